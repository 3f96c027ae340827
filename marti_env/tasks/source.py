"""Task sources: indexable, sampleable collections of tasks, and the spec parser for configs.

A :class:`TaskSource` is what an environment draws its problems from. ``make_task_source``
turns the values a config may hold (a name, a path, a dict) into one:

================================  ======================================================
spec                              source
================================  ======================================================
a ``TaskSource``                  itself
a list / tuple of ``Task``        ``ListTasks(tasks, name="tasks")``
``"arithmetic"``                  ``ArithmeticTasks()`` (levels 1-2, train split)
``{"type": "arithmetic", ...}``   ``ArithmeticTasks(**rest)`` (seed, levels, size, split)
``"expr"``                        ``ExprTasks()`` (expression tasks, levels 1-3, train)
``{"type": "expr", ...}``         ``ExprTasks(**rest)`` (seed, levels, size, split)
``{"type": "file", "path": p}``   ``load_tasks(p, ...)`` (also prompt_field, answer_field,
                                  on_error)
``{"type": "hf", "name": n}``     ``load_hf_dataset(n, ...)`` (split, config, fields,
                                  on_error)
``"path/to/file.json[l]"``        ``load_tasks(path)``
a benchmark name (``"amc"``)      its file under :func:`data_dir` or packaged (see
                                  ``BENCHMARKS``)
``"hf:<name>[:<split>]"``         ``load_hf_dataset(name, split)`` (split default
                                  ``"test"``)
================================  ======================================================

Malformed rows raise :class:`~marti_env.tasks.TaskDataError` naming ``file:line`` and the
problem. ``"on_error": "skip"`` in a ``file`` or ``hf`` dict leaves them out instead: a
:class:`~marti_env.tasks.files.TaskDataWarning` names the file and the count, and the
source keeps them for the run's metadata: ``source.skipped`` (how many rows) and
``source.skipped_problems`` (the first few, ``"path:LINE: problem"``).
"""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from marti_env.tasks.arithmetic import ArithmeticTasks
from marti_env.tasks.base import ListTasks, TaskSource
from marti_env.tasks.catalog import DATA_DIR_ENV, DATASETS, data_dir, locate
from marti_env.tasks.code_sources import code_task_source
from marti_env.tasks.expr import ExprTasks
from marti_env.tasks.files import load_tasks, read_task_file
from marti_env.tasks.hf import load_hf_dataset, read_hf_dataset
from marti_env.tasks.task import Task

__all__ = ["BENCHMARKS", "DATA_DIR_ENV", "ListTasks", "TaskSource", "data_dir", "make_task_source"]

BENCHMARKS: dict[str, str] = {name: ds.path for name, ds in DATASETS.items()}
"""Short names of the benchmark files, relative to :func:`data_dir` (the catalogue,
licences and packaged copies: :mod:`marti_env.tasks.catalog`). Rows without an id get
``<short name>/<row index>`` (e.g. ``"gsm8k/test/17"``)."""

_SPEC_KEYS: dict[str, tuple[str, ...]] = {
    "arithmetic": ("seed", "levels", "size", "split"),
    "expr": ("seed", "levels", "size", "split"),
    "file": ("path", "prompt_field", "answer_field", "on_error"),
    "hf": ("name", "split", "config", "prompt_field", "answer_field", "on_error"),
}
_REQUIRED_KEYS = {"file": ("path",), "hf": ("name",)}


def make_task_source(spec: Any, *, limit: int | None = None) -> TaskSource:
    """Build a :class:`TaskSource` from a config value (see the module docstring's table).

    Args:
        spec: A task source, a list of tasks, a name, a path, ``"hf:..."`` or a dict.
        limit: Keep at most the first ``limit`` tasks (>= 1); ``None`` keeps all.

    Raises:
        ValueError: An unknown spec (the message lists the accepted forms and close names),
            a dict with an unknown or missing key, or a bad ``limit``.
        FileNotFoundError: A benchmark or file that does not exist (the message names the
            directory searched and ``MARTI_DATA_DIR``).
        TaskDataError: A malformed file or dataset row.
        ImportError: An ``hf:`` spec without the ``datasets`` package.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be None or an integer >= 1, got {limit!r}")
    source = _make(spec, limit)
    if limit is not None and len(source) > limit:
        source = _head(source, limit)
    return source


def _make(spec: Any, limit: int | None) -> TaskSource:
    if isinstance(spec, TaskSource):
        return spec
    code = code_task_source(spec)  # "humaneval", "code_gen", {"type": "code_..."}
    if code is not None:
        return code
    if isinstance(spec, (list, tuple)) and (not spec or isinstance(spec[0], Task)):
        return ListTasks(spec, name="tasks")  # checks every element
    if isinstance(spec, Mapping):
        return _from_dict(spec, limit)
    if isinstance(spec, Path):
        return ListTasks(load_tasks(spec, limit), name=str(spec))
    if isinstance(spec, str):
        if spec == "arithmetic":
            return ArithmeticTasks()
        if spec == "expr":
            return ExprTasks()
        if spec in BENCHMARKS:
            return _benchmark(spec, limit)
        if spec.startswith("hf:"):
            return _hf_string(spec, limit)
        if spec.lower().endswith((".json", ".jsonl")):
            return ListTasks(load_tasks(spec, limit), name=spec)
    raise ValueError(_unknown_spec_message(spec))


def _head(source: TaskSource, limit: int) -> TaskSource:
    if isinstance(source, (ArithmeticTasks, ExprTasks)):
        return source.with_size(limit)
    head = [source[i] for i in range(limit)]
    if isinstance(source, ListTasks):
        return source.with_tasks(head)
    return ListTasks(head, name=source.name)


def _benchmark(short: str, limit: int | None) -> TaskSource:
    path = locate(short)  # the data directory, else the packaged copy; else names the fix
    return ListTasks(load_tasks(path, limit, name=short), name=short)


def _hf_string(spec: str, limit: int | None) -> TaskSource:
    parts = spec[len("hf:") :].split(":")
    if not parts[0] or len(parts) > 2 or (len(parts) == 2 and not parts[1]):
        raise ValueError(
            f"bad Hugging Face spec {spec!r}: expected 'hf:<name>' or 'hf:<name>:<split>'"
        )
    split = parts[1] if len(parts) == 2 else "test"
    return ListTasks(load_hf_dataset(parts[0], split, limit=limit), name=spec)


def _from_dict(spec: Mapping[str, Any], limit: int | None) -> TaskSource:
    kind = spec.get("type")
    if kind not in _SPEC_KEYS:
        raise ValueError(
            f"task source dict needs 'type' in {sorted(_SPEC_KEYS)}, got {dict(spec)!r}"
        )
    rest = {k: v for k, v in spec.items() if k != "type"}
    unknown = sorted(set(rest) - set(_SPEC_KEYS[kind]))
    if unknown:
        raise ValueError(
            f"unknown key(s) {unknown} for task source type {kind!r}; "
            f"accepted: {list(_SPEC_KEYS[kind])}"
        )
    missing = [k for k in _REQUIRED_KEYS.get(kind, ()) if k not in rest]
    if missing:
        raise ValueError(f"task source type {kind!r} needs key(s) {missing}")
    if kind == "arithmetic":
        return ArithmeticTasks(**rest)
    if kind == "expr":
        return ExprTasks(**rest)
    if kind == "file":
        path = rest.pop("path")
        return ListTasks.from_loaded(read_task_file(path, limit, **rest), name=str(path))
    name = rest.pop("name")
    split = rest.pop("split", "test")
    loaded = read_hf_dataset(name, split, limit=limit, **rest)
    return ListTasks.from_loaded(loaded, name=f"hf:{name}:{split}")


def _unknown_spec_message(spec: Any) -> str:
    names = ["arithmetic", "expr", *BENCHMARKS]
    close = difflib.get_close_matches(str(spec), names, n=3, cutoff=0.5)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    forms = [
        "a TaskSource",
        "a non-empty list of Task",
        "'arithmetic'",
        "'expr'",
        f"a benchmark name ({', '.join(BENCHMARKS)}) under data_dir() (${DATA_DIR_ENV})",
        "a path ending in .json or .jsonl",
        "'hf:<name>[:<split>]'",
        f"a dict with 'type' in {sorted(_SPEC_KEYS)}",
    ]
    return f"unknown task source {reprlib.repr(spec)}.{hint} Accepted: {'; '.join(forms)}."
