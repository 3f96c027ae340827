"""Per-token estimators of the KL divergence between the policy and a reference policy.

Reference: J. Schulman, "Approximating KL Divergence" (2020),
http://joschu.net/blog/kl-approx.html. In the note, samples are drawn from ``q`` and
``r = p(x) / q(x)``; the quantity estimated is ``KL[q, p] = E_q[-log r]``.

Here the tokens were sampled from the policy ``π_θ`` (``q``), and ``p`` is the reference
``π_ref``, so per token::

    log r = log π_ref(x) - log π_θ(x)        (r = π_ref / π_θ)

and every estimator below targets ``KL(π_θ || π_ref)``, the direction used in the KL term of
GRPO (Shao et al. 2024, eq. 4: ``π_ref/π_θ - log(π_ref/π_θ) - 1``, which is k3) and the
reward penalty of RLHF-PPO (Ouyang et al. 2022: ``log π_θ - log π_ref``, which is k1).
This matches OpenRLHF's ``compute_approx_kl`` and verl's ``kl_penalty`` ("kl"/"k1", "mse"/"k2",
"low_var_kl"/"k3").
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

KLKind = Literal["k1", "k2", "k3"]
KL_KINDS: tuple[str, ...] = get_args(KLKind)


def kl_estimate(
    logprobs: Tensor,
    ref_logprobs: Tensor,
    kind: KLKind = "k3",
    *,
    log_ratio_clamp: float | None = None,
    clamp: float | None = None,
) -> Tensor:
    """Schulman's per-token estimators of ``KL(π_θ || π_ref)`` for tokens sampled from ``π_θ``.

    With ``log r = ref_logprobs - logprobs`` (``r = π_ref / π_θ``)::

        k1 = -log r                  unbiased, can be negative, high variance
        k2 = (log r)^2 / 2           biased (low for close policies), always >= 0
        k3 = (r - 1) - log r         unbiased, always >= 0, low variance

    Unbiased means ``E_{x~π_θ}[k(x)] = KL(π_θ || π_ref)`` (k1 and k3).

    Args:
        logprobs: ``Tensor[...]``, log-probabilities of the sampled tokens under the policy.
        ref_logprobs: ``Tensor[...]`` of the same shape, under the reference policy.
        kind: ``"k1"``, ``"k2"`` or ``"k3"``.
        log_ratio_clamp: if given, ``log r`` is clamped to ``[-c, c]`` before the estimator
            is applied (verl clamps to ±20 for k3 so that ``exp`` stays finite and gradients
            stay free of NaN). Off by default: the plain formula.
        clamp: if given, the estimate is clamped to ``[-c, c]`` (OpenRLHF and verl clamp k3
            to ±10). Off by default. Clamped tokens get zero gradient.

    Returns:
        ``Tensor[...]``, the per-token estimate (no masking: see ``losses.kl_loss``).
        Half-precision inputs are computed and returned in float32.

    Raises:
        ValueError: unknown ``kind``, shapes that differ, or a negative clamp.
    """
    if kind not in KL_KINDS:
        raise ValueError(f"unknown KL estimator {kind!r}; valid kinds: {list(KL_KINDS)}")
    if logprobs.shape != ref_logprobs.shape:
        raise ValueError(
            f"logprobs and ref_logprobs must have the same shape, got "
            f"{tuple(logprobs.shape)} and {tuple(ref_logprobs.shape)}"
        )
    for name, value in (("log_ratio_clamp", log_ratio_clamp), ("clamp", clamp)):
        if value is not None and not value > 0:
            raise ValueError(f"{name} must be positive or None, got {value}")

    dtype = torch.promote_types(logprobs.dtype, ref_logprobs.dtype)
    dtype = torch.promote_types(dtype, torch.float32)
    log_r = ref_logprobs.to(dtype) - logprobs.to(dtype)
    if log_ratio_clamp is not None:
        log_r = log_r.clamp(-log_ratio_clamp, log_ratio_clamp)

    if kind == "k1":
        kl = -log_r
    elif kind == "k2":
        kl = 0.5 * log_r.square()
    else:
        kl = torch.expm1(log_r) - log_r

    if clamp is not None:
        kl = kl.clamp(-clamp, clamp)
    return kl
