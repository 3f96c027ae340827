"""TTRL majority vote: tables of answer groups and their pseudo-labels and rewards."""

from __future__ import annotations

import pytest

from marti_env.rewards import majority_answer, ttrl_scores

TTRL_TABLE = [
    # (answers, majority, scores)
    (["3", "3", "4"], "3", [1.0, 1.0, 0.0]),
    (["3", "3.0", "4", None], "3", [1.0, 1.0, 0.0, 0.0]),  # 3.0 votes with 3
    # tie 2-2 between 1/2 and 2: 1/2 appears first
    (["0.5", None, "2", r"\frac{1}{2}", "2"], "1/2", [1.0, 0.0, 0.0, 1.0, 0.0]),
    (["2", "0.5", r"\frac{1}{2}", "2"], "2", [1.0, 0.0, 0.0, 1.0]),  # tie: 2 first
    (["a", "b", "c"], "a", [1.0, 0.0, 0.0]),  # all distinct: the first one
    (["1,000", "1000", "100"], "1000", [1.0, 1.0, 0.0]),
    ([r"\text{(C)}", "C", "(B)"], "C", [1.0, 1.0, 0.0]),
    ([r"\frac{\sqrt{3}}{2}", r"\dfrac{\sqrt{3}}{2}", "0.866"], r"\frac{\sqrt{3}}{2}", [1, 1, 0]),
    # canonical only: 2\sqrt{2} and \sqrt{8} are different votes
    ([r"2\sqrt{2}", r"\sqrt{8}", r"\sqrt{8}"], r"\sqrt{8}", [0.0, 1.0, 1.0]),
    (["", "  ", "5"], "5", [0.0, 0.0, 1.0]),  # empty answers abstain
    ([None, None], None, [0.0, 0.0]),
    ([], None, []),
    (["", None], None, [0.0, 0.0]),
]


@pytest.mark.parametrize(("answers", "majority", "scores"), TTRL_TABLE)
def test_ttrl_table(answers, majority, scores) -> None:
    assert majority_answer(answers) == majority
    assert ttrl_scores(answers) == [float(s) for s in scores]


def test_majority_of_overlong_answers() -> None:
    long_a, long_b = "1" * 2000, "2" * 2000
    # Equal overlong answers still vote together; different ones do not.
    assert ttrl_scores([long_a, long_b, long_b]) == [0.0, 1.0, 1.0]


def test_accepts_any_sequence() -> None:
    assert ttrl_scores(("7", "7.0", "8")) == [1.0, 1.0, 0.0]
