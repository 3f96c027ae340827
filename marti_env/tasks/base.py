"""The task-source interface, :class:`TaskSource`, and its plain implementation, :class:`ListTasks`.

Every source of problems (procedural arithmetic, a file, a dataset) is a :class:`TaskSource`;
:func:`~marti_env.tasks.source.make_task_source` builds one from a config value.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence

import numpy as np

from marti_env.tasks.files import LoadedTasks
from marti_env.tasks.task import Task

__all__ = ["ListTasks", "TaskSource"]


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


def check_generator_args(
    seed: object,
    levels: object,
    size: object,
    split: object,
    known_levels: Sequence[int],
    splits: Sequence[str],
) -> tuple[int, ...]:
    """Validate a procedural generator's ``seed``, ``levels``, ``size`` and ``split`` (the
    arguments :class:`~marti_env.tasks.arithmetic.ArithmeticTasks` and the code generator
    share); returns ``levels`` as a tuple of ints.

    Raises:
        ValueError: naming the argument and the value.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    if isinstance(levels, (str, bytes)) or not isinstance(levels, Sequence):
        raise ValueError(f"levels must be a sequence of integers in {known_levels}, got {levels!r}")
    chosen = tuple(levels)
    if not chosen or any(isinstance(lv, bool) or lv not in known_levels for lv in chosen):
        raise ValueError(f"levels must be a non-empty sequence from {known_levels}, got {levels!r}")
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"levels must not repeat, got {levels!r}")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be an integer >= 1, got {size!r}")
    if split not in splits:
        raise ValueError(f"split must be one of {sorted(splits)}, got {split!r}")
    return tuple(int(lv) for lv in chosen)
