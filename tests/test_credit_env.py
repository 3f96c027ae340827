"""Credit methods inside the real envs: make() options, records, returns, state, errors."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

import marti_env
from marti_env import Task
from marti_env.credit import CreditMethod, Quality, make_credit

TASK = Task("q/0", "What is 3 + 4?", "7", "test")


def run(env, answers, seed=0):
    """``answers[round][agent]`` is the agent's boxed answer; returns (rewards, record)."""
    obs, infos = env.reset(seed=seed, options={"task": TASK})
    while env.agents:
        k = infos[env.agents[0]]["round"]
        actions = {
            a: f"so \\boxed{{{answers[k][a]}}}" if infos[a]["active"] else "" for a in env.agents
        }
        obs, rewards, terms, truncs, infos = env.step(actions)
    return rewards, infos[next(iter(infos))]["episode"]


D0, D1, D2 = "debater_0", "debater_1", "debater_2"
# Round 0 scores (1, 1, 0); round 1 scores (1, 0, 1) -> team Q of round 1 = 2/3.
ANSWERS = [{D0: "7", D1: "7", D2: "5"}, {D0: "7", D1: "5", D2: "7"}]


@pytest.mark.parametrize("credit", ["quality", Quality(alpha=0.5)])
def test_quality_rewards_reach_record_and_returns(credit):
    options = {"alpha": 0.5} if isinstance(credit, str) else {}
    env = marti_env.make("mad-v0", credit=credit, **options)
    rewards, record = run(env, ANSWERS)
    # round 0 unshaped: 1, 1, 0.  round 1, Q = 2/3:
    #   R = 1: 1 + 0.5 * (2/3 * 1 - 1/3 * 0) = 4/3;  R = 0: 0 + 0.5 * (0 - 1/3 * 1) = -1/6
    expected = [1, 1, 0, 4 / 3, -1 / 6, 4 / 3]
    assert [t.reward for t in record.turns] == pytest.approx(expected)
    assert record.credit == "quality"
    # returns: per-agent sums of turn rewards
    assert rewards == pytest.approx({D0: 1 + 4 / 3, D1: 1 - 1 / 6, D2: 0 + 4 / 3})
    assert record.agent_rewards == pytest.approx(rewards)


def test_every_builtin_runs_in_every_env():
    from marti_env.credit import BUILTIN_METHODS

    for env_id in ("mad-v0", "moa-v0", "chain-v0", "single-v0", "majority-v0"):
        for name in BUILTIN_METHODS:
            env = marti_env.make(env_id, credit=name)
            obs, infos = env.reset(seed=1, options={"task": TASK})
            while env.agents:
                obs, rewards, *_, infos = env.step({a: "\\boxed{7}" for a in env.agents})
            record = infos[next(iter(infos))]["episode"]
            assert record.credit == name and record.outcome == 1.0
            assert sum(rewards.values()) == pytest.approx(sum(t.reward for t in record.turns))
            assert all(math.isfinite(t.reward) for t in record.turns)


def test_shapley_in_debate_sums_to_outcome_over_last_round():
    env = marti_env.make("mad-v0", credit="shapley")
    rewards, record = run(env, ANSWERS)
    last = [t.reward for t in record.turns if t.round == 1]
    assert sum(last) == pytest.approx(record.outcome)
    # every turn of an agent gets the agent's value: return = 2 * phi
    assert rewards == pytest.approx({t.agent: 2 * t.reward for t in record.turns if t.round == 1})


def test_window_state_persists_across_episodes_in_one_env():
    env = marti_env.make("mad-v0", num_agents=2, credit="margin", scope="agent_window", window=4)
    answers = [{D0: "7", D1: "5"}, {D0: "7", D1: "5"}]
    _, first = run(env, answers, seed=0)
    assert [t.reward for t in first.turns] == [1, 0, 1, 0]  # no history yet: unshaped
    assert env.credit.state_dict() == {"history": {D0: [1.0], D1: [0.0]}}
    _, second = run(env, answers, seed=1)
    # d0: R = 1, Q = 1 -> 1;  d1: R = 0, Q = 0 -> 0 (margin pays nothing for matching history)
    assert [t.reward for t in second.turns] == [1, 0, 1, 0]
    flipped = [{D0: "5", D1: "7"}, {D0: "5", D1: "7"}]
    _, third = run(env, flipped, seed=2)
    # d0: R = 0, Q = 1 -> -0.5;  d1: R = 1, Q = 0 -> 1.5
    assert [t.reward for t in third.turns] == pytest.approx([-0.5, 1.5, -0.5, 1.5])
    assert env.credit.state_dict() == {"history": {D0: [1.0, 1.0, 0.0], D1: [0.0, 0.0, 1.0]}}


def test_shared_credit_object_shares_state_between_envs():
    credit = make_credit("quality", scope="agent_window")
    env_a = marti_env.make("mad-v0", num_agents=2, credit=credit)
    env_b = marti_env.make("mad-v0", num_agents=2, credit=credit)
    run(env_a, [{D0: "7", D1: "5"}] * 2)
    run(env_b, [{D0: "7", D1: "5"}] * 2)
    assert credit.state_dict()["history"][D0] == [1.0, 1.0]


def test_credit_options_are_validated_by_make():
    with pytest.raises(ValueError, match="alpha"):
        marti_env.make("mad-v0", credit="quality", alpha=-1)
    with pytest.raises(ValueError, match="unknown argument 'alpah'"):
        marti_env.make("mad-v0", credit="quality", alpah=0.5)
    with pytest.raises(ValueError, match="unknown argument 'alpha'"):
        marti_env.make("mad-v0", credit="none", alpha=0.5)


@dataclass
class _Broken(CreditMethod):
    """Returns ``kind``-broken rewards (a test double, not registered)."""

    name = "broken_for_test"  # type: ignore[assignment]
    kind: str = "nan"

    def assign(self, episode, rule):
        n = len(episode.turns)
        if self.kind == "short":
            return [0.0] * (n - 1)
        bad = math.nan if self.kind == "nan" else math.inf
        return [0.0] * (n - 1) + [bad]


@pytest.mark.parametrize(
    ("kind", "pattern"),
    [
        ("short", r"credit method 'broken_for_test' returned 5 rewards for 6 turns"),
        ("nan", r"credit method 'broken_for_test' gave agent 'debater_2' .*non-finite reward nan"),
        ("inf", r"credit method 'broken_for_test' gave agent 'debater_2' .*non-finite reward inf"),
    ],
)
def test_bad_method_output_errors_naming_method_and_agent(kind, pattern):
    env = marti_env.make("mad-v0", credit=_Broken(kind))
    with pytest.raises(ValueError, match=pattern):
        run(env, ANSWERS)
