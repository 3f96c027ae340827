"""load_tasks: the shared benchmark files, the row rules, and malformed files."""

from __future__ import annotations

import json

import pytest

from marti_env.tasks import Task, TaskDataError, data_dir, load_tasks

# --- the real shared files (row counts from ../shared/data/README.md) ---------------------

SHARED = {
    "math/aime24.json": 30,
    "math/amc.json": 83,
    "math/math500.json": 500,
    "math/math_train_level3to5.json": 8890,
    "math/minerva.json": 272,
    "math/olympiad_bench.json": 675,
    "gsm8k/test.jsonl": 1319,
    "gsm8k/train.jsonl": 7473,
}

needs_data = pytest.mark.skipif(
    not (data_dir() / "math").is_dir(), reason=f"shared data not found at {data_dir()}"
)


@needs_data
@pytest.mark.parametrize(("relpath", "rows"), SHARED.items())
def test_shared_file_loads_with_readme_row_count(relpath, rows):
    tasks = load_tasks(data_dir() / relpath)
    assert len(tasks) == rows
    assert len({t.id for t in tasks}) == rows
    assert all(t.prompt.strip() for t in tasks)


@needs_data
def test_shared_file_known_answers():
    amc = load_tasks(data_dir() / "math/amc.json")
    assert amc[0].answer == "142" and amc[1].answer == "144"  # JSON 142.0, 144.0
    assert amc[0].id == "0" and amc[0].source == "amc"

    gsm = load_tasks(data_dir() / "gsm8k/test.jsonl")
    assert gsm[0].prompt.startswith("Janet’s ducks lay 16 eggs")
    assert gsm[0].answer == "18" and gsm[0].id == "test/0" and gsm[0].source == "test"
    assert gsm[146].answer == "2125"  # "#### 2,125"
    assert all(t.answer.lstrip("-").replace(".", "").isdigit() for t in gsm)

    aime = load_tasks(data_dir() / "math/aime24.json")
    assert aime[1].answer == "025"  # strings are kept, not reparsed as numbers
    math500 = load_tasks(data_dir() / "math/math500.json")
    assert math500[1].answer == "p - q"
    minerva = load_tasks(data_dir() / "math/minerva.json")
    assert minerva[0].answer == "9.6"  # ["9.6\n"]: first accepted form, stripped
    olympiad = load_tasks(data_dir() / "math/olympiad_bench.json")
    assert olympiad[1].answer == "$\\frac{1}{2 n+2}$"


@needs_data
def test_shared_math_train_quirks():
    tasks = load_tasks(data_dir() / "math/math_train_level3to5.json")
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
    assert str(err).startswith(f"{path}:3: bad JSON at line 3")
    assert err.where == f"{path}:3"


def test_bad_json_file_names_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[\n  {"prompt": "p", "answer": "1"},\n  oops\n]\n', encoding="utf-8")
    err = _error(path)
    assert str(path) in str(err) and "bad JSON at line 3" in str(err)


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
