"""The ``Reward`` protocol used by environments, its implementations and a small registry.

A reward scores one response to one task: ``reward.score(task, response) -> float`` in
[0, 1]. Environments take a reward object, or a spec resolved by :func:`make_reward`:

=================  =======================================================================
name               reward
=================  =======================================================================
``"math"``         :class:`MathReward` with the shared :func:`default_verifier`
``"format"``       :class:`FormatReward`
``"math+format"``  ``WeightedReward([(MathReward(), 1.0), (FormatReward(), 0.1)])``:
                   ``(math + 0.1 * format) / 1.1``, i.e. 1.0 for a right boxed answer,
                   ~0.09 for a wrong boxed one, 0.0 for no box (a signal from step one
                   for models that do not box yet)
=================  =======================================================================

Label-free (TTRL) rewards are group-level, not per response: see
:mod:`marti_env.rewards.ttrl`.
"""

from __future__ import annotations

import difflib
import math
import threading
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from marti_env.rewards.format import format_score
from marti_env.rewards.genrm import JudgeReward
from marti_env.rewards.math_verifier import MathVerifier, default_verifier
from marti_env.tasks.task import Task

__all__ = [
    "FormatReward",
    "JudgeReward",
    "MathReward",
    "Reward",
    "WeightedReward",
    "make_reward",
    "register_reward",
    "reward_names",
]


@runtime_checkable
class Reward(Protocol):
    """Anything with ``score(task, response) -> float`` returning a value in [0, 1]."""

    def score(self, task: Task, response: str) -> float:
        """Score ``response`` (an agent's full text) as an answer to ``task``."""
        ...


class MathReward:
    """1.0 if the response's last ``\\boxed{}`` answer equals ``task.answer``, else 0.0.

    Args:
        verifier: The :class:`MathVerifier` to use; None (default) means the process-wide
            :func:`default_verifier`, looked up on first use (so pickling a ``MathReward()``
            does not carry a verifier).

    Raises (from :meth:`score`):
        ValueError: ``task.answer`` is None. Label-free tasks need a group-level reward:
            use ``reward="ttrl"`` in an environment, or :func:`ttrl_scores` directly.
    """

    def __init__(self, verifier: MathVerifier | None = None) -> None:
        self.verifier = verifier

    def __repr__(self) -> str:
        return "MathReward()" if self.verifier is None else f"MathReward({self.verifier!r})"

    def score(self, task: Task, response: str) -> float:
        if task.answer is None:
            raise ValueError(
                f"task {task.id!r} has no reference answer, so MathReward cannot score it; "
                "for label-free training use the TTRL reward (reward='ttrl', or "
                "marti_env.rewards.ttrl_scores over a group of answers)"
            )
        verifier = self.verifier if self.verifier is not None else default_verifier()
        return verifier.score(response, task.answer)


class FormatReward:
    """1.0 if the response has a non-empty, balanced final ``\\boxed{}``; see format_score."""

    def __repr__(self) -> str:
        return "FormatReward()"

    def score(self, task: Task, response: str) -> float:
        return format_score(response)


class WeightedReward:
    """A weighted mean of rewards: ``sum(w_i * r_i) / sum(w_i)``, so it stays in [0, 1].

    Args:
        terms: ``[(reward, weight), ...]``; weights must be finite and >= 0 with a positive
            sum. ``WeightedReward([(MathReward(), 1.0), (FormatReward(), 0.1)])`` scores
            ``(math + 0.1 * format) / 1.1``.
    """

    def __init__(self, terms: Sequence[tuple[Reward, float]]) -> None:
        checked: list[tuple[Reward, float]] = []
        for i, term in enumerate(terms):
            if not (isinstance(term, tuple) and len(term) == 2):
                raise TypeError(f"term {i} must be a (reward, weight) pair, got {term!r}")
            reward, weight = term
            if not isinstance(reward, Reward):
                raise TypeError(f"term {i}: {reward!r} has no score(task, response) method")
            if isinstance(weight, bool) or not isinstance(weight, (int, float)):
                raise TypeError(f"term {i}: weight must be a number, got {weight!r}")
            if not (math.isfinite(weight) and weight >= 0):
                raise ValueError(f"term {i}: weight must be finite and >= 0, got {weight!r}")
            checked.append((reward, float(weight)))
        self.total = math.fsum(w for _, w in checked)
        if not checked or self.total <= 0:
            raise ValueError("WeightedReward needs at least one term with a positive weight")
        self.terms = tuple(checked)

    def __repr__(self) -> str:
        inner = ", ".join(f"({r!r}, {w})" for r, w in self.terms)
        return f"WeightedReward([{inner}])"

    def score(self, task: Task, response: str) -> float:
        total = math.fsum(w * r.score(task, response) for r, w in self.terms if w)
        return min(1.0, max(0.0, total / self.total))


def _math_plus_format() -> Reward:
    return WeightedReward([(MathReward(), 1.0), (FormatReward(), 0.1)])


_REGISTRY: dict[str, Callable[[], Reward]] = {
    "math": MathReward,
    "format": FormatReward,
    "math+format": _math_plus_format,
}
_REGISTRY_LOCK = threading.Lock()


def reward_names() -> list[str]:
    """The names :func:`make_reward` accepts, sorted."""
    return sorted(_REGISTRY)


def register_reward(name: str, factory: Callable[[], Reward], *, overwrite: bool = False) -> None:
    """Make ``make_reward(name)`` return ``factory()``.

    Raises:
        ValueError: ``name`` is empty or already registered (unless ``overwrite``).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"reward name must be a non-empty str, got {name!r}")
    if not callable(factory):
        raise TypeError(f"factory must be callable, got {type(factory).__name__}")
    with _REGISTRY_LOCK:
        if name in _REGISTRY and not overwrite:
            raise ValueError(f"reward {name!r} is already registered (pass overwrite=True)")
        _REGISTRY[name] = factory


def make_reward(spec: str | Reward | Callable[[Task, str], float]) -> Reward:
    """Resolve ``spec`` into a :class:`Reward`.

    * a registered name (see the module docstring and :func:`reward_names`) → a new reward;
    * an object with ``score(task, response)`` → returned unchanged;
    * any other callable ``(task, response) -> float`` → wrapped in :class:`JudgeReward`.

    Raises:
        ValueError: an unknown name; the message lists the known names and the closest one.
        TypeError: anything else.
    """
    if isinstance(spec, str):
        factory = _REGISTRY.get(spec)
        if factory is None:
            known = reward_names()
            close = difflib.get_close_matches(spec, known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"unknown reward {spec!r}; known rewards: {', '.join(known)}.{hint}")
        return factory()
    if isinstance(spec, Reward):
        return spec
    if callable(spec):
        return JudgeReward(spec)
    raise TypeError(
        f"reward spec must be a name, a Reward or a callable, got {type(spec).__name__}"
    )
