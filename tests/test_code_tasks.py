"""Code tasks: program extraction, HumanEval, the generator, users' JSONL files, specs."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from marti_env.code_prompts import code_prompts
from marti_env.sandbox import Job, Sandbox, SandboxLimits, SandboxWarning
from marti_env.tasks import TaskDataError, make_task_source
from marti_env.tasks.code import (
    MAX_PROGRAM_CHARS,
    CodeTask,
    extract_program,
    humaneval_tasks,
    load_code_tasks,
    program_for,
)
from marti_env.tasks.code_gen import NUM_TESTS, CodeGenTasks


@pytest.fixture(scope="module")
def box():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SandboxWarning)
        sandbox = Sandbox("auto", SandboxLimits(timeout_s=5.0))
    yield sandbox
    sandbox.close()


@pytest.mark.parametrize(
    "response, expected",
    [
        ("```python\ndef f():\n    return 1\n```", "def f():\n    return 1\n"),
        # the last block with a def wins over a later usage example without one
        (
            "```python\ndef f(): pass\n```\n```python\ndef g(): pass\n```\n```\nf()\n```",
            "def g(): pass\n",
        ),
        ("```py\nx = 1\n```", "x = 1\n"),  # no def anywhere: the last block
        ("text\n```python\ndef f():\n    return 2", "def f():\n    return 2"),  # cut off
        ("def f(x):\n    return x\n\nThat is it.", "def f(x):\n    return x\n\nThat is it."),
        ("So \\boxed{def f(x): return {1: x}}", "def f(x): return {1: x}"),
        ("The answer is \\boxed{5}.", None),
        ("no code here", None),
        ("```python\n   \n```", None),
        ("```python\n" + "x" * (MAX_PROGRAM_CHARS + 1) + "\n```", None),
    ],
)
def test_extract_program_table(response, expected):
    assert extract_program(response) == expected


def test_code_task_checks_its_fields():
    with pytest.raises(ValueError, match="entry_point"):
        CodeTask(id="t", prompt="p", answer="", entry_point="not valid", tests=("pass",))
    with pytest.raises(ValueError, match="tests"):
        CodeTask(id="t", prompt="p", answer="", entry_point="f", tests=())


def test_code_task_round_trips_through_a_dict():
    task = CodeTask(id="t", prompt="p", answer="a", entry_point="f", tests=("assert f() == 1",))
    data = json.loads(json.dumps(task.to_dict()))
    assert CodeTask.from_dict(data) == task


def test_a_completion_of_the_body_runs_after_the_stub_and_the_prelude_first():
    task = CodeTask(
        id="t",
        prompt="p",
        answer="",
        entry_point="f",
        tests=("pass",),
        stub="def f(x):\n",
        prelude="import math\n",
    )
    assert program_for(task, "    return x\n") == "import math\ndef f(x):\n    return x\n"
    assert (
        program_for(task, "def f(x):\n    return 1\n") == "import math\ndef f(x):\n    return 1\n"
    )


def test_a_humaneval_program_without_its_imports_still_loads(box):
    task = humaneval_tasks()[0]  # has_close_elements(numbers: List[float], ...)
    program = (
        "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
        "    return any(abs(a - b) < threshold for i, a in enumerate(numbers)"
        " for b in numbers[i + 1:])\n"
    )
    assert box.run_job(Job(program_for(task, program), task.tests, task.setup)).all_passed


# -- HumanEval ------------------------------------------------------------------------------


def test_humaneval_has_164_problems_split_into_asserts():
    tasks = humaneval_tasks()
    assert len(tasks) == 164 and len({t.id for t in tasks}) == 164
    first = tasks[0]
    assert first.id == "HumanEval/0" and first.entry_point == "has_close_elements"
    assert first.tests[0] == "assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True"
    assert first.prelude == "from typing import List\n"
    assert first.stub.startswith("from typing import List\n\n\ndef has_close_elements(")
    assert sum(len(t.tests) > 1 for t in tasks) > 140  # most checks are plain asserts


def test_every_humaneval_reference_passes_and_a_stub_fails(box):
    tasks = humaneval_tasks()
    jobs = [Job(program_for(t, t.answer), t.tests, t.setup) for t in tasks]
    results = box.run_many(jobs)
    failed = [t.id for t, r in zip(tasks, results, strict=True) if not r.all_passed]
    assert failed == []
    wrong = box.run_job(
        Job(program_for(tasks[0], "    return False\n"), tasks[0].tests, tasks[0].setup)
    )
    assert 0 < wrong.pass_fraction < 1  # a constant answer passes some asserts, not all


# -- the generator ------------------------------------------------------------------------------


def test_generator_is_deterministic_and_seeded():
    a, b, c = (
        CodeGenTasks(seed=3, levels=(1, 2, 3, 4)),
        CodeGenTasks(seed=3, levels=(1, 2, 3, 4)),
        CodeGenTasks(seed=4, levels=(1, 2, 3, 4)),
    )
    assert [a[i] for i in range(20)] == [b[i] for i in range(20)]
    assert [a[i].prompt for i in range(20)] != [c[i].prompt for i in range(20)]
    assert a.sample(np.random.default_rng(0)) == b.sample(np.random.default_rng(0))


def test_generator_levels_round_robin_and_hidden_tests():
    tasks = CodeGenTasks(levels=(2, 4), size=10)
    assert [t.source for t in tasks][:4] == ["code_gen/level2", "code_gen/level4"] * 2
    for t in tasks:
        assert len(t.tests) == NUM_TESTS
        example = t.prompt.split("For example, `")[1].split("`")[0]
        assert all(example not in test for test in t.tests)  # the example is not a hidden test


def test_generator_splits_never_share_a_prompt():
    train = {CodeGenTasks(seed=0, levels=(1, 2, 3, 4), size=300)[i].prompt for i in range(300)}
    test = {
        CodeGenTasks(seed=0, levels=(1, 2, 3, 4), size=300, split="test")[i].prompt
        for i in range(300)
    }
    assert not train & test


def test_generated_references_pass_and_wrong_programs_fail(box):
    tasks = list(CodeGenTasks(seed=1, levels=(1, 2, 3, 4), size=40))
    results = box.run_many([Job(t.answer, t.tests) for t in tasks])
    assert all(r.all_passed for r in results), [
        t.id for t, r in zip(tasks, results, strict=True) if not r.all_passed
    ]
    wrong = box.run_many(
        [Job(f"def {t.entry_point}(*args):\n    return None\n", t.tests) for t in tasks]
    )
    assert all(not r.all_passed for r in wrong)


@pytest.mark.parametrize(
    "kwargs, culprit",
    [
        ({"seed": -1}, "seed"),
        ({"levels": (5,)}, "levels"),
        ({"levels": (1, 1)}, "repeat"),
        ({"size": 0}, "size"),
        ({"split": "dev"}, "split"),
    ],
)
def test_generator_refuses_bad_arguments(kwargs, culprit):
    with pytest.raises(ValueError, match=culprit):
        CodeGenTasks(**kwargs)


# -- users' JSONL files ------------------------------------------------------------------------

GOOD = {"prompt": "Write f.", "entry_point": "f", "tests": ["assert f(1) == 2"]}


def _write(tmp_path, rows):
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_jsonl_file_loads_with_defaults(tmp_path):
    path = _write(
        tmp_path,
        [GOOD, {**GOOD, "id": "x", "setup": "K = 1", "reference": "def f(x): return x + 1"}],
    )
    tasks = load_code_tasks(path)
    assert [t.id for t in tasks] == ["mine/0", "x"]
    assert tasks[1].setup == "K = 1" and tasks[1].answer == "def f(x): return x + 1"
    assert tasks[0].tests == ("assert f(1) == 2",)


@pytest.mark.parametrize(
    "bad, problem",
    [
        ("{not json", "invalid JSON"),
        ('["a list"]', "expected a JSON object"),
        ({"prompt": "p", "tests": ["pass"]}, "missing field 'entry_point'"),
        ({**GOOD, "entry_point": "two words"}, "identifier"),
        ({**GOOD, "tests": []}, "non-empty list"),
        ({**GOOD, "tests": "assert f(1) == 2"}, "non-empty list"),
        ({**GOOD, "tests": ["assert f(1) =="]}, "tests\\[0\\] is not valid Python"),
        ({**GOOD, "tests": [3]}, "tests\\[0\\] must be a non-empty string"),
        ({**GOOD, "prompt": 7}, "'prompt' must be a string"),
        ({**GOOD, "answer": "x"}, "unknown field"),
        ({**GOOD, "id": "mine/0"}, "duplicate id"),
    ],
)
def test_jsonl_errors_name_file_and_line(tmp_path, bad, problem):
    path = _write(tmp_path, [GOOD, "", bad])
    with pytest.raises(TaskDataError, match=problem) as info:
        load_code_tasks(path)
    assert info.value.where == f"{path}:3"


def test_empty_jsonl_file_is_an_error(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    with pytest.raises(TaskDataError, match="no tasks"):
        load_code_tasks(path)


# -- specs and prompts ---------------------------------------------------------------------------


def test_task_source_specs(tmp_path):
    assert len(make_task_source("humaneval")) == 164
    assert len(make_task_source("humaneval", limit=5)) == 5
    gen = make_task_source({"type": "code_gen", "seed": 2, "levels": [3], "size": 7})
    assert isinstance(gen, CodeGenTasks) and len(gen) == 7 and gen.levels == (3,)
    assert isinstance(make_task_source("code_gen"), CodeGenTasks)
    cli = make_task_source("code_gen:test:1,3")
    assert (cli.split, cli.levels) == ("test", (1, 3))
    assert make_task_source("code_gen:test").levels == (1, 2)
    with pytest.raises(ValueError, match="comma-separated"):
        make_task_source("code_gen:test:one")
    with pytest.raises(ValueError, match="split"):
        make_task_source("code_gen:dev")
    path = _write(tmp_path, [GOOD])
    assert make_task_source({"type": "code_file", "path": str(path)})[0].entry_point == "f"
    with pytest.raises(ValueError, match="unknown key"):
        make_task_source({"type": "code_gen", "sede": 1})
    with pytest.raises(ValueError, match="needs key"):
        make_task_source({"type": "code_file"})


@pytest.mark.parametrize("env_id", ["single-v0", "majority-v0", "mad-v0", "moa-v0", "chain-v0"])
def test_code_prompts_ask_for_a_code_block(env_id):
    prompts = code_prompts(env_id)
    text = json.dumps(prompts)
    assert "boxed" not in text and "```python" in text
