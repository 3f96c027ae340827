"""Load tasks from JSON / JSONL files, and the row rules shared with Hugging Face datasets.

Row rules (one row = one JSON object = one :class:`Task`):

* **Text**: the field ``prompt_field`` if given, else exactly one of ``prompt``, ``problem``
  or ``question`` (a row with two of them is ambiguous and rejected). It must be a string
  that is not blank; it is kept verbatim.
* **Answer**: the field ``answer_field`` if given, else ``answer``. The field is required;
  its value may be

  - a string: stripped of surrounding whitespace; an empty string means no reference
    answer (``None``; the shared MATH-train file has two such rows);
  - a number (JSON numbers; ``true``/``false`` are rejected): written canonically, integral
    values without a fractional part (``142.0`` -> ``"142"``), others as Python's
    ``repr`` (``0.5`` -> ``"0.5"``); NaN and infinities are rejected;
  - a non-empty list of strings/numbers (several accepted forms of one answer, as in
    Minerva and OlympiadBench): the **first** element, converted as above, is the answer;
    the others are dropped;
  - ``null``: the task has no reference answer (``Task.answer is None``, label-free use).

* **GSM8K format**: detected per file from its first row. If that row's answer is a string
  containing ``####``, every row of the file must contain ``####``, and the answer is the
  text after the last ``####`` with whitespace and thousands commas removed
  (``"... #### 1,000"`` -> ``"1000"``).
* **id**: the row's ``id`` (a string or an integer, not blank) if present, else
  ``<name>/<row index>`` (0-based index among the rows). Ids must be unique within a
  file, with one exception: a row identical to an earlier row of the same id (same text,
  answer and source; the shared MATH-train file has one such duplicate) keeps its place
  and gets the id ``<id>#<k>`` for its k-th occurrence (k >= 2). A duplicate id on a
  differing row is an error.
* **source**: the row's ``source`` (a string) if present, else ``name``.
* Other fields are ignored.

Any violation raises :class:`TaskDataError` naming the file and the row: ``path:LINE``
(1-based line number) for JSONL, ``path: row INDEX`` (0-based list index) for JSON, then
the problem (``missing field 'answer'``, ``bad JSON (Expecting value, column 1): ...``,
``not valid UTF-8 (byte 0xff at column 12)``). Nothing is skipped silently.

**Skipping bad rows (opt-in).** With ``on_error="skip"`` a row that breaks a rule (bad JSON
or UTF-8 on its line included) is left out instead; a :class:`TaskDataWarning` names the
file, how many rows were skipped and the first problems, and the :class:`LoadedTasks`
result (``make_task_source`` copies it onto the source: ``source.skipped``,
``source.skipped_problems``) keeps the count and the first :data:`MAX_PROBLEMS` problems as
``"path:LINE: problem"``. Skipped rows keep their row index, so the default ids of the
other rows are the same in both modes. Problems with the whole file (unknown extension, a
``.json`` file that is not valid JSON or not a list) always raise.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from marti_env.tasks.task import Task

__all__ = [
    "MAX_PROBLEMS",
    "LoadedTasks",
    "OnError",
    "TaskDataError",
    "TaskDataWarning",
    "convert_rows",
    "load_tasks",
    "read_task_file",
    "tasks_from_rows",
]

OnError = Literal["raise", "skip"]
"""What a malformed row does: ``"raise"`` (the default) a :class:`TaskDataError`, or
``"skip"``: it is left out, counted and reported (see the module docstring)."""

MAX_PROBLEMS = 5
"""How many skipped rows' problems :class:`LoadedTasks` and the warning keep."""

PROMPT_FIELDS = ("prompt", "problem", "question")
"""Fields searched, in order, for the problem text when no ``prompt_field`` is given."""

GSM8K_MARKER = "####"


class TaskDataError(ValueError):
    """A task file or dataset row is malformed.

    Attributes:
        where: The location, e.g. ``"data/x.jsonl:3"`` or ``"data/x.json: row 4"``.
        problem: What is wrong, e.g. ``"missing field 'answer'"``.
    """

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


class TaskDataWarning(UserWarning):
    """Rows of a task file or dataset were skipped (``on_error="skip"``)."""


@dataclass(frozen=True)
class LoadedTasks:
    """Tasks read from a file or dataset, and what ``on_error="skip"`` left out.

    Attributes:
        tasks: The tasks, in file order.
        skipped: How many rows were left out (0 with ``on_error="raise"``).
        problems: The first :data:`MAX_PROBLEMS` of them, ``"path:LINE: problem"``.
    """

    tasks: list[Task]
    skipped: int = 0
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Unreadable:
    """A row whose text could not be read (bad JSON or UTF-8 on its line)."""

    problem: str


@dataclass(frozen=True)
class _Row:
    where: str  # location for error messages
    index: int  # 0-based position among the rows (used for default ids)
    data: Any


def load_tasks(
    path: str | Path,
    limit: int | None = None,
    *,
    name: str | None = None,
    prompt_field: str | None = None,
    answer_field: str | None = None,
    on_error: OnError = "raise",
) -> list[Task]:
    """Read every task of a ``.json`` (a list of objects) or ``.jsonl`` (one object a line) file.

    The whole file is read and validated (see the module docstring for the row rules)
    before the first ``limit`` tasks are returned, so a bad row anywhere fails loudly.
    Blank lines in JSONL files are skipped. :func:`read_task_file` also returns what
    ``on_error="skip"`` left out.

    Args:
        path: The file; the format is chosen by its extension (``.json`` or ``.jsonl``).
        limit: Return at most this many tasks (the first ones); ``None`` returns all.
        name: Default ``source`` and id prefix for rows without them; defaults to the
            file's stem (``"test"`` for ``gsm8k/test.jsonl``).
        prompt_field: Field holding the problem text (default: prompt|problem|question).
        answer_field: Field holding the answer (default: ``answer``).
        on_error: ``"raise"`` (default) or ``"skip"`` malformed rows (with a warning).

    Raises:
        FileNotFoundError: The file does not exist.
        TaskDataError: Unknown extension, bad JSON, or a malformed / duplicate row.
    """
    return read_task_file(
        path,
        limit,
        name=name,
        prompt_field=prompt_field,
        answer_field=answer_field,
        on_error=on_error,
    ).tasks


def read_task_file(
    path: str | Path,
    limit: int | None = None,
    *,
    name: str | None = None,
    prompt_field: str | None = None,
    answer_field: str | None = None,
    on_error: OnError = "raise",
) -> LoadedTasks:
    """:func:`load_tasks`, returning the tasks with the count and problems of skipped rows
    (with ``on_error="skip"``; they are counted over the whole file, whatever ``limit``)."""
    path = Path(path)
    check_limit(limit)
    _check_on_error(on_error)
    suffix = path.suffix.lower()
    if suffix not in (".json", ".jsonl"):
        raise TaskDataError(str(path), f"unknown extension {suffix!r}; expected .json or .jsonl")
    data = path.read_bytes()
    rows = _jsonl_rows(path, data) if suffix == ".jsonl" else _json_rows(path, data)
    loaded = convert_rows(
        rows,
        name=path.stem if name is None else name,
        prompt_field=prompt_field,
        answer_field=answer_field,
        on_error=on_error,
        origin=str(path),
    )
    if limit is not None:
        loaded = replace(loaded, tasks=loaded.tasks[:limit])
    return loaded


def tasks_from_rows(
    rows: Iterable[tuple[str, Any]],
    *,
    name: str,
    prompt_field: str | None = None,
    answer_field: str | None = None,
    on_error: OnError = "raise",
) -> list[Task]:
    """Convert ``(where, row)`` pairs to tasks with the module's row rules.

    ``where`` locates the row in error messages (``"file.jsonl:3"``); the pairs' 0-based
    position is the row index used in default ids. ``name`` is the default source and id
    prefix. :func:`convert_rows` also returns what ``on_error="skip"`` left out.

    Raises:
        TaskDataError: A malformed row, or a duplicate id on differing rows.
    """
    return convert_rows(
        rows, name=name, prompt_field=prompt_field, answer_field=answer_field, on_error=on_error
    ).tasks


def convert_rows(
    rows: Iterable[tuple[str, Any]],
    *,
    name: str,
    prompt_field: str | None = None,
    answer_field: str | None = None,
    on_error: OnError = "raise",
    origin: str | None = None,
) -> LoadedTasks:
    """The one implementation of the row rules, used by :func:`load_tasks` and
    :func:`marti_env.tasks.load_hf_dataset` (see :func:`tasks_from_rows` for the arguments).

    With ``on_error="skip"``, a malformed row (or a duplicate id on a differing row) is left
    out and counted, and if any was, a :class:`TaskDataWarning` names ``origin`` (default
    ``name``), the count and the first problems.
    """
    _check_on_error(on_error)
    tasks: list[Task] = []
    seen: dict[str, Task] = {}
    occurrences: dict[str, int] = {}
    problems: list[str] = []
    skipped = 0
    total = 0
    gsm8k: list[bool] = []  # decided by the first row whose answer is read
    for index, (where, data) in enumerate(rows):
        total += 1
        try:
            task = _row_task(_Row(where, index, data), name, prompt_field, answer_field, gsm8k)
            task = _unique(task, where, seen, occurrences)
        except TaskDataError as err:
            if on_error == "raise":
                raise
            skipped += 1
            if len(problems) < MAX_PROBLEMS:
                problems.append(str(err))
            continue
        tasks.append(task)
    if skipped:
        more = f"; first {len(problems)}" if skipped > len(problems) else ""
        warnings.warn(
            f"{origin or name}: skipped {skipped} of {total} rows (on_error='skip'){more}: "
            + "; ".join(problems),
            TaskDataWarning,
            stacklevel=2,
        )
    return LoadedTasks(tasks, skipped, tuple(problems))


def _row_task(
    row: _Row,
    name: str,
    prompt_field: str | None,
    answer_field: str | None,
    gsm8k: list[bool],
) -> Task:
    if isinstance(row.data, _Unreadable):
        raise TaskDataError(row.where, row.data.problem)
    if not isinstance(row.data, Mapping):
        raise TaskDataError(row.where, f"not an object (got {type(row.data).__name__})")
    prompt = _prompt(row, prompt_field)
    field = answer_field or "answer"
    if field not in row.data:
        raise TaskDataError(row.where, f"missing field {field!r}")
    raw_answer = row.data[field]
    if not gsm8k:
        gsm8k.append(isinstance(raw_answer, str) and GSM8K_MARKER in raw_answer)
    answer = _gsm8k_answer(row, raw_answer) if gsm8k[0] else _answer(row, field, raw_answer)
    return Task(id=_id(row, name), prompt=prompt, answer=answer, source=_source(row, name))


def _unique(task: Task, where: str, seen: dict[str, Task], occurrences: dict[str, int]) -> Task:
    """``task``, renamed ``<id>#<k>`` if it repeats an identical earlier row; records it."""
    if task.id in seen:
        first = seen[task.id]
        if (first.prompt, first.answer, first.source) != (task.prompt, task.answer, task.source):
            raise TaskDataError(where, f"duplicate id {task.id!r} on a different row")
        task = replace(task, id=f"{task.id}#{occurrences[task.id] + 1}")
        if task.id in seen:
            raise TaskDataError(where, f"duplicate id {task.id!r}")
        occurrences[first.id] += 1
    seen[task.id] = task
    occurrences.setdefault(task.id, 1)
    return task


def check_limit(limit: int | None) -> None:
    """Raise ValueError unless ``limit`` is ``None`` or an integer >= 0."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be None or an integer >= 0, got {limit!r}")


def _check_on_error(on_error: Any) -> None:
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")


_BOM = b"\xef\xbb\xbf"


def _snippet(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _jsonl_rows(path: Path, data: bytes) -> list[tuple[str, Any]]:
    """One row per non-blank line; lines end at ``\\n`` only (a raw U+2028 inside a JSON
    string is not a line break), a ``\\r`` before it and a leading BOM are dropped."""
    rows: list[tuple[str, Any]] = []
    for number, raw in enumerate(data.removeprefix(_BOM).split(b"\n"), start=1):
        raw = raw.removesuffix(b"\r")
        if not raw.strip():
            continue
        where = f"{path}:{number}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            bad = raw[err.start]
            rows.append(
                (where, _Unreadable(f"not valid UTF-8 (byte 0x{bad:02x} at byte {err.start + 1})"))
            )
            continue
        try:
            rows.append((where, json.loads(line)))
        except json.JSONDecodeError as err:
            rows.append(
                (where, _Unreadable(f"bad JSON ({err.msg}, column {err.colno}): {_snippet(line)}"))
            )
    return rows


def _json_rows(path: Path, data: bytes) -> list[tuple[str, Any]]:
    try:
        text = data.removeprefix(_BOM).decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise TaskDataError(
            f"{path}:{line}", f"not valid UTF-8 (byte 0x{data[err.start]:02x})"
        ) from None
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as err:
        raise TaskDataError(
            f"{path}:{err.lineno}", f"bad JSON ({err.msg}, column {err.colno})"
        ) from None
    if not isinstance(rows, list):
        raise TaskDataError(
            str(path), f"expected a JSON list of objects, got {type(rows).__name__}"
        )
    return [(f"{path}: row {i}", row) for i, row in enumerate(rows)]


def _prompt(row: _Row, prompt_field: str | None) -> str:
    if prompt_field is not None:
        if prompt_field not in row.data:
            raise TaskDataError(row.where, f"missing field {prompt_field!r}")
        field = prompt_field
    else:
        present = [f for f in PROMPT_FIELDS if f in row.data]
        if not present:
            raise TaskDataError(row.where, "missing field 'prompt' (or 'problem' / 'question')")
        if len(present) > 1:
            raise TaskDataError(
                row.where,
                f"ambiguous text fields {present}; choose one with prompt_field",
            )
        field = present[0]
    value = row.data[field]
    if not isinstance(value, str):
        raise TaskDataError(row.where, f"field {field!r} must be a string, got {value!r}")
    if not value.strip():
        raise TaskDataError(row.where, f"empty prompt (field {field!r})")
    return value


def _answer(row: _Row, field: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, list):
        if not value:
            raise TaskDataError(row.where, f"field {field!r} is an empty list")
        value = value[0]
        if isinstance(value, list):
            raise TaskDataError(row.where, f"field {field!r} is a nested list")
    return _scalar_answer(row, field, value)


def _scalar_answer(row: _Row, field: str, value: Any) -> str | None:
    if isinstance(value, bool):
        raise TaskDataError(row.where, f"field {field!r} is a boolean ({value!r})")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TaskDataError(row.where, f"field {field!r} is not finite ({value!r})")
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return value.strip() or None
    raise TaskDataError(
        row.where, f"field {field!r} must be a string, number or list, got {value!r}"
    )


def _gsm8k_answer(row: _Row, value: Any) -> str:
    if not isinstance(value, str) or GSM8K_MARKER not in value:
        raise TaskDataError(
            row.where,
            f"answer has no {GSM8K_MARKER!r} (the file's first row is in GSM8K format)",
        )
    final = "".join(value.rsplit(GSM8K_MARKER, 1)[1].split()).replace(",", "")
    if not final:
        raise TaskDataError(row.where, f"empty answer after {GSM8K_MARKER!r}")
    return final


def _id(row: _Row, name: str) -> str:
    if "id" not in row.data:
        return f"{name}/{row.index}"
    value = row.data["id"]
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
        raise TaskDataError(
            row.where, f"field 'id' must be a non-empty string or int, got {value!r}"
        )
    return str(value)


def _source(row: _Row, name: str) -> str:
    if "source" not in row.data:
        return name
    value = row.data["source"]
    if not isinstance(value, str):
        raise TaskDataError(row.where, f"field 'source' must be a string, got {value!r}")
    return value
