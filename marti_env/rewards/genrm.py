"""GenRM hook: a reward computed by a user-supplied judge (e.g. an LLM grading responses)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

from marti_env.tasks.task import Task

__all__ = ["Judge", "JudgeReward"]

Judge = Callable[[Task, str], float]
"""``judge(task, response) -> float``: a score, ideally in [0, 1]."""


def _short_repr(value: object, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:  # e.g. an int too long to print, or a broken __repr__
        return f"<unprintable {type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class JudgeReward:
    """A :class:`Reward` that asks ``judge(task, response)`` and validates its answer.

    Args:
        judge: Any callable ``(task, response) -> real number``, e.g. a wrapper that prompts
            a generative reward model and parses its grade. Exceptions it raises propagate
            unchanged.
        name: Used in error messages; defaults to the judge's ``__qualname__``/``repr``.
        clip: If True (default), a finite value outside [0, 1] is clipped into it
            (``1.3`` → 1.0, ``-0.2`` → 0.0): a judge on another scale saturates, so rescale
            it yourself. If False such a value raises ``ValueError``.

    Raises (from :meth:`score`):
        ValueError: The judge returned a non-number (``None``, ``str``, ``complex``...) or a
            non-finite number (``nan``, ``inf``); the message names the judge and task id.
            ``bool`` counts as a number (``True`` → 1.0).
    """

    def __init__(self, judge: Judge, *, name: str | None = None, clip: bool = True) -> None:
        if not callable(judge):
            raise TypeError(f"judge must be callable, got {type(judge).__name__}")
        self.judge = judge
        self.name = name or getattr(judge, "__qualname__", None) or repr(judge)
        self.clip = clip

    def __repr__(self) -> str:
        return f"JudgeReward({self.name!r}, clip={self.clip})"

    def score(self, task: Task, response: str) -> float:
        """Return the judge's score of ``response`` for ``task``, validated, in [0, 1]."""
        value = self.judge(task, response)
        if not isinstance(value, numbers.Real):
            raise ValueError(
                f"judge {self.name!r} returned {type(value).__name__} {_short_repr(value)} "
                f"for task {task.id!r}; expected a real number in [0, 1]"
            )
        raw = value
        try:
            value = float(raw)
        except OverflowError:  # a huge int or Fraction: finite, far outside [0, 1]
            value = 2.0 if raw > 0 else -1.0
        if not math.isfinite(value):
            raise ValueError(
                f"judge {self.name!r} returned non-finite {value} for task {task.id!r}"
            )
        if not 0.0 <= value <= 1.0:
            if not self.clip:
                raise ValueError(
                    f"judge {self.name!r} returned {_short_repr(raw)} for task {task.id!r}, "
                    "outside [0, 1] (clip=False)"
                )
            value = min(1.0, max(0.0, value))
        return value
