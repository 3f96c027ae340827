"""The unit of work an environment poses: one problem with a reference answer."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

_KINDS: dict[str, type] = {}
"""Task kinds by name (filled by subclasses that set ``kind``)."""


@dataclass(frozen=True)
class Task:
    """One problem.

    Attributes:
        id: Stable identifier, unique within its source (e.g. ``"gsm8k/test/17"``).
        prompt: The problem statement shown to the agents (plain text or LaTeX).
        answer: The reference final answer as a string (LaTeX allowed), or ``None`` for
            label-free use (TTRL-style rewards); verifiers compare against it.
        source: Where the task came from (``"arithmetic/level1"``, a file path, a dataset name).
    """

    id: str
    prompt: str
    answer: str | None
    source: str = ""

    kind: ClassVar[str] = "task"
    """A subclass's name in serialised records (``"code"``, ``"expr"``), so
    :meth:`Task.from_dict` gives back the same kind of task, with its tests."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in vars(cls):
            _KINDS[cls.kind] = cls

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.kind != "task":
            data["kind"] = self.kind
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        """The task ``to_dict`` wrote; on :class:`Task` itself, of the kind it names.

        Raises:
            ValueError: a kind no imported task class has (named).
        """
        kind = data.get("kind", "task")
        if cls is Task and kind != "task":
            if kind not in _KINDS:
                raise ValueError(
                    f"task {data.get('id')!r} is of kind {kind!r}, which no task class "
                    f"registers; known: {sorted(_KINDS)}"
                )
            return _KINDS[kind].from_dict(data)
        return cls(
            id=str(data["id"]),
            prompt=str(data["prompt"]),
            answer=None if data.get("answer") is None else str(data["answer"]),
            source=str(data.get("source", "")),
        )
