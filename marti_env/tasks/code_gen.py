"""Procedurally generated Python function tasks with hidden tests, graded in difficulty.

Levels (each a set of templates with random names, constants and test inputs):

1. One expression of one argument: add or multiply by a constant, a string repeated,
   the first element of a list, the larger of two numbers.
2. One pass over a list or string: sum, count of a character, reverse, the even numbers,
   squares of the elements.
3. A loop with a condition: factorial, digit sum, vowel count, palindrome check, the
   count of elements above a threshold.
4. Small algorithms: run-length encoding, greatest common divisor, n-th Fibonacci
   number, primality, second-largest distinct element.

A task shows one worked example call in its prompt and keeps ``NUM_TESTS`` other calls as
hidden tests, ``assert name(args) == expected``; expected values come from a reference
implementation in this module (plain Python functions, never ``exec``). Task ``i`` depends
only on ``(seed, split, levels, i)``: its level is ``levels[i % len(levels)]`` and its
draws come from ``numpy.random.default_rng([seed, split_code, i])``. Splits are disjoint
by construction: a prompt is in the test split iff its CRC-32 is divisible by 5, and each
split draws until it gets a prompt of its own (as :mod:`marti_env.tasks.arithmetic`).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from marti_env.tasks.base import TaskSource, check_generator_args
from marti_env.tasks.code import CodeTask

__all__ = ["LEVELS", "NUM_TESTS", "SPLITS", "CodeGenTasks"]

LEVELS = (1, 2, 3, 4)
SPLITS = {"train": 0, "test": 1}
NUM_TESTS = 5
_TEST_MODULUS = 5
_MAX_DRAWS = 1000


@dataclass(frozen=True)
class _Spec:
    """One generated function: what to ask, how to compute it, where to test it."""

    name: str
    params: str
    description: str
    reference: str
    fn: Callable[..., Any]
    inputs: list[tuple[Any, ...]]


def _ints(rng: np.random.Generator, lo: int, hi: int, n: int) -> list[int]:
    return [int(x) for x in rng.integers(lo, hi + 1, size=n)]


def _int_list(rng: np.random.Generator, lo: int = -9, hi: int = 20) -> list[int]:
    return _ints(rng, lo, hi, int(rng.integers(0, 7)))


def _word(rng: np.random.Generator, letters: str = "abcde", lo: int = 0, hi: int = 8) -> str:
    n = int(rng.integers(lo, hi + 1))
    return "".join(letters[int(i)] for i in rng.integers(0, len(letters), size=n))


def _calls(rng: np.random.Generator, draw: Callable[[], tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """``NUM_TESTS + 1`` distinct argument tuples (the first is the prompt's example)."""
    seen: list[tuple[Any, ...]] = []
    for _ in range(200):
        args = draw()
        if args not in seen:
            seen.append(args)
        if len(seen) == NUM_TESTS + 1:
            break
    return seen


# -- level 1 -----------------------------------------------------------------------------


def _add_const(rng: np.random.Generator) -> _Spec:
    k = int(rng.integers(2, 20))
    return _Spec(
        f"add_{k}", "x", f"returns x plus {k}", f"    return x + {k}", lambda x: x + k,
        _calls(rng, lambda: (int(rng.integers(-50, 100)),)),
    )  # fmt: skip


def _times_const(rng: np.random.Generator) -> _Spec:
    k = int(rng.integers(2, 10))
    return _Spec(
        f"times_{k}", "x", f"returns x multiplied by {k}", f"    return x * {k}",
        lambda x: x * k, _calls(rng, lambda: (int(rng.integers(-20, 50)),)),
    )  # fmt: skip


def _repeat(rng: np.random.Generator) -> _Spec:
    k = int(rng.integers(2, 5))
    return _Spec(
        f"repeat_{k}", "s", f"returns the string s repeated {k} times", f"    return s * {k}",
        lambda s: s * k, _calls(rng, lambda: (_word(rng, lo=1, hi=4),)),
    )  # fmt: skip


def _first(rng: np.random.Generator) -> _Spec:
    return _Spec(
        "first_item", "items", "returns the first element of the non-empty list items",
        "    return items[0]", lambda items: items[0],
        _calls(rng, lambda: (_ints(rng, -9, 30, int(rng.integers(1, 6))),)),
    )  # fmt: skip


def _larger(rng: np.random.Generator) -> _Spec:
    return _Spec(
        "larger", "a, b", "returns the larger of the two numbers a and b", "    return max(a, b)",
        max, _calls(rng, lambda: tuple(_ints(rng, -30, 30, 2))),
    )  # fmt: skip


# -- level 2 -----------------------------------------------------------------------------


def _sum_list(rng: np.random.Generator) -> _Spec:
    return _Spec(
        "total", "numbers", "returns the sum of the list numbers (0 for an empty list)",
        "    return sum(numbers)", sum, _calls(rng, lambda: (_int_list(rng),)),
    )  # fmt: skip


def _count_char(rng: np.random.Generator) -> _Spec:
    c = "abcde"[int(rng.integers(0, 5))]
    return _Spec(
        f"count_{c}", "s", f"returns how many times the letter '{c}' occurs in the string s",
        f"    return s.count({c!r})", lambda s: s.count(c), _calls(rng, lambda: (_word(rng),)),
    )  # fmt: skip


def _reverse(rng: np.random.Generator) -> _Spec:
    return _Spec(
        "reverse_text", "s", "returns the string s reversed", "    return s[::-1]",
        lambda s: s[::-1], _calls(rng, lambda: (_word(rng, "abcdefgh"),)),
    )  # fmt: skip


def _evens(rng: np.random.Generator) -> _Spec:
    return _Spec(
        "even_numbers", "numbers",
        "returns a list of the even numbers in the list numbers, in their original order",
        "    return [n for n in numbers if n % 2 == 0]",
        lambda numbers: [n for n in numbers if n % 2 == 0],
        _calls(rng, lambda: (_int_list(rng),)),
    )  # fmt: skip


def _squares(rng: np.random.Generator) -> _Spec:
    return _Spec(
        "squares", "numbers", "returns a list of the squares of the numbers in the list numbers",
        "    return [n * n for n in numbers]", lambda numbers: [n * n for n in numbers],
        _calls(rng, lambda: (_int_list(rng),)),
    )  # fmt: skip


# -- level 3 -----------------------------------------------------------------------------


def _factorial(rng: np.random.Generator) -> _Spec:
    return _Spec(
        "factorial", "n", "returns n! (the product 1 * 2 * ... * n, and 1 for n = 0)",
        "    result = 1\n    for i in range(2, n + 1):\n        result *= i\n    return result",
        math.factorial, _calls(rng, lambda: (int(rng.integers(0, 12)),)),
    )  # fmt: skip


def _digit_sum(rng: np.random.Generator) -> _Spec:
    return _Spec(
        "digit_sum", "n", "returns the sum of the decimal digits of the non-negative integer n",
        "    return sum(int(d) for d in str(n))", lambda n: sum(int(d) for d in str(n)),
        _calls(rng, lambda: (int(rng.integers(0, 100_000)),)),
    )  # fmt: skip


def _vowels(rng: np.random.Generator) -> _Spec:
    return _Spec(
        "count_vowels", "s",
        "returns the number of vowels (a, e, i, o, u) in the lowercase string s",
        "    return sum(c in 'aeiou' for c in s)", lambda s: sum(c in "aeiou" for c in s),
        _calls(rng, lambda: (_word(rng, "abeiknostu", 0, 10),)),
    )  # fmt: skip


def _palindrome(rng: np.random.Generator) -> _Spec:
    def draw() -> tuple[Any, ...]:
        half = _word(rng, "abc", 0, 3)
        if rng.random() < 0.5:
            return (half + half[::-1][int(rng.integers(0, 2)) :],)
        return (_word(rng, "abc", 1, 5),)

    return _Spec(
        "is_palindrome", "s", "returns True if the string s reads the same backwards, else False",
        "    return s == s[::-1]", lambda s: s == s[::-1], _calls(rng, draw),
    )  # fmt: skip


def _above(rng: np.random.Generator) -> _Spec:
    t = int(rng.integers(0, 10))
    return _Spec(
        f"count_above_{t}", "numbers",
        f"returns how many numbers in the list numbers are greater than {t}",
        f"    return sum(1 for n in numbers if n > {t})",
        lambda numbers: sum(1 for n in numbers if n > t), _calls(rng, lambda: (_int_list(rng),)),
    )  # fmt: skip


# -- level 4 -----------------------------------------------------------------------------


def _rle(s: str) -> list[list[Any]]:
    out: list[list[Any]] = []
    for c in s:
        if out and out[-1][0] == c:
            out[-1][1] += 1
        else:
            out.append([c, 1])
    return out


def _run_length(rng: np.random.Generator) -> _Spec:
    return _Spec(
        "run_lengths", "s",
        "returns the run-length encoding of the string s as a list of [character, count] "
        "pairs, e.g. 'aab' gives [['a', 2], ['b', 1]]",
        "    out = []\n    for c in s:\n        if out and out[-1][0] == c:\n"
        "            out[-1][1] += 1\n        else:\n            out.append([c, 1])\n"
        "    return out",
        _rle, _calls(rng, lambda: (_word(rng, "ab", 0, 8),)),
    )  # fmt: skip


def _gcd(rng: np.random.Generator) -> _Spec:
    def draw() -> tuple[Any, ...]:
        k = int(rng.integers(1, 12))
        return (k * int(rng.integers(1, 20)), k * int(rng.integers(1, 20)))

    return _Spec(
        "gcd", "a, b", "returns the greatest common divisor of the positive integers a and b",
        "    while b:\n        a, b = b, a % b\n    return a", math.gcd, _calls(rng, draw),
    )  # fmt: skip


def _fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def _fibonacci(rng: np.random.Generator) -> _Spec:
    return _Spec(
        "fibonacci", "n",
        "returns the n-th Fibonacci number, with fibonacci(0) = 0 and fibonacci(1) = 1",
        "    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
        _fib, _calls(rng, lambda: (int(rng.integers(0, 30)),)),
    )  # fmt: skip


def _prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, math.isqrt(n) + 1))


def _is_prime(rng: np.random.Generator) -> _Spec:
    return _Spec(
        "is_prime", "n", "returns True if the integer n is a prime number, else False",
        "    return n >= 2 and all(n % d for d in range(2, int(n ** 0.5) + 1))",
        _prime, _calls(rng, lambda: (int(rng.integers(0, 120)),)),
    )  # fmt: skip


def _second_largest(rng: np.random.Generator) -> _Spec:
    def draw() -> tuple[Any, ...]:
        values = _ints(rng, -5, 15, int(rng.integers(2, 7)))
        if len(set(values)) < 2:
            values.append(max(values) + 1)
        return (values,)

    return _Spec(
        "second_largest", "numbers",
        "returns the second-largest distinct value in the list numbers (it has at least two "
        "distinct values)",
        "    return sorted(set(numbers))[-2]", lambda numbers: sorted(set(numbers))[-2],
        _calls(rng, draw),
    )  # fmt: skip


_TEMPLATES: dict[int, tuple[Callable[[np.random.Generator], _Spec], ...]] = {
    1: (_add_const, _times_const, _repeat, _first, _larger),
    2: (_sum_list, _count_char, _reverse, _evens, _squares),
    3: (_factorial, _digit_sum, _vowels, _palindrome, _above),
    4: (_run_length, _gcd, _fibonacci, _is_prime, _second_largest),
}


def _call(name: str, args: Sequence[Any]) -> str:
    return f"{name}({', '.join(repr(a) for a in args)})"


def _task(spec: _Spec, task_id: str, level: int) -> CodeTask:
    example, *hidden = spec.inputs
    prompt = (
        f"Write a Python function `{spec.name}({spec.params})` that {spec.description}.\n"
        f"For example, `{_call(spec.name, example)}` returns `{spec.fn(*example)!r}`."
    )
    return CodeTask(
        id=task_id,
        prompt=prompt,
        answer=f"def {spec.name}({spec.params}):\n{spec.reference}\n",
        source=f"code_gen/level{level}",
        entry_point=spec.name,
        tests=tuple(f"assert {_call(spec.name, args)} == {spec.fn(*args)!r}" for args in hidden),
    )


class CodeGenTasks(TaskSource):
    """Generated Python function tasks (no files, no network); see the module docstring.

    Args:
        seed: Non-negative integer; different seeds give different streams.
        levels: Difficulty levels to mix (each of 1-4, no repeats), in round-robin order.
        size: Number of tasks (``len``).
        split: ``"train"`` or ``"test"``; the two never share a prompt.

    Tasks have ids ``code_gen/<split>/L<level>/<index>`` and source ``code_gen/level<level>``.

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
        self.seed, self.levels, self.size, self.split = seed, tuple(levels), size, split
        self.name = f"code_gen(seed={seed}, levels={list(self.levels)}, split={split!r})"

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> CodeTask:
        i = self._check_index(index)
        level = self.levels[i % len(self.levels)]
        rng = np.random.default_rng([self.seed, SPLITS[self.split], i])
        templates = _TEMPLATES[level]
        for _ in range(_MAX_DRAWS):
            spec = templates[int(rng.integers(len(templates)))](rng)
            task = _task(spec, f"code_gen/{self.split}/L{level}/{i}", level)
            in_test = zlib.crc32(task.prompt.encode("utf-8")) % _TEST_MODULUS == 0
            if in_test == (self.split == "test"):
                return task
        raise RuntimeError(f"{self.name}: no {self.split} task after {_MAX_DRAWS} draws")

    def with_size(self, size: int) -> CodeGenTasks:
        """The same stream (same tasks at the same indices) with ``size`` tasks."""
        return CodeGenTasks(self.seed, self.levels, size, self.split)

    def __repr__(self) -> str:
        return (
            f"CodeGenTasks(seed={self.seed}, levels={self.levels}, size={self.size}, "
            f"split={self.split!r})"
        )
