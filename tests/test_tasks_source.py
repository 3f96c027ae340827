"""TaskSource, ListTasks, data_dir and make_task_source (every spec form and its errors)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from marti_env.tasks import (
    ArithmeticTasks,
    ListTasks,
    Task,
    TaskDataError,
    TaskSource,
    data_dir,
    make_task_source,
)
from marti_env.tasks.source import BENCHMARKS
from tests.conftest import needs_data

TASKS = [Task(f"t/{i}", f"p{i}", str(i), "t") for i in range(3)]


# --- ListTasks ----------------------------------------------------------------------------


def test_list_tasks_indexing_and_sampling():
    source = ListTasks(TASKS, name="mine")
    assert isinstance(source, TaskSource) and len(source) == 3 and source.name == "mine"
    assert list(source) == TASKS and source[-1] == TASKS[2]
    with pytest.raises(IndexError, match="mine"):
        source[3]
    draws = [source.sample(np.random.default_rng(9)).id for _ in range(3)]
    assert len(set(draws)) == 1  # same seed, same draw
    rng = np.random.default_rng(0)
    seq = [source.sample(rng).id for _ in range(300)]
    rng = np.random.default_rng(0)
    assert seq == [source.sample(rng).id for _ in range(300)]
    assert sorted(set(seq)) == ["t/0", "t/1", "t/2"]
    counts = [seq.count(f"t/{i}") for i in range(3)]
    assert min(counts) > 60  # uniform: expected 100 each (fixed seed, not a flaky bound)


def test_list_tasks_validation():
    with pytest.raises(ValueError, match="no tasks"):
        ListTasks([], name="empty")
    with pytest.raises(ValueError, match="duplicate task id 't/0'"):
        ListTasks([TASKS[0], TASKS[0]], name="dup")
    with pytest.raises(TypeError, match="element 1"):
        ListTasks([TASKS[0], {"id": "x"}], name="bad")


# --- data_dir -----------------------------------------------------------------------------


def test_data_dir_default_and_override(monkeypatch, tmp_path):
    from marti_env.tasks import catalog

    monkeypatch.delenv("MARTI_DATA_DIR", raising=False)
    shared = tmp_path / "shared" / "data"
    shared.mkdir(parents=True)
    monkeypatch.setattr(catalog, "_REPO_SHARED", shared)  # <repo>/../shared/data
    assert data_dir() == shared and catalog.data_dir_origin() == "../shared/data"
    monkeypatch.setenv("MARTI_DATA_DIR", "")  # empty means unset
    assert data_dir() == shared
    monkeypatch.setenv("MARTI_DATA_DIR", str(tmp_path))
    assert data_dir() == tmp_path
    # no override and no ../shared/data: the user cache, where `marti data get` writes
    monkeypatch.delenv("MARTI_DATA_DIR")
    monkeypatch.setattr(catalog, "_REPO_SHARED", tmp_path / "absent")
    monkeypatch.setenv("MARTI_CACHE", str(tmp_path / "cache"))
    assert data_dir() == tmp_path / "cache" / "data"
    assert catalog.data_dir_origin() == "user cache"


def test_benchmark_missing_names_directory_and_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("MARTI_DATA_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError) as info:
        make_task_source("amc")
    message = str(info.value)
    assert str(tmp_path) in message and "MARTI_DATA_DIR" in message
    assert "math/amc.json" in message


def test_benchmark_from_override_directory(monkeypatch, tmp_path):
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text(
        json.dumps({"question": "q", "answer": "#### 5"}) + "\n", encoding="utf-8"
    )
    monkeypatch.setenv("MARTI_DATA_DIR", str(tmp_path))
    source = make_task_source("gsm8k/test")
    assert list(source) == [Task("gsm8k/test/0", "q", "5", "gsm8k/test")]


# --- make_task_source: every form -------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_benchmark_name(name, data_file):
    data_file(name)
    source = make_task_source(name, limit=5)
    assert isinstance(source, ListTasks) and len(source) == 5 and source.name == name


@needs_data("gsm8k/test", "amc")
def test_benchmark_ids_and_answers():
    gsm = make_task_source("gsm8k/test")
    assert len(gsm) == 1319 and gsm[17].id == "gsm8k/test/17" and gsm[0].answer == "18"
    assert make_task_source("amc")[0].answer == "142"


def test_task_source_is_returned_as_is():
    source = ArithmeticTasks(size=10)
    assert make_task_source(source) is source
    mine = ListTasks(TASKS, name="mine")
    assert make_task_source(mine) is mine
    head = make_task_source(mine, limit=2)
    assert list(head) == TASKS[:2] and head.name == "mine"


def test_list_of_tasks():
    source = make_task_source(TASKS)
    assert isinstance(source, ListTasks) and list(source) == TASKS
    assert list(make_task_source(tuple(TASKS), limit=1)) == TASKS[:1]


def test_arithmetic_forms():
    default = make_task_source("arithmetic")
    assert isinstance(default, ArithmeticTasks)
    assert (default.seed, default.levels, default.split) == (0, (1, 2), "train")
    assert len(default) == 100_000
    assert [default[i] for i in range(20)] == [ArithmeticTasks()[i] for i in range(20)]

    spec = {"type": "arithmetic", "seed": 3, "levels": [2, 4], "split": "test", "size": 50}
    source = make_task_source(spec)
    assert list(source) == list(ArithmeticTasks(3, (2, 4), 50, "test"))
    limited = make_task_source(spec, limit=7)
    assert isinstance(limited, ArithmeticTasks) and list(limited) == list(source)[:7]


def test_file_paths(tmp_path):
    rows = [{"prompt": f"p{i}", "answer": i} for i in range(4)]
    json_path = tmp_path / "mine.json"
    json_path.write_text(json.dumps(rows), encoding="utf-8")
    jsonl_path = tmp_path / "mine.jsonl"
    jsonl_path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    for spec in (str(json_path), json_path, str(jsonl_path)):
        source = make_task_source(spec)
        assert [t.answer for t in source] == ["0", "1", "2", "3"], spec
        assert source[0].id == "mine/0"
    assert len(make_task_source(str(jsonl_path), limit=2)) == 2
    file_spec = {"type": "file", "path": str(json_path), "answer_field": "answer"}
    assert len(make_task_source(file_spec)) == 4
    with pytest.raises(FileNotFoundError):
        make_task_source(str(tmp_path / "nope.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "p"}\n', encoding="utf-8")
    with pytest.raises(TaskDataError, match=r"bad\.jsonl:1: missing field 'answer'"):
        make_task_source(str(bad))


# --- make_task_source: errors -------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "suggestion"),
    [("gsm8k/tset", "'gsm8k/test'"), ("math_500", "'math500'"), ("arithmatic", "'arithmetic'")],
)
def test_unknown_name_suggests_close_names(spec, suggestion):
    with pytest.raises(ValueError) as info:
        make_task_source(spec)
    message = str(info.value)
    assert repr(spec) in message and f"Did you mean {suggestion}" in message
    assert "hf:<name>[:<split>]" in message and ".jsonl" in message and "olympiad_bench" in message


@pytest.mark.parametrize("spec", [42, None, ["amc"], "data.csv", "nothing-like-it"])
def test_unknown_spec_forms(spec):
    with pytest.raises(ValueError, match="unknown task source"):
        make_task_source(spec)


def test_bad_task_lists():
    with pytest.raises(ValueError, match="no tasks"):
        make_task_source([])
    with pytest.raises(TypeError, match="element 1 is not a Task"):
        make_task_source([TASKS[0], "amc"])
    with pytest.raises(ValueError, match="duplicate task id"):
        make_task_source([TASKS[0], TASKS[0]])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"seed": 1}, "needs 'type'"),
        ({"type": "arithmetc"}, "needs 'type'"),
        ({"type": "arithmetic", "seeds": 1}, r"unknown key\(s\) \['seeds'\]"),
        ({"type": "arithmetic", "levels": [9]}, "levels"),
        ({"type": "file"}, r"needs key\(s\) \['path'\]"),
        ({"type": "hf", "split": "test"}, r"needs key\(s\) \['name'\]"),
    ],
)
def test_bad_dict_specs(spec, message):
    with pytest.raises(ValueError, match=message):
        make_task_source(spec)


@pytest.mark.parametrize("spec", ["hf:", "hf:name:", "hf:a:b:c"])
def test_bad_hf_strings(spec):
    with pytest.raises(ValueError, match="bad Hugging Face spec"):
        make_task_source(spec)


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
def test_bad_limit(limit):
    with pytest.raises(ValueError, match="limit"):
        make_task_source("arithmetic", limit=limit)


def test_importing_tasks_stays_light():
    heavy = ["torch", "transformers", "vllm", "deepspeed", "ray", "datasets", "pyarrow"]
    code = f"import sys, marti_env.tasks\nprint([m for m in {heavy!r} if m in sys.modules])\n"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
