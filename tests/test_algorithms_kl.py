"""Schulman's KL estimators against hand-computed values (derivations in the comments).

Convention under test: tokens are sampled from the policy π (``logprobs``), the reference is
π_ref (``ref_logprobs``), ``r = π_ref / π``, ``log r = ref_logprobs - logprobs``;
k1 = -log r, k2 = (log r)^2 / 2, k3 = (r - 1) - log r, all estimating KL(π || π_ref).
"""

from __future__ import annotations

import math

import pytest
import torch

from marti_trainer.algorithms import kl_estimate

F64 = torch.float64
LN2 = math.log(2)


def lp(*probs: float) -> torch.Tensor:
    return torch.tensor([math.log(p) for p in probs], dtype=F64)


def assert_values(actual: torch.Tensor, expected, atol: float = 1e-6) -> None:
    expected = torch.tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected, atol=atol, rtol=0)


# token a: π = 0.5, π_ref = 0.25 -> r = 0.5, log r = -ln 2
# token b: π = 0.25, π_ref = 0.5 -> r = 2,   log r = +ln 2
# token c: π = π_ref = 0.3       -> r = 1,   log r = 0
POLICY = lp(0.5, 0.25, 0.3)
REF = lp(0.25, 0.5, 0.3)


def test_k1_by_hand():
    # k1 = -log r = [ln 2, -ln 2, 0] ≈ [0.693147, -0.693147, 0]
    assert_values(kl_estimate(POLICY, REF, "k1"), [LN2, -LN2, 0.0])


def test_k2_by_hand():
    # k2 = (log r)^2 / 2 = [ln²2 / 2, ln²2 / 2, 0] ≈ [0.240227, 0.240227, 0]
    assert_values(kl_estimate(POLICY, REF, "k2"), [LN2**2 / 2, LN2**2 / 2, 0.0])


def test_k3_by_hand():
    # k3 = (r - 1) - log r:
    #   a: (0.5 - 1) + ln 2 = 0.193147
    #   b: (2 - 1) - ln 2   = 0.306853
    #   c: 0
    # The asymmetry (a != b) pins the direction: swapping the arguments swaps a and b.
    assert_values(kl_estimate(POLICY, REF, "k3"), [LN2 - 0.5, 1 - LN2, 0.0])
    assert_values(kl_estimate(REF, POLICY, "k3"), [1 - LN2, LN2 - 0.5, 0.0])


@pytest.mark.parametrize("kind", ["k1", "k3"])
def test_unbiased_estimators_average_to_kl_policy_to_ref(kind):
    # π = [0.5, 0.25, 0.25], π_ref = [0.25, 0.5, 0.25]. Exact expectation under x ~ π:
    # KL(π || π_ref) = 0.5 ln(0.5/0.25) + 0.25 ln(0.25/0.5) + 0.25 ln 1 = 0.5 ln2 - 0.25 ln2
    #                = 0.25 ln 2 ≈ 0.173287
    # With the direction swapped (r = π / π_ref), k1 would average to -0.173287 and k3 to
    # 0.5 (2 - 1 - ln 2) + 0.25 (0.5 - 1 + ln 2) = 0.375 - 0.25 ln 2 ≈ 0.201713.
    policy = torch.tensor([0.5, 0.25, 0.25], dtype=F64)
    ref = torch.tensor([0.25, 0.5, 0.25], dtype=F64)
    expectation = (policy * kl_estimate(policy.log(), ref.log(), kind)).sum()
    assert_values(expectation, 0.25 * LN2)


def test_gradients_with_respect_to_logprobs():
    # token a, log r = ref - lp:
    #   d k1 / d lp = 1
    #   d k2 / d lp = -(log r) = ln 2 ≈ 0.693147
    #   d k3 / d lp = -r + 1 = 1 - 0.5 = 0.5
    for kind, grad in (("k1", 1.0), ("k2", LN2), ("k3", 0.5)):
        x = POLICY[:1].clone().requires_grad_(True)
        kl_estimate(x, REF[:1], kind).sum().backward()
        assert_values(x.grad, [grad])


def test_output_clamp():
    # token b under k3 is 0.306853 -> clamped to 0.25; a (0.193147) and c (0) unchanged
    assert_values(kl_estimate(POLICY, REF, "k3", clamp=0.25), [LN2 - 0.5, 0.25, 0.0])
    # k1: [0.693, -0.693, 0] -> [0.5, -0.5, 0]
    assert_values(kl_estimate(POLICY, REF, "k1", clamp=0.5), [0.5, -0.5, 0.0])


def test_log_ratio_clamp_keeps_k3_finite():
    # log r = 200 - 0 = 200 would overflow exp in float32 (> 88.7); clamped to 20 first:
    # k3 = e^20 - 1 - 20 = 485165174.41  (e^20 = 485165195.41)
    logprobs = torch.zeros(1, requires_grad=True)
    ref = torch.full((1,), 200.0)
    value = kl_estimate(logprobs, ref, "k3", log_ratio_clamp=20.0)
    torch.testing.assert_close(value, torch.tensor([485165174.41]), rtol=1e-6, atol=0)
    # With both clamps (verl's low_var_kl), the value is 10 and the gradient finite (0).
    clamped = kl_estimate(logprobs, ref, "k3", log_ratio_clamp=20.0, clamp=10.0)
    clamped.sum().backward()
    assert clamped.item() == 10.0
    assert logprobs.grad is not None and torch.isfinite(logprobs.grad).all()


def test_half_precision_is_upcast():
    out = kl_estimate(POLICY.to(torch.bfloat16), REF.to(torch.bfloat16), "k1")
    assert out.dtype == torch.float32


def test_rejects_bad_inputs():
    with pytest.raises(ValueError, match="unknown KL estimator 'k4'"):
        kl_estimate(POLICY, REF, "k4")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="same shape"):
        kl_estimate(POLICY, REF[:2], "k1")
    with pytest.raises(ValueError, match="clamp"):
        kl_estimate(POLICY, REF, "k3", clamp=0.0)
