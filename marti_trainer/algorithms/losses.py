"""Policy-gradient losses and their building blocks, as small pure functions.

Shapes: ``B`` sequences (samples), ``T`` token positions (the response, right-padded or with
holes), ``V`` vocabulary entries. ``mask: Tensor[B, T]`` is 1 (or ``True``) on the tokens the
policy generated and that are trained on, 0 elsewhere (padding, prompt, tool or other agents'
tokens). Values at masked positions never reach a loss or a gradient, even if they are
``inf``/``nan`` garbage.

Two different uses of the KL to the reference policy live here; do not combine both by
accident:

* :func:`kl_loss` — KL **as a loss term** (GRPO, Shao et al. 2024, eq. 3): a differentiable
  scalar added to the policy loss as ``loss = policy_loss + β * kl_loss``.
* :func:`kl_penalty_rewards` — KL **as a reward penalty** (RLHF-PPO, Ouyang et al. 2022;
  REINFORCE++, Hu 2025): detached per-token rewards ``-coef * kl_t`` that are added to the
  task reward *before* advantages are computed; no gradient flows through them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import Tensor

from marti_trainer.algorithms.kl import KLKind, kl_estimate

LossAggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
LOSS_AGGREGATIONS: tuple[str, ...] = get_args(LossAggregation)

_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def _check_same_shape(**tensors: Tensor) -> None:
    names = list(tensors)
    first = tensors[names[0]]
    for name in names[1:]:
        if tensors[name].shape != first.shape:
            raise ValueError(
                f"{names[0]} and {name} must have the same shape, got "
                f"{tuple(first.shape)} and {tuple(tensors[name].shape)}"
            )


def _check_2d(name: str, x: Tensor) -> None:
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D [B, T], got shape {tuple(x.shape)}")


def _masked(values: Tensor, mask: Tensor) -> Tensor:
    """``values * mask`` with masked positions forced to exactly 0 (also for inf/nan values)."""
    weights = mask.to(values.dtype)
    return torch.where(mask != 0, values * weights, torch.zeros_like(values))


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``values`` over the positions where ``mask`` is non-zero.

    ``sum(values * mask) / sum(mask)`` over ``dim`` (all dimensions when ``None``). Where the
    mask has no valid entry the result is 0 (not NaN), with a zero (finite) gradient.

    Args:
        values: ``Tensor[...]``.
        mask: ``Tensor[...]`` of the same shape; bool, or numeric weights.
        dim: the dimension to reduce, or ``None`` for all.

    Returns:
        A 0-dim tensor (``dim=None``) or ``values`` reduced over ``dim``.
    """
    _check_same_shape(values=values, mask=mask)
    weights = mask.to(values.dtype)
    if dim is None:
        total, count = _masked(values, mask).sum(), weights.sum()
    else:
        total, count = _masked(values, mask).sum(dim), weights.sum(dim)
    safe_count = torch.where(count != 0, count, torch.ones_like(count))
    return torch.where(count != 0, total / safe_count, torch.zeros_like(total))


def aggregate_loss(
    per_token_loss: Tensor,
    mask: Tensor,
    mode: LossAggregation = "token-mean",
    max_tokens: int | None = None,
) -> Tensor:
    """Reduce a ``Tensor[B, T]`` of per-token losses to a scalar.

    With ``l`` the loss, ``m`` the mask, ``n_i = sum_t m_it`` and ``B`` the number of rows::

        token-mean               sum_it l_it m_it / sum_it m_it
                                 every token weighs the same (DAPO, Yu et al. 2025, §3.3)
        seq-mean-token-mean      mean over rows with n_i > 0 of (sum_t l_it m_it / n_i)
                                 every sequence weighs the same (GRPO, Shao et al. 2024, eq. 3)
        seq-mean-token-sum-norm  sum_it l_it m_it / (B * max_tokens)
                                 a constant normaliser, no length bias (Dr. GRPO, Liu et
                                 al. 2025, arXiv:2503.20783); ``B`` counts every row,
                                 fully masked ones too

    Fully masked rows contribute nothing; a fully masked batch gives 0.

    Args:
        per_token_loss: ``Tensor[B, T]``.
        mask: ``Tensor[B, T]``, bool or 0/1.
        mode: one of the three modes above.
        max_tokens: the constant of ``seq-mean-token-sum-norm``, normally the generation
            budget (max new tokens); required by that mode, ignored by the others. It must
            be the same for every batch, so it is not taken from the padded ``T``.

    Raises:
        ValueError: unknown mode, bad shapes, or a missing / non-positive ``max_tokens``.
    """
    _check_2d("per_token_loss", per_token_loss)
    _check_same_shape(per_token_loss=per_token_loss, mask=mask)
    if mode == "token-mean":
        return masked_mean(per_token_loss, mask)
    if mode == "seq-mean-token-mean":
        seq_loss = masked_mean(per_token_loss, mask, dim=-1)
        seq_has_tokens = mask.to(per_token_loss.dtype).sum(-1) > 0
        return masked_mean(seq_loss, seq_has_tokens)
    if mode == "seq-mean-token-sum-norm":
        if max_tokens is None:
            raise ValueError(
                "aggregation 'seq-mean-token-sum-norm' needs max_tokens (the generation "
                "budget, constant across batches)"
            )
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0:
            raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
        return _masked(per_token_loss, mask).sum() / (per_token_loss.shape[0] * max_tokens)
    raise ValueError(f"unknown loss aggregation {mode!r}; valid modes: {list(LOSS_AGGREGATIONS)}")


@dataclass(frozen=True)
class PolicyLossStats:
    """Diagnostics of :func:`policy_loss`: detached 0-dim tensors (token means over the mask).

    Attributes:
        clip_frac_low: fraction of tokens where the lower clip is active (``A < 0`` and
            ``ratio < 1 - clip_low``): the objective is flat there, zero gradient.
        clip_frac_high: fraction where the upper clip is active (``A > 0`` and
            ``ratio > 1 + clip_high``), zero gradient.
        approx_kl: k3 estimate of ``KL(π_old || π_θ)``: mean of ``(ratio - 1) - log ratio``
            with ``ratio = π_θ / π_old`` on tokens sampled from ``π_old`` (CleanRL's
            ``approx_kl``). Always >= 0; 0 when the policy has not moved.
        ratio_mean: mean of ``ratio``.
    """

    clip_frac_low: Tensor
    clip_frac_high: Tensor
    approx_kl: Tensor
    ratio_mean: Tensor

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        """Python floats for logging (synchronises with the device), names with ``prefix``."""
        return {
            f"{prefix}clip_frac_low": float(self.clip_frac_low),
            f"{prefix}clip_frac_high": float(self.clip_frac_high),
            f"{prefix}approx_kl": float(self.approx_kl),
            f"{prefix}ratio_mean": float(self.ratio_mean),
        }


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    aggregation: LossAggregation = "token-mean",
    max_tokens: int | None = None,
) -> tuple[Tensor, PolicyLossStats]:
    """Clipped surrogate policy loss of PPO with decoupled clip ranges (clip-higher).

    Per token, with ``ratio = exp(logprobs - old_logprobs)`` and advantage ``A``::

        l_t = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)

    then ``loss = aggregate_loss(l, mask, aggregation, max_tokens)``. PPO: Schulman et al.
    2017 (arXiv:1707.06347), eq. 7. ``clip_high > clip_low`` is DAPO's clip-higher (Yu et al.
    2025, arXiv:2503.14476, §3.1; they use 0.2 / 0.28). Where the clip is active (``A > 0``
    and ``ratio > 1 + clip_high``, or ``A < 0`` and ``ratio < 1 - clip_low``) the token has
    zero gradient; elsewhere ``d l_t / d logprobs_t = -ratio * A`` (before aggregation).

    Args:
        logprobs: ``Tensor[B, T]``, current policy log-probabilities (differentiable).
        old_logprobs: ``Tensor[B, T]``, under the policy that sampled the tokens; treated
            as a constant (detached).
        advantages: ``Tensor[B]`` (one per sequence, broadcast over tokens) or
            ``Tensor[B, T]`` (per token); treated as a constant (detached).
        mask: ``Tensor[B, T]``, bool or 0/1.
        clip_low: ε_low, in ``[0, 1)``.
        clip_high: ε_high, ``>= 0``.
        aggregation: see :func:`aggregate_loss`.
        max_tokens: see :func:`aggregate_loss` (needed by ``seq-mean-token-sum-norm``).

    Returns:
        ``(loss, stats)``: a scalar tensor and detached :class:`PolicyLossStats`.

    Raises:
        ValueError: shapes that do not match, or clip ranges out of bounds.
    """
    _check_2d("logprobs", logprobs)
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, mask=mask)
    if advantages.dim() == 1 and advantages.shape[0] == logprobs.shape[0]:
        advantages = advantages.unsqueeze(-1)
    elif advantages.shape != logprobs.shape:
        raise ValueError(
            f"advantages must be [B] or [B, T] with [B, T] = {tuple(logprobs.shape)}, got "
            f"{tuple(advantages.shape)}"
        )
    if not 0 <= clip_low < 1:
        raise ValueError(f"clip_low must be in [0, 1), got {clip_low}")
    if not clip_high >= 0:
        raise ValueError(f"clip_high must be >= 0, got {clip_high}")

    old_logprobs, advantages = old_logprobs.detach(), advantages.detach()  # constants
    valid = mask != 0
    # Masked positions get log ratio 0 so that padding garbage cannot overflow exp() and
    # turn the (zero) gradient there into NaN.
    log_ratio = torch.where(valid, logprobs - old_logprobs, torch.zeros_like(logprobs))
    ratio = torch.exp(log_ratio)
    surrogate = ratio * advantages
    clipped_surrogate = ratio.clamp(1 - clip_low, 1 + clip_high) * advantages
    per_token_loss = -torch.minimum(surrogate, clipped_surrogate)
    loss = aggregate_loss(per_token_loss, mask, aggregation, max_tokens)

    with torch.no_grad():
        ratio_d, log_ratio_d = ratio.detach(), log_ratio.detach()
        low = (ratio_d < 1 - clip_low) & (advantages < 0)
        high = (ratio_d > 1 + clip_high) & (advantages > 0)
        stats = PolicyLossStats(
            clip_frac_low=masked_mean(low.to(ratio_d.dtype), mask),
            clip_frac_high=masked_mean(high.to(ratio_d.dtype), mask),
            approx_kl=masked_mean(torch.expm1(log_ratio_d) - log_ratio_d, mask),
            ratio_mean=masked_mean(ratio_d, mask),
        )
    return loss, stats


def kl_loss(
    logprobs: Tensor,
    ref_logprobs: Tensor,
    mask: Tensor,
    kind: KLKind = "k3",
    aggregation: LossAggregation = "token-mean",
    max_tokens: int | None = None,
    *,
    log_ratio_clamp: float | None = None,
    clamp: float | None = None,
) -> Tensor:
    """KL to the reference policy **as a loss term** (GRPO style), differentiable.

    ``aggregate_loss(kl_estimate(logprobs, ref_logprobs, kind), mask, aggregation)``; the
    caller adds ``β * kl_loss`` to the policy loss. GRPO (Shao et al. 2024, eq. 3-4) uses
    k3 with a per-sequence token mean. Gradients flow into ``logprobs`` (and into
    ``ref_logprobs`` if it requires grad: pass it detached).

    Args:
        logprobs, ref_logprobs, mask: ``Tensor[B, T]``.
        kind, log_ratio_clamp, clamp: see :func:`~marti_trainer.algorithms.kl.kl_estimate`.
        aggregation, max_tokens: see :func:`aggregate_loss`.

    Returns:
        A scalar tensor, not yet multiplied by β.
    """
    _check_2d("logprobs", logprobs)
    _check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs, mask=mask)
    # Route logprobs through a where so that garbage (inf) at masked positions cannot turn
    # their zero gradient into NaN; the masked values themselves are dropped by aggregation.
    logprobs = torch.where(mask != 0, logprobs, torch.zeros_like(logprobs))
    per_token = kl_estimate(
        logprobs, ref_logprobs, kind, log_ratio_clamp=log_ratio_clamp, clamp=clamp
    )
    return aggregate_loss(per_token, mask, aggregation, max_tokens)


def kl_penalty_rewards(
    logprobs: Tensor,
    ref_logprobs: Tensor,
    mask: Tensor,
    kl_coef: float,
    kind: KLKind = "k1",
    *,
    log_ratio_clamp: float | None = None,
    clamp: float | None = None,
) -> Tensor:
    """KL to the reference policy **as a reward penalty**, per token, detached.

    ``r^KL_t = -kl_coef * kl_estimate(logprobs_t, ref_logprobs_t, kind) * mask_t``, added to
    the task reward before returns/advantages are computed (Ouyang et al. 2022, eq. 2, with
    k1 = ``log π_θ - log π_ref``; REINFORCE++, Hu 2025). The same penalty is built inside
    :func:`~marti_trainer.algorithms.advantages.reinforce_pp_advantages` from ``token_kl``.

    Returns:
        ``Tensor[B, T]``, 0 at masked positions, ``requires_grad=False``.

    Raises:
        ValueError: bad shapes, or a negative ``kl_coef``.
    """
    _check_2d("logprobs", logprobs)
    _check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs, mask=mask)
    if not kl_coef >= 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
    with torch.no_grad():
        kl = kl_estimate(logprobs, ref_logprobs, kind, log_ratio_clamp=log_ratio_clamp, clamp=clamp)
        return _masked(-kl_coef * kl, mask)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the categorical distribution ``softmax(logits)`` over the last dimension.

    ``H = -sum_v p_v log p_v = logsumexp(z) - sum_v p_v z_v`` with ``p = softmax(z)``; the
    right-hand form is shift-invariant and stable for large logits. Logits must be finite.
    Computed in the dtype of ``logits`` (pass float32 logits for a precise value).
    Differentiable; for a metric over a long vocabulary see :func:`entropy_metric`.

    Args:
        logits: ``Tensor[B, T, V]`` (any leading shape).

    Returns:
        ``Tensor[B, T]``.
    """
    if logits.dim() < 1:
        raise ValueError("logits must have a vocabulary dimension")
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


LOGIT_CHUNK = 8
"""Positions per chunk in :func:`logprobs_from_logits` and :func:`entropy_metric`: a float32
chunk of SmolLM2's 49,152-token vocabulary is 1.5 MB, so it stays in a CPU core's L2 cache
while the chunk's exp, sum and scale run over it."""


ACCELERATOR_CHUNK_BYTES = 256 * 1024 * 1024
"""Float32 bytes per chunk on a GPU, where each chunk costs kernel launches rather than cache
misses: a chunk holds ``ACCELERATOR_CHUNK_BYTES // (4 V)`` positions (at least
:data:`LOGIT_CHUNK`)."""


def chunk_positions(device_type: str, vocab: int) -> int:
    """Positions per chunk: :data:`LOGIT_CHUNK` on a CPU, a byte budget elsewhere."""
    if device_type == "cpu":
        return LOGIT_CHUNK
    return max(LOGIT_CHUNK, ACCELERATOR_CHUNK_BYTES // (4 * max(1, vocab)))


def _chunks(logits: Tensor) -> list[tuple[int, int, int]]:
    """``(row, start, stop)`` position chunks of ``logits [B, T, V]``."""
    rows, length = logits.shape[0], logits.shape[1]
    step = chunk_positions(logits.device.type, logits.shape[-1])
    return [(b, s, min(s + step, length)) for b in range(rows) for s in range(0, length, step)]


def _scaled(chunk: Tensor, temperature: float) -> Tensor:
    """A copy of ``chunk / temperature`` in at least float32 (half-precision logits are
    upcast before the division, so it is not rounded to bf16 again)."""
    dtype = torch.promote_types(chunk.dtype, torch.float32)
    z = chunk.to(dtype, copy=True)
    return z.div_(temperature) if temperature != 1.0 else z


class _SelectiveLogSoftmax(torch.autograd.Function):
    """``log softmax(z / tau)[x]`` per position, forward and backward chunk by chunk."""

    @staticmethod
    def forward(ctx, logits: Tensor, ids: Tensor, temperature: float) -> Tensor:  # type: ignore[override]
        dtype = torch.promote_types(logits.dtype, torch.float32)
        lse = logits.new_empty(ids.shape, dtype=dtype)
        out = logits.new_empty(ids.shape, dtype=dtype)
        for b, s, e in _chunks(logits):
            z = _scaled(logits[b, s:e], temperature)
            lse[b, s:e] = torch.logsumexp(z, dim=-1)
            out[b, s:e] = z.gather(-1, ids[b, s:e, None]).squeeze(-1) - lse[b, s:e]
        ctx.save_for_backward(logits, ids, lse)
        ctx.temperature = temperature
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        logits, ids, lse = ctx.saved_tensors
        tau = ctx.temperature
        grad = grad.to(lse.dtype)
        out = torch.empty_like(logits)
        for b, s, e in _chunks(logits):
            g = grad[b, s:e, None]
            p = _scaled(logits[b, s:e], tau).sub_(lse[b, s:e, None]).exp_()  # softmax(z/tau)
            p.mul_(-g).scatter_add_(-1, ids[b, s:e, None], g)  # g (onehot - p)
            out[b, s:e] = p.div_(tau) if tau != 1.0 else p
        return out, None, None


def logprobs_from_logits(logits: Tensor, token_ids: Tensor, temperature: float = 1.0) -> Tensor:
    """Log-probabilities of ``token_ids`` under ``softmax(logits / temperature)``.

    ``log p(x_t) = z_{t, x_t} / tau - logsumexp_v (z_{t, v} / tau)``, and its gradient
    ``d log p(x_t) / d z_{t, v} = (1[v = x_t] - p_v) / tau``. Like TRL's
    ``selective_log_softmax``, the full ``[B, T, V]`` log-softmax is never materialised:
    forward and backward run over chunks of :data:`LOGIT_CHUNK` positions, each upcast to
    float32 and scaled there (so bf16 logits are not rounded again after the division), and
    the backward writes the logits' gradient directly. The result is float32 for half and
    float32 logits, float64 for float64.

    Args:
        logits: ``Tensor[B, T, V]``, aligned with ``token_ids`` (already shifted so that
            ``logits[:, t]`` predicts ``token_ids[:, t]``).
        token_ids: ``Tensor[B, T]``, integer.
        temperature: ``tau > 0``, the sampling temperature the tokens were drawn at.

    Returns:
        ``Tensor[B, T]``, differentiable with respect to ``logits``.

    Raises:
        ValueError: shapes that do not line up, non-integer ``token_ids`` or ``tau <= 0``.
    """
    if logits.dim() != 3 or token_ids.shape != logits.shape[:-1]:
        raise ValueError(
            f"token_ids must have the shape of logits without its last dimension, got logits "
            f"{tuple(logits.shape)} and token_ids {tuple(token_ids.shape)}"
        )
    if token_ids.dtype not in _INT_DTYPES:
        raise ValueError(f"token_ids must be an integer tensor, got {token_ids.dtype}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    return _SelectiveLogSoftmax.apply(logits, token_ids.long(), float(temperature))


def entropy_metric(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """:func:`entropy_from_logits` of ``logits / temperature`` in float32, without gradient,
    over chunks of :data:`LOGIT_CHUNK` positions (bounded memory, cache-sized passes).

    Args:
        logits: ``Tensor[B, T, V]``.
        temperature: ``tau > 0``.

    Returns:
        ``Tensor[B, T]``, float32 (float64 for float64 logits).
    """
    if logits.dim() != 3:
        raise ValueError(f"logits must be [B, T, V], got {tuple(logits.shape)}")
    out = logits.new_empty(
        logits.shape[:-1], dtype=torch.promote_types(logits.dtype, torch.float32)
    )
    with torch.no_grad():
        for b, s, e in _chunks(logits):
            z = _scaled(logits[b, s:e], temperature)
            lse = torch.logsumexp(z, dim=-1)
            p = (z - lse[:, None]).exp_()
            out[b, s:e] = lse - p.mul_(z).sum(dim=-1)
    return out


__all__ = [
    "LOSS_AGGREGATIONS",
    "LossAggregation",
    "PolicyLossStats",
    "aggregate_loss",
    "entropy_from_logits",
    "entropy_metric",
    "kl_loss",
    "kl_penalty_rewards",
    "logprobs_from_logits",
    "masked_mean",
    "policy_loss",
]
