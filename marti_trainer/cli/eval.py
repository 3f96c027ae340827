"""``marti eval``: accuracy (avg@k, maj@k) and inference cost of a model on any env.

Examples::

    marti eval --env mad-v0 --data ../shared/data/gsm8k/test.jsonl --limit 200
    marti eval --env single-v0 --data arithmetic --limit 100 -k 8 --out runs/single.json
    marti eval --env majority-v0 --env-arg num_samples=8 --data gsm8k/test --limit 50
    marti eval --env mad-v0 --checkpoint runs/single-v0__135m_single_grpo__0__1764 -k 1 \\
        --temperature 0 --max-tokens 32     # a trained model, on its run's held-out tasks

``--data`` is any task source spec (``marti_env.tasks.make_task_source``): a JSON/JSONL
path, a benchmark name (``gsm8k/test``, ``math500``...), ``hf:<name>``, or a procedural
generator's name, ``arithmetic``, ``expr`` or ``code_gen``: its *test* split, never the
split runs train on (``--levels`` picks the levels: 1,2 for arithmetic, all the generator's
by default for the others). ``--checkpoint``
evaluates the weights a ``marti train`` run saved (its newest checkpoint, or the one named),
on the run's own held-out tasks (``env.eval_tasks``) unless ``--data`` says otherwise, in any
env: e.g. a model trained alone, in a debate; by default it repeats the run's own held-out
evaluation (greedy, or its ``eval.samples`` sampled episodes, in its ``eval.chunk_tasks``).

Tasks are evaluated in fixed chunks of ``--chunk-tasks`` (16) consecutive problems, each its
own rollout, so a problem's result does not depend on which others are evaluated with it
(bf16 logits change with the left padding a batch gives; see docs/baselines.md). Two
evaluations that differ only in ``--seed`` measure the noise floor
(``benchmarks/noise_floor.py``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

# An import inside a function keeps a heavy dependency (torch, transformers, vllm, ray)
# lazy: building the parser imports none, so `marti envs` answers instantly.

__all__ = ["add_eval_parser", "run_eval"]

_GENERATOR_DEFAULT_LIMIT = 1000


def add_eval_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``eval`` subcommand to an ``argparse`` subparsers object; return its parser."""
    from marti_trainer.models import DEFAULT_MODEL

    p = subparsers.add_parser(
        "eval",
        help="avg@k / maj@k accuracy, boxed rate, tokens and wall time of a model on an env",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--env",
        default=None,
        help="registered env id, e.g. mad-v0, single-v0 (required without --checkpoint; "
        "with it, the run's env and its env.kwargs)",
    )
    p.add_argument(
        "--model", default=DEFAULT_MODEL, help=f"model alias or directory ({DEFAULT_MODEL})"
    )
    p.add_argument(
        "--backend",
        default="hf",
        choices=("hf", "vllm", "openai", "simulated"),
        help="generation backend; 'simulated' is a fake model for dry runs (default hf)",
    )
    p.add_argument(
        "--checkpoint",
        default=None,
        help="evaluate a marti train run's trained weights: its directory (newest checkpoint) "
        "or a checkpoint directory; the model is the run's (hf backend)",
    )
    p.add_argument(
        "--unit", default=None, help="with --checkpoint: the trained unit (per-agent runs)"
    )
    p.add_argument(
        "--data",
        default=None,
        help="task source (default: arithmetic test; with --checkpoint, the run's eval_tasks)",
    )
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        help=f"first N tasks (default: all; {_GENERATOR_DEFAULT_LIMIT} of a procedural generator)",
    )
    p.add_argument(
        "--levels",
        default=None,
        help="levels of a procedural --data (arithmetic, expr, code_gen), comma-separated "
        "(arithmetic: 1,2; the others: all)",
    )
    p.add_argument("-k", "--k", type=int, default=None, help="episodes per task (4; run: 1)")
    p.add_argument(
        "--temperature", type=float, default=None, help="sampling temperature (0.7; run: 0)"
    )
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus mass (1.0)")
    p.add_argument(
        "--max-tokens", type=int, default=None, help="new tokens per response (256; run's)"
    )
    p.add_argument(
        "--mode", choices=("sync", "async"), default=None, help="rollout mode (async; run: sync)"
    )
    p.add_argument("--concurrency", type=int, default=32, help="requests in flight (32)")
    p.add_argument(
        "--chunk-tasks",
        type=int,
        default=None,
        help="evaluate in fixed chunks of N consecutive tasks, each its own rollout, so a "
        "task's result does not depend on which other tasks are evaluated (16; run: its "
        "eval.chunk_tasks; 0 = one rollout)",
    )
    p.add_argument("--seed", type=int, default=None, help="root seed (0; run's)")
    p.add_argument(
        "--dtype",
        choices=("bfloat16", "float32"),
        default=None,
        help="hf only (bfloat16 where the device has native bf16, else float32; run's)",
    )
    p.add_argument("--batch-size", type=int, default=None, help="hf static batch size (32; run's)")
    p.add_argument(
        "--device", default="auto", help="hf only: auto (cuda if torch sees one), cpu, cuda:N"
    )
    p.add_argument(
        "--threads", type=int, default=0, help="torch threads for hf (0: torch's default)"
    )
    p.add_argument(
        "--env-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="env override, VALUE parsed as YAML (repeatable), e.g. num_agents=2",
    )
    p.add_argument("--out", default=None, help="write the result as JSON here")
    p.add_argument("--transcripts", default=None, help="append episode records (JSONL) here")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_eval)
    return p


def _env_args(items: list[str]) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--env-arg expects KEY=VALUE, got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def _tasks(data: Any, limit: int | None, levels: str | None) -> list[Any]:
    """The tasks ``--data`` names; a procedural generator's name gives its test split."""
    from marti_env.tasks import ArithmeticTasks, make_task_source
    from marti_env.tasks.code_gen import CodeGenTasks
    from marti_env.tasks.expr import ExprTasks

    generators = {"arithmetic": ArithmeticTasks, "expr": ExprTasks, "code_gen": CodeGenTasks}
    if not isinstance(data, str) or data not in generators:
        if levels is not None:
            raise ValueError(
                f"--levels applies to a procedural --data ({', '.join(generators)}), not to "
                f"--data {data!r}: drop it, or name the levels in the task source itself"
            )
        return list(make_task_source(data, limit=limit))
    kwargs: dict[str, Any] = {"size": limit or _GENERATOR_DEFAULT_LIMIT, "split": "test"}
    if levels is not None:
        try:
            kwargs["levels"] = [int(x) for x in levels.split(",") if x.strip()]
        except ValueError as e:
            raise ValueError(f"--levels must be comma-separated integers, got {levels!r}") from e
    elif data == "arithmetic":
        kwargs["levels"] = [1, 2]
    try:
        return list(generators[data](**kwargs))
    except ValueError as e:
        flags = f"--data {data}" + (f" --levels {levels}" if levels is not None else "")
        raise ValueError(f"{flags}: {e}") from e


_DEFAULTS = {
    "k": 4, "temperature": 0.7, "max_tokens": 256, "mode": "async", "seed": 0,
    "batch_size": 32, "chunk_tasks": 16,
}  # fmt: skip


def check_eval_args(args: argparse.Namespace) -> None:
    """Refuse flag values outside their range, naming the flag (before any model loads)."""
    import math

    checks = [
        ("-k", args.k, lambda v: 1 <= v <= 10_000, "an integer in [1, 10000]"),
        ("--temperature", args.temperature, lambda v: math.isfinite(v) and 0 <= v <= 100,
         "a number in [0, 100]"),
        ("--top-p", args.top_p, lambda v: 0 < v <= 1, "a number in (0, 1]"),
        ("--max-tokens", args.max_tokens, lambda v: 1 <= v <= 1_000_000,
         "an integer in [1, 1000000]"),
        ("--concurrency", args.concurrency, lambda v: 1 <= v <= 1_000_000,
         "an integer in [1, 1000000]"),
        ("--seed", args.seed, lambda v: 0 <= v < 2**63, "an integer in [0, 2**63)"),
        ("--batch-size", args.batch_size, lambda v: 1 <= v <= 100_000,
         "an integer in [1, 100000]"),
        ("--threads", args.threads, lambda v: 0 <= v <= 4096, "an integer in [0, 4096]"),
        ("--limit", args.limit, lambda v: v >= 1, "an integer >= 1"),
        ("--chunk-tasks", args.chunk_tasks, lambda v: 0 <= v <= 1_000_000,
         "an integer in [0, 1000000]"),
    ]  # fmt: skip
    for flag, value, ok, allowed in checks:
        if value is not None and not ok(value):
            raise ValueError(f"{flag} must be {allowed}, got {value!r}")


def _rollout_dtype(cfg: Any) -> str:
    """A run's ``rollout.dtype``, with ``auto`` resolved for this machine (runs save the
    concrete value; a hand-written config.yaml may still say ``auto``)."""
    if cfg.rollout.dtype != "auto":
        return cfg.rollout.dtype
    # torch is imported only when a subcommand runs, never to build the parser
    import torch

    from marti_trainer.precision import resolve_precision

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return resolve_precision(cfg.optim.precision, "auto", device).rollout_dtype


def _fill_defaults(args: argparse.Namespace, trained: Any) -> dict[str, Any]:
    """Fill unset flags: from the run's config with ``--checkpoint`` (its env, env.kwargs and
    greedy held-out settings), else the plain defaults. Returns the env kwargs."""
    env_kwargs = _env_args(args.env_arg)
    if trained is None:
        if args.env is None:
            raise ValueError("--env is required (or give --checkpoint to use a run's env)")
        for key, value in _DEFAULTS.items():
            if getattr(args, key) is None:
                setattr(args, key, value)
        if args.dtype is None and args.backend == "hf":  # emulated bf16 is many times slower
            from marti_trainer.precision import native_dtype
            from marti_trainer.team import resolve_device

            args.dtype = native_dtype(resolve_device(args.device, "--device"))
        return env_kwargs
    cfg = trained.config
    if args.env is None or args.env == cfg.env.id:
        args.env = cfg.env.id
        # A checkpoint may come from someone else: its credit setting could name a file or
        # module to import (an entry point). Evaluation needs no credit, so it is not taken;
        # --env-arg credit=... still applies.
        saved = {k: v for k, v in cfg.env.kwargs.items() if k != "credit"}
        env_kwargs = {**saved, **env_kwargs}
    e = cfg.eval
    run = {
        "k": max(1, e.samples), "temperature": e.temperature if e.samples else 0.0,
        "max_tokens": e.max_tokens or cfg.rollout.max_tokens, "mode": "sync",
        "seed": cfg.heldout_seed,
        "dtype": _rollout_dtype(cfg), "batch_size": cfg.rollout.batch_size,
        "chunk_tasks": e.chunk_tasks,
    }  # fmt: skip
    for key, value in run.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return env_kwargs


def _policy(args: argparse.Namespace, trained: Any = None) -> Any:
    if args.backend == "simulated":
        from marti_trainer.policies.simulated import SimulatedPolicy

        return SimulatedPolicy(seed=args.seed, max_concurrency=args.concurrency)
    from marti_trainer.policies import make_policy

    kwargs: dict[str, Any] = {}
    if args.backend == "hf":
        if args.threads:  # on a busy shared CPU, 1 thread can be several times faster
            import torch

            torch.set_num_threads(args.threads)
        from marti_trainer.team import resolve_device

        kwargs = {
            "dtype": args.dtype,
            "batch_size": args.batch_size,
            "seed": args.seed,
            "device": resolve_device(args.device, "--device"),
        }
    return make_policy(args.backend, args.model, **kwargs)


def _load_trained(policy: Any, trained: Any, work_dir: str) -> str | None:
    """Put the trained unit into ``policy``; returns the adapter name to generate with."""
    if not trained.is_adapter:
        policy.load_weights(trained.tensors)
        return None
    from marti_trainer.export import ADAPTER_NAME, peft_model_of

    peft_model_of(trained).save_pretrained(work_dir, selected_adapters=[ADAPTER_NAME])
    policy.add_adapter(trained.unit, work_dir)
    return trained.unit


def _trained(args: argparse.Namespace) -> Any:
    """The checkpoint's unit (``args.model``/``args.data`` filled from its run), or None."""
    if args.checkpoint is None:
        if args.unit is not None:
            raise ValueError("--unit needs --checkpoint")
        return None
    from marti_trainer.checkpoint import load_trained_unit
    from marti_trainer.models import DEFAULT_MODEL

    if args.backend != "hf":
        raise ValueError(f"--checkpoint needs --backend hf, got --backend {args.backend}")
    if args.model != DEFAULT_MODEL:
        raise ValueError("give --checkpoint or --model, not both: a checkpoint names its model")
    trained = load_trained_unit(args.checkpoint, args.unit)
    args.model = trained.config.model.name
    if args.data is None:
        if args.levels is not None:
            raise ValueError(
                "--levels needs --data: without it --checkpoint evaluates the run's own "
                f"held-out tasks (env.eval_tasks: {trained.config.env.eval_tasks!r})"
            )
        args.data = trained.config.env.eval_tasks
    return trained


def _settings(args: argparse.Namespace, env_kwargs: dict[str, Any]) -> str:
    return (
        f"env {args.env} {env_kwargs or ''}, k={args.k}, temperature {args.temperature}, "
        f"top_p {args.top_p}, max_tokens {args.max_tokens}, mode {args.mode}, seed {args.seed}, "
        f"chunk_tasks {args.chunk_tasks}"
        + (f", dtype {args.dtype}, batch_size {args.batch_size}" if args.backend == "hf" else "")
    )


def run_eval(args: argparse.Namespace) -> int:
    """Run the evaluation described by parsed ``marti eval`` arguments; print the table."""
    import tempfile

    from marti_trainer.evaluate import evaluate, heldout_rollout, summarize
    from marti_trainer.policies.base import SamplingParams
    from marti_trainer.team import GreedyDedup

    check_eval_args(args)
    data_from_run = args.checkpoint is not None and args.data is None
    trained = _trained(args)
    env_kwargs = _fill_defaults(args, trained)
    check_eval_args(args)
    if data_from_run:  # as the run built them (a bare generator name: its default split)
        from marti_env.tasks import make_task_source

        tasks = list(make_task_source(args.data, limit=args.limit))
    else:
        tasks = _tasks(args.data or "arithmetic", args.limit, args.levels)
    label = "simulated" if args.backend == "simulated" else str(args.model)
    if trained is not None:
        label = f"{trained.checkpoint.parent.parent.name}/{trained.checkpoint.name}/{trained.unit}"
    print(f"evaluating {label} with {_settings(args, env_kwargs)}", file=sys.stderr)
    # The run's own held-out evaluation, repeated exactly: one greedy episode (each distinct
    # prompt generated once) or k sampled ones (eval.samples), each round's requests of a
    # chunk in one batch.
    as_in_training = (
        trained is not None and args.top_p == 1.0 and args.mode == "sync"
        and (args.temperature > 0 or args.k == 1)
    )  # fmt: skip
    samples = args.k if args.temperature > 0 else 0
    with _policy(args, trained) as policy, tempfile.TemporaryDirectory() as work:
        adapter = _load_trained(policy, trained, work) if trained is not None else None
        if as_in_training:
            base = GreedyDedup(policy) if samples == 0 else policy
            spec = (base, adapter) if adapter else base
            batch = heldout_rollout(
                args.env, tasks, spec, args.max_tokens, args.seed, env_kwargs, args.transcripts,
                samples=samples, temperature=args.temperature, chunk_tasks=args.chunk_tasks,
            )  # fmt: skip
            result = summarize(batch, label, seed=args.seed, sampling=SamplingParams(
                temperature=args.temperature, max_tokens=args.max_tokens))  # fmt: skip
            if args.out:
                result.write_json(args.out)
        else:
            sampling = SamplingParams(
                temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens
            )
            result = evaluate(
                args.env,
                tasks,
                (policy, adapter) if adapter else policy,
                args.k,
                sampling,
                model=label,
                mode=args.mode,
                max_concurrency=args.concurrency,
                seed=args.seed,
                env_kwargs=env_kwargs,
                progress=not args.no_progress,
                transcript_path=args.transcripts,
                json_path=args.out,
                chunk_tasks=args.chunk_tasks,
            )
    print(result.table())
    if args.out:
        print(f"wrote {args.out}", file=sys.stderr)
    return 0
