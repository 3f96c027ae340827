"""Expression tasks: an integer expression in ``x`` from a verbal spec, graded by hidden tests.

The language is a tiny, safe subset of Python's expression syntax, evaluated by walking the
tree that :func:`ast.parse` gives (:func:`evaluate_expr`; never ``eval`` or ``exec``):

* integer constants with ``|c| <= 10**6``, the name ``x``;
* unary ``-``, ``+`` and ``not``; binary ``+ - * // %`` (floor division and modulo as in
  Python; by zero is an error);
* comparisons with one operator (``< <= > >= == !=``), worth 1 or 0; ``and`` / ``or``
  (Python's short-circuit values); ``a if c else b`` (``c`` true when non-zero);
* calls ``abs(a)``, ``min(a, b[, c])``, ``max(a, b[, c])``.

Anything else (another name, attribute access, ``**``, strings, floats, lambdas,
subscripts, chained comparisons) raises :class:`ExprError` naming the offending part.
Sizes are bounded: at most :data:`MAX_SOURCE_CHARS` characters, :data:`MAX_NODES` tree
nodes, nesting depth :data:`MAX_DEPTH`, and every intermediate value at most
:data:`MAX_MAGNITUDE` in absolute value, so one evaluation is microseconds whatever it is
given.

An :class:`ExprTask` holds a reference expression (``answer``) and hidden ``(x, y)``
tests; :class:`ExprTasks` generates them (``tasks="expr"`` or ``{"type": "expr", "seed",
"levels", "size", "split"}``), in three levels:

1. linear: ``3 * x + 2``, ``7 - 2 * x``, ``4 * (x + 1)``;
2. with ``abs``, ``min``, ``max``, ``//`` and ``%``: ``abs(x - 4)``, ``x % 5``,
   ``min(max(x, -2), 6)``;
3. with conditionals: ``(3 * x if x > 2 else x + 5)``, ``(x if x % 3 == 0 else 0)``.

A task's prompt says what to compute in words and shows one example call (``f(3) == 11``);
its :data:`NUM_TESTS` hidden tests use other inputs, edge cases first (thresholds and the
values next to them, 0, negatives). Expected values come from the reference through
:func:`evaluate_expr`. Task ``i`` depends only on ``(seed, split, levels, i)``, and splits
never share a prompt: a prompt is in the test split iff its CRC-32 is divisible by 5, each
split drawing until it gets one of its own (as :mod:`marti_env.tasks.arithmetic`).
"""

from __future__ import annotations

import ast
import functools
import operator
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from marti_env.tasks.base import TaskSource, check_generator_args
from marti_env.tasks.code import boxed_content
from marti_env.tasks.task import Task

__all__ = [
    "LEVELS",
    "MAX_CONSTANT",
    "MAX_MAGNITUDE",
    "MAX_SOURCE_CHARS",
    "NUM_TESTS",
    "ExprError",
    "ExprTask",
    "ExprTasks",
    "evaluate_all",
    "evaluate_expr",
    "extract_expr",
    "format_test",
    "parse_expr",
    "pass_fraction",
]

MAX_SOURCE_CHARS = 200
MAX_NODES = 100
MAX_DEPTH = 24
MAX_CONSTANT = 10**6
MAX_MAGNITUDE = 10**12
LEVELS = (1, 2, 3)
SPLITS = {"train": 0, "test": 1}
NUM_TESTS = 6
_TEST_MODULUS = 5
_MAX_DRAWS = 1000


class ExprError(ValueError):
    """An expression outside the language, too large, or failing to evaluate."""


_BINOPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_COMPARE: dict[type, Callable[[int, int], bool]] = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
_CALLS: dict[str, tuple[Callable[..., int], int, int]] = {
    "abs": (abs, 1, 1),
    "min": (min, 2, 3),
    "max": (max, 2, 3),
}


def _part(text: str, node: ast.AST) -> str:
    segment = ast.get_source_segment(text, node) or type(node).__name__
    return segment if len(segment) <= 60 else segment[:57] + "..."


@functools.lru_cache(maxsize=4096)
def parse_expr(source: str) -> ast.expr:
    """The checked tree of ``source`` (surrounding whitespace ignored).

    Raises:
        ExprError: not a string, empty, too long, unparsable, too many nodes or too deep,
            or a construct outside the language (named with the offending part).
    """
    if not isinstance(source, str):
        raise ExprError(f"an expression must be a string, got {type(source).__name__}")
    text = source.strip()
    if not text:
        raise ExprError("empty expression")
    if len(text) > MAX_SOURCE_CHARS:
        raise ExprError(f"expression longer than {MAX_SOURCE_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise ExprError(f"not an expression: {text[:60]!r}") from e
    nodes = sum(1 for _ in ast.walk(tree))
    if nodes > MAX_NODES:
        raise ExprError(f"expression has {nodes} nodes, more than {MAX_NODES}")
    _check(tree.body, text, 0)
    return tree.body


def _check(node: ast.AST, text: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ExprError(f"expression nested deeper than {MAX_DEPTH}")
    children: list[ast.AST]
    if isinstance(node, ast.Constant):
        if type(node.value) is not int:
            raise ExprError(f"only integer constants are allowed, got {_part(text, node)!r}")
        if abs(node.value) > MAX_CONSTANT:
            raise ExprError(f"constant {_part(text, node)} is larger than {MAX_CONSTANT}")
        return
    if isinstance(node, ast.Name):
        if node.id != "x":
            raise ExprError(f"unknown name {node.id!r}: the only variable is x")
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
        children = [node.operand]
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        children = [node.left, node.right]
    elif isinstance(node, ast.BoolOp):
        children = list(node.values)
    elif isinstance(node, ast.Compare):
        if len(node.ops) != 1 or type(node.ops[0]) not in _COMPARE:
            raise ExprError(f"only one of < <= > >= == != per comparison: {_part(text, node)!r}")
        children = [node.left, node.comparators[0]]
    elif isinstance(node, ast.IfExp):
        children = [node.test, node.body, node.orelse]
    elif isinstance(node, ast.Call):
        fn = node.func.id if isinstance(node.func, ast.Name) else None
        if fn not in _CALLS or node.keywords:
            raise ExprError(f"only abs, min and max may be called: {_part(text, node)!r}")
        _, lo, hi = _CALLS[fn]
        if not lo <= len(node.args) <= hi or any(isinstance(a, ast.Starred) for a in node.args):
            raise ExprError(f"{fn} takes {lo} to {hi} arguments: {_part(text, node)!r}")
        children = list(node.args)
    else:
        raise ExprError(f"not allowed in an expression: {_part(text, node)!r}")
    for child in children:
        _check(child, text, depth + 1)


def evaluate_expr(source: str, x: int) -> int:
    """The value of expression ``source`` at ``x`` (see the module docstring's language).

    >>> evaluate_expr("3 * x + 2", 3)
    11
    >>> evaluate_expr("(x if x % 2 == 0 else -x)", -5)
    5

    Raises:
        ExprError: see :func:`parse_expr`; also division or modulo by zero, ``|x|`` or an
            intermediate value larger than :data:`MAX_MAGNITUDE`.
    """
    if isinstance(x, bool) or not isinstance(x, int):
        raise ExprError(f"the input x must be an integer, got {x!r}")
    node = parse_expr(source)
    return _eval(node, _bounded(x))


def _bounded(value: int) -> int:
    if abs(value) > MAX_MAGNITUDE:
        raise ExprError(f"a value exceeds {MAX_MAGNITUDE:.0e} in absolute value")
    return value


def _eval(node: ast.AST, x: int) -> int:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return x
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, x)
        if isinstance(node.op, ast.Not):
            return int(not v)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, x), _eval(node.right, x)
        if b == 0 and isinstance(node.op, (ast.FloorDiv, ast.Mod)):
            raise ExprError("division or modulo by zero")
        return _bounded(_BINOPS[type(node.op)](a, b))
    if isinstance(node, ast.BoolOp):  # Python's values: the first falsy (and) / truthy (or)
        v = 0
        for operand in node.values:
            v = _eval(operand, x)
            if (v == 0) == isinstance(node.op, ast.And):
                return v
        return v
    if isinstance(node, ast.Compare):
        a, b = _eval(node.left, x), _eval(node.comparators[0], x)
        return int(_COMPARE[type(node.ops[0])](a, b))
    if isinstance(node, ast.IfExp):
        return _eval(node.body, x) if _eval(node.test, x) else _eval(node.orelse, x)
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)  # checked
    return _CALLS[node.func.id][0](*(_eval(a, x) for a in node.args))


def evaluate_all(source: str, inputs: Sequence[int]) -> tuple[tuple[int | None, str | None], ...]:
    """``(value, None)`` or ``(None, error message)`` of ``source`` at each input; never
    raises (an invalid expression, or one that is not a string, gives its error at every
    input)."""
    if not isinstance(source, str):
        return tuple((None, f"not an expression: {type(source).__name__}") for _ in inputs)
    try:
        parse_expr(source)
    except ExprError as e:
        return tuple((None, str(e)) for _ in inputs)
    out: list[tuple[int | None, str | None]] = []
    for x in inputs:
        try:
            out.append((evaluate_expr(source, x), None))
        except ExprError as e:
            out.append((None, str(e)))
    return tuple(out)


def pass_fraction(tests: Sequence[tuple[int, int]], source: str) -> float:
    """``passed / len(tests)``: the fraction of tests ``(x, y)`` with ``f(x) == y`` (an
    error fails); 0.0 for no tests.

    >>> pass_fraction([(0, 2), (1, 3), (2, 5)], "x + 2")  # 2 of 3
    0.6666666666666666
    """
    if not tests:
        return 0.0
    outputs = evaluate_all(source, [x for x, _ in tests])
    return sum(v == y for (v, _), (_, y) in zip(outputs, tests, strict=True)) / len(tests)


def format_test(x: int, y: int) -> str:
    """A test as shown to agents: ``f(3) == 11``."""
    return f"f({x}) == {y}"


def extract_expr(response: str) -> str | None:
    """The expression in a response, or None.

    Rule: the content of the last ``\\boxed{...}`` (braces balanced), else the first
    non-empty line of the last fenced code block; a leading ``f(x) =`` is dropped. None
    when nothing is found or the expression is longer than :data:`MAX_SOURCE_CHARS`.

    >>> extract_expr("So f(x) = 3x + 2, that is \\\\boxed{3 * x + 2}.")
    '3 * x + 2'
    """
    if not isinstance(response, str):
        return None
    found: str | None = None
    start = response.rfind("\\boxed{")
    if start >= 0:
        found = boxed_content(response, start + len("\\boxed{"), 4 * MAX_SOURCE_CHARS)
    if found is None:
        fences = response.split("```")
        if len(fences) >= 3:
            block = fences[-2] if len(fences) % 2 == 1 else fences[-1]
            lines = [ln.strip() for ln in block.splitlines()[1:] if ln.strip()]
            found = lines[0] if lines else None
    if found is None:
        return None
    found = found.strip()
    for prefix in ("f(x) =", "f(x)="):
        if found.startswith(prefix):
            found = found[len(prefix) :].strip()
    if not found or len(found) > MAX_SOURCE_CHARS:
        return None
    return found


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class ExprTask(Task):
    """A task whose answer is an expression in ``x``, graded by hidden tests.

    Attributes (besides :class:`Task`'s; ``answer`` holds the reference expression):
        tests: Hidden tests, ``(x, y)`` pairs: the expression must give ``y`` at ``x``.
    """

    kind = "expr"

    tests: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        try:
            tests = tuple((x, y) for x, y in self.tests)
        except (TypeError, ValueError) as e:
            raise ValueError(
                f"expression task {self.id!r}: tests must be (x, y) integer pairs"
            ) from e
        bad = next((t for t in tests if not all(_is_int(v) for v in t)), None)
        if bad is not None:  # a float or bool would be truncated silently by int()
            raise ValueError(f"expression task {self.id!r}: test {bad!r} is not a pair of integers")
        if not tests:
            raise ValueError(f"expression task {self.id!r}: tests must not be empty")
        object.__setattr__(self, "tests", tests)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "tests": [list(t) for t in self.tests]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExprTask:
        return cls(
            id=str(data["id"]),
            prompt=str(data["prompt"]),
            answer=None if data.get("answer") is None else str(data["answer"]),
            source=str(data.get("source", "")),
            tests=tuple(tuple(t) for t in data["tests"]),  # type: ignore[misc]
        )


# -- the generator -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Spec:
    """One generated expression: words, reference, edge-case inputs."""

    words: str
    reference: str
    edges: tuple[int, ...]


def _r(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi + 1))


def _linear(rng: np.random.Generator) -> _Spec:
    a, b = _r(rng, 2, 9), _r(rng, 1, 20)
    kind = _r(rng, 0, 3)
    if kind == 0:
        return _Spec(f"{a} times x, plus {b}", f"{a} * x + {b}", (0, -1))
    if kind == 1:
        return _Spec(f"{a} times x, minus {b}", f"{a} * x - {b}", (0, -2))
    if kind == 2:
        return _Spec(f"{b} minus {a} times x", f"{b} - {a} * x", (0, -3))
    return _Spec(f"{a} times the sum of x and {b}", f"{a} * (x + {b})", (0, -b))


def _calls(rng: np.random.Generator) -> _Spec:
    b, m = _r(rng, 1, 12), _r(rng, 3, 9)
    kind = _r(rng, 0, 5)
    if kind == 0:
        return _Spec(f"the distance between x and {b}, that is |x - {b}|", f"abs(x - {b})",
                     (b, b - 1, b + 1, 0))  # fmt: skip
    if kind == 1:
        return _Spec(f"the larger of x and {b}", f"max(x, {b})", (b, b - 1, b + 1, -b))
    if kind == 2:
        a = _r(rng, 2, 5)
        return _Spec(f"the smaller of {a} times x and {b}", f"min({a} * x, {b})",
                     (b // a, b // a + 1, 0, -1))  # fmt: skip
    if kind == 3:
        return _Spec(f"the remainder of x divided by {m} (from 0 to {m - 1}, also for "
                     f"negative x)", f"x % {m}", (m, m - 1, -1, -m - 1))  # fmt: skip
    if kind == 4:
        return _Spec(f"x divided by {m} and rounded down (towards minus infinity), plus {b}",
                     f"x // {m} + {b}", (m, m - 1, -1, -m))  # fmt: skip
    lo = -_r(rng, 1, 5)
    hi = _r(rng, 2, 9)
    return _Spec(f"x clamped to the range from {lo} to {hi}", f"min(max(x, {lo}), {hi})",
                 (lo, hi, lo - 1, hi + 1))  # fmt: skip


def _conditional(rng: np.random.Generator) -> _Spec:
    a, b, t = _r(rng, 2, 6), _r(rng, 1, 9), _r(rng, -3, 6)
    kind = _r(rng, 0, 3)
    if kind == 0:
        return _Spec(f"{a} times x when x is greater than {t}, else x plus {b}",
                     f"({a} * x if x > {t} else x + {b})", (t, t + 1, t - 1))  # fmt: skip
    if kind == 1:
        m = _r(rng, 2, 5)
        return _Spec(f"x when x is a multiple of {m}, else 0",
                     f"(x if x % {m} == 0 else 0)", (m, m + 1, -m, 2 * m - 1))  # fmt: skip
    if kind == 2:
        lo, hi = t, t + _r(rng, 2, 6)
        return _Spec(f"{b} when x is between {lo} and {hi} (both included), else 0",
                     f"({b} if {lo} <= x and x <= {hi} else 0)",
                     (lo, hi, lo - 1, hi + 1))  # fmt: skip
    return _Spec(f"{a} when x is positive, -{b} when x is negative, and 0 when x is 0",
                 f"({a} if x > 0 else -{b} if x < 0 else 0)", (0, 1, -1))  # fmt: skip


_TEMPLATES: dict[int, Callable[[np.random.Generator], _Spec]] = {
    1: _linear,
    2: _calls,
    3: _conditional,
}


def _inputs(rng: np.random.Generator, spec: _Spec) -> tuple[int, list[int]]:
    """The prompt's example input (1..9) and :data:`NUM_TESTS` other distinct inputs,
    edge cases first, then draws from -30..30."""
    example = _r(rng, 1, 9)
    hidden: list[int] = []
    for x in spec.edges:
        if x != example and x not in hidden and len(hidden) < NUM_TESTS:
            hidden.append(x)
    while len(hidden) < NUM_TESTS:
        x = _r(rng, -30, 30)
        if x != example and x not in hidden:
            hidden.append(x)
    return example, hidden


def _task(spec: _Spec, rng: np.random.Generator, task_id: str, level: int) -> ExprTask:
    example, hidden = _inputs(rng, spec)
    shown = format_test(example, evaluate_expr(spec.reference, example))
    return ExprTask(
        id=task_id,
        prompt=f"Write an expression in x for: {spec.words}. For example, {shown}.",
        answer=spec.reference,
        source=f"expr/level{level}",
        tests=tuple((x, evaluate_expr(spec.reference, x)) for x in hidden),
    )


class ExprTasks(TaskSource):
    """Generated expression tasks (no files, no network); see the module docstring.

    Args:
        seed: Non-negative integer; different seeds give different streams.
        levels: Difficulty levels to mix (each of 1-3, no repeats), in round-robin order.
        size: Number of tasks (``len``).
        split: ``"train"`` or ``"test"``; the two never share a prompt.

    Tasks have ids ``expr/<split>/L<level>/<index>`` and source ``expr/level<level>``.

    Raises:
        ValueError: A bad seed, level, size or split.
    """

    def __init__(
        self,
        seed: int = 0,
        levels: Sequence[int] = (1, 2, 3),
        size: int = 100_000,
        split: str = "train",
    ) -> None:
        levels = check_generator_args(seed, levels, size, split, LEVELS, tuple(SPLITS))
        self.seed, self.levels, self.size, self.split = seed, tuple(levels), size, split
        self.name = f"expr(seed={seed}, levels={list(self.levels)}, split={split!r})"

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> ExprTask:
        i = self._check_index(index)
        level = self.levels[i % len(self.levels)]
        rng = np.random.default_rng([self.seed, SPLITS[self.split], i])
        for _ in range(_MAX_DRAWS):
            task = _task(_TEMPLATES[level](rng), rng, f"expr/{self.split}/L{level}/{i}", level)
            in_test = zlib.crc32(task.prompt.encode("utf-8")) % _TEST_MODULUS == 0
            if in_test == (self.split == "test"):
                return task
        raise RuntimeError(f"{self.name}: no {self.split} task after {_MAX_DRAWS} draws")

    def with_size(self, size: int) -> ExprTasks:
        """The same stream (same tasks at the same indices) with ``size`` tasks."""
        return ExprTasks(self.seed, self.levels, size, self.split)

    def __repr__(self) -> str:
        return (
            f"ExprTasks(seed={self.seed}, levels={self.levels}, size={self.size}, "
            f"split={self.split!r})"
        )
