"""reward="code": pass-fraction scores, all-pass outcomes, votes by behaviour, every workflow."""

from __future__ import annotations

import pickle

import pytest
from pettingzoo.test import parallel_api_test

import marti_env
from marti_env.code_prompts import code_prompts
from marti_env.rewards import AnswerRule, CodeReward, make_reward, reward_params
from marti_env.tasks import Task
from marti_env.tasks.code import CodeTask

TASK = CodeTask(
    id="double",
    prompt="Write a Python function `double(x)` that returns 2 * x.",
    answer="def double(x):\n    return 2 * x\n",
    entry_point="double",
    tests=("assert double(1) == 2", "assert double(2) == 4", "assert double(0) == 0"),
)
RIGHT = "```python\ndef double(x):\n    return 2 * x\n```"
RIGHT_OTHER_TEXT = (
    "Here you go:\n```python\ndef double(y):\n    total = y + y\n    return total\n```"
)
WRONG_SQUARE = "```python\ndef double(x):\n    return x * x\n```"  # right on 0 and 2 only
WRONG_SQUARE_OTHER_TEXT = "```python\ndef double(x):\n    return x ** 2\n```"
NO_CODE = "I think the answer is 4."


@pytest.fixture(scope="module")
def reward():
    return make_reward("code", timeout_s=5.0)


def test_code_reward_is_registered_with_its_options(reward):
    assert isinstance(reward, CodeReward) and isinstance(reward, AnswerRule)
    assert reward_params("code") == ("isolation", "timeout_s")


def test_score_is_the_pass_fraction(reward):
    assert reward.score(TASK, RIGHT) == 1.0
    assert reward.score(TASK, WRONG_SQUARE) == pytest.approx(2 / 3)  # 1*1 != 2; 2*2 == 4; 0 == 0
    assert reward.score(TASK, NO_CODE) == 0.0
    assert reward.score(TASK, "```python\nwhile True:\n    pass\n```") == 0.0


def test_outcome_is_all_pass(reward):
    assert reward.score_answer(TASK, "def double(x):\n    return x + x\n") == 1.0
    assert reward.score_answer(TASK, "def double(x):\n    return x * x\n") == 0.0


def test_answer_key_is_behaviour_not_text(reward):
    key = reward.answer_key
    assert key(TASK, "def double(x):\n    return 2 * x\n") == key(
        TASK, "def double(y):\n    return y + y\n"
    )
    assert key(TASK, "def double(x):\n    return x * x\n") == key(
        TASK, "def double(x):\n    return x ** 2\n"
    )
    assert key(TASK, "def double(x):\n    return x * x\n") != key(
        TASK, "def double(x):\n    return 2 * x\n"
    )


def test_a_plain_task_is_refused_naming_it(reward):
    with pytest.raises(ValueError, match="'t1' is a Task"):
        reward.score(Task("t1", "What is 1 + 1?", "2"), RIGHT)


def test_executions_are_cached(reward):
    task = CodeTask(id="cached", prompt="p", answer="", entry_point="f", tests=("assert f() == 1",))
    first = reward.run(task, "def f():\n    return 1\n")
    assert reward.run(task, "def f():\n    return 1\n") is first


def test_the_reward_pickles_without_its_sandbox(reward):
    reward.score(TASK, RIGHT)  # starts the sandbox
    clone = pickle.loads(pickle.dumps(reward))
    assert clone._sandbox is None and clone.score(TASK, RIGHT) == 1.0


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="isolation"):
        make_reward("code", isolation="none")
    with pytest.raises(ValueError, match="timeout_s"):
        make_reward("code", timeout_s=0)


def _episode(env_id: str, responses: dict[str, str], **kwargs):
    env = marti_env.make(
        env_id, tasks=[TASK], reward="code", prompts=code_prompts(env_id), **kwargs
    )
    env.reset(seed=0)
    infos = {}
    while env.agents:
        actions = {a: responses.get(a, RIGHT) for a in env.agents}
        _, _, _, _, infos = env.step(actions)
    return next(iter(infos.values()))["episode"]


def test_majority_votes_by_behaviour():
    # three programs behave as "square" (in two texts), two as "double" (in two texts):
    # the squares win
    record = _episode(
        "majority-v0",
        {
            "sampler_0": RIGHT,
            "sampler_1": WRONG_SQUARE,
            "sampler_2": WRONG_SQUARE_OTHER_TEXT,
            "sampler_3": RIGHT_OTHER_TEXT,
            "sampler_4": WRONG_SQUARE,
        },
        num_samples=5,
    )
    assert record.outcome == 0.0 and "x" in record.final_answer
    assert [t.score for t in record.turns] == pytest.approx([1, 2 / 3, 2 / 3, 1, 2 / 3])
    # by text, RIGHT and RIGHT_OTHER_TEXT would be two groups of one; by behaviour they are
    # one group of two, which beats two different-looking wrong programs
    record = _episode(
        "majority-v0",
        {"sampler_0": RIGHT, "sampler_1": WRONG_SQUARE, "sampler_2": RIGHT_OTHER_TEXT},
        num_samples=3,
    )
    assert record.outcome == 1.0
    record = _episode(
        "majority-v0",
        {"sampler_0": NO_CODE, "sampler_1": NO_CODE, "sampler_2": RIGHT_OTHER_TEXT},
        num_samples=3,
    )
    assert record.outcome == 1.0 and record.turns[0].answer is None  # no program: no vote


@pytest.mark.parametrize("env_id", ["single-v0", "majority-v0", "mad-v0", "moa-v0", "chain-v0"])
def test_every_workflow_runs_on_code_unchanged(env_id):
    record = _episode(env_id, {})
    assert record.outcome == 1.0
    assert all(t.score == 1.0 for t in record.turns if t.answer is not None)


@pytest.mark.parametrize("env_id", ["single-v0", "mad-v0"])
def test_code_envs_pass_the_pettingzoo_api_test(env_id):
    env = marti_env.make(
        env_id, tasks={"type": "code_gen", "size": 20}, reward="code", prompts=code_prompts(env_id)
    )
    parallel_api_test(env, num_cycles=3)
