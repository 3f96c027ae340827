"""The training loop, top to bottom: rollout with the current policies, per-agent advantages
from credited rewards, one update per trained unit, weights back to the rollout backend.

    for step in 1..total_steps (or until total_tokens response tokens are spent):
        tasks   = sampler.draw(tasks_per_step)                # seeded; order checkpointed
        batch   = rollout(env, tasks, n_samples, policies)    # episodes -> Samples
        for unit in team.units:                               # shared | per agent | LoRA
            samples = its agents' samples
            A       = advantages(rewards, groups=(task, agent, turn))
            metrics = unit.engine.step(TrainBatch(samples, A))
            team.sync(unit)                                   # new weights -> rollout
        log; evaluate held-out greedily every N; checkpoint every M

Run it with ``marti train CONFIG [key=value ...] [--resume [RUN_DIR]]`` or :func:`train`.
A resumed run continues exactly: same tasks, same samples, same losses.
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
import yaml

import marti_env
from marti_env.credit import is_replay_method
from marti_env.rewards import verifiers_of
from marti_env.tasks import TaskSource
from marti_trainer import eval_cache
from marti_trainer.checkpoint import (
    find_checkpoint,
    load_checkpoint,
    save_checkpoint,
    set_rng_state,
)
from marti_trainer.config import TrainConfig
from marti_trainer.evaluate import heldout_rollout
from marti_trainer.evaluate import summarize as summarize_eval
from marti_trainer.interrupt import StopRequest
from marti_trainer.learner import make_loss_fn, update_unit
from marti_trainer.machine import describe_machine
from marti_trainer.metrics import MetricsLogger, read_metrics, step_tokens, training_tokens
from marti_trainer.plots import plot_run
from marti_trainer.policies import SamplingParams
from marti_trainer.precision import keep_resumed, resolve_config
from marti_trainer.rollout import RolloutBatch, derive_seed, rollout
from marti_trainer.team import Team, build_team, precision_device

__all__ = ["TaskSampler", "evaluate_heldout", "train"]


class TaskSampler:
    """Draws training tasks without replacement, epoch by epoch, in a seeded order.

    Epoch ``e`` visits the source in the order ``default_rng([seed, e]).permutation(n)``;
    the state is just ``(epoch, position)``, saved in checkpoints.
    """

    def __init__(self, source: TaskSource, seed: int) -> None:
        self.source, self.seed = source, seed
        self.epoch, self.position = 0, 0
        self._order = self._permutation()

    def _permutation(self) -> np.ndarray:
        return np.random.default_rng([self.seed, self.epoch]).permutation(len(self.source))

    def draw(self, k: int) -> list:
        out = []
        while len(out) < k:
            if self.position == len(self._order):
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._permutation()
            out.append(self.source[int(self._order[self.position])])
            self.position += 1
        return out

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._permutation()


def rollout_metrics(batch: RolloutBatch, group_by: str = "agent") -> dict[str, float]:
    """Reward, verifier score, boxed rate and length per agent; team outcome; signal
    (``zero_spread_groups``: the share of advantage groups under ``group_by`` whose rewards
    are all equal); training samples, and how many of them are siblings (``sibling`` credit
    with ``train=True``), with the siblings' mean reward and truncation rate (the per-agent
    figures are the episodes' own turns); ``tokens``, the response tokens of the step's
    episodes' turns (a replay credit method's replays, siblings included, are
    ``rollout/replay_tokens``, logged beside)."""
    out: dict[str, float] = {"rollout/outcome": float(np.mean([e.outcome for e in batch.episodes]))}
    siblings = [s for s in batch.samples if s.branch > 0]
    out["rollout/samples"] = float(len(batch.samples))
    out["rollout/sibling_samples"] = float(len(siblings))
    if siblings:  # their own figures; the per-agent ones are the episodes' turns
        out["rollout/sibling_reward"] = float(np.mean([s.reward for s in siblings]))
        out["rollout/sibling_truncated"] = float(np.mean([s.truncated for s in siblings]))
    by_agent: dict[str, list] = defaultdict(list)
    for s in batch.samples:
        if s.branch == 0:
            by_agent[s.agent].append(s)
    for agent, samples in by_agent.items():
        out[f"rollout/{agent}/reward"] = float(np.mean([s.reward for s in samples]))
        out[f"rollout/{agent}/score"] = float(np.mean([s.score for s in samples]))
        out[f"rollout/{agent}/response_tokens"] = float(
            np.mean([s.num_response_tokens for s in samples])
        )
        out[f"rollout/{agent}/truncated"] = float(np.mean([s.truncated for s in samples]))
    groups = batch.groups(group_by).values()
    flat = [len({s.reward for s in g}) == 1 for g in groups]
    out["rollout/zero_spread_groups"] = float(np.mean(flat)) if flat else 0.0
    boxed = [bool(t.answer) for e in batch.episodes for t in e.turns]
    out["rollout/boxed_rate"] = float(np.mean(boxed))
    out["rollout/tokens_per_s"] = batch.stats.tokens_per_s
    out["rollout/tokens"] = float(batch.stats.tokens_generated)
    return out


def evaluate_heldout(
    team: Team,
    cfg: TrainConfig,
    tasks: list,
    env_kwargs: dict,
    transcript_path: Path | None = None,
) -> dict[str, float]:
    """Held-out evaluation (:func:`~marti_trainer.evaluate.heldout_rollout`: greedy, or
    avg@k with ``eval.samples = k``): team accuracy, boxed rate, accuracy per agent and round."""
    e = cfg.eval
    batch = heldout_rollout(
        cfg.env.id, tasks, team.rollout_policies(greedy_dedup=e.samples == 0),
        e.max_tokens or cfg.rollout.max_tokens, cfg.heldout_seed, env_kwargs, transcript_path,
        samples=e.samples, temperature=e.temperature, chunk_tasks=e.chunk_tasks,
    )  # fmt: skip
    result = summarize_eval(batch, cfg.model.name)  # the definitions `marti eval` reports
    out = {
        "eval/accuracy": result.avg_at_k,
        "eval/boxed_rate": result.boxed_rate,
        "eval/truncated_rate": result.truncated_rate,
        "eval/tokens_per_task": result.tokens_per_task,
    }
    if e.samples:
        out["eval/pass_at_k"] = result.pass_at_k
        out["eval/maj_at_k"] = result.maj_at_k
    turns = [t for e in batch.episodes for t in e.turns]
    for key in sorted({(t.agent, t.round) for t in turns}):
        scores = [t.score for t in turns if (t.agent, t.round) == key]
        out[f"eval/{key[0]}/round{key[1]}_accuracy"] = float(np.mean(scores))
    for r in sorted({t.round for t in turns}):
        out[f"eval/round{r}_accuracy"] = float(np.mean([t.score for t in turns if t.round == r]))
    return out


def _cached_start_eval(
    cfg: TrainConfig,
    team: Team,
    tasks: list,
    run_dir: Path,
    evaluate: Callable[[Path | None], dict[str, float]],
) -> dict[str, float]:
    """The step-0 evaluation through ``log.eval_cache`` (:mod:`marti_trainer.eval_cache`):
    copied from a matching entry, or ``evaluate(records_path)``-d and stored; ``eval/cached``
    says which. A run that cannot be fingerprinted, or runs on Ray, evaluates and says why;
    a failure to store is a warning (the evaluation itself succeeded)."""
    wanted = run_dir / "eval" / "step_000000.jsonl" if cfg.log.eval_transcripts else None
    if cfg.distributed.backend == "ray":
        print("log.eval_cache: not used on Ray (the rollout workers' machines are not the "
              "key's); evaluating step 0", flush=True)  # fmt: skip
        return evaluate(wanted)
    cache_dir = Path(cfg.log.eval_cache)
    weights = {u.name: u.engine.weights for u in team.units}
    try:
        key, parts = eval_cache.cache_key(cfg, tasks, team.model_dir, weights)
    except eval_cache.NotFingerprintable as err:
        print(f"log.eval_cache: not used ({err}); evaluating step 0", flush=True)
        return evaluate(wanted)
    hit = eval_cache.load_entry(cache_dir, key, wanted)
    if hit is not None:
        print(f"step-0 evaluation copied from {cache_dir / key}", flush=True)
        return {**hit, "eval/cached": 1.0}
    records = wanted or run_dir / ".step_000000.jsonl"  # an entry always holds its records
    metrics = evaluate(records)
    try:
        entry = eval_cache.store_entry(cache_dir, key, parts, metrics, records)
        print(f"step-0 evaluation stored in {entry}", flush=True)
    except OSError as err:
        print(f"log.eval_cache: could not store the step-0 evaluation ({err})", flush=True)
    if wanted is None:
        records.unlink(missing_ok=True)
    return {**metrics, "eval/cached": 0.0}


def _run_dir(cfg: TrainConfig) -> Path:
    name = cfg.run_name or f"{cfg.env.id}__{cfg.exp_name}__{cfg.seed}__{int(time.time())}"
    return Path(cfg.log.output_dir) / name


_LOGS = ("metrics.jsonl", "transcripts.jsonl")


def _save(
    run_dir: Path,
    step: int,
    team: Team,
    sampler: TaskSampler,
    credit,
    cfg: TrainConfig,
    elapsed_s: float,
) -> Path:
    logs = {name: (run_dir / name).stat().st_size for name in _LOGS if (run_dir / name).exists()}
    return save_checkpoint(
        run_dir,
        step,
        weights={u.name: u.engine.weights() for u in team.units},
        state={
            "engines": {u.name: u.engine.state_dict() for u in team.units},
            "sampler": sampler.state_dict(),
            "credit": credit.state_dict(),
            "logs": logs,  # bytes of each log at this step: a resume cuts what came after
            "elapsed_s": elapsed_s,
        },
        config=cfg.to_dict(),
        keep_last=cfg.log.keep_last,
    )


def _fresh_start(run_dir: Path) -> None:
    """Clear what an earlier start of the same run name left before its first checkpoint;
    refuse to overwrite a run that has checkpoints."""
    if any((run_dir / "checkpoints").glob("step_*")):
        raise ValueError(
            f"{run_dir} already holds checkpoints: continue it with --resume, or choose "
            "another run_name"
        )
    for name in _LOGS:
        (run_dir / name).unlink(missing_ok=True)
    shutil.rmtree(run_dir / "eval", ignore_errors=True)


@dataclass
class _Resumed:
    run_dir: Path
    step: int
    elapsed_s: float


def _resume(path: str | Path, team: Team, sampler: TaskSampler, credit) -> _Resumed:
    """Load the newest valid checkpoint under ``path`` into the team, sampler, credit method
    and RNGs; cut the run's logs back to that step. Prints what it resumes from."""
    skipped: list[str] = []
    checkpoint = find_checkpoint(path, skipped)
    for problem in skipped:
        print(f"resume: skipping an unusable checkpoint: {problem}", file=sys.stderr)
    weights, state = load_checkpoint(checkpoint)
    missing = [u.name for u in team.units if u.name not in weights]
    if missing:
        raise ValueError(
            f"{checkpoint} holds units {sorted(weights)}, but this config trains {missing}: "
            "resume with the config the run was started with"
        )
    for unit in team.units:
        unit.engine.load_weights(weights[unit.name])
        unit.engine.load_state_dict(state["engines"][unit.name])
        team.sync(unit)
    sampler.load_state_dict(state["sampler"])
    credit.load_state_dict(state["credit"])
    set_rng_state(state["rng"])
    run_dir = checkpoint.parent.parent
    for name, size in state.get("logs", {}).items():
        log = run_dir / name
        if name in _LOGS and log.exists() and log.stat().st_size > size:
            with log.open("r+b") as f:  # drop what steps after the checkpoint wrote
                f.truncate(size)
    print(f"resuming from step {state['step']} ({checkpoint})", file=sys.stderr)
    return _Resumed(run_dir, int(state["step"]), float(state.get("elapsed_s", 0.0)))


@dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        run_dir: The run directory.
        summary: :func:`summarize`'s figures (empty when the run stopped early).
        history: Every line of ``metrics.jsonl``.
        stopped_by: ``"SIGINT"`` / ``"SIGTERM"`` when a signal stopped the run after a step
            (a checkpoint of that step was saved), else None.
        last_step: The last step completed.
        checkpoint: The newest checkpoint written by this call, if any.
    """

    run_dir: Path
    summary: dict[str, Any]
    history: list[dict[str, Any]]
    stopped_by: str | None = None
    last_step: int = 0
    checkpoint: Path | None = None


def train(
    cfg: TrainConfig, resume: str | Path | None = None, stop_at_step: int | None = None
) -> TrainResult:
    """Train as ``cfg`` says; returns the run directory, the summary and the metric history.

    SIGINT and SIGTERM (when called from the main thread) let the current step finish, save
    a checkpoint and return with ``stopped_by`` set; a second signal stops at once, losing
    the current step (the previous checkpoint stays valid).

    Args:
        cfg: The run's configuration.
        resume: A run directory or checkpoint to continue from (exactly): the newest valid
            checkpoint is used, and the run's logs are cut back to its step.
        stop_at_step: Stop after this step as if the process were killed there (no final
            evaluation, plots or summary); for time-boxed jobs and resume tests.
    """
    given = (cfg.optim.precision, cfg.rollout.dtype)
    if resume is not None:  # keep the precision the run was started with
        saved = _saved_config(Path(resume))
        cfg = keep_resumed(cfg, saved)
        if saved and saved.get("total_tokens") is not None and cfg.total_tokens is None:
            print(
                f"warning: the resumed run had total_tokens {saved['total_tokens']} and this "
                f"config has none: it trains on to total_steps {cfg.total_steps} (pass "
                f"total_tokens={saved['total_tokens']} to keep the budget)",
                file=sys.stderr,
            )
    kept = (cfg.optim.precision, cfg.rollout.dtype) != given
    cfg, precision = resolve_config(cfg, precision_device(cfg))
    if kept:  # set by keep_resumed, not by the user (the warning, if any, still holds)
        reason = precision.reason.replace("set explicitly", "kept from the resumed run", 1)
        precision = replace(precision, reason=reason)
    print(
        f"precision: {precision.precision}, rollout dtype: {precision.rollout_dtype} "
        f"({precision.reason})",
        file=sys.stderr,
    )
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed % 2**32)
    built = cfg.env.build()  # before any model: bad settings are refused naming their key
    probe, credit = built.probe, built.credit
    train_source, eval_source = built.train_tasks, built.eval_tasks
    agents = list(probe.possible_agents)
    scorer = probe.unwrapped.reward or probe.unwrapped.label_free_reward
    verifiers = verifiers_of(scorer)  # the shared ones every env of this process uses
    env_kwargs = {**cfg.env.kwargs, "credit": credit}
    sampler = TaskSampler(train_source, cfg.seed)
    eval_tasks = list(eval_source)
    want_ref = cfg.algorithm.kl_coef > 0 or cfg.log.ref_kl_samples > 0
    loss_fn = make_loss_fn(cfg.algorithm, cfg.rollout.max_tokens, cfg.rollout.temperature)
    if cfg.distributed.backend == "ray":  # marti_trainer.distributed: units on Ray actors
        from marti_trainer.distributed import build_ray_team  # ray is optional: loaded if used

        team = build_ray_team(cfg, agents, loss_fn, want_ref)
    else:
        team = build_team(cfg, agents, loss_fn, want_ref)
    pad_id = team.tokenizer.pad_token_id
    run_dir, start, elapsed0 = _run_dir(cfg), 0, 0.0
    if resume is not None:
        resumed = _resume(resume, team, sampler, credit)
        run_dir, start, elapsed0 = resumed.run_dir, resumed.step, resumed.elapsed_s
    else:
        _fresh_start(run_dir)
    # the token budget's count so far (the steps before a resumed run's checkpoint), checked
    # before the run's files are rewritten
    spent, met = 0.0, False
    try:
        if cfg.total_tokens is not None and start > 0:
            history = read_metrics(run_dir)
            spent = training_tokens(history, start)
            # a run resumed from the checkpoint of the step that met its budget has no step
            # left; it must be the run that met it there
            met = spent >= cfg.total_tokens
            if met:
                _check_budget_met_at(history, start, cfg)
    except ValueError:
        team.close()
        raise
    end = start if met else cfg.total_steps
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    _write_run_metadata(
        run_dir,
        start,
        {"train_tasks": train_source, "eval_tasks": eval_source},
        precision.as_dict(),
        on_ray=cfg.distributed.backend == "ray",
    )
    _record_credit_source(run_dir, cfg.env.credit)
    logger = MetricsLogger(
        run_dir, cfg.log.tensorboard, cfg.total_steps if cfg.log.progress else None, start
    )
    sampling = SamplingParams(
        temperature=cfg.rollout.temperature,
        top_p=cfg.rollout.top_p,
        max_tokens=cfg.rollout.max_tokens,
    )
    transcripts = run_dir / "transcripts.jsonl" if cfg.log.transcripts else None
    t_start = time.perf_counter()

    def elapsed() -> float:
        return elapsed0 + time.perf_counter() - t_start

    def held_out(step: int, path: Path | None = None) -> dict[str, float]:
        if path is None and cfg.log.eval_transcripts:
            path = run_dir / "eval" / f"step_{step:06d}.jsonl"
        if path is not None:
            path.parent.mkdir(exist_ok=True)
            path.unlink(missing_ok=True)  # a redone step rewrites its file
        return evaluate_heldout(team, cfg, eval_tasks, dict(cfg.env.kwargs), path)

    def held_out_start() -> dict[str, float]:
        if cfg.log.eval_cache in ("", "off"):
            return held_out(0)
        return _cached_start_eval(cfg, team, eval_tasks, run_dir, lambda path: held_out(0, path))

    checkpoint = None
    saves: list[float] = []  # seconds of each save (it follows its step's log line)
    with StopRequest() as stop:
        if start == 0 and cfg.eval.at_start:
            t_eval = time.perf_counter()
            metrics = held_out_start()
            logger.log(0, {**metrics, "time/eval_s": time.perf_counter() - t_eval})
        for step in range(start + 1, end + 1):
            before = _verifier_counts(verifiers)
            metrics = _train_step(
                step, cfg, team, sampler, sampling, env_kwargs, pad_id, transcripts, verifiers
            )
            after = _verifier_counts(verifiers)
            metrics.update({f"rollout/verifier_{k}": after[k] - before[k] for k in after})
            if cfg.total_tokens is not None:
                spent += step_tokens(metrics)
            last = step == cfg.total_steps or (
                cfg.total_tokens is not None and spent >= cfg.total_tokens
            )
            if (cfg.eval.every and step % cfg.eval.every == 0) or (last and cfg.eval.at_end):
                t_eval = time.perf_counter()
                metrics.update(held_out(step))
                metrics["time/eval_s"] = time.perf_counter() - t_eval
            logger.log(step, metrics)
            logger.advance(
                {"reward": metrics["rollout/outcome"], "s/step": metrics["charts/step_s"]}
            )
            stopping = stop.requested is not None and not last
            if (cfg.log.save_every and step % cfg.log.save_every == 0) or last or stopping:
                t_save = time.perf_counter()
                checkpoint = _save(run_dir, step, team, sampler, credit, cfg, elapsed())
                saves.append(time.perf_counter() - t_save)
            if stopping or (stop_at_step is not None and step >= stop_at_step and not last):
                logger.close()
                team.close()
                return TrainResult(
                    run_dir, {}, read_metrics(run_dir), stop.requested, step, checkpoint
                )
            if last:
                break

    logger.close()
    history = read_metrics(run_dir)
    summary = summarize(history, elapsed(), cfg, resumed_from=start)
    summary["checkpoint_s"] = round(sum(saves), 2)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    if cfg.log.plots:
        plot_run(run_dir)
    team.close()
    return TrainResult(run_dir, summary, history, None, summary["steps"], checkpoint)


def _check_budget_met_at(history: list[dict[str, Any]], start: int, cfg: TrainConfig) -> None:
    """A run resumed at step ``start`` with its ``total_tokens`` already spent must be the
    run that met the budget at that step (and evaluated it, with ``eval.at_end``): one whose
    budget was lowered or added on resume would end without a final evaluation, or past its
    budget.

    Raises:
        ValueError: the budget was met before ``start``, or ``start`` has no evaluation.
    """
    before = training_tokens(history, start - 1)
    evaluated = any(h.get("step") == start and "eval/accuracy" in h for h in history)
    if before >= cfg.total_tokens or (cfg.eval.at_end and not evaluated):
        when = f"by step {start - 1}" if before >= cfg.total_tokens else f"at step {start}"
        raise ValueError(
            f"total_tokens {cfg.total_tokens}: the resumed run had spent "
            f"{training_tokens(history, start):.0f} tokens by its checkpoint's step {start} "
            f"(the budget was met {when}, and that step was not its end), so no step is left "
            "to train and no final evaluation was made: raise total_tokens, or evaluate the "
            "checkpoint with `marti eval --checkpoint`"
        )


def _saved_config(resume: Path) -> dict | None:
    """The ``config.yaml`` of the run or checkpoint ``resume`` names, as a mapping (None if
    there is none; resuming reports a missing run itself)."""
    for path in (resume / "config.yaml", resume.parent.parent / "config.yaml"):
        if path.is_file():
            data = yaml.safe_load(path.read_text())
            return data if isinstance(data, dict) else None
    return None


def _write_run_metadata(
    run_dir: Path,
    start: int,
    sources: dict[str, TaskSource],
    precision: dict[str, str],
    on_ray: bool = False,
) -> None:
    """``run.json``: versions, and each start (fresh or resumed) of the run with the machine
    it ran on (:func:`~marti_trainer.machine.describe_machine`), the size of its task
    sources, the data rows they skipped (``on_error: skip``) and the precision it ran at
    (with the reason, e.g. the rule that resolved ``auto``). With ``on_ray`` the machine is
    the driver's, and says so: the units train on Ray actors elsewhere."""
    path = run_dir / "run.json"
    meta = json.loads(path.read_text()) if start > 0 and path.is_file() else {"sessions": []}
    data = {}
    for name, source in sources.items():
        data[name] = {"tasks": len(source), "skipped_rows": getattr(source, "skipped", 0)}
        problems = list(getattr(source, "skipped_problems", ()))
        if problems:
            data[name]["skipped_examples"] = problems
            print(
                f"{name}: skipped {data[name]['skipped_rows']} bad data row(s), e.g. {problems[0]}",
                file=sys.stderr,
            )
    meta["sessions"].append(
        {
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "from_step": start,
            "versions": {
                "marti": marti_env.__version__,
                "python": platform.python_version(),
                "torch": torch.__version__,
                "transformers": transformers.__version__,
            },
            "machine": describe_machine()
            + (" (the driver; units on Ray actors)" if on_ray else ""),
            "data": data,
            "precision": precision,
        }
    )
    path.write_text(json.dumps(meta, indent=1) + "\n")


def _record_credit_source(run_dir: Path, credit: str) -> None:
    """``credit_source`` in run.json's newest session: the path and sha256 of the file that
    defines a credit method from outside ``marti_env`` (``null`` for a built-in one)."""
    from marti_env.credit import credit_source

    path = run_dir / "run.json"
    meta = json.loads(path.read_text())
    meta["sessions"][-1]["credit_source"] = credit_source(credit)
    path.write_text(json.dumps(meta, indent=1) + "\n")


def _verifier_counts(verifiers: list) -> dict[str, int]:
    """Answers the verifiers refused before parsing (``rejected``: over the length cap or a
    blow-up such as an exponent tower) and checks that ran out of time, so far."""
    infos = [v.cache_info() for v in verifiers]
    return {
        "rejected": sum(i.rejected for i in infos),
        "timeouts": sum(i.timeouts for i in infos),
    }


def _train_step(
    step: int,
    cfg: TrainConfig,
    team: Team,
    sampler: TaskSampler,
    sampling: SamplingParams,
    env_kwargs: dict[str, Any],
    pad_id: int,
    transcripts: Path | None,
    verifiers: list,
) -> dict[str, float]:
    """One rollout batch and every unit's update; the step's metrics and its profile.

    The profile (``time/*_s``, wall seconds): ``generation`` (the rollout minus the time in
    ``env.step``), ``verification`` (the verifiers' busy time), ``env_and_credit`` (the rest
    of ``env.step``: credit, prompts), ``ref_logprobs``, ``old_logprobs``,
    ``forward_backward``, ``optimizer``, ``weight_sync``; the loop adds ``eval`` and
    ``checkpoint``. ``charts/update_gflops_per_s`` is the update's achieved arithmetic rate
    (:func:`~marti_trainer.flops.train_flops` over the forward+backward time).
    """
    t0, c0 = time.perf_counter(), time.process_time()
    verified0 = sum(v.busy_s for v in verifiers)
    replay = env_kwargs.get("credit") if is_replay_method(env_kwargs.get("credit")) else None
    batch = rollout(
        cfg.env.id, sampler.draw(cfg.rollout.tasks_per_step), cfg.rollout.n_samples,
        team.rollout_policies(), sampling, mode=cfg.rollout.mode,
        seed=derive_seed(cfg.seed, step), progress=False,
        env_kwargs={**env_kwargs, "credit": "none"} if replay else env_kwargs,
        max_concurrency=cfg.rollout.batch_size, transcript_path=transcripts,
        replay_credit=replay,
    )  # fmt: skip
    verification = sum(v.busy_s for v in verifiers) - verified0
    metrics = rollout_metrics(batch, cfg.algorithm.group_by)
    if replay is not None:  # a re-execution credit method's extra cost (0 is a figure too)
        metrics["rollout/replay_generations"] = float(batch.stats.replay_generations)
        metrics["rollout/replay_tokens"] = float(batch.stats.replay_tokens)
        metrics["time/replay_s"] = batch.stats.replay_s
    t1, c1 = time.perf_counter(), time.process_time()
    work: dict[str, float] = defaultdict(float)
    for unit in team.units:
        samples = [s for s in batch.samples if s.agent in unit.agents]
        if hasattr(unit, "remote_update"):  # a RayTeam unit: the whole update runs on its actor
            unit_metrics = unit.remote_update(samples, step)
        else:
            unit_metrics = update_unit(unit, samples, cfg, pad_id, step)
        for key, value in unit_metrics.items():
            if key.startswith("time/") or key == "charts/update_flops":
                work[key] += value
            else:
                metrics[key] = value
        t_sync = time.perf_counter()
        team.sync(unit)
        work["time/weight_sync_s"] += time.perf_counter() - t_sync
    t2, c2 = time.perf_counter(), time.process_time()
    tokens = sum(v for k, v in metrics.items() if k.startswith("charts/") and "update_tokens" in k)
    env_s = batch.stats.env_s
    metrics.update(work)
    metrics.update(
        {
            "charts/rollout_s": t1 - t0,
            "charts/update_s": t2 - t1,
            "charts/step_s": t2 - t0,
            "charts/rollout_cpu_s": c1 - c0,
            "charts/update_cpu_s": c2 - c1,
            "charts/update_tokens_per_s": tokens / max(t2 - t1, 1e-9),
            "charts/update_gflops_per_s": work["charts/update_flops"]
            / 1e9
            / max(work["time/forward_backward_s"], 1e-9),
            "time/generation_s": max(0.0, (t1 - t0) - env_s),
            "time/verification_s": verification,
            "time/env_and_credit_s": max(0.0, env_s - verification),
        }
    )
    return metrics


def summarize(
    history: list[dict[str, Any]], wall_s: float, cfg: TrainConfig, resumed_from: int = 0
) -> dict[str, Any]:
    """Held-out figures and timings of a finished run.

    ``accuracy_before`` is the evaluation at step 0 and exists only when the run evaluated
    before training (``eval.at_start``); ``accuracy_after`` is the last evaluation.
    ``wall_s`` is the training time of every session of the run (a resumed run adds the
    time its checkpoint recorded); ``resumed_from`` the step this session started from.
    ``steps`` is the last step trained: ``total_steps``, or fewer when ``total_tokens``
    stopped the run (then ``tokens`` is what it spent, :func:`training_tokens`).
    """
    evals = [h for h in history if "eval/accuracy" in h]
    steps = [h for h in history if "charts/step_s" in h]
    last = max((h["step"] for h in steps), default=0)
    out: dict[str, Any] = {"steps": last, "wall_s": round(wall_s, 1)}
    if cfg.total_tokens is not None:
        out["total_tokens"] = cfg.total_tokens
        out["tokens"] = training_tokens(history, last)
    if resumed_from:
        out["resumed_from_step"] = resumed_from
    if steps:
        out["s_per_step"] = round(float(np.mean([h["charts/step_s"] for h in steps])), 2)
    if evals and evals[0]["step"] == 0:
        out["accuracy_before"] = evals[0]["eval/accuracy"]
        out["boxed_rate_before"] = evals[0]["eval/boxed_rate"]
        out["eval_step_before"] = 0
    if evals and evals[-1]["step"] > 0:
        out["accuracy_after"] = evals[-1]["eval/accuracy"]
        out["boxed_rate_after"] = evals[-1]["eval/boxed_rate"]
        out["eval_step_after"] = evals[-1]["step"]
    return out


def format_summary(summary: dict[str, Any]) -> str:
    """A few human-readable lines: held-out accuracy and boxed rate before/after, timings.

    Only the evaluations that ran are shown: without ``accuracy_before`` (no evaluation at
    step 0) the line gives the final accuracy alone.
    """
    lines = ["run summary"]
    if "accuracy_before" in summary and "accuracy_after" in summary:
        a0, a1 = summary["accuracy_before"], summary["accuracy_after"]
        b0, b1 = summary["boxed_rate_before"], summary["boxed_rate_after"]
        lines.append(
            f"  held-out greedy accuracy: {a0:.1%} -> {a1:.1%} ({100 * (a1 - a0):+.1f} points)"
        )
        lines.append(f"  boxed rate:               {b0:.1%} -> {b1:.1%}")
    elif "accuracy_after" in summary:
        step = summary["eval_step_after"]
        lines.append(
            f"  held-out greedy accuracy: {summary['accuracy_after']:.1%} after step {step} "
            "(no evaluation before training)"
        )
        lines.append(f"  boxed rate:               {summary['boxed_rate_after']:.1%}")
    elif "accuracy_before" in summary:
        lines.append(
            f"  held-out greedy accuracy: {summary['accuracy_before']:.1%} before training "
            "(no evaluation after it)"
        )
    resumed = summary.get("resumed_from_step")
    sessions = f", resumed at step {resumed}" if resumed else ""
    lines.append(
        f"  steps: {summary.get('steps')}, training wall time "
        f"{summary.get('wall_s', 0) / 60:.1f} min{sessions}"
    )
    if "total_tokens" in summary:
        lines.append(
            f"  tokens: {summary['tokens']:.0f} generated in training, budget "
            f"{summary['total_tokens']} (total_tokens)"
        )
    if "s_per_step" in summary:
        lines.append(f"  {summary['s_per_step']} s/step")
    return "\n".join(lines)
