"""Benchmark data that travels: the data directory order, packaged sets, ``marti data``, and
the one way a data-dependent test skips."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from marti_env.tasks import catalog, make_task_source
from marti_env.tasks.catalog import DATASETS, PACKAGED_DIR, MissingDataError, locate
from marti_trainer.cli import main
from marti_trainer.cli.data import get_dataset, list_datasets
from tests.conftest import missing_data


@pytest.fixture
def clone(monkeypatch, tmp_path):
    """A checkout with no ../shared/data and no $MARTI_DATA_DIR: data_dir() is the user cache."""
    monkeypatch.delenv("MARTI_DATA_DIR", raising=False)
    monkeypatch.setattr(catalog, "_REPO_SHARED", tmp_path / "no-shared")
    monkeypatch.setenv("MARTI_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "data"


def _amc_rows(n: int = 83) -> str:
    return json.dumps([{"prompt": f"p{i}", "answer": float(i), "id": str(i)} for i in range(n)])


def test_packaged_sets_are_verbatim_and_mit():
    pinned = {  # the SHA-256 of the published files (marti_env/data/README.md)
        "gsm8k/test": "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
        "math500": "aa442c2b866ad6c6231990ebc71894f7d72be0c14d275a81bc9c7edae0e0c71b",
    }
    packaged = {name for name, ds in DATASETS.items() if ds.packaged}
    assert packaged == set(pinned)
    for name, digest in pinned.items():
        path = PACKAGED_DIR / DATASETS[name].path
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, name
        assert DATASETS[name].licence == "MIT"


def test_clone_without_shared_data_uses_packaged_sets(clone):
    assert catalog.data_dir() == clone and catalog.data_dir_origin() == "user cache"
    assert locate("gsm8k/test") == PACKAGED_DIR / "gsm8k/test.jsonl"
    source = make_task_source("gsm8k/test", limit=3)
    assert len(source) == 3 and source[0].answer == "18"
    assert len(make_task_source("math500")) == 500


def test_absent_set_error_names_set_directory_and_command(clone):
    with pytest.raises(MissingDataError) as info:
        make_task_source("amc")
    message = str(info.value)
    assert "'amc'" in message and str(clone / "math" / "amc.json") in message
    assert "marti data get amc --from PATH/amc.json" in message and "MARTI_DATA_DIR" in message
    # the test suite's skip reason is the same message
    assert missing_data("gsm8k/test", "amc") == message
    assert missing_data("gsm8k/test", "math500") is None


def test_data_directory_copy_wins_over_the_packaged_one(monkeypatch, tmp_path):
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text('{"question": "q", "answer": "#### 5"}\n')
    monkeypatch.setenv("MARTI_DATA_DIR", str(tmp_path))
    assert locate("gsm8k/test") == tmp_path / "gsm8k" / "test.jsonl"
    assert [t.answer for t in make_task_source("gsm8k/test")] == ["5"]


def test_get_copies_from_a_file_or_a_directory_and_list_shows_it(clone, tmp_path, capsys):
    src = tmp_path / "amc.json"
    src.write_text(_amc_rows())
    assert main(["data", "get", "amc", "--from", str(src)]) == 0
    assert (clone / "math" / "amc.json").read_text() == src.read_text()
    assert len(make_task_source("amc")) == 83
    row = next(r for r in list_datasets() if r["name"] == "amc")
    assert row["where"] == str(clone / "math" / "amc.json") and row["bytes"] > 0
    # again: refused without --force; from a directory laid out like the data directory
    assert main(["data", "get", "amc", "--from", str(src)]) == 2
    assert "already exists" in capsys.readouterr().err
    layout = tmp_path / "layout"
    (layout / "math").mkdir(parents=True)
    (layout / "math" / "amc.json").write_text(_amc_rows())
    out = get_dataset("amc", layout, to=tmp_path / "elsewhere")
    assert out == tmp_path / "elsewhere" / "math" / "amc.json" and out.is_file()


def test_list_prints_every_set(clone, capsys):
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    assert f"data directory: {clone} (from user cache)" in out
    for name in DATASETS:
        assert name in out
    assert "absent: marti data get amc --from PATH/amc.json" in out
    assert "(packaged)" in out


def test_get_refuses_bad_input(clone, tmp_path):
    with pytest.raises(ValueError, match="unknown set 'amx'"):
        get_dataset("amx")
    with pytest.raises(ValueError, match=r"no download URL.*--from PATH"):
        get_dataset("amc")  # MARTI's files have no stable raw URL: copy only
    with pytest.raises(FileNotFoundError, match="set 'amc'"):
        get_dataset("amc", tmp_path / "nope.json")
    short = tmp_path / "short.json"
    short.write_text(_amc_rows(10))
    with pytest.raises(ValueError, match="10 rows, but set 'amc' has 83"):
        get_dataset("amc", short)
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    with pytest.raises(ValueError, match="not a loadable task file"):
        get_dataset("amc", junk)
    assert not (clone / "math" / "amc.json").exists()  # nothing half-written stays


def test_get_downloads_from_the_sets_url(clone, tmp_path, monkeypatch):
    served = tmp_path / "served.jsonl"
    served.write_text("".join(f'{{"question": "q{i}", "answer": "#### {i}"}}\n' for i in range(7)))
    fake = dataclasses.replace(DATASETS["gsm8k/train"], rows=7, url=served.as_uri())
    monkeypatch.setitem(DATASETS, "gsm8k/train", fake)
    path = get_dataset("gsm8k/train")
    assert path == clone / "gsm8k" / "train.jsonl"
    assert path.read_bytes() == served.read_bytes()
