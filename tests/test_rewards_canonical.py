"""canonical_answer: a table of answers and their canonical forms."""

from __future__ import annotations

import random

import pytest

from marti_env.rewards import canonical_answer
from marti_env.rewards.canonical import MAX_CANONICAL_CHARS, OVERLONG_PREFIX, numeric_value

CANONICAL_TABLE = [
    # numbers → exact reduced fractions
    ("142.0", "142"),  # AMC answers are JSON floats
    ("142", "142"),
    ("-4.0", "-4"),
    ("0.5", "1/2"),
    (".5", "1/2"),
    (r"\frac12", "1/2"),
    (r"\frac{1}{2}", "1/2"),
    (r"\dfrac{1}{2}", "1/2"),
    (r"\tfrac{2}{4}", "1/2"),
    (r"\frac1{2}", "1/2"),
    ("1/2", "1/2"),
    ("2/4", "1/2"),
    ("-3.50", "-7/2"),
    (r"-\frac{7}{2}", "-7/2"),
    ("+5", "5"),
    ("007", "7"),
    ("-0", "0"),
    ("5.", "5"),  # trailing period
    ("$5$", "5"),
    (r"\$18", "18"),
    ("  12  ", "12"),
    ("\u22125", "-5"),  # unicode minus
    (r"\text{12}", "12"),
    # thousands separators
    ("1,000", "1000"),  # GSM8K writes "#### 1,000"
    ("114,200", "114200"),
    ("1,000,000", "1000000"),
    ("-12,345.5", "-24691/2"),
    (r"10{,}000", "10000"),
    (r"10,\!000", "10000"),  # MATH's spelling
    (r"1\,000", "1000"),
    (r"\$10,\!000.00", "10000"),
    ("(1,2)", "(1,2)"),  # a tuple, not a number
    ("(1,000)", "(1,000)"),
    ("1, 000", "1,000"),  # a list
    ("1,-2", "1,-2"),
    ("1,234,5", "1,234,5"),
    ("1,2", "1,2"),
    # not numbers
    ("12/0", "12/0"),  # zero denominator
    (r"\frac{1}{0}", r"\frac{1}{0}"),
    ("1e5", "1e5"),  # no exponent notation (would allow 1e999999999)
    ("\u0663", "\u0663"),  # Arabic-Indic three: not an ASCII digit
    (r"\frac{-1}{2}", r"\frac{-1}{2}"),
    # LaTeX noise
    (r"\left( 3, -1 \right)", "(3,-1)"),
    (r"\left[ 2, 5 \right)", "[2,5)"),
    (r"\rightarrow", r"\rightarrow"),  # not \right
    (r"90^\circ", "90"),
    (r"90^{\circ}", "90"),
    ("90°", "90"),
    (r"\text{(C)}", "C"),
    ("(C)", "C"),
    (r"\textbf{(B)}", "B"),
    (r"\text{Evelyn}", "Evelyn"),
    (r"\text{New York}", "NewYork"),
    (r"\mathrm{cm}", "cm"),
    (r"\text{a \textbf{b}}", r"\text{ab}"),  # nested: only the inner word is unwrapped
    (r"x^2 + 1", "x^2+1"),
    (r"\frac{\sqrt{3}}{2}", r"\frac{\sqrt{3}}{2}"),
    (r"\dfrac{\sqrt{3}}{2}", r"\frac{\sqrt{3}}{2}"),
    (r"\pi r^2", r"\pi r^2"),  # the space ends a control word before a letter
    (r"\pi\,r^2", r"\pi r^2"),
    ("1 2", "1 2"),  # digits stay apart
    (r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", r"\begin{pmatrix}1\\2\end{pmatrix}"),
    (r"x \in [2, 5)", r"x\in[2,5)"),
    ("52_8", "52_8"),
    ("", ""),
    ("   ", ""),
    ("\x00", ""),
]


@pytest.mark.parametrize(("answer", "expected"), CANONICAL_TABLE)
def test_canonical_table(answer: str, expected: str) -> None:
    assert canonical_answer(answer) == expected


def test_numeric_value() -> None:
    from fractions import Fraction

    assert numeric_value("-3.50") == Fraction(-7, 2)
    assert numeric_value("1,000") == 1000
    assert numeric_value(r"\sqrt{2}") is None
    assert numeric_value("12/0") is None


def test_overlong_marker() -> None:
    long_a = "1" * (MAX_CANONICAL_CHARS + 1)
    long_b = "1" * MAX_CANONICAL_CHARS + "2"
    marker = canonical_answer(long_a)
    assert marker.startswith(OVERLONG_PREFIX)
    assert canonical_answer(long_a) == marker  # equal inputs still agree
    assert canonical_answer(long_b) != marker  # same prefix, different input
    # No input of allowed length can produce a marker: NUL is deleted first.
    assert canonical_answer(marker[:MAX_CANONICAL_CHARS]) != marker
    assert "\x00" not in canonical_answer(marker[:MAX_CANONICAL_CHARS])
    assert canonical_answer("1" * MAX_CANONICAL_CHARS) == "1" * MAX_CANONICAL_CHARS


@pytest.mark.timeout(120)
def test_hostile_answers_never_raise() -> None:
    rng = random.Random(1)
    hostile = [
        "9" * 1000,  # 1000-digit integer: fine
        "0." + "9" * 998,
        "9" * 999 + "/" + "7",
        r"\frac{" + "9" * 490 + "}{" + "3" * 490 + "}",
        "{" * 1000,
        "\\" * 1000,
        "1," * 499 + "1",
        "\ud800",
        bytes(rng.getrandbits(8) for _ in range(999)).decode("utf-8", errors="replace"),
        "".join(rng.choice("0123456789,./-\\frac{}() $") for _ in range(1000)),
        "x" * 100_000,
    ]
    for answer in hostile:
        assert isinstance(canonical_answer(answer), str)
    assert canonical_answer("9" * 998 + "/" + "9") == "1" * 998  # 1000 chars: still exact
