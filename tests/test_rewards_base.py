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
    default_verifier,
    make_reward,
    register_reward,
    reward_names,
    reward_params,
    shared_verifier,
    verifiers_of,
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


def test_reward_options() -> None:
    assert reward_params("math") == ("max_answer_chars",)
    assert reward_params("math+format") == ("max_answer_chars",)
    assert reward_params("format") == ()
    capped = make_reward("math", max_answer_chars=2)
    assert repr(capped) == "MathReward(max_answer_chars=2)"
    assert capped.score(TASK, r"\boxed{142}") == 0.0  # "142" is longer than 2
    # the gold "142.0" is capped too: 5 characters fit
    assert make_reward("math", max_answer_chars=5).score(TASK, r"\boxed{142}") == 1.0
    # one shared verifier per setting (one helper process), counting the rejection
    verifier = capped.resolved_verifier()
    assert verifier is shared_verifier(2) and verifier.max_answer_chars == 2
    assert verifier.cache_info().rejected >= 1 and verifier.rejections()["length"] >= 1
    assert MathReward().resolved_verifier() is default_verifier()
    mixed = make_reward("math+format", max_answer_chars=2)
    assert mixed.score(TASK, r"\boxed{142}") == pytest.approx(0.1 / 1.1)  # format only
    clone = pickle.loads(pickle.dumps(capped))
    assert clone.max_answer_chars == 2 and clone.score(TASK, r"\boxed{142}") == 0.0


def test_reward_option_errors() -> None:
    with pytest.raises(ValueError, match=r"no option 'max_answer_char'.*max_answer_chars.*mean"):
        make_reward("math", max_answer_char=5)
    with pytest.raises(ValueError, match="reward 'format' has no option 'max_answer_chars'"):
        make_reward("format", max_answer_chars=5)
    with pytest.raises(ValueError, match="given with a reward object"):
        make_reward(FormatReward(), max_answer_chars=5)
    with pytest.raises(ValueError, match="max_answer_chars must be >= 0"):
        make_reward("math", max_answer_chars=-1)
    with pytest.raises(TypeError, match="max_answer_chars must be an int"):
        MathReward(max_answer_chars="10")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not both"):
        MathReward(MathVerifier(), max_answer_chars=10)


def test_verifiers_of_finds_the_math_verifiers() -> None:
    capped = MathVerifier(max_answer_chars=5)
    assert verifiers_of(MathReward(capped)) == [capped]
    assert verifiers_of(make_reward("math+format", max_answer_chars=11)) == [shared_verifier(11)]
    nested = WeightedReward(
        [(MathReward(capped), 1.0), (WeightedReward([(MathReward(capped), 1.0)]), 1.0)]
    )
    assert verifiers_of(nested) == [capped]  # once, however often it is used
    assert verifiers_of(FormatReward()) == [] and verifiers_of(None) == []
