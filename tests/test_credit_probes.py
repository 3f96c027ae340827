"""The fast tier on the credit-probe envs: simulated roles, true contributions, controls,
the degeneracy flag and the paired differences."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import marti_env
from marti_env import Task
from marti_env.credit import CreditMethod, register_credit
from marti_env.credit.base import _CREDIT
from marti_env.credit.bench import BenchConfig, run_benchmark
from marti_env.credit.bench.harness import (
    EnvChoice,
    method_spec,
    probe_batch,
    random_team,
    true_contributions,
)
from marti_env.credit.bench.probes import ProbeTeam
from marti_env.credit.bench.sim import PERSUADE, SKILL, play
from marti_env.credit.degeneracy import affine_fit, gradient_identical_to_none

SURE, NEVER = 50.0, -50.0
TASK = Task("q", "What is 40 + 6?", "46", "test")
TINY = BenchConfig(
    updates=2, batch=4, eval_episodes=8, attr_configs=1, attr_episodes=8, probe_episodes=8
)


def user(content: str) -> tuple[dict[str, str], ...]:
    return ({"role": "user", "content": content},)


# --- the degeneracy check -----------------------------------------------------------------


def test_affine_fit_hand_values():
    # r = 0.5 R exactly
    assert affine_fit([0.5, 0.5, 0.0], [1, 1, 0]) == pytest.approx((0.0, 0.5, 0.0))
    # constant outcome: a = mean(r), b = 0, residual = max |r - mean|
    assert affine_fit([1.0, 3.0], [1, 1]) == pytest.approx((2.0, 0.0, 1.0))
    with pytest.raises(ValueError, match="equal-length"):
        affine_fit([1.0], [1, 0])


def test_turn_discounting_is_flagged_and_score_is_not():
    # two rounds, gamma = 0.9: round 0 gets 0.9 R, round 1 gets R; groups (agent, round)
    outcomes = [1, 0, 1, 1, 0, 1]
    groups = [("a", 0), ("a", 0), ("a", 0), ("a", 1), ("a", 1), ("a", 1)]
    discounted = [0.9 * r for r in outcomes[:3]] + outcomes[3:]
    assert gradient_identical_to_none(discounted, outcomes, groups)
    assert gradient_identical_to_none(outcomes, outcomes, groups)  # none itself
    score = [1, 1, 0, 1, 0, 0]  # the turn's own score: not a function of R
    assert not gradient_identical_to_none(score, outcomes, groups)
    # a negative slope flips the gradient: not identical
    assert not gradient_identical_to_none([-r for r in outcomes], outcomes, groups)
    # constant reward where R varies: zero advantages, not none's
    assert not gradient_identical_to_none([0.0] * 6, outcomes, groups)
    # mean-only centering: identical only with slope 1
    assert not gradient_identical_to_none(discounted, outcomes, groups, normalize="mean")
    assert gradient_identical_to_none([r + 3 for r in outcomes], outcomes, groups, "mean")
    with pytest.raises(ValueError, match="normalize must be one of"):
        gradient_identical_to_none(outcomes, outcomes, groups, normalize="max")


def test_degeneracy_under_agent_scale_keeps_discounting_apart():
    # agent a: rounds 0 and 1; agent b: round 0. groups (agent, round), scale key = agent.
    outcomes = [1, 0, 1, 1, 0, 1, 1, 0]
    groups = [("a", 0)] * 3 + [("a", 1)] * 3 + [("b", 0)] * 2
    agents = [g[0] for g in groups]
    # discounting: a's round 0 has b = 0.9, its round 1 b = 1 -> the ratio survives a's one
    # scale, so it is NOT none's gradient (it is under per-group std)
    discounted = [0.9 * r for r in outcomes[:3]] + outcomes[3:]
    assert gradient_identical_to_none(discounted, outcomes, groups)
    assert not gradient_identical_to_none(discounted, outcomes, groups, "agent_scale", 1e-9, agents)
    # one slope per agent (a: 2 R + 1 in both rounds, b: 5 R - 3) cancels in the scale
    per_agent = [2 * r + 1 for r in outcomes[:6]] + [5 * r - 3 for r in outcomes[6:]]
    assert gradient_identical_to_none(per_agent, outcomes, groups, "agent_scale", 1e-9, agents)
    assert not gradient_identical_to_none(per_agent, outcomes, groups, "mean")  # b != 1
    assert gradient_identical_to_none(outcomes, outcomes, groups, "agent_scale", 1e-9, agents)
    with pytest.raises(ValueError, match="needs one scale key"):
        gradient_identical_to_none(outcomes, outcomes, groups, "agent_scale")
    with pytest.raises(ValueError, match="needs one scale key"):
        gradient_identical_to_none(outcomes, outcomes, groups, "agent_scale", 1e-9, agents[:2])


def test_degeneracy_agent_scale_matches_the_trainer_estimator():
    # the flag's claim, checked on the advantages the trainer computes
    torch = pytest.importorskip("torch")
    from marti_trainer.algorithms import agent_scale_advantages, group_ids_from_keys

    outcomes = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    groups = [("a", 0)] * 3 + [("a", 1)] * 3 + [("b", 0)] * 2
    agents = [g[0] for g in groups]
    g_ids, a_ids = group_ids_from_keys(groups), group_ids_from_keys(agents)

    def adv(r):
        return agent_scale_advantages(torch.tensor(r, dtype=torch.float64), g_ids, a_ids)

    per_agent = [2 * r + 1 for r in outcomes[:6]] + [5 * r - 3 for r in outcomes[6:]]
    discounted = [0.9 * r for r in outcomes[:3]] + outcomes[3:]
    assert torch.allclose(adv(per_agent), adv(outcomes), atol=1e-9)
    assert not torch.allclose(adv(discounted), adv(outcomes), atol=1e-3)


def test_benchmark_flags_discounting_in_its_table():
    result = run_benchmark(
        ["none", "discounted", "score"], ["mad-v0"], seeds=[0], config=TINY.__class__(
            **{**TINY.to_dict(), "controls": False}
        ),
    )  # fmt: skip
    assert result.flags == {
        ("mad-v0", "none"): True, ("mad-v0", "discounted"): True, ("mad-v0", "score"): False,
    }  # fmt: skip
    rows = {line.split()[1]: line.split()[2] for line in result.table().splitlines()[2:-1]}
    assert rows == {"none": "YES", "discounted": "YES", "score": "no"}
    assert "gradient-identical to `none` under this normalization" in result.table()


# --- simulated roles ----------------------------------------------------------------------


def test_probe_roles():
    team = ProbeTeam(("a",), np.array([[SURE, SURE]]))
    rng = np.random.default_rng(0)
    text, d = team.act("a", "solver", user("Your share of the total is 3 * 7 - 4. Give"), TASK, rng)
    assert text == "\\boxed{17}" and d == [(SKILL, True)]
    text, d = team.act("a", "distractor", user("Your sensor reads 34. Give"), TASK, rng)
    assert text == "\\boxed{0}" and d == [(SKILL, True)]
    text, d = team.act("a", "verifier", user("Proposed solution:\n\\boxed{45}\n"), TASK, rng)
    assert text == "\\boxed{REJECT}" and d == [(SKILL, True)]  # checks: the proposal is wrong
    text, _ = team.act(
        "a", "speaker", user("Candidates: 40, 46. The target is 46. Send"), TASK, rng
    )
    assert text.endswith("\\boxed{46}")
    seen = user("Candidates: 46, 40. Your partner, ... message: 46. Give the target in")
    text, d = team.act("a", "listener", seen, TASK, rng)
    assert text == "\\boxed{46}" and d == [(PERSUADE, True)]
    lazy = ProbeTeam(("a",), np.array([[NEVER, NEVER]]))
    text, d = lazy.act("a", "distractor", user("Your sensor reads 34. Give"), TASK, rng)
    assert text == "\\boxed{34}" and d == [(SKILL, False)]
    text, d = lazy.act("a", "verifier", user("Proposed solution:\n\\boxed{46}\n"), TASK, rng)
    assert text == "\\boxed{REJECT}" and d == [(SKILL, False), (PERSUADE, False)]
    with pytest.raises(ValueError, match="role 'debater', which it cannot play"):
        team.act("a", "debater", user(""), TASK, rng)


def test_true_contributions_by_replay():
    # split-sum, a perfect team with one loud distractor: team wrong; without the
    # distractor it is right (contribution -1); without a solver still wrong (0)
    env = marti_env.make("split-sum-v0", num_solvers=2, num_distractors=1)
    team = ProbeTeam(tuple(env.possible_agents), np.array([[SURE, 0], [SURE, 0], [NEVER, 0]]))
    outcome = play(env, team, 3, 0).record.outcome
    assert outcome == 0.0
    assert true_contributions(env, team, 3, 0, outcome) == {
        "solver_0": 0.0, "solver_1": 0.0, "distractor_0": -1.0,
    }  # fmt: skip
    # gate: a right generator and a verifier that checks (ACCEPT); flipping it hands the
    # answer to a fallback that is never right: contribution 1. Without the generator the
    # verifier sees no proposal and accepts nothing: 1 - 0.
    env = marti_env.make("gate-v0", fallback_accuracy=0.0)
    team = ProbeTeam(tuple(env.possible_agents), np.array([[SURE, 0], [SURE, SURE]]))
    outcome = play(env, team, 1, 0).record.outcome
    assert outcome == 1.0
    assert true_contributions(env, team, 1, 0, outcome) == {"generator_0": 1.0, "verifier_0": 1.0}
    # signal: an informative speaker and a listener that follows: the null message leaves
    # the listener guessing among 4 (this draw guesses wrong): contribution 1
    env = marti_env.make("signal-v0")
    team = ProbeTeam(tuple(env.possible_agents), np.array([[SURE, 0], [0, SURE]]))
    played = play(env, team, 0, 0)
    truth = true_contributions(env, team, 0, 0, played.record.outcome)
    assert played.record.outcome == 1.0 and truth["listener_0"] == 1.0
    assert truth["speaker_0"] in (0.0, 1.0)


def test_true_contributions_of_a_verifier_panel():
    # three verifiers on a wrong proposal, fallback always right: verifier_0 checks (REJECT),
    # verifier_1 and verifier_2 never check and always ACCEPT -> 1 REJECT of 3, the wrong
    # proposal goes through (R = 0). Flipping verifier_0 gives 0 REJECTs (R' = 0): 0;
    # flipping either acceptor gives 2 REJECTs and the fallback (R' = 1): -1.
    env = marti_env.make("gate-v0", fallback_accuracy=1.0, num_verifiers=3)
    team = ProbeTeam(tuple(env.possible_agents),
                     np.array([[NEVER, 0], [SURE, 0], [NEVER, SURE], [NEVER, SURE]]))  # fmt: skip
    outcome = play(env, team, 2, 0).record.outcome
    assert outcome == 0.0
    truth = true_contributions(env, team, 2, 0, outcome)
    assert truth == {"generator_0": 0.0, "verifier_0": 0.0, "verifier_1": -1.0,
                     "verifier_2": -1.0}  # fmt: skip
    # the benchmark runs on the panel, and the verifiers' balanced accuracy is the panel mean
    result = run_benchmark(["none", "leave_one_out"], ["gate-v0:num_verifiers=3"], seeds=[0],
                           config=TINY)  # fmt: skip
    assert all(0.0 <= r["verifier_ba"] <= 1.0 for r in result.rows)


def test_a_listener_of_several_speakers_follows_the_most_named_candidate():
    team = ProbeTeam(("a",), np.array([[0, SURE]]))
    rng = np.random.default_rng(0)
    seen = "Candidates: 46, 40, 41. Your partner, ... message: {}. Give the target in"
    for said, picked in [("40 / 46 / 46", "46"), ("46 / 40", "46"), ("ok / 40", "40"),
                         ("(no message) / 41 / 99", "41")]:  # fmt: skip
        text, d = team.act("a", "listener", user(seen.format(said)), TASK, rng)
        assert (text, d) == (f"\\boxed{{{picked}}}", [(PERSUADE, True)]), said


def test_redundant_speakers_contribute_nothing_alone():
    # two informative speakers and a listener that follows: the team is right, and removing
    # either message leaves the other, so each one's true contribution is 0 (the lazy-agent
    # case); with the second speaker lazy ("ok"), the first is pivotal unless the listener,
    # left guessing among 4, happens to guess right
    env = marti_env.make("signal-v0", num_speakers=2)
    both = ProbeTeam(tuple(env.possible_agents), np.array([[SURE, 0], [SURE, 0], [0, SURE]]))
    played = play(env, both, 0, 0)
    truth = true_contributions(env, both, 0, 0, played.record.outcome)
    assert played.record.outcome == 1.0
    assert (truth["speaker_0"], truth["speaker_1"]) == (0.0, 0.0)
    one = ProbeTeam(tuple(env.possible_agents), np.array([[SURE, 0], [NEVER, 0], [0, SURE]]))
    pivotal = [true_contributions(env, one, s, 0, play(env, one, s, 0).record.outcome)
               for s in range(8)]  # fmt: skip
    assert all(t["speaker_1"] == 0.0 for t in pivotal)
    assert sum(t["speaker_0"] == 1.0 for t in pivotal) >= 4  # the guess is right 1 in 4


@register_credit("test_shifted_score")
@dataclass
class _ShiftedScore(CreditMethod):
    """score + 5: the same ranks as score."""

    def assign(self, episode, rule):
        return [t.score + 5.0 for t in episode.turns]


def test_fidelity_ignores_a_constant_added_to_every_reward():
    try:
        spec = EnvChoice("gate-v0", "gate-v0")
        env = marti_env.make("gate-v0")
        team = random_team(env, np.random.default_rng(0), TINY)
        cfg = BenchConfig(probe_episodes=32)
        out = probe_batch(spec, [method_spec("score"), method_spec("test_shifted_score")],
                          team, 0, cfg)  # fmt: skip
        assert out["score"][1] == out["test_shifted_score"][1] != 0.0
    finally:
        _CREDIT.pop("test_shifted_score", None)


# --- the benchmark on the probes ------------------------------------------------------------


def test_probe_benchmark_rows_controls_and_pairs():
    result = run_benchmark(["none", "shapley"], ["split-sum-v0", "gate-v0"], seeds=[0, 1],
                           config=TINY)  # fmt: skip
    assert result.methods == ["none", "shapley", "oracle", "random", "none@reseed"]
    rows = {(r["env"], r["method"], r["seed"]): r for r in result.rows}
    assert rows[("gate-v0", "none@reseed", 1)]["train_seed"] == 1 + 100_003
    assert rows[("gate-v0", "none", 1)]["train_seed"] == 1
    assert 0.0 <= rows[("gate-v0", "none", 0)]["verifier_ba"] <= 1.0
    assert np.isnan(rows[("split-sum-v0", "none", 0)]["verifier_ba"])
    assert rows[("split-sum-v0", "none", 0)]["abl_drop"] == 0.0  # nobody sees anyone
    summary = {(e["env"], e["method"]): e for e in result.summary()}
    assert "d_acc_mean" not in summary[("gate-v0", "none")]
    assert summary[("gate-v0", "shapley")]["d_acc_verdict"]
    # the same arguments give the same numbers
    again = run_benchmark(["none", "shapley"], ["split-sum-v0", "gate-v0"], seeds=[0, 1],
                          config=TINY)  # fmt: skip
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in result.rows]
    # (repr: NaN, a metric that does not apply, is not equal to itself)
    assert repr(strip) == repr([{k: v for k, v in r.items() if k != "seconds"} for r in again.rows])


def _finals_by_seed(result):
    finals = {}
    for r in result.rows:
        finals.setdefault(r["seed"], set()).add(r["acc_final"])
    return finals


@pytest.mark.parametrize(
    ("variant", "probe"),
    [
        ("split-sum-v0:num_solvers=1:num_distractors=0", "split-sum-v0"),
        ("gate-v0:binding=false", "gate-v0"),
        ("signal-v0:listener_sees_target=true", "signal-v0"),
    ],
)
def test_credit_irrelevant_variant_ties(variant, probe):
    # Only one agent can change the outcome (split-sum: one solver sees the whole total; a
    # non-binding gate: the generator; a listener told the target: the listener), and every
    # method pays that agent the outcome up to an increasing affine map, so the team trains
    # alike under all of them: the same final accuracy, seed by seed. The other agent's
    # credit may differ (a non-binding verifier's difference reward is 0), not the outcome.
    # The probe itself, at the same budget, does not tie.
    config = BenchConfig(**{**TINY.to_dict(), "controls": False, "updates": 6, "batch": 8,
                            "eval_episodes": 32, "lr": 0.5})  # fmt: skip
    methods = ["none", "leave_one_out", "shapley", "score"]
    result = run_benchmark(methods, [variant], [0, 1], config)
    if variant.startswith("split-sum"):
        assert all(result.flags[(variant, m)] for m in methods)
    finals = _finals_by_seed(result)
    assert all(len(v) == 1 for v in finals.values()), finals
    probed = _finals_by_seed(run_benchmark(methods, [probe], [0, 1], config))
    assert any(len(v) > 1 for v in probed.values()), probed
