"""``marti bench credit``: benchmark credit-assignment methods across envs and seeds.

    marti bench credit --methods none,quality,shapley --envs mad-v0,moa-v0,chain-v0 \\
        --seeds 0,1,2 --out runs/bench_credit

Tiers:

* ``fast`` (default): simulated agents of known skill and persuadability, trained by
  REINFORCE through the real envs (:mod:`marti_env.credit.bench`); seconds per method and
  env on a CPU, no LLM. Scores attribution accuracy (rank correlation of each agent's
  credit with its true marginal contribution) and team accuracy after training.
* ``llm``: every cell is a real training run (:mod:`marti_trainer.credit_bench_llm`) from a
  base config (``--config``, default ``baselines/quickstart.yaml``: the default model on
  arithmetic tasks), at its fixed budget; ``--set key=value`` changes the base (e.g.
  ``--set total_steps=6``). Minutes per cell on a CPU, so its defaults are small
  (``--methods none,quality --envs mad-v0 --seeds 0``). Reports held-out greedy accuracy
  before/after and the training curve; attribution is n/a. Re-running with the same
  ``--out`` reuses finished cells and resumes unfinished ones.

    marti bench credit --tier llm --methods none,quality,leave_one_out --out runs/llm_credit

A method is a registered name, optionally with options: ``quality:alpha=0.3:scope=agent``
(the whole string is its label in the table), or an entry point to a method outside the
library: ``my_credit.py:MyMethod:w=1`` or ``my_pkg.credit:MyMethod`` (as ``marti train``'s
``env.credit``). ``results.json`` records each such method's file path and sha256
(``credit_sources``). ``--import my_credit.py`` (a file or a
module name, repeatable) runs a file that registers new methods before the benchmark, so
they can be named in ``--methods``. An env may carry ``make`` overrides the same way:
``mad-v0:num_agents=4``.

Outputs in ``--out``: ``results.csv`` (one row per env x method x seed), ``summary.csv``
(mean and std over seeds), ``results.json`` (config, rows, summary, learning curves),
``table.txt`` and ``credit_bench.png``.

The fast tier's table also prints, per env and method, ``=none`` (YES: the method's rewards
are gradient-identical to ``none`` under group normalisation, checked before training),
``fidelity``, ``zero_adv``, ``abl_drop``, the control rows (``oracle``, ``random``,
``none@reseed``) and ``acc_final - none`` with its paired 95% CI and verdict (see
docs/credit.md, "Controls and diagnostics").

Only numpy and scipy are imported when the fast tier runs; matplotlib only to draw the plot.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

# An import inside a function keeps a heavy dependency (torch, transformers, vllm, ray)
# lazy: building the parser imports none, so `marti envs` answers instantly.

DEFAULT_ENVS = "mad-v0,moa-v0,chain-v0"
LLM_DEFAULTS = {"methods": "none,quality", "envs": "mad-v0", "seeds": "0"}
FAST_ONLY = (
    "updates", "batch", "lr", "eval_episodes", "attr_configs", "attr_episodes", "normalize",
    "min_effect", "train_seed_offset",
)  # fmt: skip


def add_bench_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``bench`` (with its ``credit`` subcommand) to a ``marti`` subparsers object.

    The ``credit`` parser sets ``func`` (returns an exit code); errors in the arguments
    raise ``ValueError`` or ``FileNotFoundError`` with a message naming the bad value.
    """
    bench = subparsers.add_parser("bench", help="benchmarks (credit assignment)")
    sub = bench.add_subparsers(dest="bench_command", required=True)
    credit = sub.add_parser(
        "credit",
        help="compare credit-assignment methods (methods x envs x seeds)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_credit_arguments(credit)
    credit.set_defaults(func=run_credit_bench)
    return bench


def add_credit_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``marti bench credit`` (shared with benchmarks/bench_credit.py)."""
    from marti_env.credit.bench import BenchConfig

    d = BenchConfig()
    parser.add_argument(
        "--methods",
        default=None,
        help="comma-separated method specs, e.g. none,quality:alpha=0.3 (default: all built-ins)",
    )
    parser.add_argument(
        "--envs", default=None, help=f"comma-separated (default {DEFAULT_ENVS}; llm: mad-v0)"
    )
    parser.add_argument(
        "--seeds", default=None, help="seeds and ranges, e.g. 0-49 or 0,2,5 (default 0,1,2; llm: 0)"
    )
    parser.add_argument(
        "--out", default=None, help="output folder (default runs/bench_credit__<time>)"
    )
    parser.add_argument("--tier", choices=("fast", "llm"), default="fast")
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="FILE_OR_MODULE",
        help="a .py file or module that registers credit methods (repeatable)",
    )
    fast = parser.add_argument_group("fast tier")
    fast.add_argument("--updates", type=int, help=f"REINFORCE updates per run ({d.updates})")
    fast.add_argument("--batch", type=int, help=f"episodes per update ({d.batch})")
    fast.add_argument("--lr", type=float, help=f"step size on the logits ({d.lr})")
    fast.add_argument("--eval-episodes", type=int, help=f"({d.eval_episodes})")
    fast.add_argument("--attr-configs", type=int, help=f"teams for attr ({d.attr_configs})")
    fast.add_argument("--attr-episodes", type=int, help=f"episodes per team ({d.attr_episodes})")
    fast.add_argument(
        "--normalize",
        choices=("std", "mean", "agent_scale"),
        help=f"advantage: std (GRPO), mean (Dr. GRPO) or agent_scale ({d.normalize})",
    )
    fast.add_argument(
        "--min-effect", type=float,
        help=f"a paired difference whose CI excludes 0 but smaller than this is called "
        f"negligible, not a win ({d.min_effect})",
    )  # fmt: skip
    fast.add_argument(
        "--train-seed-offset", type=int,
        help=f"training seed = team seed + this; another offset redraws the training "
        f"randomness on the same teams ({d.train_seed_offset})",
    )  # fmt: skip
    parser.add_argument(
        "--budget",
        choices=("generations", "episodes", "tokens"),
        default=None,
        help="generations (default, both tiers): a method that re-executes episodes spends "
        "the generations of the others' updates (fast: --batch episodes' worth; llm: the "
        "base config's tasks_per_step), so it trains on fewer episodes; episodes (both "
        "tiers): the same episodes, replays on top; tokens (llm tier): every cell trains "
        "until its generated tokens, replays included, reach the base config's "
        "total_tokens (--set total_tokens=N; total_steps is the cap)",
    )
    fast.add_argument(
        "--no-controls", dest="controls", action="store_false", default=None,
        help="leave out the oracle, random and none@reseed control runs (e.g. when another "
        "results file of the same seeds has them)",
    )  # fmt: skip
    llm = parser.add_argument_group("llm tier")
    llm.add_argument(
        "--config", default=None, help="base training config (default baselines/quickstart.yaml)"
    )
    llm.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a base config field, e.g. total_steps=6 (repeatable)",
    )  # fmt: skip
    llm.add_argument(
        "--keep-checkpoints", choices=("all", "last", "none"), default=None,
        help="what a finished cell keeps of its checkpoints (~1.5 GiB each with SmolLM2-135M; "
        "the table needs none): all (default), the last, none",
    )  # fmt: skip
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG")
    parser.add_argument("--quiet", action="store_true", help="print the table only")


def _csv(text: str, what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise ValueError(f"--{what} is empty")
    return items


def _seeds(text: str) -> list[int]:
    """``--seeds`` as ``marti sweep`` reads it: ``0,2,5``, ``0-49`` or ``0-2,7``."""
    from marti_trainer.sweep import parse_seeds

    return parse_seeds(text)


def import_methods(target: str) -> None:
    """Run a ``.py`` file (once per process, shared with ``file.py:Class`` method specs) or
    import a module (to register credit methods)."""
    if target.endswith(".py"):
        from marti_env.credit import load_credit_file

        if not Path(target).is_file():
            raise FileNotFoundError(f"--import {target}: no such file")
        load_credit_file(target)
    else:
        try:
            importlib.import_module(target)
        except ModuleNotFoundError as e:
            if e.name != target:
                raise
            raise ValueError(
                f"--import {target}: no such module (or give a path ending in .py)"
            ) from e


def credit_sources(methods: list[str], imports: list[str]) -> dict[str, Any]:
    """``{"methods": {label: credit_source}, "imports": [{"path", "sha256"}]}`` for the
    methods defined outside ``marti_env`` (their file's path and sha256) and the
    ``--import`` files."""
    from marti_env.credit import credit_source
    from marti_env.credit.bench.harness import split_spec

    out: dict[str, Any] = {"methods": {}, "imports": []}
    for label in methods:
        source = credit_source(split_spec(label)[0])
        if source is not None:
            out["methods"][label] = source
    for target in imports:
        if target.endswith(".py"):
            path = Path(target).resolve()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            out["imports"].append({"import": target, "path": str(path), "sha256": digest})
        else:
            out["imports"].append({"import": target, "path": "", "sha256": ""})
    return out


def _record_sources(json_path: Path, methods: list[str], imports: list[str]) -> None:
    """Add ``credit_sources`` (:func:`credit_sources`) to the written ``results.json``."""
    data = json.loads(json_path.read_text(encoding="utf-8"))
    data["credit_sources"] = credit_sources(methods, imports)
    json_path.write_text(json.dumps(data, indent=1, allow_nan=False), encoding="utf-8")


def _check_tier_options(args: argparse.Namespace) -> None:
    """Options of the other tier are an error, not silently ignored."""
    if args.tier == "llm":
        given = [name for name in (*FAST_ONLY, "controls") if getattr(args, name) is not None]
        if given:
            flags = ", ".join(
                "--no-controls" if n == "controls" else "--" + n.replace("_", "-") for n in given
            )
            raise ValueError(
                f"{flags}: fast-tier options; the llm tier takes --config, --set, "
                "--keep-checkpoints and --budget"
            )
    elif args.config is not None or args.overrides or args.keep_checkpoints is not None:
        raise ValueError("--config/--set/--keep-checkpoints configure the llm tier; add --tier llm")
    elif args.budget == "tokens":
        raise ValueError(
            "--budget tokens: the fast tier's simulated agents generate no tokens; it is an "
            "llm-tier budget (add --tier llm)"
        )


def run_credit_bench(args: argparse.Namespace) -> int:
    """Run ``marti bench credit`` with parsed ``args``; prints the table, writes outputs."""
    _check_tier_options(args)
    for target in args.imports:
        import_methods(target)
    from marti_env.credit import BUILTIN_METHODS
    from marti_env.credit.bench import BenchConfig, run_benchmark, write_outputs

    out = args.out or f"runs/bench_credit__{time.strftime('%Y%m%d-%H%M%S')}"
    log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    start = time.perf_counter()
    if args.tier == "llm":
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `marti train` (cli/train.py)
        from marti_trainer.config import load_config
        from marti_trainer.credit_bench_llm import run_llm_benchmark

        path = args.config or "baselines/quickstart.yaml"
        if not Path(path).is_file():
            raise FileNotFoundError(f"--config {path}: no such file (give a training config)")
        base = load_config(path, args.overrides)
        methods = _csv(args.methods or LLM_DEFAULTS["methods"], "methods")
        result = run_llm_benchmark(
            methods,
            _csv(args.envs or LLM_DEFAULTS["envs"], "envs"),
            _seeds(args.seeds or LLM_DEFAULTS["seeds"]),
            base, out, log=log, keep_checkpoints=args.keep_checkpoints or "all",
            budget=args.budget or "generations",
        )  # fmt: skip
    else:
        given = {n: getattr(args, n) for n in FAST_ONLY if getattr(args, n) is not None}
        if args.budget is not None:
            given["equal_budget"] = args.budget == "generations"
        if args.controls is not None:
            given["controls"] = args.controls
        config = BenchConfig(**given)  # the rest at BenchConfig's defaults
        methods = _csv(args.methods, "methods") if args.methods else list(BUILTIN_METHODS)
        envs = _csv(args.envs or DEFAULT_ENVS, "envs")
        result = run_benchmark(methods, envs, _seeds(args.seeds or "0,1,2"), config, log=log)
    print(result.table())
    paths = write_outputs(result, out, plot_png=not args.no_plot)
    _record_sources(paths["json"], methods, args.imports)
    if not args.quiet:
        print(
            f"\n{time.perf_counter() - start:.0f}s; wrote "
            + ", ".join(str(p) for p in paths.values())
        )
    return 0
