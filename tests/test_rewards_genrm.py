"""JudgeReward: validation and clipping of a user judge's scores."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from marti_env.rewards import JudgeReward
from marti_env.tasks.task import Task

TASK = Task(id="gsm8k/test/17", prompt="What is 2 + 3?", answer="5")


def constant(value):
    def judge(task: Task, response: str):
        return value

    return judge


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.0, 0.0),
        (0.25, 0.25),
        (1, 1.0),
        (True, 1.0),
        (False, 0.0),
        (Fraction(1, 4), 0.25),
        (np.float32(0.5), 0.5),
        (np.int64(1), 1.0),
        (1.3, 1.0),  # clipped
        (-0.2, 0.0),  # clipped
        (10**400, 1.0),  # too big for a float: clipped, not an OverflowError
        (-(10**400), 0.0),
    ],
)
def test_valid_values(value, expected) -> None:
    score = JudgeReward(constant(value)).score(TASK, "5")
    assert score == expected
    assert type(score) is float


@pytest.mark.parametrize(
    "value", [None, "0.5", 0.5j, [0.5], math.nan, math.inf, -math.inf, np.float64("nan")]
)
def test_invalid_values_name_judge_and_task(value) -> None:
    reward = JudgeReward(constant(value), name="my-llm-judge")
    with pytest.raises(ValueError, match="my-llm-judge") as err:
        reward.score(TASK, "5")
    assert "gsm8k/test/17" in str(err.value)


def test_default_name_is_the_callable() -> None:
    def strict_grader(task, response):
        return "yes"

    with pytest.raises(ValueError, match="strict_grader"):
        JudgeReward(strict_grader).score(TASK, "5")


def test_unprintable_value_still_gives_a_clear_error() -> None:
    class Weird:
        def __repr__(self):
            raise RuntimeError("boom")

    with pytest.raises(ValueError, match="unprintable Weird"):
        JudgeReward(constant(Weird())).score(TASK, "5")


@pytest.mark.parametrize("value", [1.3, -0.2, 10**400])
def test_no_clip_rejects_out_of_range(value) -> None:
    with pytest.raises(ValueError, match="outside"):
        JudgeReward(constant(value), clip=False).score(TASK, "5")
    assert JudgeReward(constant(0.7), clip=False).score(TASK, "5") == 0.7


def test_judge_sees_task_and_response_and_errors_propagate() -> None:
    seen = []

    def judge(task, response):
        seen.append((task.id, response))
        if response == "bad":
            raise KeyError("judge failure")
        return 0.5

    reward = JudgeReward(judge)
    assert reward.score(TASK, "hello") == 0.5
    assert seen == [("gsm8k/test/17", "hello")]
    with pytest.raises(KeyError):
        reward.score(TASK, "bad")


def test_judge_must_be_callable() -> None:
    with pytest.raises(TypeError):
        JudgeReward(0.5)  # type: ignore[arg-type]
