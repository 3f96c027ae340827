"""Loss assembly: per-sample advantages, the batch's normaliser and the policy loss.

Micro-batching keeps the gradient exact: each micro-batch's loss is its aggregate
(token-mean, ...) times ``weight = its share of the batch's normaliser`` (tokens, sequences
or rows), so the sum of micro-batch gradients is the full batch's gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from marti_trainer.algorithms import (
    compute_advantages,
    entropy_from_logits,
    entropy_metric,
    group_ids_from_keys,
    kl_estimate,
    kl_loss,
    masked_mean,
    overlong_penalty,
    policy_loss,
)
from marti_trainer.config import AlgorithmConfig
from marti_trainer.learner.batch import TrainBatch
from marti_trainer.learner.logprobs import forward_logprobs
from marti_trainer.rollout.samples import group_key_of

__all__ = ["LossFn", "make_loss_fn", "penalised_rewards", "sample_advantages", "set_norm"]


def penalised_rewards(
    rewards: Tensor, lengths: Tensor, cfg: AlgorithmConfig, max_tokens: int
) -> Tensor:
    """``rewards + cfg.overlong_penalty * overlong_penalty(lengths)``: each credited reward
    plus the weighted soft overlong penalty of its response length against the rollout
    budget ``max_tokens`` (DAPO, Yu et al. 2025, eq. 13;
    :func:`marti_trainer.algorithms.overlong_penalty`). ``rewards`` unchanged at weight 0.
    """
    if cfg.overlong_penalty <= 0:
        return rewards
    return rewards + cfg.overlong_penalty * overlong_penalty(
        lengths, max_tokens, cfg.overlong_buffer
    )


def sample_advantages(
    samples: Sequence, batch: TrainBatch, cfg: AlgorithmConfig, max_tokens: int
) -> Tensor:
    """Advantages of one agent's (or one model's) samples from their credited rewards.

    Groups are :func:`~marti_trainer.rollout.group_key_of` under ``cfg.group_by``;
    ``agent_scale``'s scales are per ``sample.agent``. With
    ``cfg.overlong_penalty > 0`` each reward first gets that weight times DAPO's soft
    overlong penalty of its length against ``max_tokens`` (the rollout budget). REINFORCE++
    estimators get the per-token KL to the reference when ``cfg.kl_in_reward``.
    """
    rewards = penalised_rewards(
        torch.tensor([float(s.reward) for s in samples]),
        torch.tensor([len(s.response_token_ids) for s in samples]),
        cfg,
        max_tokens,
    )
    name = cfg.advantage
    groups = group_ids_from_keys([group_key_of(s, cfg.group_by) for s in samples])
    if name in ("grpo", "dr_grpo", "rloo"):
        return compute_advantages(name, rewards=rewards, group_ids=groups)
    if name == "agent_scale":  # one scale per agent, whatever the groups pool
        agents = group_ids_from_keys([s.agent for s in samples])
        return compute_advantages(name, rewards=rewards, group_ids=groups, scale_ids=agents)
    token_kl = None
    if cfg.kl_in_reward and batch.ref_logprobs is not None:
        token_kl = kl_estimate(batch.rollout_logprobs, batch.ref_logprobs, "k1")
    kwargs = dict(rewards=rewards, mask=batch.response_mask, token_kl=token_kl, gamma=cfg.gamma)
    kwargs["kl_coef"] = cfg.kl_coef if token_kl is not None else 0.0
    if name == "reinforce_pp_baseline":
        kwargs["group_ids"] = groups
    return compute_advantages(name, **kwargs)


def set_norm(batch: TrainBatch, aggregation: str) -> TrainBatch:
    """Store the whole batch's normaliser for ``aggregation`` (see :func:`micro_weight`)."""
    batch.norm = float(max(1.0, _count(batch, aggregation)))
    return batch


def _count(batch: TrainBatch, aggregation: str) -> float:
    if aggregation == "token-mean":
        return float(batch.response_mask.sum())
    if aggregation == "seq-mean-token-mean":
        return float((batch.response_mask.sum(-1) > 0).sum())
    return float(batch.size)


LossFn = Callable[[torch.nn.Module, TrainBatch], tuple[Tensor, dict[str, float], float]]
"""``loss_fn(model, micro_batch) -> (weighted loss, metrics, weight)`` used by engines."""


def make_loss_fn(cfg: AlgorithmConfig, max_tokens: int, temperature: float = 1.0) -> LossFn:
    """The clipped policy loss (+ KL term, - entropy bonus) of one micro-batch.

    Returns a function giving ``(loss * weight, metrics, weight)``; ``metrics`` are the
    micro-batch's own means, which the engine averages with ``weight``.
    """

    def loss_fn(model: torch.nn.Module, mb: TrainBatch) -> tuple[Tensor, dict[str, float], float]:
        logprobs, logits = forward_logprobs(model, mb, temperature)
        mask = mb.response_mask
        old = mb.old_logprobs if mb.old_logprobs is not None else logprobs.detach()
        loss, stats = policy_loss(
            logprobs, old, mb.advantages, mask, cfg.clip_low, cfg.clip_high,
            cfg.aggregation, max_tokens,
        )  # fmt: skip
        metrics = stats.as_dict("losses/")
        metrics["losses/policy_loss"] = float(loss.detach())
        if mb.ref_logprobs is not None:
            kl = kl_loss(
                logprobs, mb.ref_logprobs, mask, cfg.kl_estimator, cfg.aggregation, max_tokens
            )
            metrics["losses/kl_ref"] = float(kl.detach())
            if cfg.kl_coef > 0 and not cfg.kl_in_reward:
                loss = loss + cfg.kl_coef * kl
        if cfg.entropy_coef > 0:
            entropy = masked_mean(entropy_from_logits(logits.float() / temperature), mask)
            loss = loss - cfg.entropy_coef * entropy
        else:
            with torch.no_grad():
                entropy = masked_mean(entropy_metric(logits, temperature), mask)
        metrics["losses/entropy"] = float(entropy.detach())
        metrics["losses/rollout_kl"] = float(
            masked_mean(kl_estimate(mb.rollout_logprobs, logprobs.detach().float(), "k3"), mask)
        )
        weight = _count(mb, cfg.aggregation) / mb.norm
        return loss * weight, metrics, weight

    return loss_fn
