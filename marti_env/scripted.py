"""Scripted agents for demos, tests and the fast credit benchmarks: no LLM involved.

A :class:`NoisyOracle` knows the task's answer and gives it with a fixed probability, else
a wrong one; a debater that sees other responses can be made to copy the majority with a
fixed probability (``persuadability``). They exercise every code path of an env in
microseconds, so they are for tests and demos, never a stand-in for a real policy.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from marti_env.record import Message
from marti_env.tasks.task import Task

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


@dataclass
class NoisyOracle:
    """Answers right with probability ``accuracy``; in later rounds, adopts the most common
    answer it is shown with probability ``persuadability``.

    Args:
        accuracy: Probability of answering the task's reference answer, in [0, 1].
        persuadability: Probability of copying the majority of the shown answers instead.
        seed: Seed of its own generator (each call draws the same amount).
    """

    accuracy: float = 0.5
    persuadability: float = 0.0
    seed: int = 0
    _rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("accuracy", "persuadability"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        self._rng = np.random.default_rng(self.seed)

    def __call__(self, messages: tuple[Message, ...], task: Task) -> str:
        u_persuade, u_right, wrong = (
            self._rng.random(),
            self._rng.random(),
            self._rng.integers(1, 9),
        )
        content = messages[-1]["content"] if messages else ""
        shown = [a for a in _BOXED.findall(content) if a.strip()]
        if shown and u_persuade < self.persuadability:
            answer = Counter(shown).most_common(1)[0][0]
        elif u_right < self.accuracy:
            answer = task.answer
        else:
            answer = _wrong(task.answer, int(wrong))
        return f"Let me think step by step. The answer is \\boxed{{{answer}}}."


def _wrong(answer: str | None, offset: int) -> str:
    try:
        return str(int(answer) + offset)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return f"{answer}+{offset}"
