"""Advantage estimators for critic-free policy gradients (GRPO, Dr. GRPO, RLOO, REINFORCE++).

Inputs are plain tensors. ``rewards: Tensor[B]`` holds one scalar reward per sample (one
generated sequence); ``group_ids: Tensor[B]`` (integer) says which samples were drawn for the
same situation and are compared with each other. Upstream, a group is keyed by
``(task, agent, turn)``; :func:`group_ids_from_keys` turns such keys into ids. Ids need not be
contiguous or sorted, and groups may have different sizes.

Group estimators (``grpo``, ``dr_grpo``, ``agent_scale``, ``rloo``) return ``Tensor[B]``,
one advantage per sequence (``losses.policy_loss`` broadcasts it over the tokens). The
REINFORCE++ estimators return ``Tensor[B, T]``, per token. A group whose rewards are all
equal (a group of one included) carries no learning signal: all group estimators give it
exactly 0.

Rewards are data: these functions do not differentiate through them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from marti_trainer.algorithms.losses import masked_mean

_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


class _GroupStats(NamedTuple):
    """Statistics of each sample's group, gathered back per sample (``Tensor[B]``)."""

    inverse: Tensor  # contiguous group index 0..G-1 of each sample
    n_groups: int  # G
    count: Tensor  # group size n_g, in the rewards' dtype
    total: Tensor  # sum of the group's rewards
    mean: Tensor
    constant: Tensor  # bool: every reward of the group is equal (min == max)


def _check_rewards(rewards: Tensor) -> None:
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [B], got shape {tuple(rewards.shape)}")
    if not rewards.is_floating_point():
        raise ValueError(f"rewards must be a floating-point tensor, got {rewards.dtype}")


def _check_groups(rewards: Tensor, group_ids: Tensor) -> None:
    _check_rewards(rewards)
    if group_ids.shape != rewards.shape:
        raise ValueError(
            f"group_ids must have the shape of rewards {tuple(rewards.shape)}, got "
            f"{tuple(group_ids.shape)}"
        )
    if group_ids.dtype not in _INT_DTYPES:
        raise ValueError(f"group_ids must be an integer tensor, got {group_ids.dtype}")
    if group_ids.device != rewards.device:
        raise ValueError(
            f"group_ids and rewards must be on the same device, got {group_ids.device} "
            f"and {rewards.device}"
        )


def _group_sum(values: Tensor, inverse: Tensor, n_groups: int) -> Tensor:
    """Sum of ``values`` over each sample's group, per sample: ``Tensor[B]``."""
    return values.new_zeros(n_groups).index_add(0, inverse, values)[inverse]


def _group_stats(rewards: Tensor, group_ids: Tensor) -> _GroupStats:
    unique_ids, inverse = torch.unique(group_ids, return_inverse=True)
    n_groups = unique_ids.numel()
    count = _group_sum(torch.ones_like(rewards), inverse, n_groups)
    total = _group_sum(rewards, inverse, n_groups)
    zeros = rewards.new_zeros(n_groups)
    low = zeros.scatter_reduce(0, inverse, rewards, "amin", include_self=False)[inverse]
    high = zeros.scatter_reduce(0, inverse, rewards, "amax", include_self=False)[inverse]
    return _GroupStats(inverse, n_groups, count, total, total / count.clamp_min(1), low == high)


def group_ids_from_keys(
    keys: Sequence[Hashable], device: torch.device | str | None = None
) -> Tensor:
    """Integer group ids from arbitrary hashable keys, numbered in order of first appearance.

    ``[("t1", "solver", 0), ("t1", "critic", 0), ("t1", "solver", 0)]`` -> ``[0, 1, 0]``.

    Returns:
        ``Tensor[B]`` of int64.

    Raises:
        TypeError: a key that is not hashable.
    """
    ids: dict[Hashable, int] = {}
    out = [ids.setdefault(key, len(ids)) for key in keys]
    return torch.tensor(out, dtype=torch.int64, device=device)


def grpo_advantages(rewards: Tensor, group_ids: Tensor, eps: float = 1e-6) -> Tensor:
    """GRPO outcome advantages: the reward standardised within its group.

    ``A_i = (r_i - mean_g(r)) / (std_g(r) + eps)`` for sample ``i`` in group ``g``
    (Shao et al. 2024, DeepSeekMath, arXiv:2402.03300, §4.1.2).

    ``std_g`` is the **unbiased** (Bessel-corrected, ``n_g - 1``) sample standard deviation.
    The paper only says "standard deviation"; the reference implementations use
    ``torch.std``'s default, which is unbiased: TRL's ``GRPOTrainer``, OpenRLHF's
    ``group_norm`` and verl's ``compute_grpo_outcome_advantage``. For rewards ``[1, 0, 0, 1]``
    this gives ``±sqrt(3)/2`` (the biased std would give ``±1``).

    Groups whose rewards are all equal (including groups of one, where the unbiased std is
    undefined) get exactly 0.

    Args:
        rewards: ``Tensor[B]``, float.
        group_ids: ``Tensor[B]``, integer.
        eps: added to the std.

    Returns:
        ``Tensor[B]``.
    """
    _check_groups(rewards, group_ids)
    stats = _group_stats(rewards, group_ids)
    centred = rewards - stats.mean
    sum_sq = _group_sum(centred.square(), stats.inverse, stats.n_groups)
    std = (sum_sq / (stats.count - 1).clamp_min(1)).sqrt()
    advantages = centred / (std + eps)
    return torch.where(stats.constant, torch.zeros_like(rewards), advantages)


def dr_grpo_advantages(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """Dr. GRPO advantages: the reward minus its group mean, without the std division.

    ``A_i = r_i - mean_g(r)`` (Liu et al. 2025, "Understanding R1-Zero-Like Training: A
    Critical Perspective", arXiv:2503.20783). Constant groups give exactly 0.

    Args:
        rewards: ``Tensor[B]``, float.
        group_ids: ``Tensor[B]``, integer.

    Returns:
        ``Tensor[B]``.
    """
    _check_groups(rewards, group_ids)
    stats = _group_stats(rewards, group_ids)
    return torch.where(stats.constant, torch.zeros_like(rewards), rewards - stats.mean)


def agent_scale_advantages(
    rewards: Tensor, group_ids: Tensor, scale_ids: Tensor, eps: float = 1e-6
) -> Tensor:
    """Mean-only centring in the group, then one scale per agent over the whole batch.

    ``c_i = r_i - mean_g(r)`` (Dr. GRPO's centring, Liu et al. 2025, arXiv:2503.20783, which
    drops GRPO's per-group std), then ``A_i = c_i / (sigma_a + eps)`` with
    ``sigma_a = sqrt(mean_{j: a(j) = a} c_j^2)``, the root mean square of the centred rewards
    of all samples of ``i``'s agent ``a`` (``scale_ids``) in the batch. The per-agent scale
    is this library's choice, not from a paper: it keeps the learning rate comparable across
    agents whose rewards live on different scales, while, unlike GRPO's per-group std, it
    keeps the differences of reward spread between one agent's groups (a round whose credit
    is scaled by ``b_g`` keeps that weight instead of being standardised back to 1). When
    the agent's samples are whole groups (``group_by=agent``) ``sigma_a`` is the population
    standard deviation of its centred rewards (their mean is 0).

    Constant groups, and every sample of an agent whose groups are all constant, give
    exactly 0. Hand values: rewards ``[1, 0, 2, 0]``, groups ``[0, 0, 1, 1]``, one agent:
    ``c = [0.5, -0.5, 1, -1]``, ``sigma = sqrt(2.5 / 4)``, ``A = c / 0.7906 = [0.632, -0.632,
    1.265, -1.265]`` (GRPO would give ``±0.707`` in both groups).

    Args:
        rewards: ``Tensor[B]``, float.
        group_ids: ``Tensor[B]``, integer: the baseline groups.
        scale_ids: ``Tensor[B]``, integer: which agent (scale) each sample belongs to.
        eps: added to ``sigma_a``.

    Returns:
        ``Tensor[B]``.
    """
    _check_groups(rewards, group_ids)
    _check_groups(rewards, scale_ids)
    centred = dr_grpo_advantages(rewards, group_ids)
    agents = _group_stats(centred.square(), scale_ids)  # mean of c^2 per agent
    advantages = centred / (agents.mean.sqrt() + eps)
    return torch.where(centred == 0, torch.zeros_like(rewards), advantages)  # 0/0 with eps=0


def rloo_advantages(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """REINFORCE Leave-One-Out advantages: the reward minus the mean of the *other* rewards.

    ``A_i = r_i - (1 / (n_g - 1)) * sum_{j in g, j != i} r_j = n_g / (n_g - 1) * (r_i -
    mean_g(r))`` (Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style
    Optimization for Learning from Human Feedback in LLMs", arXiv:2402.14740; Kool et
    al. 2019). A group of one has no other sample: its advantage is 0.

    Args:
        rewards: ``Tensor[B]``, float.
        group_ids: ``Tensor[B]``, integer.

    Returns:
        ``Tensor[B]``.
    """
    _check_groups(rewards, group_ids)
    stats = _group_stats(rewards, group_ids)
    baseline = (stats.total - rewards) / (stats.count - 1).clamp_min(1)
    return torch.where(stats.constant, torch.zeros_like(rewards), rewards - baseline)


def _check_token_tensors(mask: Tensor, **tensors: Tensor | None) -> None:
    if mask.dim() != 2:
        raise ValueError(f"mask must be 2-D [B, T], got shape {tuple(mask.shape)}")
    for name, x in tensors.items():
        if x is not None and x.shape != mask.shape:
            raise ValueError(
                f"{name} must have the shape of mask {tuple(mask.shape)}, got {tuple(x.shape)}"
            )


def _check_gamma(gamma: float) -> None:
    if not 0 <= gamma <= 1:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")


def reinforce_pp_returns(token_rewards: Tensor, mask: Tensor, gamma: float = 1.0) -> Tensor:
    """Discounted returns-to-go per token.

    ``G_t = r_t + gamma * G_{t+1}``, ``G_T = 0``, computed right to left over all positions
    with ``r_t`` taken as 0 where ``mask`` is 0; the result is 0 at masked positions. The
    discount counts positions, so a masked hole (e.g. an observation between two turns)
    also discounts; with ``gamma = 1`` (the default, and REINFORCE++'s setting) holes do
    not matter. As in OpenRLHF's ``get_cumulative_returns``.

    Args:
        token_rewards: ``Tensor[B, T]``, float.
        mask: ``Tensor[B, T]``, bool or 0/1.
        gamma: discount in ``[0, 1]``.

    Returns:
        ``Tensor[B, T]``.
    """
    _check_token_tensors(mask, token_rewards=token_rewards)
    _check_gamma(gamma)
    valid = mask != 0
    rewards = torch.where(valid, token_rewards, torch.zeros_like(token_rewards))
    if gamma == 1.0:
        returns = rewards.flip(-1).cumsum(-1).flip(-1)
    else:
        returns = torch.zeros_like(rewards)
        running = rewards.new_zeros(rewards.shape[0])
        for t in range(rewards.shape[1] - 1, -1, -1):
            running = rewards[:, t] + gamma * running
            returns[:, t] = running
    return torch.where(valid, returns, torch.zeros_like(returns))


def _outcome_token_rewards(
    rewards: Tensor, mask: Tensor, token_kl: Tensor | None, kl_coef: float
) -> Tensor:
    """``-kl_coef * kl_t`` per token, plus the scalar reward on each row's last valid token.

    A row with no valid token gets no reward (it cannot be trained on). Values at masked
    positions are left for :func:`reinforce_pp_returns` to drop.
    """
    valid = mask != 0
    positions = torch.arange(mask.shape[1], device=mask.device)
    last = torch.where(valid, positions, -1).amax(-1, keepdim=True)  # -1: no valid token
    at_last = (positions == last) & valid
    zeros = torch.zeros(mask.shape, dtype=rewards.dtype, device=rewards.device)
    token_rewards = torch.where(at_last, rewards.unsqueeze(-1), zeros)
    if token_kl is not None:  # masked positions are dropped by reinforce_pp_returns
        token_rewards = token_rewards - kl_coef * token_kl.to(rewards.dtype)
    return token_rewards


def masked_whiten(values: Tensor, mask: Tensor, eps: float = 1e-6) -> Tensor:
    """Standardise ``values`` over all valid positions of the batch.

    ``(x - μ) / (σ + eps)`` with ``μ`` and ``σ`` the mean and the **biased** (population)
    standard deviation over the positions where ``mask`` is non-zero, as in OpenRLHF's
    REINFORCE++ advantage normalisation. Masked positions are 0. If every valid value is
    equal (or there is at most one) the result is 0 everywhere.
    """
    _check_token_tensors(mask, values=values)
    valid = mask != 0
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean).square(), mask)
    whitened = (values - mean) / (var.sqrt() + eps)
    # Constant batch (or no valid token): min >= max over the valid positions.
    low = torch.where(valid, values, torch.inf).amin()
    high = torch.where(valid, values, -torch.inf).amax()
    keep = valid & (low < high)
    return torch.where(keep, whitened, torch.zeros_like(whitened))


def reinforce_pp_advantages(
    rewards: Tensor,
    token_kl: Tensor | None,
    mask: Tensor,
    kl_coef: float,
    gamma: float = 1.0,
    eps: float = 1e-6,
) -> Tensor:
    """REINFORCE++ per-token advantages (Hu 2025, arXiv:2501.03262).

    1. Token rewards: ``r_t = -kl_coef * kl_t`` on every valid token, plus the sequence's
       scalar reward on its last valid token (the KL penalty as a reward, see
       ``losses.kl_penalty_rewards``; ``token_kl`` is normally k1 from ``kl.kl_estimate``).
    2. Returns-to-go ``G_t = r_t + gamma * G_{t+1}`` (:func:`reinforce_pp_returns`).
    3. ``A_t = (G_t - μ) / (σ + eps)``, with ``μ``, ``σ`` over all valid tokens of the
       batch, σ biased (:func:`masked_whiten`), as in OpenRLHF's ``reinforce`` estimator.

    Args:
        rewards: ``Tensor[B]``, float.
        token_kl: ``Tensor[B, T]`` per-token KL estimate, or ``None`` for no penalty (then
            ``kl_coef`` must be 0).
        mask: ``Tensor[B, T]``, bool or 0/1. Rows without a valid token get 0 everywhere.
        kl_coef: ``>= 0``.
        gamma: discount in ``[0, 1]``.
        eps: added to σ.

    Returns:
        ``Tensor[B, T]``, 0 at masked positions.
    """
    _check_rewards(rewards)
    _check_token_tensors(mask, token_kl=token_kl)
    if mask.shape[0] != rewards.shape[0]:
        raise ValueError(
            f"rewards has {rewards.shape[0]} samples but mask has {mask.shape[0]} rows"
        )
    if mask.device != rewards.device:
        raise ValueError(
            f"rewards and mask must be on the same device, got {rewards.device} and {mask.device}"
        )
    if not kl_coef >= 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
    if token_kl is None and kl_coef != 0:
        raise ValueError(f"kl_coef={kl_coef} needs token_kl; pass token_kl or kl_coef=0")
    token_rewards = _outcome_token_rewards(rewards, mask, token_kl, kl_coef)
    returns = reinforce_pp_returns(token_rewards, mask, gamma)
    return masked_whiten(returns, mask, eps)


def reinforce_pp_baseline_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    mask: Tensor,
    token_kl: Tensor | None = None,
    kl_coef: float = 0.0,
    gamma: float = 1.0,
    eps: float = 1e-6,
) -> Tensor:
    """REINFORCE++-baseline: group-mean baseline, then REINFORCE++ with batch whitening.

    ``r'_i = r_i - mean_g(r)`` (:func:`dr_grpo_advantages`), then
    :func:`reinforce_pp_advantages` on ``r'`` (optional KL reward penalty, returns-to-go,
    whitening over all valid tokens of the batch). OpenRLHF's ``reinforce_baseline``
    estimator (Hu 2025, arXiv:2501.03262, REINFORCE++-baseline).

    Returns:
        ``Tensor[B, T]``, 0 at masked positions.
    """
    shaped = dr_grpo_advantages(rewards, group_ids)
    return reinforce_pp_advantages(shaped, token_kl, mask, kl_coef, gamma=gamma, eps=eps)


ADVANTAGE_ESTIMATORS: dict[str, Callable[..., Tensor]] = {
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "agent_scale": agent_scale_advantages,
    "rloo": rloo_advantages,
    "reinforce_pp": reinforce_pp_advantages,
    "reinforce_pp_baseline": reinforce_pp_baseline_advantages,
}
"""Name -> estimator. ``grpo``, ``dr_grpo``, ``agent_scale``, ``rloo`` return ``Tensor[B]``;
the others ``Tensor[B, T]``."""


def compute_advantages(name: str, /, **kwargs: object) -> Tensor:
    """Call the estimator registered as ``name`` with ``kwargs``.

    ``compute_advantages("grpo", rewards=r, group_ids=g)`` is ``grpo_advantages(r, g)``.

    Raises:
        ValueError: unknown ``name`` (the message lists the valid names).
        TypeError: arguments the estimator does not take.
    """
    try:
        estimator = ADVANTAGE_ESTIMATORS[name]
    except KeyError:
        raise ValueError(
            f"unknown advantage estimator {name!r}; valid names: {sorted(ADVANTAGE_ESTIMATORS)}"
        ) from None
    return estimator(**kwargs)
