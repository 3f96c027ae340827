"""Advantage estimators against hand-computed tables (derivations in the comments)."""

from __future__ import annotations

import math

import pytest
import torch

from marti_trainer.algorithms import (
    ADVANTAGE_ESTIMATORS,
    agent_scale_advantages,
    compute_advantages,
    dr_grpo_advantages,
    group_ids_from_keys,
    grpo_advantages,
    masked_whiten,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    reinforce_pp_returns,
    rloo_advantages,
)

F64 = torch.float64


def t(values, dtype=F64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def ids(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def assert_values(actual: torch.Tensor, expected, atol: float = 1e-6) -> None:
    torch.testing.assert_close(actual, t(expected, actual.dtype), atol=atol, rtol=0)


# Two groups with non-contiguous, unsorted ids and a singleton:
#   group 10: rewards [1, 3] (positions 0, 2), group 3: [5, 7] (positions 1, 3),
#   group 42: [2] (position 4).
MIXED_REWARDS = [1.0, 5.0, 3.0, 7.0, 2.0]
MIXED_IDS = [10, 3, 10, 3, 42]
# Seven equal float32 rewards whose computed mean is off by rounding (7.5e-9).
SEVEN_TENTHS = torch.full((7,), 0.1, dtype=torch.float32)


# --- GRPO -------------------------------------------------------------------------------


def test_grpo_one_group_uses_unbiased_std():
    # rewards [1, 0, 0, 1]: mean 0.5, deviations ±0.5.
    # unbiased var = 4 * 0.25 / (4 - 1) = 1/3, std = 1/sqrt(3)
    # A = ±0.5 * sqrt(3) = ±sqrt(3)/2 ≈ ±0.866025  (the biased std 0.5 would give ±1).
    adv = grpo_advantages(t([1, 0, 0, 1]), ids([0, 0, 0, 0]), eps=0.0)
    h = math.sqrt(3) / 2
    assert_values(adv, [h, -h, -h, h])


def test_grpo_eps_is_added_to_std():
    # A = 0.5 / (1/sqrt(3) + 0.1) = 0.5 / 0.677350 = 0.738171
    adv = grpo_advantages(t([1, 0, 0, 1]), ids([0, 0, 0, 0]), eps=0.1)
    a = 0.5 / (1 / math.sqrt(3) + 0.1)
    assert_values(adv, [a, -a, -a, a])


def test_grpo_groups_are_separate_and_singleton_is_zero():
    # group 10: [1, 3], mean 2, unbiased std sqrt(((-1)^2 + 1^2) / 1) = sqrt(2) -> ∓1/sqrt(2)
    # group 3:  [5, 7], mean 6, std sqrt(2) -> ∓1/sqrt(2)
    # group 42: one sample -> 0
    adv = grpo_advantages(t(MIXED_REWARDS), ids(MIXED_IDS), eps=0.0)
    s = 1 / math.sqrt(2)
    assert_values(adv, [-s, -s, s, s, 0.0])


def test_grpo_all_equal_rewards_give_exact_zero():
    # In float32 the mean of seven 0.1 differs from 0.1 by 7.5e-9 (rounding), and that
    # over (std + eps) would not be 0; a constant group must still give exactly 0.
    adv = grpo_advantages(SEVEN_TENTHS, ids([7] * 7))
    assert torch.equal(adv, torch.zeros(7))


def test_grpo_single_sample_batch():
    assert torch.equal(grpo_advantages(t([5.0]), ids([0])), t([0.0]))


def test_grpo_empty_batch():
    assert grpo_advantages(t([]), ids([])).shape == (0,)


# --- Dr. GRPO -----------------------------------------------------------------------------


def test_dr_grpo_subtracts_group_mean_only():
    # [1, 0, 0, 1] - 0.5
    assert_values(dr_grpo_advantages(t([1, 0, 0, 1]), ids([0] * 4)), [0.5, -0.5, -0.5, 0.5])
    # group 10: [1, 3] - 2 = [-1, 1]; group 3: [5, 7] - 6 = [-1, 1]; group 42: 2 - 2 = 0
    assert_values(dr_grpo_advantages(t(MIXED_REWARDS), ids(MIXED_IDS)), [-1, -1, 1, 1, 0])


def test_dr_grpo_all_equal_is_zero():
    adv = dr_grpo_advantages(SEVEN_TENTHS, ids([1] * 7))
    assert torch.equal(adv, torch.zeros(7))


# --- agent_scale: group-mean centring, one scale per agent --------------------------------


def test_agent_scale_one_agent_keeps_the_spread_between_its_groups():
    # groups [1, 0] and [2, 0] (the second's credit doubled): c = [0.5, -0.5, 1, -1];
    # sigma = sqrt((0.25 + 0.25 + 1 + 1) / 4) = sqrt(0.625) = 0.790569
    # A = c / sigma = [0.632456, -0.632456, 1.264911, -1.264911]: the 2x survives.
    adv = agent_scale_advantages(t([1, 0, 2, 0]), ids([0, 0, 1, 1]), ids([0] * 4), eps=0.0)
    assert_values(adv, [0.632456, -0.632456, 1.264911, -1.264911])
    # GRPO standardises both groups to the same +-1/sqrt(2): the 2x is erased.
    grpo = grpo_advantages(t([1, 0, 2, 0]), ids([0, 0, 1, 1]))
    assert_values(grpo[:2], grpo[2:].tolist())


def test_agent_scale_agents_get_separate_scales():
    # agent 0: group [1, 0] -> c = [0.5, -0.5], sigma_0 = 0.5 -> [1, -1];
    # agent 1: group [10, 4, 7] -> c = [3, -3, 0], sigma_1 = sqrt((9 + 9 + 0) / 3) = sqrt(6)
    #   -> [3 / 2.449490, -3 / 2.449490, 0] = [1.224745, -1.224745, 0];
    # agent 2: a constant group [5, 5] -> exactly 0 (sigma_2 = 0, no division by zero).
    rewards = t([1, 0, 10, 4, 7, 5, 5])
    groups, agents = ids([0, 0, 1, 1, 1, 2, 2]), ids([0, 0, 1, 1, 1, 2, 2])
    adv = agent_scale_advantages(rewards, groups, agents, eps=0.0)
    assert_values(adv[:5], [1.0, -1.0, 1.224745, -1.224745, 0.0])
    assert torch.equal(adv[5:], torch.zeros(2, dtype=F64))
    # a reward constant per agent and a per-agent scale do not change A: r -> 3 + 4 r
    shifted = agent_scale_advantages(3 + 4 * rewards, groups, agents, eps=0.0)
    assert_values(shifted, adv.tolist())


def test_agent_scale_rejects_bad_scale_ids():
    with pytest.raises(ValueError, match="shape of rewards"):
        agent_scale_advantages(t([1.0, 0.0]), ids([0, 0]), ids([0]))
    with pytest.raises(ValueError, match="integer"):
        agent_scale_advantages(t([1.0, 0.0]), ids([0, 0]), t([0.0, 0.0]))


def test_sample_advantages_agent_scale_uses_the_sample_agents():
    from types import SimpleNamespace

    from marti_trainer.config import AlgorithmConfig
    from marti_trainer.learner import sample_advantages

    def sample(agent, rnd, reward):
        return SimpleNamespace(
            task_id="t", agent=agent, role="debater", round=rnd, reward=reward,
            response_token_ids=[0] * 4, group_key=("t", agent, rnd),
        )  # fmt: skip

    # debater_0: round 0 [0.5, 0] (discounted), round 1 [1, 0]; debater_1: round 0 [1, 0].
    samples = [sample("debater_0", 0, 0.5), sample("debater_0", 0, 0.0),
               sample("debater_0", 1, 1.0), sample("debater_0", 1, 0.0),
               sample("debater_1", 0, 1.0), sample("debater_1", 0, 0.0)]  # fmt: skip
    # debater_0: c = [0.25, -0.25, 0.5, -0.5], sigma = sqrt((2 * 0.0625 + 2 * 0.25) / 4)
    #   = sqrt(0.15625) = 0.395285 -> [0.632456, -0.632456, 1.264911, -1.264911];
    # debater_1: c = [0.5, -0.5], sigma = 0.5 -> [1, -1].
    adv = sample_advantages(samples, None, AlgorithmConfig(advantage="agent_scale"), 32)
    expected = torch.tensor([0.632456, -0.632456, 1.264911, -1.264911, 1.0, -1.0])
    assert torch.allclose(adv, expected, atol=1e-5)


# --- RLOO ----------------------------------------------------------------------------------


def test_rloo_leave_one_out_baseline():
    # [1, 2, 3]: baselines are the means of the others: (2+3)/2, (1+3)/2, (1+2)/2
    #   = 2.5, 2, 1.5 -> A = [1 - 2.5, 2 - 2, 3 - 1.5] = [-1.5, 0, 1.5]
    # (= n/(n-1) (r - mean) = 1.5 * [-1, 0, 1]).
    assert_values(rloo_advantages(t([1, 2, 3]), ids([0, 0, 0])), [-1.5, 0.0, 1.5])


def test_rloo_groups_and_singleton():
    # group 10: [1, 3] -> [1 - 3, 3 - 1] = [-2, 2]; group 3: [5, 7] -> [-2, 2];
    # group 42: nobody to leave out -> 0
    assert_values(rloo_advantages(t(MIXED_REWARDS), ids(MIXED_IDS)), [-2, -2, 2, 2, 0])


def test_rloo_all_equal_is_zero():
    adv = rloo_advantages(SEVEN_TENTHS, ids([4] * 7))
    assert torch.equal(adv, torch.zeros(7))


# --- input checks ---------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [grpo_advantages, dr_grpo_advantages, rloo_advantages])
def test_group_estimators_reject_bad_inputs(fn):
    with pytest.raises(ValueError, match="1-D"):
        fn(t([[1.0, 0.0]]), ids([[0, 0]]))
    with pytest.raises(ValueError, match="shape of rewards"):
        fn(t([1.0, 0.0, 1.0]), ids([0, 0]))
    with pytest.raises(ValueError, match="integer"):
        fn(t([1.0, 0.0]), t([0.0, 0.0]))
    with pytest.raises(ValueError, match="floating-point"):
        fn(ids([1, 0]), ids([0, 0]))


def test_group_ids_from_keys_first_appearance_order():
    keys = [("t1", "solver", 0), ("t1", "critic", 0), ("t1", "solver", 0), ("t2", "solver", 0)]
    out = group_ids_from_keys(keys)
    assert out.dtype == torch.int64
    assert out.tolist() == [0, 1, 0, 2]
    assert group_ids_from_keys([]).shape == (0,)
    with pytest.raises(TypeError):
        group_ids_from_keys([["unhashable"]])


def test_group_ids_from_keys_feed_grpo():
    # Same rewards, grouped by agent: solver [1, 0] -> ±1/sqrt(2) * ... (std sqrt(0.5)):
    # mean 0.5, unbiased std sqrt((0.25+0.25)/1) = sqrt(0.5) -> A = ±0.5/sqrt(0.5) = ±sqrt(0.5)
    # critic [1, 1] -> 0
    keys = [("t", "solver"), ("t", "critic"), ("t", "solver"), ("t", "critic")]
    adv = grpo_advantages(t([1, 1, 0, 1]), group_ids_from_keys(keys), eps=0.0)
    s = math.sqrt(0.5)
    assert_values(adv, [s, 0, -s, 0])


# --- REINFORCE++ -------------------------------------------------------------------------


def test_returns_to_go_undiscounted_and_discounted():
    rewards = t([[1, 2, 3, 4]])
    mask = t([[1, 1, 1, 0]])
    # gamma = 1: the masked reward 4 is dropped; G = [1+2+3, 2+3, 3, 0] = [6, 5, 3, 0]
    assert_values(reinforce_pp_returns(rewards, mask), [[6, 5, 3, 0]])
    # gamma = 0.5: G2 = 3, G1 = 2 + 0.5*3 = 3.5, G0 = 1 + 0.5*3.5 = 2.75
    assert_values(reinforce_pp_returns(rewards, mask, gamma=0.5), [[2.75, 3.5, 3, 0]])


def test_returns_to_go_across_a_masked_hole():
    # mask [1, 0, 1]: the reward 9 under the hole is dropped, the output there is 0.
    # gamma = 1: G = [1 + 0 + 2, (0 + 2 ->) 0, 2] = [3, 0, 2]
    # gamma = 0.5 (positions count): G2 = 2, G1 = 0 + 1 = 1 (masked), G0 = 1 + 0.5 = 1.5
    rewards, mask = t([[1, 9, 2]]), torch.tensor([[True, False, True]])
    assert_values(reinforce_pp_returns(rewards, mask), [[3, 0, 2]])
    assert_values(reinforce_pp_returns(rewards, mask, gamma=0.5), [[1.5, 0, 2]])


def test_reinforce_pp_kl_penalty_returns_and_whitening():
    # B=2, T=3, kl_coef=0.5. Masked kl entries are 100 to show they are ignored.
    # row 0 (mask 1 1 1, reward 4, kl [4, 0, 2]):
    #   token rewards -0.5*kl = [-2, 0, -1], + 4 at t=2 -> [-2, 0, 3]
    #   returns: G2 = 3, G1 = 3, G0 = 1
    # row 1 (mask 1 0 0, reward 1.5, kl [1, 100, 100]):
    #   token rewards [-0.5 + 1.5] = [1] at t=0 (its last valid token) -> G0 = 1
    # valid returns [1, 3, 3, 1]: mean 2, deviations [-1, 1, 1, -1], biased var 1, std 1
    # -> A = [[-1, 1, 1], [-1, 0, 0]]   (unbiased std sqrt(4/3) would give ±0.866)
    rewards = t([4.0, 1.5])
    token_kl = t([[4, 0, 2], [1, 100, 100]])
    mask = t([[1, 1, 1], [1, 0, 0]])
    adv = reinforce_pp_advantages(rewards, token_kl, mask, kl_coef=0.5, eps=0.0)
    assert_values(adv, [[-1, 1, 1], [-1, 0, 0]])


def test_reinforce_pp_reward_goes_on_last_valid_token():
    # row 0: mask [1, 0, 1, 0], reward 2 at t=2 -> returns [2, -, 2, -]
    # row 1: mask [1, 1, 0, 0], reward 0 -> returns [0, 0, -, -]
    # valid [2, 2, 0, 0]: mean 1, biased std 1 -> [[1, 0, 1, 0], [-1, -1, 0, 0]]
    mask = t([[1, 0, 1, 0], [1, 1, 0, 0]])
    adv = reinforce_pp_advantages(t([2.0, 0.0]), None, mask, kl_coef=0.0, eps=0.0)
    assert_values(adv, [[1, 0, 1, 0], [-1, -1, 0, 0]])


def test_reinforce_pp_fully_masked_row_is_ignored():
    # row 2 has no valid token: its reward 5 is dropped and it does not enter the stats.
    # valid returns [1, 1, 0, 0]: mean 0.5, biased std 0.5 -> [[1, 1], [-1, -1], [0, 0]]
    mask = t([[1, 1], [1, 1], [0, 0]])
    adv = reinforce_pp_advantages(t([1.0, 0.0, 5.0]), None, mask, kl_coef=0.0, eps=0.0)
    assert_values(adv, [[1, 1], [-1, -1], [0, 0]])


def test_reinforce_pp_constant_batch_is_zero():
    # Seven equal returns: σ is rounding noise (~1e-8), so without the constant-batch rule the
    # result would be noise / (σ + eps), not 0.
    adv = reinforce_pp_advantages(SEVEN_TENTHS, None, torch.ones(7, 1), kl_coef=0.0)
    assert torch.equal(adv, torch.zeros(7, 1))


def test_reinforce_pp_rejects_bad_inputs():
    mask = t([[1, 1]])
    with pytest.raises(ValueError, match="needs token_kl"):
        reinforce_pp_advantages(t([1.0]), None, mask, kl_coef=0.1)
    with pytest.raises(ValueError, match="shape of mask"):
        reinforce_pp_advantages(t([1.0]), t([[0.0, 0.0, 0.0]]), mask, kl_coef=0.1)
    with pytest.raises(ValueError, match="rows"):
        reinforce_pp_advantages(t([1.0, 2.0]), None, mask, kl_coef=0.0)
    with pytest.raises(ValueError, match="kl_coef"):
        reinforce_pp_advantages(t([1.0]), t([[0.0, 0.0]]), mask, kl_coef=-1.0)
    with pytest.raises(ValueError, match="gamma"):
        reinforce_pp_returns(t([[1.0, 0.0]]), mask, gamma=1.5)
    with pytest.raises(ValueError, match="2-D"):
        reinforce_pp_returns(t([1.0, 0.0]), t([1.0, 1.0]))


def test_masked_whiten_by_hand():
    # valid [1, 3, 5] (the 100 is masked): mean 3, biased var (4 + 0 + 4)/3 = 8/3
    # -> [-2, 0, 2] / sqrt(8/3) = ∓1.224745
    out = masked_whiten(t([[1, 3, 100], [5, 0, 0]]), t([[1, 1, 0], [1, 0, 0]]), eps=0.0)
    a = 2 / math.sqrt(8 / 3)
    assert_values(out, [[-a, 0, 0], [a, 0, 0]])


# --- REINFORCE++-baseline ---------------------------------------------------------------------


def test_reinforce_pp_baseline_group_mean_then_whitening():
    # rewards [1, 0, 0, 1, 7], groups [0, 0, 0, 0, 1], T = 2, all valid.
    # group baseline: [0.5, -0.5, -0.5, 0.5, 0] (the singleton becomes 0)
    # returns (gamma 1, reward on the last token, no KL): each row [r', r']
    # valid values: four 0.5, four -0.5, two 0 -> mean 0, biased var 8*0.25/10 = 0.2
    # -> ±0.5 / sqrt(0.2) = ±sqrt(5)/2 ≈ ±1.118034, and 0
    rewards = t([1, 0, 0, 1, 7])
    mask = torch.ones(5, 2, dtype=F64)
    adv = reinforce_pp_baseline_advantages(rewards, ids([0, 0, 0, 0, 1]), mask, eps=0.0)
    a = math.sqrt(5) / 2
    assert_values(adv, [[a, a], [-a, -a], [-a, -a], [a, a], [0, 0]])


def test_reinforce_pp_baseline_kl_penalty_enters():
    # rewards [1, 0] in one group -> [0.5, -0.5]. kl_coef 0.5, token_kl [[0, 2], [0, 0]]:
    # row 0 token rewards [0, -1 + 0.5] = [0, -0.5] -> returns [-0.5, -0.5]
    # row 1 token rewards [0, -0.5]              -> returns [-0.5, -0.5]
    # all equal -> 0 everywhere. (Without the penalty it would be [[1, 1], [-1, -1]].)
    mask = torch.ones(2, 2, dtype=F64)
    args = (t([1, 0]), ids([0, 0]), mask)
    with_kl = reinforce_pp_baseline_advantages(*args, token_kl=t([[0, 2], [0, 0]]), kl_coef=0.5)
    assert torch.equal(with_kl, torch.zeros(2, 2, dtype=F64))
    without_kl = reinforce_pp_baseline_advantages(*args, eps=0.0)
    assert_values(without_kl, [[1, 1], [-1, -1]])


# --- registry ----------------------------------------------------------------------------------


def test_compute_advantages_dispatches_by_name():
    rewards, groups = t([1, 2, 3]), ids([0, 0, 0])
    # rloo by hand: [-1.5, 0, 1.5]; dr_grpo: [-1, 0, 1]
    assert_values(compute_advantages("rloo", rewards=rewards, group_ids=groups), [-1.5, 0, 1.5])
    assert_values(compute_advantages("dr_grpo", rewards=rewards, group_ids=groups), [-1, 0, 1])
    assert set(ADVANTAGE_ESTIMATORS) == {
        "grpo",
        "dr_grpo",
        "agent_scale",
        "rloo",
        "reinforce_pp",
        "reinforce_pp_baseline",
    }


def test_compute_advantages_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match="unknown advantage estimator 'gpro'") as err:
        compute_advantages("gpro", rewards=t([1.0]), group_ids=ids([0]))
    for name in ADVANTAGE_ESTIMATORS:
        assert name in str(err.value)


def test_overlong_penalty_ramps_over_the_buffer_to_minus_one_at_the_cut():
    from marti_trainer.algorithms import overlong_penalty

    # L = 32, B = 8: free up to 24 tokens, then (24 - n) / 8 down to -1 at 32.
    lengths = torch.tensor([0, 24, 25, 28, 31, 32, 40])
    expected = torch.tensor([0.0, 0.0, -0.125, -0.5, -0.875, -1.0, -1.0])
    assert torch.equal(overlong_penalty(lengths, 32, 8), expected)
    assert torch.equal(overlong_penalty(torch.tensor([31, 32]), 32, 1), torch.tensor([0.0, -1.0]))
    with pytest.raises(ValueError, match="buffer"):
        overlong_penalty(lengths, 32, 0)


def test_overlong_penalty_enters_the_rewards_before_the_group_statistics():
    from types import SimpleNamespace

    from marti_trainer.config import AlgorithmConfig
    from marti_trainer.learner import sample_advantages

    def sample(reward, length):
        return SimpleNamespace(
            reward=reward, response_token_ids=[0] * length, group_key=("t", "a", 0)
        )

    samples = [sample(1.0, 10), sample(1.0, 32)]  # both right; the second ran to the cut
    off = sample_advantages(samples, None, AlgorithmConfig(advantage="dr_grpo"), 32)
    assert torch.equal(off, torch.zeros(2))  # equal rewards: no signal
    cfg = AlgorithmConfig(advantage="dr_grpo", overlong_penalty=0.5, overlong_buffer=8)
    on = sample_advantages(samples, None, cfg, 32)
    assert torch.allclose(on, torch.tensor([0.25, -0.25]))  # rewards 1 and 0.5, mean 0.75


def test_group_by_role_pools_the_debaters_of_a_round_under_one_baseline():
    from types import SimpleNamespace

    from marti_trainer.config import AlgorithmConfig
    from marti_trainer.learner import sample_advantages
    from marti_trainer.rollout import group_key_of

    def sample(agent, turn, rnd, reward):
        return SimpleNamespace(
            task_id="t", agent=agent, role="debater", round=rnd, reward=reward,
            response_token_ids=[0] * 4, group_key=("t", agent, turn),
        )  # fmt: skip

    # Round 0: debater_0 right once in two tries, debater_1 wrong twice.
    samples = [sample("debater_0", 0, 0, 1.0), sample("debater_0", 0, 0, 0.0),
               sample("debater_1", 1, 0, 0.0), sample("debater_1", 1, 0, 0.0)]  # fmt: skip
    assert [group_key_of(s, "role") for s in samples] == [("t", "debater", 0)] * 4
    # Per agent: debater_0's group [1, 0] -> mean 0.5, unbiased std sqrt(0.5): +-1/sqrt(2);
    # debater_1's [0, 0] has no spread -> 0.
    by_agent = sample_advantages(samples, None, AlgorithmConfig(advantage="grpo"), 32)
    h = 0.5**0.5
    assert torch.allclose(by_agent, torch.tensor([h, -h, 0.0, 0.0]), atol=1e-5)
    # Pooled: [1, 0, 0, 0] -> mean 0.25, unbiased std sqrt(0.25) = 0.5: 1.5 and -0.5 each.
    cfg = AlgorithmConfig(advantage="grpo", group_by="role")
    pooled = sample_advantages(samples, None, cfg, 32)
    assert torch.allclose(pooled, torch.tensor([1.5, -0.5, -0.5, -0.5]), atol=1e-5)
    # Rounds stay apart: a round-1 sample is its own (flat) group.
    later = [*samples, sample("debater_0", 2, 1, 1.0)]
    assert sample_advantages(later, None, cfg, 32)[-1] == 0.0
    with pytest.raises(ValueError, match="group_by"):
        group_key_of(samples[0], "team")
