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

Options: a factory's keyword-only arguments are the reward's options, given to
:func:`make_reward` (and to ``marti_env.make``) as keyword arguments;
:func:`reward_params` lists them. ``"math"`` and ``"math+format"`` take
``max_answer_chars`` (the verifier's cap on an answer's length, default 1000; see
:class:`MathVerifier`).

Label-free (TTRL) rewards are group-level, not per response: see
:mod:`marti_env.rewards.ttrl`.
"""

from __future__ import annotations

import difflib
import inspect
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from marti_env.rewards.format import format_score
from marti_env.rewards.genrm import JudgeReward
from marti_env.rewards.math_verifier import MathVerifier, shared_verifier
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
    "reward_params",
    "verifiers_of",
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
            :func:`shared_verifier` with ``max_answer_chars``, looked up on first use (so
            pickling a ``MathReward()`` does not carry a verifier).
        max_answer_chars: The shared verifier's cap on an answer's length (None: its
            default, 1000). Not allowed together with ``verifier`` (set it there).

    Raises (from :meth:`score`):
        ValueError: ``task.answer`` is None. Label-free tasks need a group-level reward:
            use ``reward="ttrl"`` in an environment, or :func:`ttrl_scores` directly.
    """

    def __init__(
        self, verifier: MathVerifier | None = None, *, max_answer_chars: int | None = None
    ) -> None:
        if verifier is not None and max_answer_chars is not None:
            raise ValueError(
                "MathReward takes a verifier or max_answer_chars, not both: pass "
                "MathVerifier(max_answer_chars=...) as the verifier"
            )
        if max_answer_chars is not None:
            shared_verifier(max_answer_chars)  # validates it (the helper starts on first use)
        self.verifier = verifier
        self.max_answer_chars = max_answer_chars

    def __repr__(self) -> str:
        if self.verifier is not None:
            return f"MathReward({self.verifier!r})"
        if self.max_answer_chars is not None:
            return f"MathReward(max_answer_chars={self.max_answer_chars})"
        return "MathReward()"

    def resolved_verifier(self) -> MathVerifier:
        """The verifier that scores (its ``cache_info()`` counts rejections)."""
        if self.verifier is not None:
            return self.verifier
        if self.max_answer_chars is None:
            return shared_verifier()
        return shared_verifier(self.max_answer_chars)

    def score(self, task: Task, response: str) -> float:
        if task.answer is None:
            raise ValueError(
                f"task {task.id!r} has no reference answer, so MathReward cannot score it; "
                "for label-free training use the TTRL reward (reward='ttrl', or "
                "marti_env.rewards.ttrl_scores over a group of answers)"
            )
        return self.resolved_verifier().score(response, task.answer)


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


def verifiers_of(reward: object) -> list[MathVerifier]:
    """The verifiers ``reward`` scores with: a :class:`MathReward`'s, those of the terms of
    a :class:`WeightedReward` (recursively), none for other rewards. A trainer logs their
    ``cache_info().rejected`` (hostile answers) and ``.timeouts``; e.g.
    ``verifiers_of(env.reward or env.label_free_reward)``."""
    if isinstance(reward, MathReward):
        return [reward.resolved_verifier()]
    if isinstance(reward, WeightedReward):
        found: dict[int, MathVerifier] = {}
        for term, _ in reward.terms:
            for verifier in verifiers_of(term):
                found.setdefault(id(verifier), verifier)
        return list(found.values())
    return []


def _math(*, max_answer_chars: int | None = None) -> Reward:
    return MathReward(max_answer_chars=max_answer_chars)


def _math_plus_format(*, max_answer_chars: int | None = None) -> Reward:
    return WeightedReward(
        [(MathReward(max_answer_chars=max_answer_chars), 1.0), (FormatReward(), 0.1)]
    )


_REGISTRY: dict[str, Callable[..., Reward]] = {
    "math": _math,
    "format": FormatReward,
    "math+format": _math_plus_format,
}
_REGISTRY_LOCK = threading.Lock()


def reward_names() -> list[str]:
    """The names :func:`make_reward` accepts, sorted."""
    return sorted(_REGISTRY)


def reward_params(name: str) -> tuple[str, ...]:
    """The options reward ``name`` accepts: its factory's keyword-only arguments.

    Raises:
        ValueError: an unknown name.
    """
    factory = _factory(name)
    params = inspect.signature(factory).parameters.values()
    return tuple(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)


def register_reward(name: str, factory: Callable[..., Reward], *, overwrite: bool = False) -> None:
    """Make ``make_reward(name, **options)`` return ``factory(**options)``; the factory's
    keyword-only arguments are the reward's options (see :func:`reward_params`).

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


def make_reward(spec: str | Reward | Callable[[Task, str], float], **options: Any) -> Reward:
    """Resolve ``spec`` into a :class:`Reward`.

    * a registered name (see the module docstring and :func:`reward_names`) → a new reward,
      built with ``options`` (see :func:`reward_params`);
    * an object with ``score(task, response)`` → returned unchanged;
    * any other callable ``(task, response) -> float`` → wrapped in :class:`JudgeReward`.

    Raises:
        ValueError: an unknown name (the message lists the known names and the closest
            one), an option the reward does not take (naming its options), or options
            given with a reward object or callable.
        TypeError: anything else.
    """
    if isinstance(spec, str):
        factory = _factory(spec)
        allowed = reward_params(spec)
        for key in options:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ValueError(
                    f"reward {spec!r} has no option {key!r}; its options: "
                    f"{', '.join(allowed) or 'none'}.{hint}"
                )
        return factory(**options)
    if options:
        raise ValueError(
            f"options {sorted(options)} given with a reward object; set them on the object"
        )
    if isinstance(spec, Reward):
        return spec
    if callable(spec):
        return JudgeReward(spec)
    raise TypeError(
        f"reward spec must be a name, a Reward or a callable, got {type(spec).__name__}"
    )


def _factory(name: str) -> Callable[..., Reward]:
    factory = _REGISTRY.get(name)
    if factory is None:
        known = reward_names()
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown reward {name!r}; known rewards: {', '.join(known)}.{hint}")
    return factory
