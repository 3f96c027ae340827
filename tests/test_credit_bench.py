"""The fast credit benchmark: simulated agents in the real envs, REINFORCE, metrics, CLI."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import pytest

import marti_env
from marti_env import Task
from marti_env.credit.bench import (
    BenchConfig,
    SimTeam,
    marginal_contributions,
    play,
    policy_gradient,
    rank_correlation,
    run_benchmark,
    team_accuracy,
    write_outputs,
)
from marti_env.credit.bench.sim import PERSUADE, SKILL, Played
from marti_env.record import EpisodeRecord, Turn
from marti_trainer.cli import main
from marti_trainer.cli.bench import add_bench_parser

SURE, NEVER = 50.0, -50.0  # logits whose sigmoid is 1.0 / ~1e-22: deterministic choices
TINY = BenchConfig(updates=2, batch=4, eval_episodes=8, attr_configs=1, attr_episodes=8)
REPO = Path(__file__).resolve().parents[1]


def team(env, rows) -> SimTeam:
    """rows: (skill logit, persuadability logit) per agent, in possible_agents order."""
    return SimTeam(tuple(env.possible_agents), np.array(rows, dtype=float))


def user(content: str) -> tuple[dict[str, str], ...]:
    return ({"role": "user", "content": content},)


TASK = Task("q", "What is 3 + 4?", "7", "test")


# --- the simulated agents ---------------------------------------------------------------


def test_agent_behaviour_by_role():
    sim = SimTeam(("a",), np.array([[SURE, SURE]]))
    rng = np.random.default_rng(0)
    # nothing shown: solve (skill 1 -> right), one SKILL choice
    text, choices = sim.act("a", "debater", user("What is 3 + 4? \\boxed{}"), TASK, rng)
    assert text.endswith("\\boxed{7}") and choices == [(SKILL, True)]
    # shown answers: defer to their majority (persuadability 1)
    shown = user("Response 1: \\boxed{5}\nResponse 2: \\boxed{5}\nResponse 3: \\boxed{7}")
    text, choices = sim.act("a", "aggregator", shown, TASK, rng)
    assert text.endswith("\\boxed{5}") and choices == [(PERSUADE, True)]
    # verifier with skill 1 judges right; refiner following "correct" keeps the solution
    text, _ = sim.act("a", "verifier", user("Proposed solution: \\boxed{8}"), TASK, rng)
    assert "VERDICT: wrong" in text and "\\boxed" not in text
    text, choices = sim.act("a", "refiner", user("\\boxed{8}\nVERDICT: correct"), TASK, rng)
    assert text.endswith("\\boxed{8}") and choices == [(PERSUADE, True)]
    # not persuadable: solves itself
    stubborn = SimTeam(("a",), np.array([[NEVER, NEVER]]), num_distractors=1)
    text, choices = stubborn.act("a", "debater", shown, TASK, rng)
    assert text.endswith("\\boxed{8}")  # skill 0: the one distractor, 7 + 1
    assert choices == [(PERSUADE, False), (SKILL, False)]


def test_perfect_and_hopeless_teams_through_the_real_envs():
    for env_id in ("mad-v0", "moa-v0", "chain-v0", "single-v0", "majority-v0"):
        env = marti_env.make(env_id)
        n = len(env.possible_agents)
        assert team_accuracy(env, team(env, [[SURE, NEVER]] * n), range(5), 0) == 1.0
        assert team_accuracy(env, team(env, [[NEVER, NEVER]] * n), range(5), 0) == 0.0
        played = play(env, team(env, [[0.0, 0.0]] * n), 3, 0)
        assert len(played.decisions) == len(played.record.turns) > 0


def test_persuadable_debaters_copy_the_majority_they_are_shown():
    env = marti_env.make("mad-v0", num_agents=3, rounds=2)
    # d0, d1 always right and stubborn; d2 never right, always defers -> round 1 copies 7
    played = play(env, team(env, [[SURE, NEVER], [SURE, NEVER], [NEVER, SURE]]), 0, 0)
    answers = [
        (t.round, t.agent, t.answer == played.record.task.answer) for t in played.record.turns
    ]
    assert (0, "debater_2", False) in answers and (1, "debater_2", True) in answers


def test_common_random_numbers_replay_other_agents():
    env = marti_env.make("mad-v0")
    sim = team(env, [[0.0, 0.0]] * 3)
    a = play(env, sim, 11, 5).record
    b = play(env, sim, 11, 5).record
    assert [t.response for t in a.turns] == [t.response for t in b.turns]
    c = play(env, sim, 11, 5, absent="debater_2").record
    assert [t.response for t in c.turns if t.round == 0][:2] == [
        t.response for t in a.turns if t.round == 0
    ][:2]
    assert all(t.response == "" for t in c.turns if t.agent == "debater_2")


def test_true_marginal_contributions():
    # MoA: the aggregator solves alone (never defers) and is always right: it alone matters
    env = marti_env.make("moa-v0", num_proposers=2)
    acc, contrib = marginal_contributions(
        env, team(env, [[0.0, 0.0]] * 2 + [[SURE, NEVER]]), range(10), 0
    )
    assert acc == 1.0 and contrib == {"proposer_0": 0.0, "proposer_1": 0.0, "aggregator_0": 1.0}
    # aggregator always defers to the proposals: a perfect proposer carries the team
    sim = team(env, [[SURE, NEVER], [NEVER, NEVER], [NEVER, SURE]])
    acc, contrib = marginal_contributions(env, sim, range(10), 0)
    # both proposals shown: 7 and a wrong one tie 1-1, the aggregator picks either.
    # Without proposer_0 only the wrong one is left: contribution = acc.
    assert contrib["proposer_0"] == pytest.approx(acc) and contrib["aggregator_0"] == acc
    assert contrib["proposer_1"] <= 0.0


# --- REINFORCE --------------------------------------------------------------------------


def _played(agent: str, reward: float, taken: bool) -> Played:
    turn = Turn(0, 0, agent, "solver", (), "", None, 0.0, reward=reward)
    return Played(EpisodeRecord("single-v0", TASK, [turn]), [[(SKILL, taken)]])


def test_policy_gradient_by_hand():
    sim = SimTeam(("solver_0",), np.array([[0.0, 0.0]]))  # p = 0.5
    batch = [_played("solver_0", 1.0, True), _played("solver_0", 0.0, False)]
    # slot mean 0.5, std 0.5 -> A = +1, -1;  grad = 1/2 (1 * (1 - .5) + -1 * (0 - .5)) = 0.5
    assert policy_gradient(sim, batch)[0, SKILL] == pytest.approx(0.5)
    # without normalising: A = +-0.5 -> grad = 1/2 (0.25 + 0.25) = 0.25
    assert policy_gradient(sim, batch, normalize="mean")[0, SKILL] == pytest.approx(0.25)
    assert policy_gradient(sim, batch)[0, PERSUADE] == 0.0
    # equal rewards: no signal
    same = [_played("solver_0", 1.0, True), _played("solver_0", 1.0, False)]
    assert policy_gradient(sim, same)[0, SKILL] == 0.0


def test_node_groups_with_siblings_by_hand():
    """``sibling`` with ``train=True``: each turn is grouped with its siblings. Episode 0's
    turn (R = 1, taken) has siblings 0 (not taken) and 1 (taken); episode 1's turn (R = 0,
    not taken) has siblings 0 and 0 (not taken)."""
    from marti_env.credit.bench.sim import SiblingTurn

    sim = SimTeam(("solver_0",), np.array([[0.0, 0.0]]))  # p = 0.5: (x - p) = +-0.5
    batch = [_played("solver_0", 1.0, True), _played("solver_0", 0.0, False)]
    siblings = [
        SiblingTurn(0, "solver_0", 0, 0.0, [(SKILL, False)]),
        SiblingTurn(0, "solver_0", 0, 1.0, [(SKILL, True)]),
        SiblingTurn(1, "solver_0", 0, 0.0, [(SKILL, False)]),
        SiblingTurn(1, "solver_0", 0, 0.0, [(SKILL, False)]),
    ]
    # node 0: rewards 1, 0, 1 -> mean 2/3, std sqrt(2)/3; A = +1/sqrt(2), -sqrt(2), +1/sqrt(2)
    # A * (x - p): 0.3536 + 0.7071 + 0.3536 = 1.4142; node 1 is constant: A = 0.
    # grad = T/N * sum = 1/6 * sqrt(2) (T = 1 turn per episode, N = 6 samples)
    grad = policy_gradient(sim, batch, "std", siblings, by_node=True)
    assert grad[0, SKILL] == pytest.approx(np.sqrt(2) / 6)
    # mean-centred: A = 1/3, -2/3, 1/3 -> sum A (x - p) = 1/6 + 1/3 + 1/6 = 2/3; / 6
    assert policy_gradient(sim, batch, "mean", siblings, by_node=True)[0, SKILL] == (
        pytest.approx(2 / 3 / 6)
    )
    # slot groups pool all six: mean 1/3 -> the same rows under one baseline
    pooled = policy_gradient(sim, batch, "mean", siblings)[0, SKILL]
    rewards, xs = [1, 0, 0, 1, 0, 0], [1, 0, 0, 1, 0, 0]
    expected = sum((r - 1 / 3) * (x - 0.5) for r, x in zip(rewards, xs, strict=True)) / 6
    assert pooled == pytest.approx(expected)


def test_training_on_siblings_in_the_fast_tier():
    """``sibling:train=true`` trains on the siblings (node groups): same replays as
    ``sibling``, other advantage groups, and the probe's credit is the sibling baseline's."""
    config = BenchConfig(updates=2, batch=6, eval_episodes=8, attr_configs=1, attr_episodes=8,
                         probe_episodes=8, controls=False, equal_budget=False)  # fmt: skip
    result = run_benchmark(["none", "sibling", "sibling:train=true"], ["chain-v0"], [0], config)
    rows = {r["method"]: r for r in result.rows}
    assert rows["sibling:train=true"]["generations"] == rows["sibling"]["generations"]
    assert rows["sibling:train=true"]["fidelity"] == rows["sibling"]["fidelity"]
    # node groups (a turn and its 2 siblings) are sometimes constant; slot groups of 6 are not
    assert rows["sibling:train=true"]["zero_adv"] > rows["sibling"]["zero_adv"] == 0.0
    assert result.flags[("chain-v0", "sibling:train=true")] is False


def test_budget_episodes_by_hand():
    from marti_env.credit.bench.harness import budget_episodes

    assert budget_episodes(48, 15) == 3 and budget_episodes(18, 6) == 3
    assert budget_episodes(18, 15) == 2  # the floor: a baseline needs two episodes


def test_agent_scale_policy_gradient_by_hand():
    """Two rounds of one agent: round 0 rewards 1/0, round 1 rewards 0.5/0 (a discounted
    round). c = +-0.5 and +-0.25; sigma = sqrt((2 * 0.25 + 2 * 0.0625) / 4) = 0.3953.
    std keeps both rounds at A = +-1; agent_scale keeps round 1 at half round 0's weight."""
    sim = SimTeam(("solver_0",), np.array([[0.0, 0.0]]))

    def two_rounds(r0: float, r1: float, taken: bool) -> Played:
        turns = [Turn(0, 0, "solver_0", "solver", (), "", None, 0.0, reward=r0),
                 Turn(1, 1, "solver_0", "solver", (), "", None, 0.0, reward=r1)]  # fmt: skip
        return Played(EpisodeRecord("x", TASK, turns), [[(SKILL, taken)], [(SKILL, taken)]])

    batch = [two_rounds(1.0, 0.5, True), two_rounds(0.0, 0.0, False)]
    sigma = np.sqrt((2 * 0.25 + 2 * 0.0625) / 4)
    # per episode, (x - p) = +-0.5; grad = 1/2 * sum over 4 turns of A * (x - p)
    expected = 0.5 * (2 * 0.5 * 0.5 / sigma + 2 * 0.25 * 0.5 / sigma)
    assert policy_gradient(sim, batch, "agent_scale")[0, SKILL] == pytest.approx(expected)
    assert policy_gradient(sim, batch, "std")[0, SKILL] == pytest.approx(0.5 * 4 * 0.5)
    with pytest.raises(ValueError, match="normalize must be"):
        policy_gradient(sim, batch, "max")
    with pytest.raises(ValueError, match=r"BenchConfig\.normalize must be"):
        BenchConfig(normalize="max")
    assert BenchConfig(normalize=False).normalize == "mean"  # older result files


def test_training_on_credited_rewards_improves_the_team():
    config = BenchConfig(updates=15, batch=16, lr=0.5, eval_episodes=100, attr_configs=0)
    result = run_benchmark(["score"], ["single-v0"], seeds=[0], config=config)
    row = result.rows[0]
    assert row["acc_final"] > row["acc_start"] + 0.1


def test_rank_correlation():
    assert rank_correlation([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert rank_correlation([3, 2, 1], [10, 20, 30]) == pytest.approx(-1.0)
    # ties get average ranks: x ranks (0.5, 0.5, 2), y ranks (0, 1, 2) -> r = 0.866
    assert rank_correlation([1, 1, 2], [1, 2, 3]) == pytest.approx(np.sqrt(3) / 2)
    assert np.isnan(rank_correlation([1, 1, 1], [1, 2, 3]))


# --- the harness ------------------------------------------------------------------------


def test_benchmark_is_deterministic_and_writes_outputs(tmp_path):
    methods = ["none", "shapley", "quality:alpha=0.3:scope=agent"]
    a = run_benchmark(methods, ["mad-v0:num_agents=2", "chain-v0"], seeds=[0, 1], config=TINY)
    b = run_benchmark(methods, ["mad-v0:num_agents=2", "chain-v0"], seeds=[0, 1], config=TINY)

    def strip(rows):  # repr: nan == nan
        return repr([{k: v for k, v in r.items() if k != "seconds"} for r in rows])

    assert strip(a.rows) == strip(b.rows)
    assert a.methods == [*methods, "oracle", "random", "none@reseed"]  # the controls
    assert len(a.rows) == 6 * 2 * 2
    table = a.table()
    assert "quality:alpha=0.3:scope=agent" in table and "chain-v0" in table
    assert "n/a" in table  # chain-v0 has one agent per role: no attr_within
    paths = write_outputs(a, tmp_path, plot_png=False)
    data = json.loads(paths["json"].read_text())  # strict JSON: n/a is null, not NaN
    assert len(data["rows"]) == 24 and len(data["summary"]) == 12
    assert data["rows"][-1]["attr_within"] is None
    assert paths["rows_csv"].read_text().startswith("env,method,seed,team_seed,train_seed,attr")
    # paired differences against none: CI ends and a verdict
    shapley = next(e for e in data["summary"] if e["method"] == "shapley")
    assert shapley["d_acc_verdict"] and shapley["d_acc_low"] <= shapley["d_acc_mean"]


def test_bad_specs_are_named():
    with pytest.raises(ValueError, match=r"credit method 'quality'.*alpha"):
        run_benchmark(["quality:alpha=-1"], ["mad-v0"], config=TINY)
    with pytest.raises(ValueError, match=r"unknown credit method 'qualty'.*did you mean"):
        run_benchmark(["qualty"], ["mad-v0"], config=TINY)
    with pytest.raises(ValueError, match=r"'alpha' is not an option setting.*key=value"):
        run_benchmark(["quality:alpha"], ["mad-v0"], config=TINY)
    with pytest.raises(ValueError, match=r"bad option 'w' in 'my\.py:Mine:w'.*key=value"):
        run_benchmark(["my.py:Mine:w"], ["mad-v0"], config=TINY)
    with pytest.raises(ValueError, match="unique"):
        run_benchmark(["none", "none"], ["mad-v0"], config=TINY)
    with pytest.raises(ValueError, match=r"BenchConfig\.lr"):
        BenchConfig(lr=0)


# --- the CLI and the documented example -------------------------------------------------


def cli(argv):
    parser = argparse.ArgumentParser(prog="marti")
    add_bench_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


SMALL = ["--updates", "2", "--batch", "4", "--eval-episodes", "8", "--attr-configs", "1"]
SMALL += ["--attr-episodes", "8", "--no-plot", "--quiet"]


def test_cli_rejects_options_of_the_other_tier(tmp_path):
    with pytest.raises(ValueError, match="--updates: fast-tier options"):
        cli(["bench", "credit", "--tier", "llm", "--updates", "3", "--out", str(tmp_path)])
    with pytest.raises(ValueError, match="add --tier llm"):
        cli(["bench", "credit", "--set", "total_steps=1", "--out", str(tmp_path)])
    with pytest.raises(ValueError, match="add --tier llm"):
        cli(["bench", "credit", "--keep-checkpoints", "none", "--out", str(tmp_path)])
    with pytest.raises(FileNotFoundError, match=r"--config nope\.yaml: no such file"):
        cli(["bench", "credit", "--tier", "llm", "--config", "nope.yaml", "--out", str(tmp_path)])
    with pytest.raises(ValueError, match="--no-controls: fast-tier options"):
        cli(["bench", "credit", "--tier", "llm", "--no-controls", "--out", str(tmp_path)])
    with pytest.raises(ValueError, match="--budget tokens: the fast tier's simulated agents"):
        cli(["bench", "credit", "--budget", "tokens", "--out", str(tmp_path)])


def test_cli_no_controls_leaves_the_control_runs_out(tmp_path):
    argv = ["bench", "credit", "--methods", "none,score", "--envs", "chain-v0", "--seeds", "0"]
    cli([*argv, *SMALL, "--no-controls", "--out", str(tmp_path / "a")])
    rows = json.loads((tmp_path / "a" / "results.json").read_text())["rows"]
    assert sorted({r["method"] for r in rows}) == ["none", "score"]
    # seeds read as `marti sweep` reads them (docs/credit.md gives ranges)
    argv[-1] = "0-1,3"
    cli([*argv, *SMALL, "--no-controls", "--out", str(tmp_path / "c")])
    rows = json.loads((tmp_path / "c" / "results.json").read_text())["rows"]
    assert sorted({r["seed"] for r in rows}) == [0, 1, 3]
    with pytest.raises(ValueError, match="names seeds more than once"):
        cli([*argv[:-1], "0-2,1", *SMALL, "--out", str(tmp_path / "d")])
    argv[-1] = "0"
    cli([*argv, *SMALL, "--out", str(tmp_path / "b")])
    rows = json.loads((tmp_path / "b" / "results.json").read_text())["rows"]
    assert {"oracle", "random", "none@reseed"} <= {r["method"] for r in rows}


def test_a_control_named_in_methods_is_the_control(tmp_path):
    # `random` is the control (noise in training, no attribution), not the `random` credit
    # method, which `random:seed=1` names
    argv = ["bench", "credit", "--envs", "chain-v0", "--seeds", "0", *SMALL, "--no-controls"]
    cli([*argv, "--methods", "none,random,random:seed=1", "--out", str(tmp_path / "a")])
    rows = {
        r["method"]: r for r in json.loads((tmp_path / "a" / "results.json").read_text())["rows"]
    }
    assert rows["random"]["fidelity"] is None  # n/a: a control (NaN, written as null)
    assert isinstance(rows["random:seed=1"]["fidelity"], float)
    with pytest.raises(ValueError, match="oracle control credits each agent with its true"):
        cli(
            ["bench", "credit", "--tier", "llm", "--methods", "none,oracle", "--out", str(tmp_path)]
        )


def test_cli_min_effect_and_train_seed_offset_reach_the_config(tmp_path):
    argv = ["bench", "credit", "--methods", "none", "--envs", "chain-v0", "--seeds", "0", *SMALL,
            "--no-controls"]  # fmt: skip
    cli([*argv, "--out", str(tmp_path / "a")])
    other = ["--min-effect", "0.05", "--train-seed-offset", "1000"]
    cli([*argv, *other, "--out", str(tmp_path / "b")])
    a, b = (json.loads((tmp_path / n / "results.json").read_text()) for n in "ab")
    assert (a["config"]["min_effect"], a["config"]["train_seed_offset"]) == (0.02, 0)
    assert (b["config"]["min_effect"], b["config"]["train_seed_offset"]) == (0.05, 1000)
    # the same team, other training draws: the run differs
    assert a["rows"][0]["acc_final"] != b["rows"][0]["acc_final"] or (
        a["rows"][0]["acc_auc"] != b["rows"][0]["acc_auc"]
    )
    with pytest.raises(ValueError, match="--min-effect: fast-tier options"):
        cli(["bench", "credit", "--tier", "llm", "--min-effect", "0.1", "--out", str(tmp_path)])


@pytest.fixture
def forget_round_relative():
    """The docs example registers a method; unregister it (and forget the file ran) after the
    test."""
    from marti_env.credit.base import _CREDIT, _FILES

    yield
    _CREDIT.pop("round_relative", None)
    _FILES.pop((REPO / "docs" / "examples" / "my_credit.py").resolve(), None)


@pytest.mark.usefixtures("forget_round_relative")
def test_docs_example_registers_and_benchmarks(tmp_path, capsys, monkeypatch):
    """docs/examples/my_credit.py, shown whole in docs/credit.md, through `marti bench credit`."""
    text = (REPO / "docs" / "credit.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(\"\"\"my_credit\.py.*?)```", text, re.S).group(1)
    assert len(code.strip().splitlines()) <= 30
    example = REPO / "docs" / "examples" / "my_credit.py"
    assert example.read_text(encoding="utf-8") == code, "docs/credit.md shows the file as it is"
    monkeypatch.chdir(REPO)  # the path as the docs give it
    out = tmp_path / "out"
    argv = ["bench", "credit", "--import", "docs/examples/my_credit.py"]
    argv += ["--methods", "none,round_relative:w=2", "--envs", "mad-v0", "--seeds", "0"]
    assert main([*argv, "--out", str(out), *SMALL]) == 0
    printed = capsys.readouterr().out
    assert "round_relative:w=2" in printed
    assert (out / "results.csv").is_file() and (out / "summary.csv").is_file()
    # the registered method is usable by make() too, with its option validated
    env = marti_env.make("mad-v0", credit="round_relative", w=1.0)
    assert env.credit.name == "round_relative"
    with pytest.raises(ValueError, match="w must be"):
        marti_env.make("mad-v0", credit="round_relative", w=-1.0)


def test_replay_methods_pay_for_replays_at_equal_generation_budget():
    """Re-execution methods run in the fast tier with the simulated team as the replay
    policy; at an equal generation budget they train on fewer episodes, at an equal
    episode budget on as many, and every row records both costs."""
    methods = ["none", "leave_one_out", "leave_one_out_replay", "sibling"]
    config = BenchConfig(updates=2, batch=6, eval_episodes=8, attr_configs=1, attr_episodes=8,
                         probe_episodes=8, controls=False)  # fmt: skip
    result = run_benchmark(methods, ["chain-v0"], [0], config)
    rows = {r["method"]: r for r in result.rows}
    assert rows["none"]["episodes"] == 2 * 6 and rows["none"]["generations"] == 2 * 6 * 3
    # leave-one-out replays cost 2 + 1 + 0 a chain episode: 3 + 3 = 6 per episode, so a
    # budget of 6 x 3 = 18 generations affords 3 episodes, exactly spent
    assert rows["leave_one_out_replay"]["episodes"] == 2 * 3
    assert rows["leave_one_out_replay"]["generations"] == 2 * 6 * 3
    # two siblings per turn: 3 turns + 2 x (3 + 2 + 1) = 15 per episode -> the floor of 2
    assert rows["sibling"]["episodes"] == 2 * 2 and rows["sibling"]["generations"] == 2 * 2 * 15
    # re-execution sees the generator's influence on the refiner: not flagged =none
    assert result.flags[("chain-v0", "leave_one_out")] is True
    assert result.flags[("chain-v0", "leave_one_out_replay")] is False
    same = run_benchmark(methods, ["chain-v0"], [0], BenchConfig(**{
        **config.to_dict(), "equal_budget": False}))  # fmt: skip
    assert all(r["episodes"] == 12 for r in same.rows)
    by = {r["method"]: r["generations"] for r in same.rows}
    assert by["leave_one_out_replay"] == 12 * (3 + 2 + 1 + 0)


def test_degeneracy_flag_follows_the_advantage():
    """Turn discounting is gradient-identical to `none` under per-slot std (GRPO), not under
    agent_scale (one scale per agent keeps the rounds' weights)."""
    tiny = BenchConfig(updates=1, batch=4, eval_episodes=4, attr_configs=0, probe_episodes=16,
                       controls=False)  # fmt: skip
    for normalize, flagged in (("std", True), ("agent_scale", False)):
        config = BenchConfig(**{**tiny.to_dict(), "normalize": normalize})
        result = run_benchmark(["none", "discounted"], ["mad-v0"], [0], config)
        assert result.flags[("mad-v0", "discounted")] is flagged, normalize
