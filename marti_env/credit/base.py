"""The credit-assignment protocol: a finished episode in, one reward per turn out.

A method is a small class (a dataclass whose fields are its hyperparameters) with one
method, :meth:`CreditMethod.assign`. It may keep state across episodes (e.g. a running
average of each agent's rewards for a historical baseline); such state lives on the
object, is exposed by ``state_dict``/``load_state_dict`` for checkpoints, and is updated
only by ``assign``. Methods are registered by name::

    @register_credit("my_method")
    @dataclass
    class MyMethod(CreditMethod):
        alpha: float = 0.5
        def assign(self, episode, rule): ...

and chosen with ``marti_env.make("mad-v0", credit="my_method", alpha=0.3)``.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from marti_env.record import EpisodeRecord


@dataclass(frozen=True)
class FinalAnswerRule:
    """The env's final-answer rule, bound to one episode, for counterfactual questions.

    Attributes:
        inputs: The answers the rule reads, by agent (e.g. the last debate round).
        choose: Answers by agent -> the team's final answer (the workflow's rule, with the
            episode's tie order).
        score: A final answer -> the episode outcome it would give (e.g. 1.0 if correct).
    """

    inputs: Mapping[str, str | None]
    choose: Callable[[Mapping[str, str | None]], str | None]
    score: Callable[[str | None], float]

    def outcome(self, answers: Mapping[str, str | None] | None = None) -> float:
        """The outcome the team would get if the rule read ``answers`` (default: its inputs)."""
        return self.score(self.choose(self.inputs if answers is None else answers))


class CreditMethod(ABC):
    """Turns a finished episode into one reward per turn.

    Subclasses are dataclasses; their fields are the hyperparameters ``make`` accepts.
    """

    name: ClassVar[str] = "?"

    @abstractmethod
    def assign(self, episode: EpisodeRecord, rule: FinalAnswerRule) -> Sequence[float]:
        """Rewards for ``episode.turns``, in order (same length).

        ``episode`` carries the turns (agent, role, round, answer, verifier ``score``), the
        final answer and the ``outcome``; ``rule`` answers counterfactual questions.
        """

    def state_dict(self) -> dict[str, Any]:
        """State carried across episodes (empty for stateless methods)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state:
            raise ValueError(f"credit method '{self.name}' keeps no state, got {sorted(state)}")


_CREDIT: dict[str, type[CreditMethod]] = {}


def register_credit(name: str) -> Callable[[type[CreditMethod]], type[CreditMethod]]:
    """Class decorator registering a credit method under ``name``."""

    def wrap(cls: type[CreditMethod]) -> type[CreditMethod]:
        if name in _CREDIT and _CREDIT[name] is not cls:
            raise ValueError(f"credit method '{name}' is already registered ({_CREDIT[name]})")
        if not dataclasses.is_dataclass(cls):
            raise TypeError(
                f"credit method '{name}' must be a dataclass (its fields are its options)"
            )
        cls.name = name
        _CREDIT[name] = cls
        return cls

    return wrap


def credit_methods() -> list[str]:
    """Registered method names."""
    return sorted(_CREDIT)


def credit_params(name: str) -> tuple[str, ...]:
    """The option names (dataclass fields) method ``name`` accepts."""
    return tuple(f.name for f in dataclasses.fields(_credit_class(name)) if f.init)


def make_credit(spec: str | CreditMethod, **options: Any) -> CreditMethod:
    """A credit method from its registered name and options, or an instance as is."""
    if isinstance(spec, CreditMethod):
        if options:
            raise ValueError(
                f"options {sorted(options)} given with a credit object; set them on the object"
            )
        return spec
    cls = _credit_class(spec)
    allowed = credit_params(spec)
    for key in options:
        if key not in allowed:
            raise ValueError(
                f"credit method '{spec}' has no option '{key}'{_suggest(key, allowed)}; "
                f"its options: {', '.join(allowed) or 'none'}"
            )
    return cls(**options)


def checked_rewards(
    method: CreditMethod, episode: EpisodeRecord, rule: FinalAnswerRule
) -> list[float]:
    """``method.assign`` with its output validated, naming the method and the culprit.

    Contract: the output must be a sequence (list, tuple, 1-D array) of exactly
    ``len(episode.turns)`` real numbers, each finite. Otherwise ``ValueError`` names the
    method, and for a bad value the agent, turn and round it was meant for.
    """
    raw = method.assign(episode, rule)
    where = f"env {episode.env_id}, task {episode.task.id}"
    if isinstance(raw, (str, bytes)) or not hasattr(raw, "__iter__"):
        raise ValueError(
            f"credit method '{method.name}' returned {type(raw).__name__}, not a sequence of "
            f"{len(episode.turns)} rewards (one per turn; {where})"
        )
    rewards = list(raw)
    if len(rewards) != len(episode.turns):
        raise ValueError(
            f"credit method '{method.name}' returned {len(rewards)} rewards for "
            f"{len(episode.turns)} turns ({where})"
        )
    out = []
    for turn, r in zip(episode.turns, rewards, strict=True):
        if not isinstance(r, numbers.Real):
            raise ValueError(
                f"credit method '{method.name}' gave agent '{turn.agent}' (turn {turn.index}, "
                f"round {turn.round}) a reward that is not a number: {r!r} ({where})"
            )
        value = float(r)
        if not math.isfinite(value):
            raise ValueError(
                f"credit method '{method.name}' gave agent '{turn.agent}' (turn {turn.index}, "
                f"round {turn.round}) a non-finite reward {r!r} ({where})"
            )
        out.append(value)
    return out


def _credit_class(name: str) -> type[CreditMethod]:
    if not isinstance(name, str) or name not in _CREDIT:
        raise ValueError(
            f"unknown credit method {name!r}{_suggest(str(name), _CREDIT)}; "
            f"registered: {', '.join(sorted(_CREDIT))}"
        )
    return _CREDIT[name]


def _suggest(word: str, options: Any) -> str:
    close = difflib.get_close_matches(word, list(options), n=3)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
