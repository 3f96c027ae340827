"""The degeneracy check: is a credit method gradient-identical to ``none``?

Group-normalised advantages (GRPO: ``A = (r - mean_g r) / std_g r`` within each advantage
group ``g``) are invariant to any affine map ``r -> a_g + b_g r`` with ``b_g > 0`` applied
inside a group. So a method whose rewards are, in every group, an increasing affine
function of the team outcome ``R`` gives exactly the advantages of ``none`` (``r = R``): it
trains identically, whatever it is called. Turn discounting (``r_t = gamma^(K - k_t) R``:
one ``b_g`` per round) is the standard example; so are ``leave_one_out``/``shapley`` where
the final-answer rule reads one agent.

Other normalisations keep more: with mean-only centring (Dr. GRPO) only ``b = 1`` is
identical, and with ``agent_scale`` (centring, then one scale per agent over the batch)
only a ``b`` shared by all of an agent's groups is, so turn discounting is *not* identical
there.

The check runs on a batch of finished episodes before any training (no gradient needed):
:func:`gradient_identical_to_none`.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Literal

import numpy as np

Normalization = Literal["std", "mean", "agent_scale"]
NORMALIZATIONS: tuple[str, ...] = ("std", "mean", "agent_scale")


def affine_fit(rewards: Sequence[float], outcomes: Sequence[float]) -> tuple[float, float, float]:
    """Least-squares ``r ~ a + b R`` over one group: ``(a, b, max |residual|)``.

    With constant ``R`` the fit is ``a = mean(r)``, ``b = 0``. Hand values:
    ``r = [0.5, 0.5, 0.0]``, ``R = [1, 1, 0]`` -> ``(0.0, 0.5, 0.0)``.
    """
    r = np.asarray(rewards, dtype=float)
    x = np.asarray(outcomes, dtype=float)
    if r.shape != x.shape or r.ndim != 1 or r.size == 0:
        raise ValueError(
            f"affine_fit: rewards and outcomes must be equal-length, non-empty 1-D sequences, "
            f"got shapes {r.shape} and {x.shape}"
        )
    if np.ptp(x) == 0:
        a, b = float(r.mean()), 0.0
    else:
        b = float(np.cov(x, r, bias=True)[0, 1] / x.var())
        a = float(r.mean() - b * x.mean())
    return a, b, float(np.max(np.abs(r - (a + b * x))))


def gradient_identical_to_none(
    rewards: Sequence[float],
    outcomes: Sequence[float],
    groups: Sequence[Hashable],
    normalize: Normalization = "std",
    tol: float = 1e-9,
    scale_keys: Sequence[Hashable] | None = None,
) -> bool:
    """True if every advantage group's rewards give ``none``'s advantages exactly.

    One entry per turn: its credited reward ``r``, its episode's outcome ``R`` and its
    advantage group key (e.g. ``(agent, round)`` or ``(task, agent, round)``). Per group:

    * ``"std"`` (``A = (r - mean) / std``, 0 where ``std = 0``): identical iff ``r`` is
      constant where ``R`` is, and ``r = a + b R`` with ``b > 0`` where ``R`` varies.
    * ``"mean"`` (``A = r - mean``): identical iff ``r = a + R`` (``b = 1``) where ``R``
      varies, and ``r`` constant where ``R`` is.
    * ``"agent_scale"`` (``A = (r - mean) / sigma_k``, one ``sigma_k`` per ``scale_keys``
      value, e.g. per agent, over the whole batch: the trainer's ``algorithm.advantage=
      agent_scale``): identical iff ``r`` is constant where ``R`` is, and ``r = a_g + b R``
      where ``R`` varies with one ``b > 0`` shared by all groups of the same scale key (the
      common ``b`` cancels in ``sigma_k``; a ``b`` that differs between groups, e.g. turn
      discounting, survives). ``scale_keys`` is required, one per entry.

    Residuals up to ``tol`` times the rewards' scale count as exact.

    Raises:
        ValueError: unequal lengths, no entries, an unknown ``normalize``, or
            ``scale_keys`` missing (or of another length) for ``"agent_scale"``.
    """
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {normalize!r}")
    if not len(rewards) == len(outcomes) == len(groups) or not len(rewards):
        raise ValueError(
            f"gradient_identical_to_none: {len(rewards)} rewards, {len(outcomes)} outcomes "
            f"and {len(groups)} group keys (need equal, non-zero counts)"
        )
    if normalize == "agent_scale" and (scale_keys is None or len(scale_keys) != len(rewards)):
        raise ValueError(
            f"normalize='agent_scale' needs one scale key (agent) per entry: "
            f"{len(rewards)} rewards, {'no' if scale_keys is None else len(scale_keys)} "
            f"scale keys"
        )
    members: dict[Hashable, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    r_all = np.asarray(rewards, dtype=float)
    x_all = np.asarray(outcomes, dtype=float)
    scale = max(1.0, float(np.max(np.abs(r_all))))
    slopes: dict[Hashable, float] = {}  # agent_scale: the b each scale key's groups share
    for index in members.values():
        r, x = r_all[index], x_all[index]
        a, b, residual = affine_fit(r, x)
        if residual > tol * scale:
            return False
        if np.ptp(x) == 0:
            if np.ptp(r) > tol * scale:
                return False
            continue
        if b <= tol or (normalize == "mean" and abs(b - 1.0) > tol * scale):
            return False
        if normalize == "agent_scale":
            keys = {scale_keys[i] for i in index}  # type: ignore[index]
            for key in keys:
                if abs(slopes.setdefault(key, b) - b) > tol * max(1.0, abs(b)):
                    return False
    return True
