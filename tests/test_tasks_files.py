"""load_tasks: the shared benchmark files, the row rules, and malformed files."""

from __future__ import annotations

import json
import warnings

import pytest

import marti_env
from marti_env.tasks import (
    ListTasks,
    Task,
    TaskDataError,
    TaskDataWarning,
    load_tasks,
    make_task_source,
    read_task_file,
)
from marti_env.tasks.files import MAX_PROBLEMS

# --- the real shared files (row counts from ../shared/data/README.md) ---------------------

SHARED = {
    "aime24": 30,
    "amc": 83,
    "math500": 500,
    "math_train": 8890,
    "minerva": 272,
    "olympiad_bench": 675,
    "gsm8k/test": 1319,
    "gsm8k/train": 7473,
}


@pytest.mark.parametrize(("name", "rows"), SHARED.items())
def test_shared_file_loads_with_readme_row_count(data_file, name, rows):
    tasks = load_tasks(data_file(name))
    assert len(tasks) == rows
    assert len({t.id for t in tasks}) == rows
    assert all(t.prompt.strip() for t in tasks)


def test_shared_file_known_answers(data_file):
    amc = load_tasks(data_file("amc"))
    assert amc[0].answer == "142" and amc[1].answer == "144"  # JSON 142.0, 144.0
    assert amc[0].id == "0" and amc[0].source == "amc"

    gsm = load_tasks(data_file("gsm8k/test"))
    assert gsm[0].prompt.startswith("Janet’s ducks lay 16 eggs")
    assert gsm[0].answer == "18" and gsm[0].id == "test/0" and gsm[0].source == "test"
    assert gsm[146].answer == "2125"  # "#### 2,125"
    assert all(t.answer.lstrip("-").replace(".", "").isdigit() for t in gsm)

    aime = load_tasks(data_file("aime24"))
    assert aime[1].answer == "025"  # strings are kept, not reparsed as numbers
    math500 = load_tasks(data_file("math500"))
    assert math500[1].answer == "p - q"
    minerva = load_tasks(data_file("minerva"))
    assert minerva[0].answer == "9.6"  # ["9.6\n"]: first accepted form, stripped
    olympiad = load_tasks(data_file("olympiad_bench"))
    assert olympiad[1].answer == "$\\frac{1}{2 n+2}$"


def test_shared_math_train_quirks(data_file):
    tasks = load_tasks(data_file("math_train"))
    # one exact duplicate row (same id, text and answer) is kept under a suffixed id
    assert tasks[1716].id == "test/precalculus/24307.json"
    assert tasks[8739].id == "test/precalculus/24307.json#2"
    assert tasks[8739].prompt == tasks[1716].prompt
    # two rows have an empty answer: no reference answer
    assert [i for i, t in enumerate(tasks) if t.answer is None] == [847, 6016]


# --- row rules --------------------------------------------------------------------------


def _write_json(tmp_path, rows, name="rows.json"):
    path = tmp_path / name
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def _write_jsonl(tmp_path, lines, name="rows.jsonl"):
    path = tmp_path / name
    path.write_text(
        "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n",
        encoding="utf-8",
    )
    return path


def test_math_style_rows(tmp_path):
    path = _write_json(
        tmp_path,
        [
            {"prompt": "p0", "answer": 142.0, "source": "amc", "id": "a"},
            {"prompt": "p1", "answer": 0.5},
            {"problem": "p2", "answer": 7, "id": 12},
            {"question": "p3", "answer": ["  \\frac12\n", "0.5"]},
            {"prompt": "p4", "answer": None},
            {"prompt": "p5", "answer": "  x^2 \n", "extra": [1, 2]},
            {"prompt": "p6", "answer": "   "},
        ],
    )
    assert load_tasks(path) == [
        Task("a", "p0", "142", "amc"),
        Task("rows/1", "p1", "0.5", "rows"),
        Task("12", "p2", "7", "rows"),
        Task("rows/3", "p3", "\\frac12", "rows"),
        Task("rows/4", "p4", None, "rows"),
        Task("rows/5", "p5", "x^2", "rows"),
        Task("rows/6", "p6", None, "rows"),
    ]


def test_gsm8k_style_rows(tmp_path):
    path = _write_jsonl(
        tmp_path,
        [
            {"question": "How many?", "answer": "2 + 2 = <<2+2=4>>4\n#### 4"},
            "",  # blank lines are skipped
            {"question": "Big?", "answer": "a #### b\n#### 1,000 "},
            {"question": "Neg?", "answer": "#### -3"},
        ],
        name="gsm.jsonl",
    )
    tasks = load_tasks(path, name="gsm8k/test")
    assert [t.answer for t in tasks] == ["4", "1000", "-3"]
    assert [t.id for t in tasks] == ["gsm8k/test/0", "gsm8k/test/1", "gsm8k/test/2"]
    assert {t.source for t in tasks} == {"gsm8k/test"}


def test_custom_fields(tmp_path):
    path = _write_json(tmp_path, [{"q": "text", "solution": "5", "prompt": "ignored"}])
    tasks = load_tasks(path, prompt_field="q", answer_field="solution")
    assert tasks == [Task("rows/0", "text", "5", "rows")]


def test_limit_returns_first_rows_after_validating_all(tmp_path):
    rows = [{"prompt": f"p{i}", "answer": str(i)} for i in range(5)]
    path = _write_json(tmp_path, rows)
    assert [t.prompt for t in load_tasks(path, limit=2)] == ["p0", "p1"]
    assert load_tasks(path, limit=0) == []
    bad = _write_json(tmp_path, [*rows, {"prompt": "late"}], name="bad.json")
    with pytest.raises(TaskDataError, match=r"row 5: missing field 'answer'"):
        load_tasks(bad, limit=1)
    with pytest.raises(ValueError, match="limit"):
        load_tasks(path, limit=-1)


def test_identical_duplicate_rows_get_suffixed_ids(tmp_path):
    row = {"prompt": "p", "answer": "1", "id": "x"}
    path = _write_json(tmp_path, [row, {"prompt": "q", "answer": "2"}, row, row])
    assert [t.id for t in load_tasks(path)] == ["x", "rows/1", "x#2", "x#3"]


# --- malformed files ----------------------------------------------------------------------


def _error(path, **kwargs) -> TaskDataError:
    with pytest.raises(TaskDataError) as info:
        load_tasks(path, **kwargs)
    assert isinstance(info.value, ValueError)
    return info.value


def test_bad_json_line_names_file_and_line(tmp_path):
    path = _write_jsonl(tmp_path, [{"question": "q", "answer": "#### 1"}, "", "{not json"])
    err = _error(path)
    assert str(err) == (
        f"{path}:3: bad JSON (Expecting property name enclosed in double quotes, column 2): "
        "'{not json'"
    )
    assert err.where == f"{path}:3"
    # a long line is quoted in part; the line ends (12 + 200 + 14 = 226 chars) without "}"
    path = _write_jsonl(tmp_path, ['{"prompt": "' + "x" * 200 + '", "answer": 1'], name="l.jsonl")
    err = _error(path)
    assert err.problem == (
        "bad JSON (Expecting ',' delimiter, column 227): '" + '{"prompt": "' + "x" * 48 + "...'"
    )


def test_bad_json_file_names_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[\n  {"prompt": "p", "answer": "1"},\n  oops\n]\n', encoding="utf-8")
    err = _error(path)
    assert str(err) == f"{path}:3: bad JSON (Expecting value, column 3)"


def test_invalid_utf8_names_file_line_and_byte(tmp_path):
    path = tmp_path / "bytes.jsonl"
    path.write_bytes(b'{"prompt": "p", "answer": "1"}\n{"prompt": "caf\xe9", "answer": "1"}\n')
    assert str(_error(path)) == f"{path}:2: not valid UTF-8 (byte 0xe9 at byte 16)"
    path = tmp_path / "bytes.json"
    path.write_bytes(b'[\n{"prompt": "p", "answer": "1"},\n{"prompt": "\xff", "answer": "1"}]')
    assert str(_error(path)) == f"{path}:3: not valid UTF-8 (byte 0xff)"


def test_missing_custom_fields_are_named(tmp_path):
    path = _write_jsonl(tmp_path, [{"q": "text", "answer": "1"}])
    assert str(_error(path, prompt_field="question")) == f"{path}:1: missing field 'question'"
    assert str(_error(path, prompt_field="q", answer_field="solution")) == (
        f"{path}:1: missing field 'solution'"
    )
    path = _write_jsonl(tmp_path, [{"text": "t", "answer": "1"}], name="t.jsonl")
    assert str(_error(path)) == f"{path}:1: missing field 'prompt' (or 'problem' / 'question')"


def test_jsonl_line_breaks_bom_and_crlf(tmp_path):
    """Lines end at \\n only: a raw U+2028 inside a JSON string (valid JSON, written by
    ensure_ascii=False) stays in its row; CRLF files and a UTF-8 BOM load too."""
    path = tmp_path / "sep.jsonl"
    rows = [{"prompt": "a\u2028b\u0085c", "answer": "1"}, {"prompt": "d", "answer": "2"}]
    text = "\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\r\n"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    tasks = load_tasks(path)
    assert [t.prompt for t in tasks] == ["a\u2028b\u0085c", "d"]
    assert [t.id for t in tasks] == ["sep/0", "sep/1"]
    json_path = tmp_path / "bom.json"
    json_path.write_bytes(b"\xef\xbb\xbf" + json.dumps(rows).encode("utf-8"))
    assert [t.prompt for t in load_tasks(json_path)] == ["a\u2028b\u0085c", "d"]


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ({"prompt": "p"}, "missing field 'answer'"),
        ({"answer": "1"}, "missing field 'prompt'"),
        ({"prompt": "  \n", "answer": "1"}, "empty prompt"),
        ({"prompt": 3, "answer": "1"}, "must be a string"),
        ({"prompt": "p", "question": "q", "answer": "1"}, "ambiguous"),
        ({"prompt": "p", "answer": True}, "boolean"),
        ({"prompt": "p", "answer": {"a": 1}}, "must be a string, number or list"),
        ({"prompt": "p", "answer": []}, "empty list"),
        ({"prompt": "p", "answer": "1", "id": ""}, "'id'"),
        ({"prompt": "p", "answer": "1", "source": 5}, "'source'"),
        (["prompt", "answer"], "not an object"),
        (42, "not an object"),
    ],
)
def test_malformed_row_names_file_row_and_problem(tmp_path, row, problem):
    good = {"prompt": "ok", "answer": "1"}
    json_err = _error(_write_json(tmp_path, [good, good, row]))
    assert json_err.where == f"{tmp_path / 'rows.json'}: row 2"
    assert problem in json_err.problem
    jsonl_err = _error(_write_jsonl(tmp_path, [good, "", row]))
    assert str(jsonl_err).startswith(f"{tmp_path / 'rows.jsonl'}:3: ")
    assert problem in str(jsonl_err)


def test_nan_answer_is_rejected(tmp_path):
    path = tmp_path / "nan.jsonl"
    path.write_text('{"prompt": "p", "answer": NaN}\n', encoding="utf-8")
    assert "not finite" in str(_error(path))


def test_duplicate_id_on_different_rows(tmp_path):
    rows = [{"prompt": "p", "answer": "1", "id": "7"}, {"prompt": "q", "answer": "1", "id": 7}]
    err = _error(_write_json(tmp_path, rows))
    assert err.where.endswith("rows.json: row 1") and "duplicate id '7'" in err.problem
    # a default id can collide with an explicit one too
    rows = [{"prompt": "p", "answer": "1", "id": "rows/1"}, {"prompt": "q", "answer": "2"}]
    assert "duplicate id 'rows/1'" in str(_error(_write_json(tmp_path, rows)))


def test_gsm8k_file_row_without_marker(tmp_path):
    path = _write_jsonl(
        tmp_path, [{"question": "q", "answer": "#### 1"}, {"question": "r", "answer": "2"}]
    )
    assert "no '####'" in str(_error(path))
    path = _write_jsonl(tmp_path, [{"question": "q", "answer": "x ####  "}], name="e.jsonl")
    assert "empty answer" in str(_error(path))


def test_file_level_errors(tmp_path):
    not_list = _write_json(tmp_path, {"prompt": "p", "answer": "1"})
    assert "expected a JSON list" in str(_error(not_list))
    csv = tmp_path / "rows.csv"
    csv.write_text("prompt,answer\n", encoding="utf-8")
    assert "unknown extension '.csv'" in str(_error(csv))
    with pytest.raises(FileNotFoundError):
        load_tasks(tmp_path / "missing.json")


# --- skipping bad rows (opt-in) -----------------------------------------------------------


def _mixed_file(tmp_path):
    """Six non-blank lines: rows 0, 3 and 5 are good; 1, 2 and 4 are bad in three ways."""
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(
        b'{"prompt": "p0", "answer": "0"}\n'
        b"{oops\n"
        b'{"prompt": "p2"}\n'
        b"\n"
        b'{"prompt": "p3", "answer": "3"}\n'
        b'{"prompt": "\xff", "answer": "4"}\n'
        b'{"prompt": "p5", "answer": "5", "id": "mixed/0"}\n'
    )
    return path


def test_bad_rows_raise_by_default(tmp_path):
    path = _mixed_file(tmp_path)
    err = _error(path)
    assert err.where == f"{path}:2"  # the first bad line, nothing skipped


def test_skip_leaves_out_counts_and_warns(tmp_path):
    path = _mixed_file(tmp_path)
    with pytest.warns(TaskDataWarning) as caught:
        loaded = read_task_file(path, on_error="skip")
    assert [t.prompt for t in loaded.tasks] == ["p0", "p3"]
    # row ids keep their index among the non-blank lines: p3 is row 3 in both modes
    assert [t.id for t in loaded.tasks] == ["mixed/0", "mixed/3"]
    assert loaded.skipped == 4
    assert loaded.problems == (
        f"{path}:2: bad JSON (Expecting property name enclosed in double quotes, column 2): "
        "'{oops'",
        f"{path}:3: missing field 'answer'",
        f"{path}:6: not valid UTF-8 (byte 0xff at byte 13)",
        f"{path}:7: duplicate id 'mixed/0' on a different row",
    )
    (warning,) = caught
    message = str(warning.message)
    assert message.startswith(f"{path}: skipped 4 of 6 rows (on_error='skip'): ")
    assert f"{path}:3: missing field 'answer'" in message
    # load_tasks gives the same tasks (and the same warning)
    with pytest.warns(TaskDataWarning, match="skipped 4 of 6 rows"):
        assert load_tasks(path, on_error="skip") == loaded.tasks


def test_skip_keeps_the_first_problems_only(tmp_path):
    lines = [{"prompt": f"p{i}"} for i in range(MAX_PROBLEMS + 3)] + [{"prompt": "ok", "answer": 1}]
    path = _write_jsonl(tmp_path, lines)
    with pytest.warns(TaskDataWarning, match=rf"skipped 8 of 9 rows .*; first {MAX_PROBLEMS}: "):
        loaded = read_task_file(path, on_error="skip")
    assert loaded.skipped == MAX_PROBLEMS + 3 and len(loaded.problems) == MAX_PROBLEMS
    assert loaded.problems[0] == f"{path}:1: missing field 'answer'"
    assert [t.prompt for t in loaded.tasks] == ["ok"]


def test_skip_in_json_files_and_clean_files(tmp_path):
    path = _write_json(tmp_path, [{"prompt": "p", "answer": "1"}, {"prompt": "q", "answer": True}])
    with pytest.warns(TaskDataWarning):
        loaded = read_task_file(path, on_error="skip")
    assert loaded.problems == (f"{path}: row 1: field 'answer' is a boolean (True)",)
    clean = _write_json(tmp_path, [{"prompt": "p", "answer": "1"}], name="clean.json")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing skipped: no warning
        assert read_task_file(clean, on_error="skip").skipped == 0


def test_file_level_errors_raise_even_when_skipping(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("[{", encoding="utf-8")
    assert "bad JSON" in str(_error(broken, on_error="skip"))
    assert "expected a JSON list" in str(
        _error(_write_json(tmp_path, {"a": 1}, name="obj.json"), on_error="skip")
    )
    with pytest.raises(ValueError, match="on_error must be 'raise' or 'skip', got 'ignore'"):
        load_tasks(broken, on_error="ignore")  # type: ignore[arg-type]


def test_task_source_spec_exposes_skipped_rows(tmp_path):
    path = _mixed_file(tmp_path)
    spec = {"type": "file", "path": str(path), "on_error": "skip"}
    with pytest.warns(TaskDataWarning, match=f"{path}: skipped 4 of 6 rows"):
        source = make_task_source(spec)
    assert isinstance(source, ListTasks) and len(source) == 2
    assert source.skipped == 4
    assert source.skipped_problems[1] == f"{path}:3: missing field 'answer'"
    with pytest.warns(TaskDataWarning):
        head = make_task_source(spec, limit=1)
    assert len(head) == 1 and head.skipped == 4  # counted over the whole file
    with pytest.raises(TaskDataError, match=r"mixed\.jsonl:2: bad JSON"):
        make_task_source({"type": "file", "path": str(path)})  # raise is the default
    # an env made on such a source keeps the count for the run's metadata
    with pytest.warns(TaskDataWarning):
        env = marti_env.make("single-v0", tasks=spec)
    assert env.tasks.skipped == 4 and len(env.tasks) == 2
    assert make_task_source("arithmetic").skipped == 0  # every source has the attributes


def test_skipping_every_row_is_an_error(tmp_path):
    path = _write_jsonl(tmp_path, [{"prompt": "p"}, "[1]"])
    with pytest.warns(TaskDataWarning), pytest.raises(ValueError) as info:
        make_task_source({"type": "file", "path": str(path), "on_error": "skip"})
    assert str(info.value) == (
        f"task source '{path}' has no tasks: all 2 rows were skipped (on_error='skip'); "
        f"first problems: {path}:1: missing field 'answer'; {path}:2: not an object (got list)"
    )
