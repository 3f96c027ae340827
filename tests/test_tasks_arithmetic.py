"""ArithmeticTasks: answers recomputed independently from the prompts, determinism, splits."""

from __future__ import annotations

import ast
import operator
import re
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from marti_env.tasks import ArithmeticTasks, Task, TaskSource

# --- an independent evaluator for levels 1-3 ("What is <expr>?") ---------------------------

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: Fraction}


def _evaluate(node: ast.AST) -> tuple[Fraction, int]:
    """Exact value of an expression of integers and + - * /, and its number of operators."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Fraction(node.value), 0
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        (left, n_left), (right, n_right) = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Div):
            value = Fraction(left) / right
        else:
            value = _OPS[type(node.op)](left, right)
        return value, n_left + n_right + 1
    raise AssertionError(f"unexpected syntax {ast.dump(node)}")


def _expression(prompt: str) -> tuple[str, Fraction, int]:
    match = re.fullmatch(r"What is ([0-9+\-*/() ]+)\?", prompt)
    assert match, prompt
    expr = match.group(1)
    value, n_ops = _evaluate(ast.parse(expr, mode="eval").body)
    return expr, value, n_ops


@pytest.mark.parametrize("split", ["train", "test"])
def test_expression_levels_are_right(split):
    tasks = ArithmeticTasks(seed=3, levels=(1, 2, 3), size=600, split=split)
    for task in tasks:
        level = int(task.source.removeprefix("arithmetic/level"))
        expr, value, n_ops = _expression(task.prompt)
        assert value.denominator == 1 and value >= 0, task  # exact, non-negative
        assert task.answer == str(value.numerator), task
        ops = set(re.findall(r"[-+*/]", expr))
        if level == 1:
            assert n_ops == 1 and ops <= {"+", "-"}, task
        elif level == 2:
            assert n_ops == 1 and ops <= {"*", "/"}, task
        else:
            assert n_ops == 2, task


# --- level 4: each template re-parsed and recomputed here --------------------------------

N = r"(\d+)"
W = r"([A-Z][a-z]+)"
OBJ = r"([a-z]+)"
_WORD_PROBLEMS = [
    (
        rf"{W} has {N} {OBJ}\. \1 buys {N} more and then gives {N} to {W}\. "
        rf"How many \3 does \1 have now\?",
        lambda g: int(g[1]) + int(g[3]) - int(g[4]),
    ),
    (
        rf"{W} buys {N} packs of {OBJ}\. Each pack holds {N} \3\. \1 gives away {N} of them\. "
        rf"How many \3 does \1 have left\?",
        lambda g: int(g[1]) * int(g[3]) - int(g[4]),
    ),
    (
        rf"A box holds {N} {OBJ}\. {W} fills {N} boxes and has {N} \2 left over\. "
        rf"How many \2 did \3 start with\?",
        lambda g: int(g[0]) * int(g[3]) + int(g[4]),
    ),
    (
        rf"{W} shares {N} {OBJ} equally among {N} friends\. Then {W} gives each friend {N} more\. "
        rf"How many \3 does each friend have now\?",
        lambda g: Fraction(int(g[1]), int(g[3])) + int(g[5]),
    ),
    (
        rf"{W} earns {N} dollars per hour and works {N} hours on each of {N} days\. "
        rf"Then \1 spends {N} dollars\. How many dollars does \1 have left\?",
        lambda g: int(g[1]) * int(g[2]) * int(g[3]) - int(g[4]),
    ),
    (
        rf"A book has {N} pages\. {W} reads {N} pages a day for {N} days, and then {N} more "
        rf"pages\. How many pages are left to read\?",
        lambda g: int(g[0]) - int(g[2]) * int(g[3]) - int(g[4]),
    ),
]


@pytest.mark.parametrize("split", ["train", "test"])
def test_word_problems_are_right(split):
    tasks = ArithmeticTasks(seed=5, levels=(4,), size=300, split=split)
    used = Counter()
    for task in tasks:
        matches = [
            (k, m) for k, (pattern, _) in enumerate(_WORD_PROBLEMS)
            if (m := re.fullmatch(pattern, task.prompt))
        ]  # fmt: skip
        assert len(matches) == 1, task
        k, match = matches[0]
        expected = _WORD_PROBLEMS[k][1](match.groups())
        assert expected == int(expected) and expected >= 0, task
        assert task.answer == str(int(expected)), task
        used[k] += 1
    assert len(used) == len(_WORD_PROBLEMS)  # every template occurs


# --- determinism, splits, level mix -----------------------------------------------------


def test_task_depends_only_on_seed_split_and_index():
    a = ArithmeticTasks(seed=7, levels=(1, 2, 3, 4), size=50)
    b = ArithmeticTasks(seed=7, levels=(1, 2, 3, 4), size=1000)
    backwards = [b[i] for i in reversed(range(50))][::-1]  # order of access is irrelevant
    assert list(a) == backwards
    assert list(a) == list(a.with_size(1000))[:50]
    other = ArithmeticTasks(seed=8, levels=(1, 2, 3, 4), size=50)
    assert sum(x.prompt != y.prompt for x, y in zip(a, other, strict=True)) > 40


def test_ids_and_sources():
    tasks = ArithmeticTasks(seed=0, levels=(2, 4), size=10, split="test")
    assert tasks[3] == Task(
        id="arithmetic/test/L4/3", prompt=tasks[3].prompt, answer=tasks[3].answer,
        source="arithmetic/level4",
    )  # fmt: skip
    assert [t.id for t in tasks][:2] == ["arithmetic/test/L2/0", "arithmetic/test/L4/1"]
    assert len({t.id for t in ArithmeticTasks(size=500)}) == 500


def test_train_and_test_prompts_are_disjoint():
    levels = (1, 2, 3, 4)
    train = {t.prompt for t in ArithmeticTasks(seed=0, levels=levels, size=1000)}
    test = {t.prompt for t in ArithmeticTasks(seed=0, levels=levels, size=1000, split="test")}
    assert len(train) > 500 and len(test) > 500  # neither stream is degenerate
    assert not train & test
    # also across seeds: a test set stays held out from any training seed
    train_seed1 = {t.prompt for t in ArithmeticTasks(seed=1, levels=levels, size=1000)}
    assert not train_seed1 & test


@pytest.mark.parametrize("levels", [(1,), (3,), (2, 4), (4, 1, 3)])
def test_level_mix_is_honoured(levels):
    tasks = ArithmeticTasks(seed=2, levels=levels, size=12 * len(levels))
    counts = Counter(t.source for t in tasks)
    assert counts == {f"arithmetic/level{lv}": 12 for lv in levels}
    for t in tasks:
        assert t.id.split("/")[2] == "L" + t.source.removeprefix("arithmetic/level")


def test_indexing():
    tasks = ArithmeticTasks(size=20)
    assert isinstance(tasks, TaskSource) and len(tasks) == 20
    assert tasks[-1] == tasks[19]
    with pytest.raises(IndexError, match="20"):
        tasks[20]
    with pytest.raises(IndexError):
        tasks[-21]
    with pytest.raises(TypeError):
        tasks["0"]
    assert tasks[np.int64(3)] == tasks[3]


def test_sample_is_reproducible_and_uniform():
    tasks = ArithmeticTasks(size=5)
    draws = [tasks.sample(np.random.default_rng(11)) for _ in range(2)]
    assert draws[0] == draws[1]
    rng_a, rng_b = np.random.default_rng(4), np.random.default_rng(4)
    seq_a = [tasks.sample(rng_a).id for _ in range(200)]
    assert seq_a == [tasks.sample(rng_b).id for _ in range(200)]
    assert set(seq_a) == {t.id for t in tasks}  # every index is reachable


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seed": -1}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"levels": (5,)}, "levels"),
        ({"levels": ()}, "levels"),
        ({"levels": (1, 1)}, "repeat"),
        ({"levels": "12"}, "levels"),
        ({"size": 0}, "size"),
        ({"split": "dev"}, "split"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ArithmeticTasks(**kwargs)
