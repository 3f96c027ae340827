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
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from marti_env.tasks.catalog import DATA_DIR_ENV, DATASETS, data_dir, locate
from marti_env.tasks.files import LoadedTasks, load_tasks, read_task_file
from marti_env.tasks.hf import load_hf_dataset, read_hf_dataset
from marti_env.tasks.task import Task

__all__ = ["BENCHMARKS", "DATA_DIR_ENV", "ListTasks", "TaskSource", "data_dir", "make_task_source"]

BENCHMARKS: dict[str, str] = {name: ds.path for name, ds in DATASETS.items()}
"""Short names of the benchmark files, relative to :func:`data_dir` (the catalogue,
licences and packaged copies: :mod:`marti_env.tasks.catalog`). Rows without an id get
``<short name>/<row index>`` (e.g. ``"gsm8k/test/17"``)."""

_SPEC_KEYS: dict[str, tuple[str, ...]] = {
    "arithmetic": ("seed", "levels", "size", "split"),
    "file": ("path", "prompt_field", "answer_field", "on_error"),
    "hf": ("name", "split", "config", "prompt_field", "answer_field", "on_error"),
}
_REQUIRED_KEYS = {"file": ("path",), "hf": ("name",)}


class TaskSource(ABC):
    """A finite, indexable collection of tasks.

    Contract: ``len(source) >= 1``; ``source[i]`` for ``0 <= i < len(source)`` is a
    :class:`Task` and always the same one; ``sample(rng)`` is uniform over the indices and
    depends only on the generator's state.
    """

    name: str
    """A short human-readable description (used in logs and errors)."""
    skipped: int = 0
    """Rows of the underlying file or dataset left out by ``on_error="skip"``."""
    skipped_problems: tuple[str, ...] = ()
    """The first few of them, ``"path:LINE: problem"``."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __getitem__(self, index: int) -> Task: ...

    def __iter__(self) -> Iterator[Task]:
        for i in range(len(self)):
            yield self[i]

    def sample(self, rng: np.random.Generator) -> Task:
        """Draw one task uniformly at random with ``rng`` (one ``rng.integers`` call)."""
        return self[int(rng.integers(len(self)))]

    def _check_index(self, index: int) -> int:
        """Normalise ``index`` (negative counts from the end); raise IndexError/TypeError."""
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"{self.name}: task index must be an int, got {index!r}")
        n = len(self)
        i = int(index) + n if index < 0 else int(index)
        if not 0 <= i < n:
            raise IndexError(f"{self.name}: task index {index} out of range for {n} tasks")
        return i


class ListTasks(TaskSource):
    """A fixed list of tasks (from a file, a dataset, or built by hand).

    Args:
        tasks: At least one task; ids must be unique.
        name: Description of where the tasks came from.
        skipped: Rows of that origin left out by ``on_error="skip"`` (kept for metadata).
        skipped_problems: The first few of them, ``"path:LINE: problem"``.

    Raises:
        ValueError: ``tasks`` is empty or has a duplicate id.
        TypeError: An element is not a :class:`Task`.
    """

    def __init__(
        self,
        tasks: Sequence[Task],
        name: str,
        *,
        skipped: int = 0,
        skipped_problems: Sequence[str] = (),
    ) -> None:
        tasks = tuple(tasks)
        if not tasks:
            raise ValueError(f"task source {name!r} has no tasks")
        seen: set[str] = set()
        for i, task in enumerate(tasks):
            if not isinstance(task, Task):
                raise TypeError(f"task source {name!r}: element {i} is not a Task: {task!r}")
            if task.id in seen:
                raise ValueError(f"task source {name!r}: duplicate task id {task.id!r}")
            seen.add(task.id)
        self._tasks = tasks
        self.name = name
        self.skipped = skipped
        self.skipped_problems = tuple(skipped_problems)

    @classmethod
    def from_loaded(cls, loaded: LoadedTasks, name: str) -> ListTasks:
        """The tasks of a :class:`~marti_env.tasks.files.LoadedTasks`, with its skip count.

        Raises:
            ValueError: no task is left (every row was skipped: the message has the first
                problems).
        """
        if not loaded.tasks and loaded.skipped:
            raise ValueError(
                f"task source {name!r} has no tasks: all {loaded.skipped} rows were skipped "
                f"(on_error='skip'); first problems: {'; '.join(loaded.problems)}"
            )
        return cls(loaded.tasks, name, skipped=loaded.skipped, skipped_problems=loaded.problems)

    def with_tasks(self, tasks: Sequence[Task]) -> ListTasks:
        """Other tasks of the same origin (a head, a filtered list): name and skip count kept."""
        return ListTasks(
            tasks, self.name, skipped=self.skipped, skipped_problems=self.skipped_problems
        )

    def __len__(self) -> int:
        return len(self._tasks)

    def __getitem__(self, index: int) -> Task:
        return self._tasks[self._check_index(index)]

    def __repr__(self) -> str:
        return f"ListTasks(<{len(self)} tasks>, name={self.name!r})"


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
    from marti_env.tasks.arithmetic import ArithmeticTasks  # arithmetic imports this module

    if isinstance(spec, TaskSource):
        return spec
    if isinstance(spec, (list, tuple)) and (not spec or isinstance(spec[0], Task)):
        return ListTasks(spec, name="tasks")  # checks every element
    if isinstance(spec, Mapping):
        return _from_dict(spec, limit)
    if isinstance(spec, Path):
        return ListTasks(load_tasks(spec, limit), name=str(spec))
    if isinstance(spec, str):
        if spec == "arithmetic":
            return ArithmeticTasks()
        if spec in BENCHMARKS:
            return _benchmark(spec, limit)
        if spec.startswith("hf:"):
            return _hf_string(spec, limit)
        if spec.lower().endswith((".json", ".jsonl")):
            return ListTasks(load_tasks(spec, limit), name=spec)
    raise ValueError(_unknown_spec_message(spec))


def _head(source: TaskSource, limit: int) -> TaskSource:
    from marti_env.tasks.arithmetic import ArithmeticTasks

    if isinstance(source, ArithmeticTasks):
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
    from marti_env.tasks.arithmetic import ArithmeticTasks

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
    if kind == "file":
        path = rest.pop("path")
        return ListTasks.from_loaded(read_task_file(path, limit, **rest), name=str(path))
    name = rest.pop("name")
    split = rest.pop("split", "test")
    loaded = read_hf_dataset(name, split, limit=limit, **rest)
    return ListTasks.from_loaded(loaded, name=f"hf:{name}:{split}")


def _unknown_spec_message(spec: Any) -> str:
    names = ["arithmetic", *BENCHMARKS]
    close = difflib.get_close_matches(str(spec), names, n=3, cutoff=0.5)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    forms = [
        "a TaskSource",
        "a non-empty list of Task",
        "'arithmetic'",
        f"a benchmark name ({', '.join(BENCHMARKS)}) under data_dir() (${DATA_DIR_ENV})",
        "a path ending in .json or .jsonl",
        "'hf:<name>[:<split>]'",
        f"a dict with 'type' in {sorted(_SPEC_KEYS)}",
    ]
    return f"unknown task source {reprlib.repr(spec)}.{hint} Accepted: {'; '.join(forms)}."
