"""The training loop, top to bottom: rollout with the current policies, per-agent advantages
from credited rewards, one update per trained unit, weights back to the rollout backend.

    for step in 1..total_steps:
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
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

import marti_env
from marti_env.credit import make_credit
from marti_env.tasks import TaskSource, make_task_source
from marti_trainer.algorithms import kl_estimate, masked_mean
from marti_trainer.checkpoint import (
    find_checkpoint,
    load_checkpoint,
    save_checkpoint,
    set_rng_state,
)
from marti_trainer.config import TrainConfig
from marti_trainer.evaluate import summarize as summarize_eval
from marti_trainer.learner import collate, make_loss_fn, sample_advantages, set_norm
from marti_trainer.metrics import MetricsLogger, read_metrics
from marti_trainer.policies import SamplingParams
from marti_trainer.rollout import RolloutBatch, derive_seed, rollout
from marti_trainer.team import Team, Unit, build_team, score_with

__all__ = ["TaskSampler", "evaluate", "train"]


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
    are all equal)."""
    out: dict[str, float] = {"rollout/outcome": float(np.mean([e.outcome for e in batch.episodes]))}
    by_agent: dict[str, list] = defaultdict(list)
    for s in batch.samples:
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
    return out


def evaluate(team: Team, cfg: TrainConfig, tasks: list, env_kwargs: dict) -> dict[str, float]:
    """Greedy held-out evaluation: team accuracy, boxed rate, accuracy per agent and round."""
    max_tokens = cfg.eval.max_tokens or cfg.rollout.max_tokens
    batch = rollout(
        cfg.env.id, tasks, 1, team.rollout_policies(greedy_dedup=True),
        SamplingParams(temperature=0.0, max_tokens=max_tokens),
        mode="sync", seed=cfg.seed, env_kwargs=env_kwargs, progress=False,
        max_concurrency=10**6, driver="batch",
    )  # fmt: skip
    result = summarize_eval(batch, cfg.model.name)  # the definitions `marti eval` reports
    out = {
        "eval/accuracy": result.avg_at_k,
        "eval/boxed_rate": result.boxed_rate,
        "eval/truncated_rate": result.truncated_rate,
        "eval/tokens_per_task": result.tokens_per_task,
    }
    turns = [t for e in batch.episodes for t in e.turns]
    for key in sorted({(t.agent, t.round) for t in turns}):
        scores = [t.score for t in turns if (t.agent, t.round) == key]
        out[f"eval/{key[0]}/round{key[1]}_accuracy"] = float(np.mean(scores))
    for r in sorted({t.round for t in turns}):
        out[f"eval/round{r}_accuracy"] = float(np.mean([t.score for t in turns if t.round == r]))
    return out


def update_unit(unit: Unit, samples: list, cfg: TrainConfig, pad_id: int, step: int) -> dict:
    """Advantages from the unit's credited rewards, then ``updates_per_batch`` engine steps."""
    if hasattr(unit, "remote_update"):  # a RayTeam unit: the whole update runs on its actor
        return unit.remote_update(samples, step)
    alg = cfg.algorithm
    batch = collate(samples, pad_id)
    kl_metrics = {}
    if unit.ref is not None:
        if alg.kl_coef > 0:
            batch.ref_logprobs = unit.ref(batch)
        kl_metrics = reference_kl(unit, batch, samples, cfg, step)
    batch.advantages = sample_advantages(samples, batch, alg, cfg.rollout.max_tokens)
    if alg.updates_per_batch > 1:  # later mini-batches are off-policy: keep pre-update logprobs
        batch.old_logprobs = score_with(unit.model, batch, cfg)
    order = torch.randperm(
        batch.size, generator=torch.Generator().manual_seed(derive_seed(cfg.seed, step))
    )
    signal = (batch.advantages != 0).reshape(batch.size, -1).any(dim=1)
    skip = alg.skip_zero_advantage and alg.kl_coef == 0 and alg.entropy_coef == 0
    totals: dict[str, float] = defaultdict(float)
    for rows in torch.tensor_split(order, alg.updates_per_batch):
        minibatch = set_norm(batch.select(rows.tolist()), alg.aggregation)
        if skip:  # same gradient without the zero-advantage rows (the normaliser is kept)
            rows = rows[signal[rows]]
            if len(rows) == 0:
                totals["optim/skipped_steps"] += 1
                continue
            minibatch = replace(batch.select(rows.tolist()), norm=minibatch.norm)
        for key, value in unit.engine.step(minibatch).items():
            totals[key] += value / alg.updates_per_batch
        totals["charts/update_tokens"] += float(minibatch.num_tokens)
    totals["losses/zero_advantage_frac"] = 1.0 - float(signal.float().mean())
    return {**{k.replace("/", f"/{unit.name}/", 1): v for k, v in totals.items()}, **kl_metrics}


def reference_kl(unit: Unit, batch, samples: list, cfg: TrainConfig, step: int) -> dict:
    """``kl/<agent>``: KL(current || initial policy) per agent, k3 on the sampled tokens.

    The rollout's log-probs are the current policy's; the reference's come from the frozen
    initial model: on every sample when the KL is trained (``kl_coef > 0``), else on a
    seeded subset of ``log.ref_kl_samples`` samples per agent (a cheap estimate).
    """
    gen = torch.Generator().manual_seed(derive_seed(cfg.seed, step, 1))
    out = {}
    for agent in unit.agents:
        rows = [i for i, s in enumerate(samples) if s.agent == agent]
        if not rows:
            continue
        if batch.ref_logprobs is not None:
            ref, sub = batch.ref_logprobs[rows], batch.select(rows)
            ref = ref[:, : sub.response_mask.shape[1]]
        else:
            pick = torch.randperm(len(rows), generator=gen)[: cfg.log.ref_kl_samples].tolist()
            sub = batch.select([rows[i] for i in pick])
            ref = unit.ref(sub)
        kl = kl_estimate(sub.rollout_logprobs, ref, "k3")
        out[f"kl/{agent}"] = float(masked_mean(kl, sub.response_mask))
    return out


def _run_dir(cfg: TrainConfig) -> Path:
    name = cfg.run_name or f"{cfg.env.id}__{cfg.exp_name}__{cfg.seed}__{int(time.time())}"
    return Path(cfg.log.output_dir) / name


def _save(
    run_dir: Path, step: int, team: Team, sampler: TaskSampler, credit, cfg: TrainConfig
) -> None:
    save_checkpoint(
        run_dir,
        step,
        weights={u.name: u.engine.weights() for u in team.units},
        state={
            "engines": {u.name: u.engine.state_dict() for u in team.units},
            "sampler": sampler.state_dict(),
            "credit": credit.state_dict(),
        },
        config=cfg.to_dict(),
        keep_last=cfg.log.keep_last,
    )


def _resume(path: str | Path, team: Team, sampler: TaskSampler, credit) -> tuple[Path, int]:
    checkpoint = find_checkpoint(path)
    weights, state = load_checkpoint(checkpoint)
    for unit in team.units:
        unit.engine.load_weights(weights[unit.name])
        unit.engine.load_state_dict(state["engines"][unit.name])
        team.sync(unit)
    sampler.load_state_dict(state["sampler"])
    credit.load_state_dict(state["credit"])
    set_rng_state(state["rng"])
    return checkpoint.parent.parent, int(state["step"])


@dataclass
class TrainResult:
    run_dir: Path
    summary: dict[str, Any]
    history: list[dict[str, Any]]


def train(
    cfg: TrainConfig, resume: str | Path | None = None, stop_at_step: int | None = None
) -> TrainResult:
    """Train as ``cfg`` says; returns the run directory, the summary and the metric history.

    Args:
        cfg: The run's configuration.
        resume: A run directory or checkpoint to continue from (exactly).
        stop_at_step: Stop after this step as if the process were killed there (no final
            evaluation, plots or summary); for time-boxed jobs and resume tests.
    """
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed % 2**32)
    probe = marti_env.make(cfg.env.id, **cfg.env.kwargs)
    agents = list(probe.possible_agents)
    credit = make_credit(cfg.env.credit, **cfg.env.credit_kwargs)
    env_kwargs = {**cfg.env.kwargs, "credit": credit}
    sampler = TaskSampler(make_task_source(cfg.env.train_tasks), cfg.seed)
    eval_tasks = list(make_task_source(cfg.env.eval_tasks))
    want_ref = cfg.algorithm.kl_coef > 0 or cfg.log.ref_kl_samples > 0
    loss_fn = make_loss_fn(cfg.algorithm, cfg.rollout.max_tokens, cfg.rollout.temperature)
    if cfg.distributed.backend == "ray":  # marti_trainer.distributed: units on Ray actors
        from marti_trainer.distributed import build_ray_team

        team = build_ray_team(cfg, agents, loss_fn, want_ref)
    else:
        team = build_team(cfg, agents, loss_fn, want_ref)
    pad_id = team.tokenizer.pad_token_id
    run_dir, start = _run_dir(cfg), 0
    if resume is not None:
        run_dir, start = _resume(resume, team, sampler, credit)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
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
    if start == 0 and cfg.eval.at_start:
        logger.log(0, evaluate(team, cfg, eval_tasks, dict(cfg.env.kwargs)))

    for step in range(start + 1, cfg.total_steps + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        batch = rollout(
            cfg.env.id, sampler.draw(cfg.rollout.tasks_per_step), cfg.rollout.n_samples,
            team.rollout_policies(), sampling, mode=cfg.rollout.mode,
            seed=derive_seed(cfg.seed, step), env_kwargs=env_kwargs, progress=False,
            max_concurrency=cfg.rollout.batch_size, transcript_path=transcripts,
        )  # fmt: skip
        metrics = rollout_metrics(batch, cfg.algorithm.group_by)
        t1, c1 = time.perf_counter(), time.process_time()
        for unit in team.units:
            samples = [s for s in batch.samples if s.agent in unit.agents]
            metrics.update(update_unit(unit, samples, cfg, pad_id, step))
            team.sync(unit)
        t2, c2 = time.perf_counter(), time.process_time()
        tokens = sum(
            v for k, v in metrics.items() if k.startswith("charts/") and "update_tokens" in k
        )
        metrics.update(
            {
                "charts/rollout_s": t1 - t0,
                "charts/update_s": t2 - t1,
                "charts/step_s": t2 - t0,
                "charts/rollout_cpu_s": c1 - c0,
                "charts/update_cpu_s": c2 - c1,
                "charts/update_tokens_per_s": tokens / max(t2 - t1, 1e-9),
            }
        )
        last = step == cfg.total_steps
        if (cfg.eval.every and step % cfg.eval.every == 0) or (last and cfg.eval.at_end):
            metrics.update(evaluate(team, cfg, eval_tasks, dict(cfg.env.kwargs)))
        logger.log(step, metrics)
        logger.advance({"reward": metrics["rollout/outcome"], "s/step": t2 - t0})
        if (cfg.log.save_every and step % cfg.log.save_every == 0) or last:
            _save(run_dir, step, team, sampler, credit, cfg)
        if stop_at_step is not None and step >= stop_at_step and not last:
            logger.close()
            team.close()
            return TrainResult(run_dir, {}, read_metrics(run_dir))

    logger.close()
    history = read_metrics(run_dir)
    summary = summarize(history, time.perf_counter() - t_start, cfg)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    if cfg.log.plots:
        from marti_trainer.plots import plot_run

        plot_run(run_dir)
    team.close()
    return TrainResult(run_dir, summary, history)


def summarize(history: list[dict[str, Any]], wall_s: float, cfg: TrainConfig) -> dict[str, Any]:
    """Before/after held-out figures and timings of a finished run."""
    evals = [h for h in history if "eval/accuracy" in h]
    steps = [h for h in history if "charts/step_s" in h]
    out: dict[str, Any] = {"steps": cfg.total_steps, "wall_s": round(wall_s, 1)}
    if steps:
        out["s_per_step"] = round(float(np.mean([h["charts/step_s"] for h in steps])), 2)
    if evals:
        for tag, row in (("before", evals[0]), ("after", evals[-1])):
            out[f"accuracy_{tag}"] = row["eval/accuracy"]
            out[f"boxed_rate_{tag}"] = row["eval/boxed_rate"]
            out[f"eval_step_{tag}"] = row["step"]
    return out


def format_summary(summary: dict[str, Any]) -> str:
    """A few human-readable lines: held-out accuracy and boxed rate before/after, timings."""
    lines = ["run summary"]
    if "accuracy_before" in summary:
        a0, a1 = summary["accuracy_before"], summary["accuracy_after"]
        b0, b1 = summary["boxed_rate_before"], summary["boxed_rate_after"]
        lines.append(
            f"  held-out greedy accuracy: {a0:.1%} -> {a1:.1%} ({100 * (a1 - a0):+.1f} points)"
        )
        lines.append(f"  boxed rate:               {b0:.1%} -> {b1:.1%}")
    lines.append(
        f"  steps: {summary.get('steps')}, wall time {summary.get('wall_s', 0) / 60:.1f} min"
    )
    if "s_per_step" in summary:
        lines.append(f"  {summary['s_per_step']} s/step")
    return "\n".join(lines)
