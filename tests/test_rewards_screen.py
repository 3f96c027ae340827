"""screen_answer: hand-written tables of hostile and benign answers; the verifier's use of it."""

from __future__ import annotations

import math

import pytest

from marti_env.rewards import MathVerifier, screen_answer
from marti_env.rewards.screen import MAX_DIGITS
from marti_env.tasks import load_tasks
from marti_env.tasks.catalog import DATASETS

# (answer, reason). The comment is the size the rule computes, by hand.
HOSTILE = [
    (r"9^{9^{9^9}}", "power"),  # inner 9^{9^9}: 9^9 * log10 9 = 3.7e8 digits
    (r"9^{9^9}", "power"),  # same
    (r"x^{9^{9^9}}", "power"),  # a symbolic base does not hide its exponent
    (r"\sqrt{9^{9^9}}", "power"),  # nor does a command
    (r"9^{9^9} - 9^{9^9}", "power"),
    ("9**9**9", "power"),  # ** is right-associative: 9**(9**9)
    ("9^(9^9)", "power"),
    (r"{9}^{{9}^{9}}", "power"),
    (r"10^{100000}", "power"),  # 1e5 digits > 1e4
    (r"2^{-10^{9}}", "power"),  # |exponent| = 1e9: a 3e8-digit denominator
    (r"0.5^{10^{100}}", "power"),  # 1/2 to that power: the denominator blows up
    (r"(1+1)^{10^{100}}", "power"),  # a sum of literals is a literal
    (r"e^{e^{e^{e^{e}}}}", "tower"),  # 4 high
    ("x^x^x^x^x^x^x^x", "tower"),
    (r"100000000!", "factorial"),  # size 8 > 7: over 6e7 digits, rejected at once
    (r"(10^{7})!", "factorial"),
    (r"10000!", "factorial"),  # log10(10000!) = 35,659 digits
    (r"((5!)!)!", "factorial"),  # (120!)! : 120! = 6.7e198 > 1e7
    (r"5000!!", "factorial"),  # n!! is bounded by n!
    (r"\binom{10^{9}}{5 \cdot 10^{8}}", "binomial"),  # min(3e8, 4.5e9) digits
    ("{" * 33 + "1" + "}" * 33, "nesting"),
    ("(" * 999, "nesting"),
    (r"\frac{1}{" * 40 + "2" + "}" * 40, "nesting"),
    ("9" * 999 + "!", "factorial"),  # a 999-digit n
    (r"2^{" + "9" * 900 + "}", "power"),
    ("1" * 1001, "length"),
    ("x\x00 + 1", "characters"),
    ("\x1b[31m4\x1b[0m", "characters"),  # an ANSI escape
    ("\ud800 + 1", "characters"),  # a lone surrogate
    ("\ufffd\ufffd", "characters"),  # what a failed UTF-8 decode leaves
    ("1\x85", "characters"),  # a C1 control
]

BENIGN = [
    # (answer, gold it equals): each must pass the screen AND still verify as equal.
    (r"2^{10}", "1024"),
    ("2^10", "1024"),  # math-verify reads it as 2^{10}
    ("5!", "120"),
    (r"\frac{1}{2}", "0.5"),
    (r"\sqrt{8}", r"2\sqrt{2}"),
    (r"10^{6}", "1000000"),
    (r"2^{2^{2^2}}", "65536"),  # a tower 3 high, but small
    (r"\binom{5}{2}", "10"),
    ("3!", "6"),
    (r"(-1)^{100}", "1"),
    (r"\frac{\sqrt{3}}{2}", r"\frac{\sqrt3}{2}"),
    (r"\left(\frac{1}{2}, 3\right)", r"(0.5, 3)"),
    (r"x^{2} + 2x + 1", r"(x+1)^2"),
]

PASSES = [
    # Benign answers that pass the screen (not all are checked against a gold).
    r"2^{10000}",  # 3,011 digits: milliseconds for sympy
    "3000!",  # 9,131 digits
    r"\binom{100000}{3}",  # min(30,103, 15) digits
    r"10^{10^{4}}",  # 10,000 digits: at the bound
    r"x^{1000000}",  # symbolic: sympy does not expand it
    r"e^{e^{e^{e}}}",  # 3 high
    r"1^{10^{100}}",  # the base 1 has no digits to grow
    r"\sum_{k=1}^{100} k^{2}",
    r"\begin{pmatrix}1 \\ 2\end{pmatrix}",
    r"(3,\infty)\cup(-\infty,-2)",
    r"\{1, 2\}",
    r"45^\circ",
    "-" * 900 + "5",  # many signs, no recursion
    "{" * 32 + "1" + "}" * 32,  # exactly at the nesting bound
    "9" * 1000,  # a long number within the length cap
    "",
    "\t x \n y \r",  # tab, newline, CR are whitespace
    "π r^2 ≤ 四 °",  # non-ASCII text is fine
]


@pytest.mark.parametrize(("answer", "reason"), HOSTILE)
def test_hostile_answers_are_rejected(answer: str, reason: str) -> None:
    assert screen_answer(answer) == reason


@pytest.mark.parametrize(("answer", "gold"), BENIGN)
def test_benign_answers_pass(answer: str, gold: str) -> None:
    assert screen_answer(answer) is None


@pytest.mark.parametrize("answer", PASSES)
def test_more_benign_answers_pass(answer: str) -> None:
    assert screen_answer(answer) is None


def test_bounds_are_arguments() -> None:
    assert screen_answer("2^{100}") is None
    assert screen_answer("2^{100}", max_digits=30) == "power"  # 100 * 0.301 = 30.1 digits
    assert screen_answer("20!", max_digits=18) == "factorial"  # 20! = 2.4e18: 18.4 digits
    assert screen_answer("20!", max_digits=19) is None
    assert screen_answer("((1))", max_nesting=1) == "nesting"
    assert screen_answer("x^{y^z}", max_tower=1) == "tower"
    assert screen_answer("12345", max_chars=4) == "length"
    assert screen_answer("12345", max_digits=4) == "digits"


def test_absurdly_many_digits() -> None:
    """Under the default length cap a literal cannot exceed MAX_DIGITS; with the cap raised
    the digit rule still rejects a 100,000-digit number (and its decimal twin)."""
    assert screen_answer("9" * 100_000) == "length"
    assert screen_answer("9" * 100_000, max_chars=10**6) == "digits"
    assert screen_answer("0." + "0" * MAX_DIGITS + "1", max_chars=10**6) == "digits"
    assert screen_answer("9" * MAX_DIGITS, max_chars=10**6) is None


def test_bracket_free_command_chains_are_bounded() -> None:
    """``\\sqrt\\sqrt...`` nests without brackets; recursion stays bounded (no RecursionError)."""
    for text in (r"\sqrt" * 5_000 + "2", r"\frac" * 5_000, "x_" * 50_000 + "1"):
        assert screen_answer(text, max_chars=10**6) in ("nesting", None)
    assert screen_answer(r"\sqrt" * 5_000 + "2", max_chars=10**6) == "nesting"


def test_factorial_size_is_stirling() -> None:
    # 449! has 998 digits (log10 = 997.6), 450! has 1001 (1000.3): the bound is between
    assert math.floor(math.lgamma(450) / math.log(10)) + 1 == 998
    assert math.floor(math.lgamma(451) / math.log(10)) + 1 == 1001
    assert screen_answer("449!", max_digits=1000) is None
    assert screen_answer("450!", max_digits=1000) == "factorial"


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier()
    yield v
    v.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("answer", "gold"), BENIGN)
def test_benign_answers_still_verify(verifier, answer: str, gold: str) -> None:
    assert verifier.equivalent(answer, gold) is True
    assert verifier.score(f"so \\boxed{{{answer}}}", gold) == 1.0


@pytest.mark.timeout(120)
def test_hostile_answers_never_reach_math_verify() -> None:
    v = MathVerifier()
    for answer, _ in HOSTILE:  # a symbolic gold, so the fast path settles none of them
        assert v.equivalent(answer, r"\pi") is False, answer[:40]
    assert v._helper is None  # no math-verify process was ever needed
    info = v.cache_info()
    assert info.rejected == len(HOSTILE) and info.misses == 0
    assert sum(v.rejections().values()) == len(HOSTILE)
    assert v.rejections()["power"] == sum(r == "power" for _, r in HOSTILE)


def test_no_reference_answer_of_the_shared_benchmarks_is_rejected(data_file) -> None:
    files = [data_file(name) for name in DATASETS]
    answers = [t.answer for f in files for t in load_tasks(f) if t.answer is not None]
    assert len(answers) == 19_240
    rejected = [(a, screen_answer(a)) for a in answers if screen_answer(a) is not None]
    assert rejected == []
