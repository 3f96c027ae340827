"""Credit methods against hand-computed tables (derivations in the comments)."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from marti_env.credit import (
    BUILTIN_METHODS,
    CreditMethod,
    FinalAnswerRule,
    checked_rewards,
    credit_methods,
    credit_params,
    difference_rewards,
    discounted_rewards,
    make_credit,
    margin_delta,
    quality_delta,
    shaped_reward,
    shapley_values,
)
from marti_env.record import EpisodeRecord, Turn
from marti_env.tasks.task import Task
from marti_env.workflows import ChainOfAgents, Debate, MixtureOfAgents

TASK = Task("t/0", "What is 0 + 1?", "1", "test")


def episode(rows, outcome: float = 1.0, env_id: str = "mad-v0") -> EpisodeRecord:
    """rows: (round, agent, answer, score) in turn order."""
    turns = [
        Turn(i, k, agent, agent.rsplit("_", 1)[0], (), f"\\boxed{{{ans}}}", ans, float(s))
        for i, (k, agent, ans, s) in enumerate(rows)
    ]
    return EpisodeRecord(env_id, TASK, turns, final_answer=None, outcome=outcome)


def rule_for(workflow, ep: EpisodeRecord, tie_order) -> FinalAnswerRule:
    return FinalAnswerRule(
        inputs=workflow.rule_inputs(ep.turns),
        choose=functools.partial(workflow.final_rule, tie_order=tie_order),
        score=lambda a: 1.0 if a == TASK.answer else 0.0,
    )


def assign(name: str, ep: EpisodeRecord, rule: FinalAnswerRule | None = None, **options):
    rule = rule or FinalAnswerRule({}, lambda answers: None, lambda a: 0.0)
    return checked_rewards(make_credit(name, **options), ep, rule)


D = ("debater_0", "debater_1", "debater_2", "debater_3")


# --- registry and options ---------------------------------------------------------------


def test_every_builtin_is_registered():
    assert set(BUILTIN_METHODS) <= set(credit_methods())
    assert credit_params("quality") == ("alpha", "scope", "window")
    assert credit_params("quality_with_outcome") == ("alpha", "scope", "window", "beta")
    assert credit_params("discounted") == ("gamma",)


@pytest.mark.parametrize(
    ("name", "options", "field"),
    [
        ("margin", {"alpha": -0.1}, "alpha"),
        ("quality", {"alpha": math.nan}, "alpha"),
        ("quality", {"alpha": "0.5"}, "alpha"),
        ("margin", {"scope": "agents"}, "scope"),
        ("margin", {"window": 0}, "window"),
        ("margin", {"window": 2.5}, "window"),
        ("margin_with_outcome", {"beta": math.inf}, "beta"),
        ("discounted", {"gamma": 0.0}, "gamma"),
        ("discounted", {"gamma": 1.5}, "gamma"),
        ("leave_one_out", {"unread": "nothing"}, "unread"),
        ("shapley", {"max_agents": 17}, "max_agents"),
    ],
)
def test_bad_options_name_the_method_and_field(name, options, field):
    with pytest.raises(ValueError, match=rf"credit method '{name}': {field} must be"):
        make_credit(name, **options)


def test_option_typo_is_suggested():
    with pytest.raises(ValueError, match="did you mean 'alpha'"):
        make_credit("quality", alpah=0.5)


# --- pure formulas: the worked example ------------------------------------------


def test_worked_example():
    # margin:  1 + 0.5 * (1 - 0.25) = 1.375
    assert shaped_reward(1.0, 0.25, 0.5, "margin") == pytest.approx(1.375)
    # quality: 0 + 0.5 * (0.25 * 0 - 0.75 * 1) = -0.375
    assert shaped_reward(0.0, 0.25, 0.5, "quality") == pytest.approx(-0.375)
    assert margin_delta(1.0, 0.25) == 0.75
    assert quality_delta(0.0, 0.25) == -0.75
    assert shaped_reward(0.0, None, 0.5, "quality") == 0.0  # no history: unshaped


# --- none / score / discounted ----------------------------------------------------------

DEBATE_4x2 = [  # round-0 scores (1, 0, 0, 0) -> team Q of round 1 is 0.25
    (0, D[0], "1", 1), (0, D[1], "2", 0), (0, D[2], "2", 0), (0, D[3], "3", 0),
    (1, D[0], "1", 1), (1, D[1], "2", 0), (1, D[2], "1", 1), (1, D[3], "2", 0),
]  # fmt: skip


def test_none_and_score():
    ep = episode(DEBATE_4x2, outcome=1.0)
    assert assign("none", ep) == [1.0] * 8
    assert assign("score", ep) == [1, 0, 0, 0, 1, 0, 1, 0]


def test_discounted():
    # chain: rounds 0, 1, 2; R = 1, gamma = 0.5 -> 0.5^2, 0.5^1, 0.5^0
    chain = episode([(0, "generator_0", "1", 1), (1, "verifier_0", None, 0),
                     (2, "refiner_0", "1", 1)], outcome=1.0)  # fmt: skip
    assert assign("discounted", chain, gamma=0.5) == [0.25, 0.5, 1.0]
    # debate: both debaters of a round are discounted alike; R = 0 gives 0
    assert discounted_rewards([0, 0, 1, 1], 1.0, 0.9) == pytest.approx([0.9, 0.9, 1.0, 1.0])
    assert assign("discounted", episode(DEBATE_4x2, outcome=0.0)) == [0.0] * 8


# --- margin / quality, team scope (MARTI's code) ----------------------------------------


def test_margin_team_scope_worked_example():
    # round 0 unshaped: scores 1, 0, 0, 0.  round 1, Q = 0.25:
    #   R = 1: 1 + 0.5 * 0.75 = 1.375;  R = 0: 0 + 0.5 * (0 - 0.25) = -0.125
    got = assign("margin", episode(DEBATE_4x2), alpha=0.5)
    assert got == pytest.approx([1, 0, 0, 0, 1.375, -0.125, 1.375, -0.125])


def test_quality_team_scope_worked_example():
    # round 1, Q = 0.25:  R = 1: 1 + 0.5 * (0.25 - 0) = 1.125;  R = 0: 0 + 0.5 * (0 - 0.75) = -0.375
    got = assign("quality", episode(DEBATE_4x2), alpha=0.5)
    assert got == pytest.approx([1, 0, 0, 0, 1.125, -0.375, 1.125, -0.375])


# Two debaters, three rounds: d0 scores (1, 0, 1), d1 scores (0, 0, 1).
DEBATE_2x3 = [
    (0, D[0], "1", 1), (0, D[1], "2", 0),
    (1, D[0], "2", 0), (1, D[1], "2", 0),
    (2, D[0], "1", 1), (2, D[1], "1", 1),
]  # fmt: skip


def test_margin_team_vs_agent_scope():
    ep = episode(DEBATE_2x3)
    # team: round 1, Q = mean(1, 0) = 0.5 -> 0 + 0.5 * (0 - 0.5) = -0.25 (both);
    #       round 2, Q = mean(1, 0, 0, 0) = 0.25 -> 1 + 0.5 * 0.75 = 1.375 (both)
    assert assign("margin", ep) == pytest.approx([1, 0, -0.25, -0.25, 1.375, 1.375])
    # agent: d0 round 1, Q = 1 -> -0.5; round 2, Q = mean(1, 0) = 0.5 -> 1.25
    #        d1 round 1, Q = 0 -> 0;    round 2, Q = 0 -> 1 + 0.5 * 1 = 1.5
    assert assign("margin", ep, scope="agent") == pytest.approx([1, 0, -0.5, 0, 1.25, 1.5])


def test_quality_agent_scope():
    # d0 round 1: Q = 1, R = 0 -> 0 + 0.5 * (0 - 0 * 1) = 0
    # d0 round 2: Q = 0.5, R = 1 -> 1 + 0.5 * 0.5 = 1.25
    # d1 round 1: Q = 0, R = 0 -> 0 + 0.5 * (0 - 1) = -0.5
    # d1 round 2: Q = 0, R = 1 -> 1 + 0.5 * 0 = 1
    got = assign("quality", episode(DEBATE_2x3), scope="agent")
    assert got == pytest.approx([1, 0, 0, -0.5, 1.25, 1.0])


def test_team_scope_in_moa_and_chain():
    # MoA: proposers (round 0) unshaped; aggregator's Q = mean of proposals' scores = 2/3
    moa = episode([(0, "proposer_0", "1", 1), (0, "proposer_1", "1", 1),
                   (0, "proposer_2", "2", 0), (1, "aggregator_0", "1", 1)])  # fmt: skip
    assert assign("margin", moa) == pytest.approx([1, 1, 0, 1 + 0.5 * (1 - 2 / 3)])
    # agent scope: every MoA agent acts once -> nothing is shaped
    assert assign("margin", moa, scope="agent") == [1, 1, 0, 1]
    # chain: verifier Q = 1 (generator), refiner Q = mean(1, 0) = 0.5
    chain = episode([(0, "generator_0", "1", 1), (1, "verifier_0", None, 0),
                     (2, "refiner_0", "1", 1)])  # fmt: skip
    assert assign("quality", chain) == pytest.approx([1, 0 + 0.5 * (0 - 0), 1 + 0.5 * 0.5])


def test_with_outcome_adds_beta_times_outcome_to_every_turn():
    ep = episode(DEBATE_4x2, outcome=1.0)
    # margin values above + 0.25 * 1
    got = assign("margin_with_outcome", ep, beta=0.25)
    assert got == pytest.approx([1.25, 0.25, 0.25, 0.25, 1.625, 0.125, 1.625, 0.125])
    ep0 = episode(DEBATE_4x2, outcome=0.0)
    assert assign("quality_with_outcome", ep0) == assign("quality", ep0)


def test_agent_window_scope_carries_history_across_episodes():
    method = make_credit("margin", scope="agent_window", window=2)
    rule = FinalAnswerRule({}, lambda answers: None, lambda a: 0.0)
    # episode 1: no history -> unshaped. History after: d0 [1], d1 [0]
    ep1 = episode([(0, D[0], "1", 1), (0, D[1], "2", 0), (1, D[0], "1", 1), (1, D[1], "2", 0)])
    assert checked_rewards(method, ep1, rule) == [1, 0, 1, 0]
    assert method.state_dict() == {"history": {D[0]: [1.0], D[1]: [0.0]}}
    # episode 2: d0 Q = 1: R = 0 -> -0.5, R = 1 -> 1;  d1 Q = 0: R = 1 -> 1.5 (twice)
    ep2 = episode([(0, D[0], "2", 0), (0, D[1], "1", 1), (1, D[0], "1", 1), (1, D[1], "1", 1)])
    assert checked_rewards(method, ep2, rule) == pytest.approx([-0.5, 1.5, 1.0, 1.5])
    # history: d0 [1, 0.5], d1 [0, 1] -> Q = 0.75 and 0.5
    saved = method.state_dict()
    assert saved == {"history": {D[0]: [1.0, 0.5], D[1]: [0.0, 1.0]}}
    # episode 3: d0 R = 1 -> 1 + 0.5 * 0.25 = 1.125;  d1 R = 0 -> 0 + 0.5 * -0.5 = -0.25
    ep3 = episode([(0, D[0], "1", 1), (0, D[1], "2", 0)])
    expected = [1.125, -0.25]
    assert checked_rewards(method, ep3, rule) == pytest.approx(expected)
    # window 2: the oldest episode dropped
    assert method.state_dict() == {"history": {D[0]: [0.5, 1.0], D[1]: [1.0, 0.0]}}
    # a fresh method loaded from the saved state gives the same rewards
    fresh = make_credit("margin", scope="agent_window", window=2)
    fresh.load_state_dict(saved)
    assert checked_rewards(fresh, ep3, rule) == pytest.approx(expected)


def test_stateless_scopes_keep_no_state():
    method = make_credit("quality")
    assert method.state_dict() == {}
    with pytest.raises(ValueError, match="keeps no state"):
        method.load_state_dict({"history": {"a": [1.0]}})
    windowed = make_credit("quality", scope="agent_window")
    with pytest.raises(ValueError, match="unknown state keys"):
        windowed.load_state_dict({"hist": {}})
    with pytest.raises(ValueError, match="history"):
        windowed.load_state_dict({"history": {"a": [math.nan]}})


# --- leave-one-out and Shapley ----------------------------------------------------------

# Last round: d0 and d1 right ("1"), d2 wrong ("2"); round 0 copied from it.
VOTE = [
    (0, D[0], "1", 1), (0, D[1], "1", 1), (0, D[2], "2", 0),
    (1, D[0], "1", 1), (1, D[1], "1", 1), (1, D[2], "2", 0),
]  # fmt: skip


def test_leave_one_out_depends_on_the_tie_order():
    debate = Debate(num_agents=3, rounds=2)
    ep = episode(VOTE)
    # tie order (d2, d0, d1): removing d0 leaves "1" vs "2", d2 first -> "2" -> 0: D = 1.
    # Same for d1. Removing d2 leaves "1" twice -> 1: D = 0. Every turn of i gets D_i.
    rule = rule_for(debate, ep, (D[2], D[0], D[1]))
    assert difference_rewards(rule) == {D[0]: 1.0, D[1]: 1.0, D[2]: 0.0}
    assert assign("leave_one_out", ep, rule) == [1, 1, 0, 1, 1, 0]
    # tie order (d0, d1, d2): one right answer still wins every tie: nobody is pivotal
    rule = rule_for(debate, ep, (D[0], D[1], D[2]))
    assert assign("leave_one_out", ep, rule) == [0.0] * 6


def test_shapley_by_hand():
    debate = Debate(num_agents=3, rounds=2)
    ep = episode(VOTE)
    # tie order (d2, d0, d1): v({}) = 0, v(d0) = v(d1) = 1, v(d2) = 0, v(d0 d1) = 1,
    # v(d0 d2) = v(d1 d2) = 0 (tie to d2), v(all) = 1. Weights |S|!(2-|S|)!/3!: 1/3, 1/6, 1/6, 1/3.
    # phi_d0 = 1/3 (1 - 0) + 1/6 (1 - 1) + 1/6 (0 - 0) + 1/3 (1 - 0) = 2/3 = phi_d1
    # phi_d2 = 1/3 (0 - 0) + 1/6 (0 - 1) + 1/6 (0 - 1) + 1/3 (1 - 1) = -1/3;  sum = 1 = R
    rule = rule_for(debate, ep, (D[2], D[0], D[1]))
    phi = shapley_values(rule)
    assert phi == pytest.approx({D[0]: 2 / 3, D[1]: 2 / 3, D[2]: -1 / 3})
    assert assign("shapley", ep, rule) == pytest.approx([2 / 3, 2 / 3, -1 / 3] * 2)
    # tie order (d0, d1, d2): v(d0 d2) = v(d1 d2) = 1 now.
    # phi_d0 = 1/3 (1) + 1/6 (0) + 1/6 (1 - 0) + 1/3 (1 - 1) = 1/2 = phi_d1;  phi_d2 = 0
    rule = rule_for(debate, ep, (D[0], D[1], D[2]))
    assert shapley_values(rule) == pytest.approx({D[0]: 0.5, D[1]: 0.5, D[2]: 0.0})


def test_shapley_is_efficient_and_null_players_get_zero_on_random_votes():
    rng = np.random.default_rng(0)
    for n in (1, 2, 4, 5):
        debate = Debate(num_agents=n, rounds=1)
        agents = [f"debater_{i}" for i in range(n)]
        for _ in range(20):
            answers = [str(rng.integers(0, 3)) if rng.random() < 0.8 else None for _ in agents]
            ep = episode([(0, a, z, float(z == "1")) for a, z in zip(agents, answers, strict=True)])
            tie = tuple(agents[i] for i in rng.permutation(n))
            rule = rule_for(debate, ep, tie)
            ep.outcome = rule.outcome()
            phi = shapley_values(rule)
            assert sum(phi.values()) == pytest.approx(ep.outcome)  # v(N) - v({}), v({}) = 0
            for a, z in zip(agents, answers, strict=True):  # no answer: a null player
                if z is None:
                    assert phi[a] == pytest.approx(0.0)


def test_counterfactuals_in_moa_and_chain_pay_unread_agents_the_fallback():
    moa = MixtureOfAgents(num_proposers=2)
    ep = episode([(0, "proposer_0", "1", 1), (0, "proposer_1", "2", 0),
                  (1, "aggregator_0", "1", 1)], outcome=1.0)  # fmt: skip
    rule = rule_for(moa, ep, ("proposer_0", "proposer_1", "aggregator_0"))
    # the rule reads the aggregator only: D = phi = R - v({}) = 1
    assert assign("leave_one_out", ep, rule) == [1, 1, 1]  # proposers: the outcome
    assert assign("shapley", ep, rule, unread="score") == [1, 0, 1]
    assert assign("shapley", ep, rule, unread="zero") == [0, 0, 1]
    chain = ChainOfAgents()
    ep = episode([(0, "generator_0", "1", 1), (1, "verifier_0", None, 0),
                  (2, "refiner_0", "2", 0)], outcome=0.0)  # fmt: skip
    rule = rule_for(chain, ep, chain.agents)
    assert assign("leave_one_out", ep, rule, unread="score") == [1, 0, 0]


def test_shapley_refuses_more_than_max_agents():
    debate = Debate(num_agents=9, rounds=1)
    agents = [f"debater_{i}" for i in range(9)]
    ep = episode([(0, a, "1", 1) for a in agents])
    rule = rule_for(debate, ep, tuple(agents))
    with pytest.raises(ValueError, match=r"credit method 'shapley'.*at most 8|limited to 8"):
        assign("shapley", ep, rule)
    assert sum(assign("shapley", ep, rule, max_agents=9)) == pytest.approx(1.0)


# --- checked_rewards: bad output names the method and the agent -------------------------


class _Fixed(CreditMethod):
    name = "fixed_for_test"

    def __init__(self, out):
        self.out = out

    def assign(self, episode, rule):
        return self.out


@pytest.mark.parametrize(
    ("out", "pattern"),
    [
        ([1.0, 2.0], r"'fixed_for_test' returned 2 rewards for 3 turns"),
        ([1.0, math.nan, 0.0], r"'fixed_for_test' gave agent 'debater_1' .*non-finite reward nan"),
        ([1.0, 0.0, math.inf], r"'fixed_for_test' gave agent 'debater_2' .*non-finite reward inf"),
        ([1.0, None, 0.0], r"'fixed_for_test' gave agent 'debater_1' .*not a number: None"),
        (np.array([1.0, 0.0, -np.inf]), r"gave agent 'debater_2' .*non-finite"),
        (1.0, r"'fixed_for_test' returned float, not a sequence of 3 rewards"),
        ("abc", r"'fixed_for_test' returned str"),
    ],
)
def test_checked_rewards_errors(out, pattern):
    ep = episode([(0, D[0], "1", 1), (0, D[1], "1", 1), (0, D[2], "2", 0)])
    rule = FinalAnswerRule({}, lambda answers: None, lambda a: 0.0)
    with pytest.raises(ValueError, match=pattern):
        checked_rewards(_Fixed(out), ep, rule)


def test_checked_rewards_accepts_numpy():
    ep = episode([(0, D[0], "1", 1), (0, D[1], "1", 1)])
    rule = FinalAnswerRule({}, lambda answers: None, lambda a: 0.0)
    got = checked_rewards(_Fixed(np.array([1, 2], dtype=np.float32)), ep, rule)
    assert got == [1.0, 2.0] and all(type(x) is float for x in got)


# --- random credit (a control) ----------------------------------------------------------


def test_random_credit_is_seeded_by_the_episode_and_standard_normal():
    from marti_env.credit.controls import random_rewards

    draws = random_rewards(3, "t/1", ["a", "b", "c"])
    assert len(draws) == 3 and draws == random_rewards(3, "t/1", ["a", "b", "c"])
    # by hand: numpy's generator seeded [3, crc32(b"t/1"), crc32(b"a\0b\0c")]
    import zlib

    rng = np.random.default_rng([3, zlib.crc32(b"t/1"), zlib.crc32(b"a\x00b\x00c")])
    assert draws == [float(x) for x in rng.standard_normal(3)]
    # pinned (numpy's PCG64 stream for that seed): a change of seeding or of draws fails
    assert draws == pytest.approx([-0.691127, 0.198586, -1.166142], abs=1e-6)
    assert draws != random_rewards(4, "t/1", ["a", "b", "c"])  # the seed
    assert draws != random_rewards(3, "t/2", ["a", "b", "c"])  # the task
    assert draws != random_rewards(3, "t/1", ["a", "b", "d"])  # any response
    pooled = np.array([random_rewards(0, f"t/{i}", [str(i), "x"]) for i in range(4000)]).ravel()
    assert abs(pooled.mean()) < 0.05 and abs(pooled.std() - 1.0) < 0.05  # 8000 draws: ~4 sd

    method = make_credit("random", seed=3)
    episode = EpisodeRecord(
        "mad-v0", Task("t/1", "?", "1"),
        turns=[Turn(i, 0, a, "debater", (), a, None, 0.0) for i, a in enumerate("abc")],
        outcome=1.0,
    )  # fmt: skip
    assert list(method.assign(episode, None)) == draws  # the outcome plays no part
    with pytest.raises(ValueError, match="seed"):
        make_credit("random", seed=-1)
