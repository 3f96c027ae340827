"""Procedurally generated arithmetic problems with exact integer answers (the offline default).

Levels (every answer is a non-negative integer; every intermediate value too):

1. One-step sum or difference of two numbers in 1..99: ``"What is 23 + 58?"``.
2. One-step product (2..12 times 2..99) or exact division: ``"What is 84 / 7?"``.
3. Two-step expressions with at most one pair of parentheses, over ``+ - * /`` with usual
   precedence and exact divisions: ``"What is (12 + 7) * 3?"``.
4. Word problems of 2-3 steps from simple templates with names and objects.

Prompts use ASCII operators (``+ - * /``). Task ``i`` depends only on
``(seed, split, levels, i)``: its level is ``levels[i % len(levels)]`` (so every window
of ``len(levels)`` consecutive indices has one task of each level) and its numbers are
drawn from ``numpy.random.default_rng([seed, split_code, i])``.

Splits are disjoint by construction, not by chance: a problem belongs to the test split
iff the CRC-32 of its prompt is divisible by 5 (about 20% of all problems), and each
split draws (with the per-index generator) until it gets a problem of its own. So no
train prompt ever equals a test prompt, for any seeds.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence

import numpy as np

from marti_env.tasks.base import TaskSource, check_generator_args
from marti_env.tasks.task import Task

__all__ = ["LEVELS", "SPLITS", "ArithmeticTasks"]

LEVELS = (1, 2, 3, 4)
SPLITS = {"train": 0, "test": 1}
"""Split names and the code mixed into each per-index seed."""

_TEST_MODULUS = 5  # a prompt is in the test split iff crc32(prompt) % 5 == 0
_MAX_DRAWS = 1000  # rejection sampling bound; never reached in practice (p ~ 0.8 ** 1000)

# fmt: off
_NAMES = ("Ava", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jo",
          "Kofi", "Lena", "Mateo", "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tariq")
_OBJECTS = ("apples", "marbles", "stickers", "pencils", "cookies", "cards", "shells",
            "stamps", "beads", "books")
# fmt: on


def _level1(rng: np.random.Generator) -> tuple[str, int]:
    a, b = (int(x) for x in rng.integers(1, 100, size=2))
    if rng.random() < 0.5:
        return f"What is {a} + {b}?", a + b
    a, b = max(a, b), min(a, b)
    return f"What is {a} - {b}?", a - b


def _level2(rng: np.random.Generator) -> tuple[str, int]:
    a = int(rng.integers(2, 13))
    b = int(rng.integers(2, 100))
    if rng.random() < 0.5:
        return (
            (f"What is {a} * {b}?", a * b) if rng.random() < 0.5 else (f"What is {b} * {a}?", a * b)
        )
    return f"What is {a * b} / {a}?", b


def _level3(rng: np.random.Generator) -> tuple[str, int]:
    form = int(rng.integers(6))
    a, b = (int(x) for x in rng.integers(2, 31, size=2))
    c = int(rng.integers(2, 10))
    if form == 0:
        return f"What is ({a} + {b}) * {c}?", (a + b) * c
    if form == 1:
        a, b = max(a, b) + 1, min(a, b)
        return f"What is ({a} - {b}) * {c}?", (a - b) * c
    if form == 2:
        return f"What is {c} * {a} + {b}?", c * a + b
    if form == 3:
        a, b = max(a, b), min(a, b)  # c * a >= 2a > b
        return f"What is {c} * {a} - {b}?", c * a - b
    if form == 4:
        return f"What is {a} + {b} * {c}?", a + b * c
    total = c * int(rng.integers(2, 21))  # (x + y) / c with x + y = total
    x = int(rng.integers(1, total))
    return f"What is ({x} + {total - x}) / {c}?", total // c


def _pick(rng: np.random.Generator, options: Sequence[str], k: int = 1) -> list[str]:
    return [options[int(i)] for i in rng.choice(len(options), size=k, replace=False)]


def _level4(rng: np.random.Generator) -> tuple[str, int]:
    form = int(rng.integers(6))
    name, friend = _pick(rng, _NAMES, 2)
    (obj,) = _pick(rng, _OBJECTS)

    def num(lo: int, hi: int) -> int:  # inclusive bounds
        return int(rng.integers(lo, hi + 1))

    if form == 0:
        a, b = num(5, 60), num(2, 40)
        c = num(1, a + b)
        return (
            f"{name} has {a} {obj}. {name} buys {b} more and then gives {c} to {friend}. "
            f"How many {obj} does {name} have now?",
            a + b - c,
        )
    if form == 1:
        n, k = num(2, 9), num(3, 12)
        c = num(1, n * k)
        return (
            f"{name} buys {n} packs of {obj}. Each pack holds {k} {obj}. "
            f"{name} gives away {c} of them. How many {obj} does {name} have left?",
            n * k - c,
        )
    if form == 2:
        k, n = num(3, 12), num(2, 9)
        r = num(1, k - 1)
        return (
            f"A box holds {k} {obj}. {name} fills {n} boxes and has {r} {obj} left over. "
            f"How many {obj} did {name} start with?",
            n * k + r,
        )
    if form == 3:
        n, each, b = num(2, 8), num(2, 12), num(1, 10)
        return (
            f"{name} shares {n * each} {obj} equally among {n} friends. Then {friend} gives "
            f"each friend {b} more. How many {obj} does each friend have now?",
            each + b,
        )
    if form == 4:
        w, h, d = num(8, 25), num(2, 8), num(2, 6)
        s = num(1, w * h * d)
        return (
            f"{name} earns {w} dollars per hour and works {h} hours on each of {d} days. "
            f"Then {name} spends {s} dollars. How many dollars does {name} have left?",
            w * h * d - s,
        )
    p, d, q = num(5, 30), num(2, 7), num(1, 20)
    total = p * d + q + num(0, 100)
    return (
        f"A book has {total} pages. {name} reads {p} pages a day for {d} days, and then "
        f"{q} more pages. How many pages are left to read?",
        total - p * d - q,
    )


_GENERATORS: dict[int, Callable[[np.random.Generator], tuple[str, int]]] = {
    1: _level1,
    2: _level2,
    3: _level3,
    4: _level4,
}


def _in_test_split(prompt: str) -> bool:
    return zlib.crc32(prompt.encode("utf-8")) % _TEST_MODULUS == 0


class ArithmeticTasks(TaskSource):
    """Arithmetic word and expression problems, generated on demand (no files, no network).

    Args:
        seed: Non-negative integer; different seeds give different streams.
        levels: Difficulty levels to mix (each of 1-4, no repeats), in round-robin order.
        size: Number of tasks (``len``); indices ``0 .. size-1``.
        split: ``"train"`` or ``"test"``; the two never share a prompt.

    Tasks have ids ``arithmetic/<split>/L<level>/<index>``, source ``arithmetic/level<level>``
    and an answer that is a non-negative integer written in decimal.

    Raises:
        ValueError: A bad seed, level, size or split.
    """

    def __init__(
        self,
        seed: int = 0,
        levels: Sequence[int] = (1, 2),
        size: int = 100_000,
        split: str = "train",
    ) -> None:
        levels = check_generator_args(seed, levels, size, split, LEVELS, tuple(SPLITS))
        self.seed = seed
        self.levels = tuple(int(lv) for lv in levels)
        self.size = size
        self.split = split
        self.name = f"arithmetic(seed={seed}, levels={list(self.levels)}, split={split!r})"

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> Task:
        i = self._check_index(index)
        level = self.levels[i % len(self.levels)]
        rng = np.random.default_rng([self.seed, SPLITS[self.split], i])
        want_test = self.split == "test"
        for _ in range(_MAX_DRAWS):
            prompt, answer = _GENERATORS[level](rng)
            if _in_test_split(prompt) == want_test:
                return Task(
                    id=f"arithmetic/{self.split}/L{level}/{i}",
                    prompt=prompt,
                    answer=str(answer),
                    source=f"arithmetic/level{level}",
                )
        raise RuntimeError(f"{self.name}: no {self.split} problem after {_MAX_DRAWS} draws")

    def with_size(self, size: int) -> ArithmeticTasks:
        """The same stream (same tasks at the same indices) with ``size`` tasks."""
        return ArithmeticTasks(self.seed, self.levels, size, self.split)

    def __repr__(self) -> str:
        return (
            f"ArithmeticTasks(seed={self.seed}, levels={self.levels}, size={self.size}, "
            f"split={self.split!r})"
        )
