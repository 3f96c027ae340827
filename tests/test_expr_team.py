"""expr-team-v0: the safe evaluator by tables (hostile inputs included), the generator, the
expr reward and the tester's score by hand, the coder/tester protocol on expressions, the
PettingZoo API test, every credit method, the simulated coder and tester of the fast tier,
their true contributions by replay, the credit-irrelevant variant and a benchmark smoke run."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

import marti_env
from marti_env.credit import (
    BUILTIN_METHODS,
    REPLAY_METHODS,
)
from marti_env.credit.bench import BenchConfig, run_benchmark
from marti_env.credit.bench.harness import true_contributions
from marti_env.credit.bench.probes import ProbeTeam
from marti_env.credit.bench.sim import PERSUADE, SKILL, play
from marti_env.rewards import make_reward
from marti_env.tasks import Task, make_task_source
from marti_env.tasks.expr import (
    ExprError,
    ExprTask,
    ExprTasks,
    evaluate_expr,
    extract_expr,
    pass_fraction,
)
from marti_env.workflows.code_team import (
    CODER,
    TESTER,
    expr_tester_score,
    expr_wrong_mutants,
    mutant_sources,
    parse_expr_tests,
    summarize_expr_results,
)

SURE, NEVER = 50.0, -50.0
TINY = BenchConfig(
    updates=2, batch=4, eval_episodes=8, attr_configs=1, attr_episodes=8, probe_episodes=8
)
TASK = ExprTask(
    id="lin",
    prompt="Write an expression in x for: x plus 1. For example, f(4) == 5.",
    answer="x + 1",
    tests=((0, 1), (2, 3), (-3, -2)),
)


# -- the evaluator ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "x", "value"),
    [
        ("3 * x + 2", 3, 11),
        ("  7 - 2 * x\n", 4, -1),
        ("x // 4", -5, -2),  # floor division, as Python
        ("x % 5", -1, 4),
        ("-x + +3", 2, 1),
        ("abs(x - 4)", 1, 3),
        ("min(max(x, -2), 6)", 9, 6),
        ("max(x, 1, 7)", 3, 7),
        ("x > 2", 3, 1),
        ("x == 2", 3, 0),
        ("not x", 0, 1),
        ("x > 0 and x", 5, 5),  # Python's value of and / or
        ("x > 0 and x", -5, 0),
        ("x or 9", 0, 9),
        ("(3 * x if x > 2 else x + 5)", 1, 6),
        ("(4 if x > 0 else -8 if x < 0 else 0)", -3, -8),
        ("(1 if 2 <= x and x <= 5 else 0)", 5, 1),
        ("(" * 90 + "x" + ")" * 90, 7, 7),  # parentheses make no nodes
        ("1000000 * 1000000", 0, 10**12),  # the largest value allowed
    ],
)
def test_evaluate_table(source, x, value):
    assert evaluate_expr(source, x) == value


@pytest.mark.parametrize(
    ("source", "x", "culprit"),
    [
        ("x ** 2", 1, "not allowed in an expression: 'x \\*\\* 2'"),
        ("9 ** 9 ** 9", 1, "not allowed"),  # a huge power is impossible: ** is refused
        ("__import__('os').system('ls')", 1, "only abs, min and max may be called"),
        ("__import__('os')", 1, "only abs, min and max may be called"),
        ("x.real", 1, "not allowed in an expression: 'x.real'"),
        ("().__class__", 1, "not allowed"),
        ("y + 1", 1, "unknown name 'y'"),
        ("1.5 * x", 1, "only integer constants are allowed, got '1.5'"),
        ("'a' * 3", 1, "only integer constants"),
        ("True", 1, "only integer constants"),
        ("lambda: 1", 1, "not allowed"),
        ("(lambda: 1)()", 1, "only abs, min and max may be called"),
        ("[x][0]", 1, "not allowed"),
        ("1 < x < 3", 2, "only one of"),
        ("x is 1", 2, "only one of"),
        ("min(x)", 1, "min takes 2 to 3 arguments"),
        ("abs(*[x])", 1, "abs takes 1 to 1 arguments"),
        ("max(x, key=abs)", 1, "only abs, min and max may be called"),
        ("10000000 * x", 1, "constant 10000000 is larger than 1000000"),
        ("x if x else", 1, "not an expression"),
        ("x\x00", 1, "not an expression"),
        ("", 1, "empty expression"),
        ("x" + " + x" * 60, 1, "longer than 200 characters"),
        ("-" * 30 + "x", 1, "nested deeper than 24"),
        ("x+" * 40 + "x", 1, "more than 100"),  # ast.walk counts operators and contexts too
        ("x // 0", 1, "division or modulo by zero"),
        ("x % (x - 1)", 1, "division or modulo by zero"),
        ("1000000 * 1000000 * 10", 0, "exceeds"),  # 10**13 by multiplication
        ("x * x * x", 10**5, "exceeds"),
        ("x", 10**13, "exceeds"),
    ],
)
def test_evaluate_rejects(source, x, culprit):
    with pytest.raises(ExprError, match=culprit):
        evaluate_expr(source, x)


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("So \\boxed{3 * x + 2}.", "3 * x + 2"),
        ("\\boxed{1} then \\boxed{max(x, 2)}", "max(x, 2)"),  # the last box
        ("\\boxed{f(x) = x - 1}", "x - 1"),
        ("```python\n\nx % 3\nmore\n```", "x % 3"),  # first line of the last block
        ("no expression here", None),
        ("\\boxed{}", None),
        ("\\boxed{x + 1", None),  # never closed
        ("\\boxed{" + "x+" * 150 + "x}", None),  # too long
    ],
)
def test_extract_expr_table(response, expected):
    assert extract_expr(response) == expected


# -- the generator ------------------------------------------------------------------------


def test_generator_is_deterministic_and_splits_are_disjoint():
    a = [t.to_dict() for t in ExprTasks(seed=3, size=60)]
    assert a == [t.to_dict() for t in ExprTasks(seed=3, size=60)]
    assert a != [t.to_dict() for t in ExprTasks(seed=4, size=60)]
    train = {t.prompt for t in ExprTasks(seed=0, size=600)}
    test = {t.prompt for t in ExprTasks(seed=0, size=300, split="test")}
    assert len(train) > 300 and len(test) > 150 and not train & test


def test_generated_tasks_are_sound():
    for split in ("train", "test"):
        for task in ExprTasks(seed=1, size=300, split=split):
            level = int(task.id.split("/L")[1].split("/")[0])
            assert task.source == f"expr/level{level}" and task.id.startswith(f"expr/{split}/")
            assert len(task.tests) == 6 and len({x for x, _ in task.tests}) == 6
            assert pass_fraction(task.tests, task.answer) == 1.0
            # the tester can always be scored on a real wrong program (not the fallback)
            real = [m for m in mutant_sources(task.answer) if pass_fraction(task.tests, m) < 1]
            assert real and expr_wrong_mutants(task)[0] == real[0].strip(), task
            example = int(task.prompt.split("For example, f(")[1].split(")")[0])
            assert example not in {x for x, _ in task.tests}  # the shown call is not hidden
    assert ExprTasks(levels=(2,), size=3)[1].source == "expr/level2"
    assert ExprTask.from_dict(TASK.to_dict()) == TASK


def test_task_source_specs():
    assert repr(make_task_source("expr")) == repr(ExprTasks())
    spec = {"type": "expr", "seed": 2, "levels": [3], "split": "test", "size": 5}
    source = make_task_source(spec)
    assert len(source) == 5 and source[0] == ExprTasks(2, (3,), 5, "test")[0]
    assert len(make_task_source("expr", limit=4)) == 4
    with pytest.raises(ValueError, match="levels"):
        ExprTasks(levels=(4,))
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['lvl'\]"):
        make_task_source({"type": "expr", "lvl": 1})
    with pytest.raises(ValueError, match="expression task 'e'"):
        ExprTask("e", "?", "x", tests=())


# -- the reward ---------------------------------------------------------------------------


def test_reward_scores_by_hand():
    task = ExprTask("t", "?", "3 * x + 2", tests=((0, 2), (1, 5), (-1, -1), (4, 14)))
    reward = make_reward("expr")
    assert reward.score(task, "\\boxed{x + x + x + 2}") == 1.0
    assert reward.score(task, "\\boxed{3 * x + 1}") == 0.0
    # max(3x + 2, 5): 5, 5, 5, 14 against 2, 5, -1, 14: two of four
    assert reward.score(task, "\\boxed{max(3 * x + 2, 5)}") == 0.5
    for hostile in ("\\boxed{__import__('os').system('ls')}", "\\boxed{x ** 99999}",
                    "\\boxed{x // (x - x)}", "nothing", "\\boxed{" * 10_000):  # fmt: skip
        assert reward.score(task, hostile) == 0.0
    assert reward.score_answer(task, "2 + 3 * x") == 1.0
    assert reward.score_answer(task, "max(3 * x + 2, 5)") == 0.0
    assert reward.answer_key(task, "x + x + x + 2") == reward.answer_key(task, "3 * x + 2")
    assert reward.answer_key(task, "x // 0") == '["error", "error", "error", "error"]'
    with pytest.raises(ValueError, match="task 'q' is a Task"):
        reward.score(Task("q", "What is 1 + 1?", "2"), "\\boxed{2}")


# -- the tester's tests and score -----------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("f(0) == 1\nf(-3) == -2", ((0, 1), (-3, -2))),
        ("```\nassert f(2) == 3\n  f( 5 )==6  \n```", ((2, 3), (5, 6))),
        ("f(x) == 1\nf(1) == 2 and more\nf(1.5) == 2\ng(1) == 2", ()),
        ("f(1) == 2\n" * 20, ((1, 2),) * 10),  # at most max_tests
        ("f(1) == " + "9" * 14, ()),  # at most 13 digits
    ],
)
def test_parse_expr_tests_table(response, expected):
    assert parse_expr_tests(response, max_tests=10) == expected


def test_wrong_mutants_and_tester_score_by_hand():
    # the mutants of x + 1: x - 1, x + 2; both fail a hidden test
    assert expr_wrong_mutants(TASK) == ("x - 1", "x + 2")
    # valid: f(0) == 1 yes, f(5) == 9 no -> 1/2; f(0) == 1 catches both -> (1/2 + 1) / 2
    assert expr_tester_score(TASK, [(0, 1), (5, 9)]) == pytest.approx(0.75)
    assert expr_tester_score(TASK, [(1, 2)]) == 1.0
    assert expr_tester_score(TASK, [(7, 0)]) == 0.0  # no valid test: catches nothing
    assert expr_tester_score(TASK, []) == 0.0
    # max(x, 3): its one mutant max(x, 4) fails f(3) == 3; the valid test f(10) == 10 does
    # not catch it: (1 + 0) / 2
    clamp = ExprTask("m", "?", "max(x, 3)", tests=((3, 3), (0, 3), (5, 5)))
    assert expr_wrong_mutants(clamp) == ("max(x, 4)",)
    assert expr_tester_score(clamp, [(10, 10)]) == 0.5
    assert expr_tester_score(clamp, [(10, 10), (3, 3)]) == 1.0
    # a reference without a wrong mutant gets the fallback (reference) + 1
    flat = ExprTask("z", "?", "x", tests=((0, 0),))
    assert expr_wrong_mutants(flat) == ("(x) + 1",)


def test_summarize_expr_results():
    assert summarize_expr_results("x", ()) == "Not run: no tests."
    assert summarize_expr_results(None, ((0, 1),)) == "Not run: the coder gave no expression."
    assert summarize_expr_results("x + 1", ((0, 1), (2, 4), (1, 2))).splitlines() == [
        "Test 1 passed: f(0) == 1",
        "Test 2 failed (the expression returned 3): f(2) == 4",
        "Test 3 passed: f(1) == 2",
        "2 of 3 tests passed.",
    ]
    assert summarize_expr_results("1 // x", ((0, 1),)).splitlines() == [
        "Test 1 failed (error: division or modulo by zero): f(0) == 1",
        "0 of 1 tests passed.",
    ]
    lines = summarize_expr_results("x.real", ((0, 1),)).splitlines()
    assert lines[0] == "The expression is invalid: not allowed in an expression: 'x.real'"
    assert lines[-1] == "0 of 1 tests passed."


# -- the env ------------------------------------------------------------------------------

RIGHT = "f(x) = \\boxed{x + 1}"
WRONG = "\\boxed{x}"
TESTS = "```\nf(0) == 1\nf(5) == 6\nf(1) == 3\n```"  # two valid, one not (f(1) is 2)


def run(responses: list[dict[str, str]], **kwargs):
    env = marti_env.make("expr-team-v0", **kwargs)
    env.reset(seed=0, options={"task": TASK})
    observations = []
    for actions in responses:
        obs, rewards, *_, infos = env.step(actions)
        observations.append(obs)
    return env, observations, rewards, next(iter(infos.values()))["episode"]


def test_protocol_visibility_and_scores():
    _, observations, rewards, record = run(
        [{CODER: WRONG, TESTER: TESTS}, {CODER: RIGHT, TESTER: TESTS}]
    )
    first = record.turns[0].messages[-1]["content"]
    assert "f(5) == 6" not in first and "Give the expression in \\boxed{}" in first
    assert "Do not write the expression" in record.turns[1].messages[-1]["content"]
    for view in (observations[0][CODER], observations[0][TESTER]):
        content = view["messages"][-1]["content"]
        assert "\\boxed{x}" in content and "f(5) == 6" in content
        assert "Test 1 failed (the expression returned 0): f(0) == 1" in content
        assert "0 of 3 tests passed." in content
    # the coder: hidden pass fraction; the tester: valid 2/3, both mutants caught by f(0) == 1
    assert [t.agent for t in record.turns] == [CODER, TESTER, CODER, TESTER]
    assert record.turns[0].score == 0.0 and record.turns[2].score == 1.0
    assert record.turns[1].score == pytest.approx((2 / 3 + 1) / 2)
    assert record.final_answer == "x + 1" and record.outcome == 1.0
    assert rewards == {CODER: 2.0, TESTER: 2.0}  # credit none: every turn earns the outcome


def test_a_plain_task_is_refused():
    env = marti_env.make("expr-team-v0")
    env.reset(seed=0, options={"task": Task("t9", "What is 1 + 1?", "2")})
    with pytest.raises(ValueError, match="'t9' is a Task"):
        env.step({CODER: RIGHT, TESTER: TESTS})


def test_pettingzoo_parallel_api():
    parallel_api_test(marti_env.make("expr-team-v0"), num_cycles=3)


@pytest.mark.parametrize("credit", [*BUILTIN_METHODS, *REPLAY_METHODS])  # not tests' own
def test_every_credit_method(credit):
    from tests.test_code_team import check_credit_method

    script = [{CODER: WRONG, TESTER: TESTS}, {CODER: RIGHT, TESTER: TESTS}]
    check_credit_method("expr-team-v0", run, script, credit)


def test_hostile_generations_end_scored_and_bounded():
    from tests.test_hostile import EPISODE_BOUND_S, HOSTILE

    env = marti_env.make("expr-team-v0")
    extra = [
        ("import", "\\boxed{__import__('os').system('echo pwned')}"),
        ("power", "\\boxed{9 ** 9 ** 9}"),
        ("nesting", "\\boxed{" + "(" * 5000 + "x" + ")" * 5000 + "}"),
        ("big product", "\\boxed{1000000 * 1000000 * 1000000}"),
        ("many tests", "f(1) == 2\n" * 100_000),
    ]
    slow = []
    for name, action in [*HOSTILE, *extra]:
        start = time.perf_counter()
        env.reset(seed=0, options={"task": TASK})
        while env.agents:
            _, rewards, *_, infos = env.step(dict.fromkeys(env.agents, action))
        seconds = time.perf_counter() - start
        record = next(iter(infos.values()))["episode"]
        assert 0.0 <= record.outcome <= 1.0 and all(0 <= t.score <= 1 for t in record.turns), name
        assert all(math.isfinite(r) for r in rewards.values()), name
        if seconds > EPISODE_BOUND_S:
            slow.append((name, round(seconds, 2)))
    assert not slow, slow


# -- the simulated coder and tester (fast tier) ----------------------------------------------


def user(content: str) -> tuple[dict[str, str], ...]:
    return ({"role": "user", "content": content},)


def test_probe_coder_and_tester():
    sure = ProbeTeam(("a",), np.array([[SURE, SURE]]))
    never = ProbeTeam(("a",), np.array([[NEVER, NEVER]]))
    rng = np.random.default_rng(0)
    text, d = sure.act("a", "tester", user(TASK.prompt), TASK, rng)
    assert parse_expr_tests(text, 10) == TASK.tests and d == [(SKILL, True)]
    text, d = never.act("a", "tester", user(TASK.prompt), TASK, rng)
    assert expr_tester_score(TASK, parse_expr_tests(text, 10)) < 1.0 and d == [(SKILL, False)]
    text, d = sure.act("a", "coder", user(TASK.prompt + " Give it in \\boxed{}."), TASK, rng)
    assert extract_expr(text) == "x + 1" and d == [(SKILL, True)]
    text, d = never.act("a", "coder", user(TASK.prompt), TASK, rng)
    assert extract_expr(text) in expr_wrong_mutants(TASK) and d == [(SKILL, False)]

    # round 1: a failing valid test fixes a persuadable coder; a failing wrong test misleads
    def revision(last: str, tests: tuple[tuple[int, int], ...]) -> str:
        results = summarize_expr_results(last, tests)
        return f"Your last expression:\n\\boxed{{{last}}}\n{results}\nGive it in \\boxed{{}}."

    fixing = revision("x", ((0, 1),))
    text, d = sure.act("a", "coder", user(fixing), TASK, rng)
    assert extract_expr(text) == "x + 1" and d == [(PERSUADE, True)]
    text, d = never.act("a", "coder", user(fixing), TASK, rng)
    assert extract_expr(text) == "x" and d == [(PERSUADE, False)]
    text, _ = sure.act("a", "coder", user(revision("x + 1", ((0, 5),))), TASK, rng)
    assert extract_expr(text) in expr_wrong_mutants(TASK)  # misled by a wrong test
    text, d = sure.act("a", "coder", user(revision("x + 1", ((0, 1),))), TASK, rng)
    assert extract_expr(text) == "x + 1" and d == []  # nothing failed: keeps it
    with pytest.raises(ValueError, match="task 'q' is a Task"):
        sure.act("a", "coder", user(""), Task("q", "?", "2"), rng)


def test_true_contributions_by_replay():
    env = marti_env.make("expr-team-v0")
    # a wrong but persuadable coder, a right tester: fixed in round 1. Without the tester
    # it stays wrong (contribution 1); without the coder nothing is answered (1)
    team = ProbeTeam(tuple(env.possible_agents), np.array([[NEVER, SURE], [SURE, 0.0]]))
    outcome = play(env, team, 0, 0).record.outcome
    assert outcome == 1.0
    assert true_contributions(env, team, 0, 0, outcome) == {CODER: 1.0, TESTER: 1.0}
    # a right, persuadable coder misled by a wrong tester: the tester's contribution is -1
    team = ProbeTeam(tuple(env.possible_agents), np.array([[SURE, SURE], [NEVER, 0.0]]))
    outcome = play(env, team, 0, 0).record.outcome
    assert outcome == 0.0
    assert true_contributions(env, team, 0, 0, outcome) == {CODER: 0.0, TESTER: -1.0}
    # one round: the tester cannot help
    env = marti_env.make("expr-team-v0", rounds=1)
    team = ProbeTeam(tuple(env.possible_agents), np.array([[NEVER, SURE], [SURE, 0.0]]))
    outcome = play(env, team, 0, 0).record.outcome
    assert true_contributions(env, team, 0, 0, outcome) == {CODER: 0.0, TESTER: 0.0}


def test_credit_irrelevant_variant_ties():
    # rounds=1: the tester never influences the outcome, so methods that give the coder
    # the outcome train the same coder, and the team's accuracy ties exactly
    config = BenchConfig(**{**TINY.to_dict(), "controls": False})
    env = "expr-team-v0:rounds=1"
    methods = ["none", "leave_one_out", "leave_one_out_replay"]
    result = run_benchmark(methods, [env], [0, 1], config)
    finals: dict[int, set[float]] = {}
    for r in result.rows:
        finals.setdefault(r["seed"], set()).add(r["acc_final"])
    assert all(len(v) == 1 for v in finals.values()), finals


def test_fast_benchmark_smoke():
    result = run_benchmark(["none", "leave_one_out_replay"], ["expr-team-v0"], [0], TINY)
    rows = {r["method"]: r for r in result.rows}
    assert {"none", "leave_one_out_replay", "oracle"} <= set(rows)
    assert rows["leave_one_out_replay"]["fidelity"] == pytest.approx(1.0)  # it is the truth
    assert all(0.0 <= r["acc_final"] <= 1.0 for r in result.rows)


def test_no_silent_coercion_and_never_raising_evaluation():
    from marti_env.tasks.expr import ExprError, ExprTask, evaluate_all, evaluate_expr

    assert evaluate_all(["x"], [1, 2]) == ((None, "not an expression: list"),) * 2  # type: ignore[arg-type]
    with pytest.raises(ExprError, match="must be an integer"):
        evaluate_expr("x + 1", 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"test \(1.9, 2.7\) is not a pair of integers"):
        ExprTask("t", "spec", "x + 1", "expr", tests=((1.9, 2.7),))
    with pytest.raises(ValueError, match="is not a pair of integers"):
        ExprTask("t", "spec", "x + 1", "expr", tests=((True, 2),))
