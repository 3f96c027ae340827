"""The unit of work an environment poses: one problem with a reference answer."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        return cls(
            id=str(data["id"]),
            prompt=str(data["prompt"]),
            answer=None if data.get("answer") is None else str(data["answer"]),
            source=str(data.get("source", "")),
        )
