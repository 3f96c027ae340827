"""Reward protocol implementations and the make_reward registry."""

from __future__ import annotations

import pickle

import pytest

from marti_env.rewards import (
    FormatReward,
    JudgeReward,
    MathReward,
    MathVerifier,
    Reward,
    WeightedReward,
    make_reward,
    register_reward,
    reward_names,
)
from marti_env.tasks.task import Task

TASK = Task(id="amc/0", prompt="...", answer="142.0")
UNLABELLED = Task(id="unlabelled/3", prompt="...", answer=None)

REWARD_TABLE = [
    # (spec, response, expected score for TASK)
    ("math", r"\boxed{142}", 1.0),
    ("math", r"\boxed{141}", 0.0),
    ("math", "142", 0.0),
    ("format", r"\boxed{141}", 1.0),
    ("format", "142", 0.0),
    ("format", r"\boxed{}", 0.0),
    ("math+format", r"\boxed{142}", 1.0),  # (1 + 0.1) / 1.1
    ("math+format", r"\boxed{141}", 0.1 / 1.1),  # (0 + 0.1) / 1.1
    ("math+format", "142", 0.0),
]


@pytest.mark.parametrize(("spec", "response", "expected"), REWARD_TABLE)
def test_registered_rewards(spec: str, response: str, expected: float) -> None:
    reward = make_reward(spec)
    assert isinstance(reward, Reward)
    assert reward.score(TASK, response) == pytest.approx(expected, abs=1e-12)


def test_math_reward_needs_a_label() -> None:
    with pytest.raises(ValueError, match="ttrl") as err:
        MathReward().score(UNLABELLED, r"\boxed{1}")
    assert "unlabelled/3" in str(err.value)


def test_math_reward_uses_given_verifier() -> None:
    v = MathVerifier(max_answer_chars=2)
    assert MathReward(v).score(Task("t", "p", "142"), r"\boxed{142}") == 0.0  # too long for v
    assert MathReward().score(Task("t", "p", "142"), r"\boxed{142}") == 1.0


def test_rewards_pickle() -> None:
    reward = make_reward("math+format")
    clone = pickle.loads(pickle.dumps(reward))
    assert clone.score(TASK, r"\boxed{142}") == 1.0


def test_weighted_reward_is_a_weighted_mean() -> None:
    half = JudgeReward(lambda task, response: 0.5)
    reward = WeightedReward([(half, 3.0), (FormatReward(), 1.0), (MathReward(), 0.0)])
    # (3 * 0.5 + 1 * 1) / 4 = 0.625; a zero weight is allowed (and not even called)
    assert reward.score(UNLABELLED, r"\boxed{1}") == 0.625


@pytest.mark.parametrize(
    ("terms", "error"),
    [
        ([], ValueError),
        ([(FormatReward(), 0.0)], ValueError),
        ([(FormatReward(), -1.0)], ValueError),
        ([(FormatReward(), float("nan"))], ValueError),
        ([(FormatReward(), "1")], TypeError),
        ([(FormatReward(), True)], TypeError),
        ([("format", 1.0)], TypeError),
        ([FormatReward()], TypeError),
    ],
)
def test_weighted_reward_rejects_bad_terms(terms, error) -> None:
    with pytest.raises(error):
        WeightedReward(terms)


def test_make_reward_passes_rewards_through_and_wraps_callables() -> None:
    fmt = FormatReward()
    assert make_reward(fmt) is fmt
    wrapped = make_reward(lambda task, response: 2.0)
    assert isinstance(wrapped, JudgeReward)
    assert wrapped.score(TASK, "") == 1.0  # clipped
    with pytest.raises(TypeError):
        make_reward(42)  # type: ignore[arg-type]


def test_unknown_name_lists_known_and_closest() -> None:
    with pytest.raises(ValueError) as err:
        make_reward("maht")
    message = str(err.value)
    for name in ("math", "format", "math+format"):
        assert name in message
    assert "Did you mean 'math'?" in message
    with pytest.raises(ValueError, match="known rewards") as err:
        make_reward("zzzzzz")
    assert "Did you mean" not in str(err.value)


def test_register_reward() -> None:
    assert "always-half" not in reward_names()
    register_reward("always-half", lambda: JudgeReward(lambda task, response: 0.5))
    try:
        assert make_reward("always-half").score(TASK, "") == 0.5
        with pytest.raises(ValueError, match="already registered"):
            register_reward("always-half", FormatReward)
        register_reward("always-half", FormatReward, overwrite=True)
        assert isinstance(make_reward("always-half"), FormatReward)
    finally:
        from marti_env.rewards import base

        base._REGISTRY.pop("always-half", None)
    with pytest.raises(ValueError):
        register_reward("", FormatReward)
