"""Losses, aggregation and logits helpers against hand-computed values (derivations inline)."""

from __future__ import annotations

import math

import pytest
import torch

from marti_trainer.algorithms import (
    PolicyLossStats,
    aggregate_loss,
    entropy_from_logits,
    entropy_metric,
    kl_loss,
    kl_penalty_rewards,
    logprobs_from_logits,
    masked_mean,
    policy_loss,
)

F64 = torch.float64
LN2 = math.log(2)
LN3 = math.log(3)
E_HALF = math.exp(0.5)  # 1.648721
E_MHALF = math.exp(-0.5)  # 0.606531


def t(values, dtype=F64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def assert_values(actual: torch.Tensor, expected, atol: float = 1e-6) -> None:
    torch.testing.assert_close(actual, t(expected, actual.dtype), atol=atol, rtol=0)


# --- masked_mean ---------------------------------------------------------------------------


def test_masked_mean_by_hand():
    values = t([[1, 2, 3], [4, 5, 6]])
    mask = t([[1, 1, 0], [1, 0, 0]])
    # all: (1 + 2 + 4) / 3 = 7/3; per row: [(1+2)/2, 4/1] = [1.5, 4]
    assert_values(masked_mean(values, mask), 7 / 3)
    assert_values(masked_mean(values, mask, dim=-1), [1.5, 4.0])


def test_masked_mean_empty_mask_is_zero_and_garbage_is_ignored():
    values = t([[1.0, math.inf], [math.nan, 2.0]]).requires_grad_(True)
    mask = torch.tensor([[True, False], [False, False]])
    # row 0: 1 / 1 = 1 (the inf is masked); row 1: nothing valid -> 0 (not NaN)
    out = masked_mean(values, mask, dim=-1)
    assert_values(out, [1.0, 0.0])
    out.sum().backward()
    # gradient 1 on the only valid entry, 0 (finite) elsewhere
    assert_values(values.grad, [[1.0, 0.0], [0.0, 0.0]])
    assert_values(masked_mean(values, torch.zeros(2, 2)), 0.0)


# --- aggregate_loss ----------------------------------------------------------------------------

# Ragged mask: row 0 has 4 valid tokens, row 1 has 2, row 2 none.
LOSS = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9]]
MASK = [[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]]


def test_aggregation_modes_on_ragged_mask():
    loss, mask = t(LOSS), t(MASK)
    # token-mean: (1+2+3+4+5+6) / 6 = 21/6 = 3.5
    assert_values(aggregate_loss(loss, mask, "token-mean"), 3.5)
    # seq-mean-token-mean: row means 10/4 = 2.5 and 11/2 = 5.5; row 2 has no token and is
    # left out -> (2.5 + 5.5) / 2 = 4.0
    assert_values(aggregate_loss(loss, mask, "seq-mean-token-mean"), 4.0)
    # Dr. GRPO constant: 21 / (B * max_tokens) = 21 / (3 * 8) = 0.875
    assert_values(aggregate_loss(loss, mask, "seq-mean-token-sum-norm", max_tokens=8), 0.875)


@pytest.mark.parametrize(
    ("mode", "row0", "row1"),
    [
        # token-mean: every valid token weighs 1/6
        ("token-mean", 1 / 6, 1 / 6),
        # seq-mean-token-mean: 1/(2 rows * 4 tokens) = 1/8 and 1/(2 * 2) = 1/4
        ("seq-mean-token-mean", 1 / 8, 1 / 4),
        # sum-norm: 1/(3 * 8) = 1/24 for every valid token
        ("seq-mean-token-sum-norm", 1 / 24, 1 / 24),
    ],
)
def test_aggregation_gradients(mode, row0, row1):
    loss = t(LOSS).requires_grad_(True)
    aggregate_loss(loss, t(MASK), mode, max_tokens=8).backward()
    assert_values(loss.grad, [[row0] * 4, [row1, row1, 0, 0], [0, 0, 0, 0]])


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_fully_masked_batch_aggregates_to_zero(mode):
    loss = t(LOSS).requires_grad_(True)
    out = aggregate_loss(loss, torch.zeros(3, 4), mode, max_tokens=8)
    out.backward()
    assert out.item() == 0.0
    assert torch.equal(loss.grad, torch.zeros(3, 4, dtype=F64))


def test_aggregation_rejects_bad_inputs():
    loss, mask = t(LOSS), t(MASK)
    with pytest.raises(ValueError, match="needs max_tokens"):
        aggregate_loss(loss, mask, "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="positive int"):
        aggregate_loss(loss, mask, "seq-mean-token-sum-norm", max_tokens=0)
    with pytest.raises(ValueError, match="unknown loss aggregation 'token_mean'"):
        aggregate_loss(loss, mask, "token_mean")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="same shape"):
        aggregate_loss(loss, mask[:, :3], "token-mean")
    with pytest.raises(ValueError, match="2-D"):
        aggregate_loss(loss[0], mask[0], "token-mean")


# --- policy_loss --------------------------------------------------------------------------------


def test_policy_loss_clipping_table():
    # old logprobs 0, new [0.5, -0.5, 0.5, -0.5] -> ratio [e^.5, e^-.5, e^.5, e^-.5]
    #   = [1.648721, 0.606531, 1.648721, 0.606531]; A = [1, 1, -1, -1]; clip range [0.8, 1.2]
    # token 0: min(1.6487*1, 1.2*1)    = 1.2       -> loss -1.2      clipped high, grad 0
    # token 1: min(0.6065*1, 0.8*1)    = 0.6065    -> loss -0.606531 grad -ratio*A = -0.606531
    # token 2: min(-1.6487, -1.2)      = -1.6487   -> loss 1.648721  grad -ratio*A = 1.648721
    # token 3: min(-0.6065, -0.8)      = -0.8      -> loss 0.8       clipped low, grad 0
    # token-mean: (-1.2 - 0.606531 + 1.648721 + 0.8) / 4 = 0.642190 / 4 = 0.160548
    logprobs = t([[0.5, -0.5, 0.5, -0.5]]).requires_grad_(True)
    old = torch.zeros(1, 4, dtype=F64)
    adv = t([[1, 1, -1, -1]])
    loss, stats = policy_loss(logprobs, old, adv, torch.ones(1, 4))
    assert_values(loss, (-1.2 - E_MHALF + E_HALF + 0.8) / 4)
    loss.backward()
    # gradients divided by the 4 tokens: [0, -0.151633, 0.412180, 0]
    assert_values(logprobs.grad, [[0.0, -E_MHALF / 4, E_HALF / 4, 0.0]])
    # one token of four clipped on each side
    assert_values(stats.clip_frac_high, 0.25)
    assert_values(stats.clip_frac_low, 0.25)
    # ratio mean: (2 * 1.648721 + 2 * 0.606531) / 4 = 1.127626
    assert_values(stats.ratio_mean, (E_HALF + E_MHALF) / 2)
    # approx_kl = mean((ratio - 1) - log ratio):
    #   e^.5:  0.648721 - 0.5 = 0.148721;  e^-.5: -0.393469 + 0.5 = 0.106531
    #   mean = (0.148721 + 0.106531) / 2 = 0.127626
    assert_values(stats.approx_kl, ((E_HALF - 1.5) + (E_MHALF - 0.5)) / 2)


def test_clip_higher_decouples_the_two_ranges():
    # ratios [e^.25, e^-.25] = [1.284025, 0.778801], A = [1, -1]
    logprobs = t([[0.25, -0.25]]).requires_grad_(True)
    old, adv, mask = torch.zeros(1, 2, dtype=F64), t([[1, -1]]), torch.ones(1, 2)
    # clip_low 0.2, clip_high 0.3 (range [0.8, 1.3]):
    #   token 0: 1.284 < 1.3, unclipped: loss -1.284025, grad -1.284025 / 2 = -0.642013
    #   token 1: 0.7788 < 0.8 with A < 0: min(-0.7788, -0.8) = -0.8 -> loss 0.8, grad 0
    #   loss = (-1.284025 + 0.8) / 2 = -0.242013
    loss, stats = policy_loss(logprobs, old, adv, mask, clip_low=0.2, clip_high=0.3)
    loss.backward()
    assert_values(loss, (-math.exp(0.25) + 0.8) / 2)
    assert_values(logprobs.grad, [[-math.exp(0.25) / 2, 0.0]])
    assert_values(stats.clip_frac_high, 0.0)
    assert_values(stats.clip_frac_low, 0.5)
    # symmetric 0.2: token 0 is now clipped at 1.2 -> loss (-1.2 + 0.8) / 2 = -0.2, no grad
    logprobs.grad = None
    loss, stats = policy_loss(logprobs, old, adv, mask, clip_low=0.2, clip_high=0.2)
    loss.backward()
    assert_values(loss, -0.2)
    assert_values(logprobs.grad, [[0.0, 0.0]])
    assert_values(stats.clip_frac_high, 0.5)


def test_sequence_advantages_broadcast_over_tokens():
    # ratio 1 everywhere, so l_t = -A of the row: row 0 (A=2) [-2, -2], row 1 (A=-1) [1, -]
    logprobs = torch.zeros(2, 2, dtype=F64, requires_grad=True)
    old = torch.zeros(2, 2, dtype=F64)
    adv, mask = t([2, -1]), t([[1, 1], [1, 0]])
    # token-mean: (-2 - 2 + 1) / 3 = -1
    loss, _ = policy_loss(logprobs, old, adv, mask)
    assert_values(loss, -1.0)
    # seq-mean-token-mean: (mean(-2, -2) + 1) / 2 = -0.5
    loss, _ = policy_loss(logprobs, old, adv, mask, aggregation="seq-mean-token-mean")
    assert_values(loss, -0.5)
    # Dr. GRPO: (-2 - 2 + 1) / (2 * 4) = -0.375; grad -A/8 on valid tokens
    loss, stats = policy_loss(
        logprobs, old, adv, mask, aggregation="seq-mean-token-sum-norm", max_tokens=4
    )
    assert_values(loss, -0.375)
    loss.backward()
    assert_values(logprobs.grad, [[-0.25, -0.25], [0.125, 0.0]])
    # unchanged policy: ratio 1, approx_kl 0, nothing clipped
    assert_values(stats.ratio_mean, 1.0)
    assert_values(stats.approx_kl, 0.0)
    assert_values(stats.clip_frac_low + stats.clip_frac_high, 0.0)


def test_masked_garbage_gives_finite_loss_and_zero_gradient():
    # position 1 is padding with absurd values: exp(1000 - (-1000)) would overflow.
    # valid token 0: ratio 1, A = 1 -> loss -1
    logprobs = t([[0.0, 1000.0]]).requires_grad_(True)
    old = t([[0.0, -1000.0]])
    loss, stats = policy_loss(logprobs, old, t([1.0]), t([[1, 0]]))
    loss.backward()
    assert_values(loss, -1.0)
    assert_values(logprobs.grad, [[-1.0, 0.0]])
    assert_values(stats.ratio_mean, 1.0)


def test_fully_masked_sequence_contributes_nothing():
    # row 1 fully masked with a huge advantage: the loss is row 0's alone (ratio 1, A = 1)
    logprobs = torch.zeros(2, 2, dtype=F64, requires_grad=True)
    loss, stats = policy_loss(
        logprobs, torch.zeros(2, 2, dtype=F64), t([1.0, 1e6]), t([[1, 1], [0, 0]])
    )
    loss.backward()
    assert_values(loss, -1.0)
    assert_values(logprobs.grad, [[-0.5, -0.5], [0.0, 0.0]])
    # and an all-masked batch: loss 0, stats 0
    loss, stats = policy_loss(logprobs, logprobs.detach(), t([1.0, 1.0]), torch.zeros(2, 2))
    assert loss.item() == 0.0
    assert stats.as_dict() == {
        "clip_frac_low": 0.0,
        "clip_frac_high": 0.0,
        "approx_kl": 0.0,
        "ratio_mean": 0.0,
    }


def test_policy_loss_stats_are_detached():
    logprobs = torch.zeros(1, 2, requires_grad=True)
    # old log-probs and advantages are constants: no gradient reaches them
    old, adv = torch.zeros(1, 2, requires_grad=True), torch.ones(1, requires_grad=True)
    loss, stats = policy_loss(logprobs, old, adv, torch.ones(1, 2))
    loss.backward()
    assert old.grad is None and adv.grad is None
    assert logprobs.grad is not None
    assert isinstance(stats, PolicyLossStats)
    for value in (stats.clip_frac_low, stats.clip_frac_high, stats.approx_kl, stats.ratio_mean):
        assert not value.requires_grad
        assert value.dim() == 0
    assert set(stats.as_dict(prefix="losses/")) == {
        "losses/clip_frac_low",
        "losses/clip_frac_high",
        "losses/approx_kl",
        "losses/ratio_mean",
    }


def test_policy_loss_rejects_bad_inputs():
    lp, old, mask = torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match="advantages must be"):
        policy_loss(lp, old, torch.zeros(2, 4), mask)
    with pytest.raises(ValueError, match="advantages must be"):
        policy_loss(lp, old, torch.zeros(3), mask)
    with pytest.raises(ValueError, match="same shape"):
        policy_loss(lp, torch.zeros(2, 2), torch.zeros(2), mask)
    with pytest.raises(ValueError, match="same shape"):
        policy_loss(lp, old, torch.zeros(2), torch.ones(2, 2))
    with pytest.raises(ValueError, match="2-D"):
        policy_loss(torch.zeros(3), torch.zeros(3), torch.zeros(3), torch.ones(3))
    with pytest.raises(ValueError, match="clip_low"):
        policy_loss(lp, old, torch.zeros(2), mask, clip_low=1.0)
    with pytest.raises(ValueError, match="clip_high"):
        policy_loss(lp, old, torch.zeros(2), mask, clip_high=-0.1)
    with pytest.raises(ValueError, match="needs max_tokens"):
        policy_loss(lp, old, torch.zeros(2), mask, aggregation="seq-mean-token-sum-norm")


# --- KL as a loss / as a reward ----------------------------------------------------------------

# token a: π = 0.5, π_ref = 0.25 (r = 0.5); token b: π = 0.25, π_ref = 0.5 (r = 2)
KL_LP = t([[math.log(0.5), math.log(0.25)]])
KL_REF = t([[math.log(0.25), math.log(0.5)]])


def test_kl_loss_k3_token_mean_and_gradient():
    # k3 = (r - 1) - log r: a = -0.5 + ln 2 = 0.193147, b = 1 - ln 2 = 0.306853
    # token-mean = (0.193147 + 0.306853) / 2 = 0.5 / 2 = 0.25
    logprobs = KL_LP.clone().requires_grad_(True)
    loss = kl_loss(logprobs, KL_REF, torch.ones(1, 2), kind="k3")
    assert_values(loss, 0.25)
    # d k3 / d lp = 1 - r: a: 0.5, b: -1; divided by the 2 tokens: [0.25, -0.5]
    loss.backward()
    assert_values(logprobs.grad, [[0.25, -0.5]])


def test_kl_loss_mask_and_kind():
    # only token a: k3 = ln 2 - 0.5 = 0.193147
    assert_values(kl_loss(KL_LP, KL_REF, t([[1, 0]]), kind="k3"), LN2 - 0.5)
    # k1 = lp - ref: [ln 2, -ln 2] -> token-mean 0
    assert_values(kl_loss(KL_LP, KL_REF, torch.ones(1, 2), kind="k1"), 0.0)
    # masked garbage (-inf logprob at padding) leaks neither into the value nor, as NaN,
    # into the gradient: token a alone, d k3 / d lp = 1 - r = 0.5
    lp = t([[math.log(0.5), -math.inf]]).requires_grad_(True)
    loss = kl_loss(lp, t([[math.log(0.25), 0.0]]), t([[1, 0]]), kind="k3")
    assert_values(loss, LN2 - 0.5)
    loss.backward()
    assert_values(lp.grad, [[0.5, 0.0]])


def test_kl_penalty_rewards_k1_detached_and_masked():
    # -coef * k1 = -0.1 * [ln 2, -ln 2] = [-0.069315, 0.069315]; masked position -> 0
    logprobs = KL_LP.clone().requires_grad_(True)
    rewards = kl_penalty_rewards(logprobs, KL_REF, torch.ones(1, 2), kl_coef=0.1)
    assert_values(rewards, [[-0.1 * LN2, 0.1 * LN2]])
    assert not rewards.requires_grad
    masked = kl_penalty_rewards(logprobs, KL_REF, t([[0, 1]]), kl_coef=0.1)
    assert_values(masked, [[0.0, 0.1 * LN2]])
    with pytest.raises(ValueError, match="kl_coef"):
        kl_penalty_rewards(logprobs, KL_REF, torch.ones(1, 2), kl_coef=-0.1)


# --- entropy / log-probabilities from logits -------------------------------------------------


def test_entropy_by_hand():
    # uniform over 4: ln 4 = 1.386294
    # logits [0, ln 3] -> p = [1/4, 3/4]: H = 0.25 ln 4 + 0.75 ln(4/3) = 0.346574 + 0.215762
    #   = 0.562335; adding 1000 to both logits changes nothing (and must not overflow)
    # logits [1000, 0] -> p ≈ [1, e^-1000] -> H = 0
    h_two = 0.25 * math.log(4) + 0.75 * math.log(4 / 3)
    # (-1e9 pads the two-way rows to V = 4: e^-1e9 = 0, and 0 * -1e9 = 0)
    logits = t(
        [
            [[0.0, 0.0, 0.0, 0.0], [0.0, LN3, -1e9, -1e9]],
            [[1000.0, 1000.0 + LN3, -1e9, -1e9], [1000.0, 0.0, 0.0, 0.0]],
        ]
    )
    out = entropy_from_logits(logits)
    assert out.shape == (2, 2)
    assert_values(out, [[math.log(4), h_two], [h_two, 0.0]])


def test_logprobs_from_logits_by_hand_and_gradient():
    # logits [0, ln 3] -> p = [0.25, 0.75]; log p = [-1.386294, -0.287682]
    logits = t([[[0.0, LN3], [1000.0, 1000.0 + LN3]]]).requires_grad_(True)
    out = logprobs_from_logits(logits, torch.tensor([[1, 0]]))
    assert_values(out, [[math.log(0.75), math.log(0.25)]])
    # d log p_k / d z = onehot_k - p: token 1 -> [-0.25, 0.25]; token 0 -> [0.75, -0.75]
    out.sum().backward()
    assert_values(logits.grad, [[[-0.25, 0.25], [0.75, -0.75]]])


def test_logprobs_from_logits_half_precision_is_upcast():
    # bf16 represents 0 and 1 exactly: logits [0, 1] -> log p_1 = -log(1 + e^-1) = -0.313262
    logits = torch.tensor([[[0.0, 1.0]]], dtype=torch.bfloat16)
    out = logprobs_from_logits(logits, torch.tensor([[1]]))
    assert out.dtype == torch.float32
    assert_values(out, [[-math.log(1 + math.exp(-1))]])


def test_logprobs_at_a_temperature_by_hand_and_gradient():
    # logits [0, 2 ln 3] at tau = 2 -> z / tau = [0, ln 3] -> p = [0.25, 0.75]
    logits = t([[[0.0, 2 * LN3]]]).requires_grad_(True)
    out = logprobs_from_logits(logits, torch.tensor([[1]]), temperature=2.0)
    assert_values(out, [[math.log(0.75)]])
    # d log p_1 / d z = (onehot_1 - p) / tau = [-0.25, 0.25] / 2
    out.sum().backward()
    assert_values(logits.grad, [[[-0.125, 0.125]]])


def test_logprobs_match_log_softmax_across_chunk_boundaries():
    # 2 rows x 19 positions: chunks of 8, 8 and 3; compared with the plain float64 formula.
    torch.manual_seed(0)
    logits = (3 * torch.randn(2, 19, 50, dtype=F64)).requires_grad_(True)
    ids = torch.randint(0, 50, (2, 19))
    weights = torch.randn(2, 19, dtype=F64)
    (logprobs_from_logits(logits, ids, 0.7) * weights).sum().backward()
    ref_logits = logits.detach().clone().requires_grad_(True)
    ref = torch.log_softmax(ref_logits / 0.7, -1).gather(-1, ids[..., None]).squeeze(-1)
    (ref * weights).sum().backward()
    torch.testing.assert_close(logprobs_from_logits(logits, ids, 0.7), ref)
    torch.testing.assert_close(logits.grad, ref_logits.grad)
    small_ids = torch.randint(0, 6, (1, 9))
    z = torch.randn(1, 9, 6, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: logprobs_from_logits(x, small_ids, 0.7), (z,))


def test_chunks_are_cache_sized_on_a_cpu_and_byte_budgeted_elsewhere():
    from marti_trainer.algorithms.losses import LOGIT_CHUNK, chunk_positions

    assert chunk_positions("cpu", 49_152) == LOGIT_CHUNK == 8
    # 256 MiB of float32 over a 151,936-token vocabulary (Qwen2.5): 441 positions a chunk
    assert chunk_positions("cuda", 151_936) == 256 * 1024 * 1024 // (4 * 151_936) == 441
    assert chunk_positions("cuda", 10**9) == 8  # never fewer than on a CPU


def test_entropy_metric_matches_the_formula_at_a_temperature():
    # uniform over 4 at any temperature: ln 4; [0, 2 ln 3] at tau = 2 is p = [1/4, 3/4]
    h_two = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    logits = t([[[0.0, 0.0, 0.0, 0.0], [0.0, 2 * LN3, -1e9, -1e9]]])
    assert_values(entropy_metric(logits, 2.0), [[math.log(4), h_two]])
    torch.manual_seed(0)
    logits = torch.randn(3, 11, 40, dtype=torch.bfloat16)
    ref = entropy_from_logits(logits.float() / 0.7)
    torch.testing.assert_close(entropy_metric(logits, 0.7), ref)


def test_logprobs_from_logits_rejects_bad_inputs():
    logits = torch.zeros(2, 3, 5)
    with pytest.raises(ValueError, match="shape of logits"):
        logprobs_from_logits(logits, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="integer"):
        logprobs_from_logits(logits, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="temperature"):
        logprobs_from_logits(logits, torch.zeros(2, 3, dtype=torch.long), temperature=0.0)
