"""One trained unit's update: advantages from its samples, then its engine's optimizer steps.

:func:`update_unit` is the learner's entry point for the training loop
(:mod:`marti_trainer.train`) and for a Ray trainer actor
(:mod:`marti_trainer.distributed.actors`), which runs it next to the weights. A unit is
anything shaped like :class:`TrainedUnit` (:class:`marti_trainer.team.Unit`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

import torch

from marti_trainer.algorithms import kl_estimate, masked_mean
from marti_trainer.config import TrainConfig
from marti_trainer.learner.batch import TrainBatch, collate
from marti_trainer.learner.logprobs import score_with
from marti_trainer.learner.loss import sample_advantages, set_norm
from marti_trainer.rollout.seeds import derive_seed

__all__ = ["StepEngine", "TrainedUnit", "reference_kl", "update_unit"]


class StepEngine(Protocol):
    """What the update needs of an engine (:class:`marti_trainer.engines.Engine`)."""

    def step(self, batch: TrainBatch) -> dict[str, float]:
        """One optimizer step over ``batch``; its metrics."""
        ...


class TrainedUnit(Protocol):
    """What the update needs of a trained unit (:class:`marti_trainer.team.Unit`)."""

    name: str
    agents: list[str]
    model: torch.nn.Module
    engine: StepEngine
    ref: Callable[[TrainBatch], torch.Tensor] | None


def update_unit(unit: TrainedUnit, samples: list, cfg: TrainConfig, pad_id: int, step: int) -> dict:
    """Advantages from the unit's credited rewards, then ``updates_per_batch`` engine steps.

    Returns the unit's metrics (``losses/<unit>/...``, ``optim/<unit>/...``), ``kl/<agent>``,
    and the unit's share of the step's profile: ``time/*_s`` and ``charts/update_flops``
    (the caller sums these over units).
    """
    alg = cfg.algorithm
    work: dict[str, float] = defaultdict(float)  # time/* and FLOPs: summed, not averaged
    t0 = time.perf_counter()
    batch = collate(samples, pad_id)
    kl_metrics = {}
    if unit.ref is not None:
        if alg.kl_coef > 0:
            batch.ref_logprobs = unit.ref(batch)
        kl_metrics = reference_kl(unit, batch, samples, cfg, step)
    t1 = time.perf_counter()
    work["time/ref_logprobs_s"] = t1 - t0
    batch.advantages = sample_advantages(samples, batch, alg, cfg.rollout.max_tokens)
    if alg.updates_per_batch > 1:  # later mini-batches are off-policy: keep pre-update logprobs
        batch.old_logprobs = score_with(unit.model, batch, cfg)
    work["time/old_logprobs_s"] = time.perf_counter() - t1
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
            if key.startswith("time/") or key == "charts/update_flops":
                work[key] += value
            else:
                totals[key] += value / alg.updates_per_batch
        totals["charts/update_tokens"] += float(minibatch.num_tokens)
    totals["losses/zero_advantage_frac"] = 1.0 - float(signal.float().mean())
    named = {k.replace("/", f"/{unit.name}/", 1): v for k, v in totals.items()}
    return {**named, **kl_metrics, **work}


def reference_kl(
    unit: TrainedUnit, batch: TrainBatch, samples: list, cfg: TrainConfig, step: int
) -> dict:
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
