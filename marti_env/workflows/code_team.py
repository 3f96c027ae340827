"""Coder and tester (``code-team-v0``, ``expr-team-v0``): the PettingLLMs design for code tasks.

Agents
    ``coder_0`` (role ``coder``) and ``tester_0`` (role ``tester``).

Rounds
    ``rounds`` (1..8, default 2); both act in every round. Round 0: the coder writes the
    function (template ``code``), the tester writes unit tests for it, ``assert`` lines in
    a ```` ```python ```` block (template ``test``), without seeing each other. Round
    ``r > 0``: each sees the other's last output and the results of running the coder's
    last program on the tester's last tests in the sandbox (templates ``code_revise`` and
    ``test_revise``, fields ``problem``, ``program``, ``tests``, ``results``).

Final answer
    The coder's last program.

Rewards
    The coder's turn score is its program's pass fraction on the hidden tests (the env's
    ``code`` reward). The tester's turn score is ``(valid + caught) / 2``
    (:func:`tester_score`): ``valid`` is the fraction of its tests that pass on the
    reference solution; ``caught`` the fraction of wrong programs (mutants of the reference
    that fail the hidden tests, :func:`mutants`) on which at least one of its valid tests
    fails. The episode's outcome is 1 when the final program passes every hidden test. The
    credit method turns these into rewards as for any workflow.

On expression tasks (``expr-team-v0``)
    On an :class:`~marti_env.tasks.expr.ExprTask` the same protocol runs without the
    sandbox: the coder's program is an expression in ``x``
    (:func:`~marti_env.tasks.expr.extract_expr`), the tester's tests are lines
    ``f(A) == B`` (:func:`parse_expr_tests`), running them is evaluating the expression
    with the safe evaluator (:func:`~marti_env.tasks.expr.evaluate_expr`), and the wrong
    programs are the mutants of the reference expression that fail a hidden test
    (:func:`expr_wrong_mutants`). The results shown in round ``r > 0`` say which tests
    failed and what the expression returned (:func:`summarize_expr_results`). The tester
    helps only through the coder's revision in round 1, so its contribution to the outcome
    is seen only by replaying the episode without it; with ``rounds=1`` it has none.

Arguments
    ``rounds`` (1..8), ``max_tests`` (tests of the tester counted, 1..50),
    ``timeout_s`` (the sandbox's budget per execution), ``max_shared_chars``.

Version history
    v0: initial version.
"""

from __future__ import annotations

import ast
import copy
import functools
import re
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from marti_env.record import Turn
from marti_env.rewards.code import shared_sandbox
from marti_env.sandbox import ExecutionResult, Job, Sandbox
from marti_env.tasks.code import CodeTask, extract_program, program_for
from marti_env.tasks.expr import (
    ExprError,
    ExprTask,
    evaluate_all,
    extract_expr,
    format_test,
    parse_expr,
    pass_fraction,
)
from marti_env.tasks.task import Task
from marti_env.workflows.base import Prompt, Workflow, check_int, clip_middle, defuse_markers

CODER, TESTER = "coder_0", "tester_0"
MAX_TEST_SOURCE_CHARS = 10_000
"""A tester response whose code is longer than this gives no tests (parsing stays cheap)."""
MAX_MUTANTS = 8


def parse_tests(response: str, max_tests: int) -> tuple[str, ...]:
    """The tester's tests: the top-level ``assert`` statements of the program in its
    response (:func:`~marti_env.tasks.code.extract_program`), at most ``max_tests``.
    Parsed with :mod:`ast`, never run here; unparsable or overlong code gives none.

    >>> parse_tests("```python\\nassert f(1) == 2\\nx = 3\\nassert f(0) == 0\\n```", 5)
    ('assert f(1) == 2', 'assert f(0) == 0')
    """
    code = extract_program(response)
    if code is None or len(code) > MAX_TEST_SOURCE_CHARS:
        return ()
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    tests = [ast.get_source_segment(code, n) for n in tree.body if isinstance(n, ast.Assert)]
    return tuple(t for t in tests if t)[:max_tests]


_SWAPS: dict[type, type] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Add,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.And: ast.Or,
    ast.Or: ast.And,
}


def mutant_sources(reference: str) -> list[str]:
    """Single-site mutants of ``reference``, in source order: each binary, comparison or
    boolean operator swapped (``+`` to ``-``, ``<`` to ``<=``, ``and`` to ``or``, ...) and
    each integer constant ``c`` replaced by ``c + 1``. Pure: parses and unparses, runs
    nothing. Empty for unparsable code."""
    try:
        tree = ast.parse(reference)
    except SyntaxError:
        return []
    sites = [n for n in ast.walk(tree) if _same_site(n)]
    out = []
    for i in range(len(sites)):
        clone = copy.deepcopy(tree)
        node = [n for n in ast.walk(clone) if _same_site(n)][i]
        if isinstance(node, ast.Constant):
            node.value = node.value + 1
        elif isinstance(node, ast.Compare):
            node.ops[0] = _SWAPS[type(node.ops[0])]()
        else:
            node.op = _SWAPS[type(node.op)]()  # type: ignore[union-attr]
        out.append(ast.unparse(clone) + "\n")
    return out


def _same_site(node: ast.AST) -> bool:
    """The site predicate of :func:`mutant_sources` (the same walk order finds the same i)."""
    if isinstance(node, (ast.BinOp, ast.BoolOp)):
        return type(node.op) in _SWAPS
    if isinstance(node, ast.Compare):
        return type(node.ops[0]) in _SWAPS
    return isinstance(node, ast.Constant) and type(node.value) is int


def tester_score(valid: Sequence[bool], caught: Sequence[bool]) -> float:
    """``(v + c) / 2`` with ``v = mean(valid)`` (tests that pass on the reference) and
    ``c = mean(caught)`` (wrong programs failing at least one valid test); a mean over
    nothing is 0. The PettingLLMs tester reward: valid tests that discriminate.

    >>> tester_score([True, True, False, True], [True, False])  # (3/4 + 1/2) / 2
    0.625
    """
    v = sum(valid) / len(valid) if valid else 0.0
    c = sum(caught) / len(caught) if caught else 0.0
    return (v + c) / 2


def summarize_results(result: ExecutionResult | None, tests: Sequence[str]) -> str:
    """What both agents are shown of the coder's program run on the tester's tests."""
    if result is None:
        return "Not run: the coder gave no program." if tests else "Not run: no tests."
    lines = []
    if result.load_error:
        lines.append(f"The program failed to load: {result.load_error}")
    elif result.status not in ("ok",):
        lines.append(f"The run ended early: {result.status}.")
    for i, (test, outcome) in enumerate(zip(tests, result.tests, strict=True), start=1):
        if outcome.passed:
            lines.append(f"Test {i} passed: {test}")
        else:
            got = f"; the call returned {outcome.value}" if outcome.value is not None else ""
            lines.append(f"Test {i} failed ({outcome.error}{got}): {test}")
    lines.append(f"{result.num_passed} of {len(tests)} tests passed.")
    return "\n".join(lines)


_EXPR_TEST = re.compile(
    r"^[ \t]*(?:assert[ \t]+)?f\([ \t]*([+-]?\d{1,13})[ \t]*\)[ \t]*==[ \t]*([+-]?\d{1,13})[ \t]*$",
    re.MULTILINE,
)


def parse_expr_tests(response: str, max_tests: int) -> tuple[tuple[int, int], ...]:
    """The tester's tests on an expression task: the lines ``f(A) == B`` (``A``, ``B``
    integers of at most 13 digits, an optional leading ``assert``) of its response's first
    :data:`MAX_TEST_SOURCE_CHARS` characters, in order, at most ``max_tests``.

    >>> parse_expr_tests("```\\nf(1) == 3\\nf(x) == 2\\nassert f(-2) == 0\\n```", 5)
    ((1, 3), (-2, 0))
    """
    if not isinstance(response, str):
        return ()
    found = _EXPR_TEST.findall(response[:MAX_TEST_SOURCE_CHARS])
    return tuple((int(a), int(b)) for a, b in found)[:max_tests]


def summarize_expr_results(expression: str | None, tests: Sequence[tuple[int, int]]) -> str:
    """What both agents are shown of the coder's expression evaluated on the tester's
    tests: per test, passed, or failed with the value the expression returned or its
    error; then the count."""
    if not tests:
        return "Not run: no tests."
    if expression is None:
        return "Not run: the coder gave no expression."
    lines = []
    try:
        parse_expr(expression)
    except ExprError as e:
        lines.append(f"The expression is invalid: {e}")
    outputs = evaluate_all(expression, [a for a, _ in tests])
    passed = 0
    for i, ((a, b), (value, err)) in enumerate(zip(tests, outputs, strict=True), start=1):
        if value == b:
            passed += 1
            lines.append(f"Test {i} passed: {format_test(a, b)}")
        elif err is not None:
            lines.append(f"Test {i} failed (error: {err}): {format_test(a, b)}")
        else:
            lines.append(f"Test {i} failed (the expression returned {value}): {format_test(a, b)}")
    lines.append(f"{passed} of {len(tests)} tests passed.")
    return "\n".join(lines)


@functools.lru_cache(maxsize=4096)
def expr_wrong_mutants(task: ExprTask) -> tuple[str, ...]:
    """Up to :data:`MAX_MUTANTS` mutants of the reference expression
    (:func:`mutant_sources`, first ``3 * MAX_MUTANTS`` tried) that fail a hidden test; when
    none does, the one wrong program ``(reference) + 1``.

    >>> from marti_env.tasks.expr import ExprTask
    >>> expr_wrong_mutants(ExprTask("t", "x plus 1", "x + 1", tests=((0, 1), (2, 3))))
    ('x - 1', 'x + 2')
    """
    candidates = [m.strip() for m in mutant_sources(task.answer or "")[: 3 * MAX_MUTANTS]]
    wrong = [m for m in candidates if pass_fraction(task.tests, m) < 1.0]
    return tuple(wrong[:MAX_MUTANTS]) or (f"({task.answer}) + 1",)


class CodeTeam(Workflow):
    name = "code_team"
    templates: ClassVar[Mapping[str, frozenset[str]]] = {
        "code": frozenset({"problem"}),
        "test": frozenset({"problem"}),
        "code_revise": frozenset({"problem", "program", "tests", "results"}),
        "test_revise": frozenset({"problem", "program", "tests", "results"}),
    }
    agents = (CODER, TESTER)

    def __init__(
        self,
        rounds: int = 2,
        max_tests: int = 10,
        timeout_s: float = 5.0,
        max_shared_chars: int = 6000,
    ) -> None:
        super().__init__(max_shared_chars=max_shared_chars)
        self.num_rounds = check_int("rounds", rounds, 1, 8)
        self.max_tests = check_int("max_tests", max_tests, 1, 50)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)):
            raise ValueError(f"timeout_s must be a number, got {timeout_s!r}")
        if not 0 < timeout_s <= 600:
            raise ValueError(f"timeout_s must be in (0, 600], got {timeout_s}")
        self.timeout_s = float(timeout_s)

    @property
    def sandbox(self) -> Sandbox:
        return shared_sandbox("bwrap", self.timeout_s)  # never unisolated: model-written code

    def role(self, agent: str) -> str:
        return "coder" if agent == CODER else "tester"

    def actors(self, round: int) -> tuple[str, ...]:
        return self.agents

    def request(
        self,
        agent: str,
        round: int,
        task: Task,
        transcript: Sequence[Turn],
        rng: np.random.Generator,
    ) -> Prompt:
        if round == 0:
            return Prompt("code" if agent == CODER else "test", {"problem": task.prompt})
        coder = _last(transcript, CODER)
        tester = _last(transcript, TESTER)
        if isinstance(task, ExprTask):
            return self._expr_request(agent, task, coder, tester)
        program = None if coder is None else extract_program(coder.response)
        tests = () if tester is None else parse_tests(tester.response, self.max_tests)
        result = None
        if program is not None and tests:
            result = self._run(_code_task(task), program, tests)
        shown_program = self.shown(coder) if coder is not None else "(none)"
        shown_tests = "\n".join(tests) if tests else "(no assert statements)"
        values = {
            "problem": task.prompt,
            "program": shown_program,
            "tests": self._shown_text(shown_tests),
            "results": self._shown_text(summarize_results(result, tests)),
        }
        return Prompt("code_revise" if agent == CODER else "test_revise", values)

    def _expr_request(
        self, agent: str, task: ExprTask, coder: Turn | None, tester: Turn | None
    ) -> Prompt:
        """Round ``r > 0`` on an expression task: the tests evaluated, no sandbox."""
        expression = None if coder is None else extract_expr(coder.response)
        tests = () if tester is None else parse_expr_tests(tester.response, self.max_tests)
        shown_tests = "\n".join(format_test(a, b) for a, b in tests) if tests else "(no tests)"
        values = {
            "problem": task.prompt,
            "program": self.shown(coder) if coder is not None else "(none)",
            "tests": self._shown_text(shown_tests),
            "results": self._shown_text(summarize_expr_results(expression, tests)),
        }
        return Prompt("code_revise" if agent == CODER else "test_revise", values)

    def _shown_text(self, text: str) -> str:
        """Text built from a response (its tests, their results): clipped and defused like
        a shown response (a multi-line assert or an exception message could imitate a
        heading)."""
        return defuse_markers(clip_middle(text, self.max_shared_chars), self.labels, self.headings)

    def rule_inputs(self, transcript: Sequence[Turn]) -> dict[str, str | None]:
        coder = _last(transcript, CODER)
        return {CODER: None if coder is None else coder.answer}

    def final_rule(self, answers: Mapping[str, str | None], tie_order: Sequence[str]) -> str | None:
        return answers.get(CODER)

    def turn_score(self, task: Task, agent: str, response: str) -> float | None:
        """The tester's score (:func:`tester_score`); None for the coder (the reward's)."""
        if agent != TESTER:
            return None
        if isinstance(task, ExprTask):
            return expr_tester_score(task, parse_expr_tests(response, self.max_tests))
        code_task = _code_task(task)
        tests = parse_tests(response, self.max_tests)
        if not tests or not code_task.answer:
            return 0.0
        on_reference = self._run(code_task, code_task.answer, tests)
        valid = [t.passed for t in on_reference.tests]
        valid_tests = tuple(t for t, ok in zip(tests, valid, strict=True) if ok)
        wrong = self._wrong_mutants(code_task)
        if not valid_tests:
            return tester_score(valid, [False] * len(wrong))
        jobs = [Job(m, valid_tests, code_task.setup) for m in wrong]  # in parallel
        caught = [not r.all_passed for r in self.sandbox.run_many(jobs)]
        return tester_score(valid, caught)

    def _run(self, task: CodeTask, program: str, tests: Sequence[str]) -> ExecutionResult:
        return self.sandbox.run_job(Job(program_for(task, program), tuple(tests), task.setup))

    def _wrong_mutants(self, task: CodeTask) -> tuple[str, ...]:
        return _wrong_mutants(self.sandbox, task)


@functools.lru_cache(maxsize=1024)
def _wrong_mutants(sandbox: Sandbox, task: CodeTask) -> tuple[str, ...]:
    """Up to :data:`MAX_MUTANTS` mutants of the reference that fail a hidden test."""
    candidates = mutant_sources(program_for(task, task.answer))[: 3 * MAX_MUTANTS]
    jobs = [Job(m, task.tests, task.setup) for m in candidates]
    results = sandbox.run_many(jobs)
    wrong = [m for m, r in zip(candidates, results, strict=True) if not r.all_passed]
    return tuple(wrong[:MAX_MUTANTS])


def expr_tester_score(task: ExprTask, tests: Sequence[tuple[int, int]]) -> float:
    """The tester's score on an expression task, :func:`tester_score` with ``valid[j]``:
    the reference gives ``B`` at ``A`` for test ``f(A) == B``; ``caught[k]``: wrong program
    ``k`` (:func:`expr_wrong_mutants`) fails (another value, or an error) at least one
    valid test. 0.0 without tests or without a reference.

    >>> from marti_env.tasks.expr import ExprTask
    >>> t = ExprTask("t", "x plus 1", "x + 1", tests=((0, 1), (2, 3)))
    >>> expr_tester_score(t, [(0, 1), (5, 9)])  # valid 1/2; x - 1 and x + 2 fail f(0) == 1
    0.75
    """
    if not tests or not task.answer:
        return 0.0
    reference = evaluate_all(task.answer, [a for a, _ in tests])
    valid = [value == b for (value, _), (_, b) in zip(reference, tests, strict=True)]
    kept = [t for t, ok in zip(tests, valid, strict=True) if ok]
    caught = [bool(kept) and pass_fraction(kept, m) < 1.0 for m in expr_wrong_mutants(task)]
    return tester_score(valid, caught)


def _last(transcript: Sequence[Turn], agent: str) -> Turn | None:
    for turn in reversed(transcript):
        if turn.agent == agent:
            return turn
    return None


def _code_task(task: Task) -> CodeTask:
    if not isinstance(task, CodeTask):
        raise ValueError(
            f"code_team needs code tasks, and task {task.id!r} is a {type(task).__name__}; "
            "use tasks='code_gen', 'humaneval', {'type': 'code_file', 'path': ...} or "
            "(with reward='expr') tasks='expr'"
        )
    return task
