"""load_hf_dataset, offline only: local JSON via the "json" builder and save_to_disk directories."""

from __future__ import annotations

import json
import os
import sys

import pytest

# Set before `datasets` is imported: nothing here may touch the network.
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"

from marti_env.tasks import (
    Task,
    TaskDataError,
    TaskDataWarning,
    load_hf_dataset,
    load_tasks,
    make_task_source,
)


def test_missing_datasets_package_is_a_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(ImportError, match="pip install datasets"):
        load_hf_dataset("anything")


ROWS = [
    {"question": "How many?", "answer": "2 + 2 = 4\n#### 4"},
    {"question": "Big?", "answer": "#### 1,000"},
    {"question": "Neg?", "answer": "#### -3"},
]


@pytest.fixture
def datasets():
    return pytest.importorskip("datasets")


def test_json_builder_uses_the_file_row_rules(datasets, tmp_path):
    path = tmp_path / "gsm.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    tasks = load_hf_dataset(
        "json", "train", data_files=str(path), cache_dir=str(tmp_path / "cache")
    )
    assert [t.answer for t in tasks] == ["4", "1000", "-3"]
    assert tasks[0] == Task("json/train/0", "How many?", "4", "json/train")
    # same rows, same tasks as the file loader (modulo the default id prefix)
    assert [(t.prompt, t.answer) for t in tasks] == [(t.prompt, t.answer) for t in load_tasks(path)]


def test_save_to_disk_dataset_dict(datasets, tmp_path):
    test = datasets.Dataset.from_list(
        [{"problem": f"p{i}", "answer": float(i) + 0.0, "id": f"t{i}"} for i in range(4)]
    )
    train = datasets.Dataset.from_list([{"problem": "x", "answer": 1.5}])
    directory = tmp_path / "mydata"
    datasets.DatasetDict({"test": test, "train": train}).save_to_disk(str(directory))

    tasks = load_hf_dataset(str(directory))  # split defaults to "test"
    assert tasks[2] == Task("t2", "p2", "2", "mydata/test")  # 2.0 -> "2"
    assert load_hf_dataset(str(directory), "train") == [
        Task("mydata/train/0", "x", "1.5", "mydata/train")
    ]
    assert [t.id for t in load_hf_dataset(str(directory), limit=2)] == ["t0", "t1"]
    with pytest.raises(
        TaskDataError, match=r"no split 'validation'; available: \['test', 'train'\]"
    ):
        load_hf_dataset(str(directory), "validation")

    source = make_task_source(f"hf:{directory}:train")
    assert source.name == f"hf:{directory}:train" and source[0].answer == "1.5"
    source = make_task_source({"type": "hf", "name": str(directory), "split": "test"}, limit=3)
    assert [t.id for t in source] == ["t0", "t1", "t2"]


def test_save_to_disk_single_dataset_and_fields(datasets, tmp_path):
    rows = [{"text": "What?", "label": 3, "prompt": "ignored"}]
    directory = tmp_path / "plain"
    datasets.Dataset.from_list(rows).save_to_disk(str(directory))
    tasks = load_hf_dataset(str(directory), prompt_field="text", answer_field="label")
    assert tasks == [Task("plain/test/0", "What?", "3", "plain/test")]
    with pytest.raises(TaskDataError, match=r"plain/test: row 0: missing field 'answer'"):
        load_hf_dataset(str(directory), prompt_field="text")


def test_skip_bad_rows_of_a_dataset(datasets, tmp_path):
    rows = [{"problem": "p0", "answer": "1"}, {"problem": "  ", "answer": "2"}]
    directory = tmp_path / "holes"
    datasets.Dataset.from_list(rows).save_to_disk(str(directory))
    with pytest.raises(TaskDataError, match=r"holes/test: row 1: empty prompt"):
        load_hf_dataset(str(directory))
    spec = {"type": "hf", "name": str(directory), "on_error": "skip"}
    with pytest.warns(TaskDataWarning, match=r"holes/test: skipped 1 of 2 rows"):
        source = make_task_source(spec)
    assert [t.prompt for t in source] == ["p0"]
    assert source.skipped == 1
    assert source.skipped_problems == ("holes/test: row 1: empty prompt (field 'problem')",)
