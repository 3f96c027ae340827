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

A method defined outside this package is named the same way everywhere (``make``,
``env.credit`` of ``marti train`` and ``marti sweep``, ``marti bench credit --methods``) by
an entry point: ``"package.module:Class"`` (imported) or ``"path/to/file.py:Class"`` (the
file is run once per process; a relative path is taken from the working directory). The
class must be a dataclass subclass of :class:`CreditMethod`; registering it is optional
(unregistered, its ``name`` is the entry point string). :func:`credit_source` gives the
path and sha256 of the file that defines a method, for the run's records.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import importlib
import importlib.util
import inspect
import math
import numbers
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from marti_env.entry_points import resolve_entry_point
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


_FILES: dict[Path, ModuleType] = {}  # resolved path -> module: each file runs once


def load_credit_file(path: str | Path) -> ModuleType:
    """Run the Python file ``path`` once per process (by resolved path) and return it.

    Running it registers the methods it decorates with :func:`register_credit`; a second
    call (``--import my.py`` and ``my.py:Class`` in one command) returns the same module
    instead of registering its classes again.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file raised while running (the error's type and message quoted).
    """
    resolved = Path(path).expanduser().resolve()
    if resolved in _FILES:
        return _FILES[resolved]
    if not resolved.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:12]
    name = f"_marti_credit_{resolved.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise ValueError(f"{path}: not a Python file Python can load")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # any error in the user's file is reported as is
        del sys.modules[name]
        raise ValueError(f"running {path} failed: {type(e).__name__}: {e}") from e
    _FILES[resolved] = module
    return module


def _entry_point_class(spec: str) -> type[CreditMethod]:
    """The class an entry point ``"package.module:Class"`` or ``"file.py:Class"`` names."""
    where = f"credit method {spec!r}"
    target, _, attr = spec.rpartition(":")
    if target in _CREDIT:
        raise ValueError(
            f"{where}: {target!r} is a registered method and {attr!r} is not an option "
            f"setting; options are key=value (e.g. '{target}:{attr}=...')"
        )

    def load(target: str) -> Any:
        if target.endswith(".py"):
            return load_credit_file(target)
        return importlib.import_module(target)

    obj = resolve_entry_point(spec, where, load, form="'package.module:Class' or 'file.py:Class'")
    if not (isinstance(obj, type) and issubclass(obj, CreditMethod)):
        raise ValueError(f"{where} is {obj!r}, not a subclass of marti_env.credit.CreditMethod")
    if not dataclasses.is_dataclass(obj):
        raise ValueError(f"{where}: {obj.__name__} must be a dataclass (its fields: options)")
    if "name" not in vars(obj):  # unregistered: it is known by its entry point
        obj.name = spec
    return obj


def credit_source(spec: str | CreditMethod) -> dict[str, str] | None:
    """Where a credit method outside ``marti_env`` is defined: ``{"method", "class", "path",
    "sha256"}`` (the file's absolute path and the sha256 of its bytes now), or ``None``
    for a built-in method.

    ``spec`` is a name, an entry point or a credit object (its class is looked up).

    Raises:
        ValueError: an unknown method (as :func:`make_credit`).
    """
    cls = type(spec) if isinstance(spec, CreditMethod) else _credit_class(spec)
    if cls.__module__.split(".")[0] == "marti_env":
        return None
    out = {
        "method": spec.name if isinstance(spec, CreditMethod) else spec,
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "path": "",  # stays empty for a class defined in an interactive session
        "sha256": "",
    }
    try:
        path = Path(inspect.getfile(cls)).resolve()
    except (TypeError, OSError):
        return out
    if path.is_file():
        out.update(path=str(path), sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def _credit_class(name: str) -> type[CreditMethod]:
    if isinstance(name, str) and name not in _CREDIT and ":" in name:
        return _entry_point_class(name)
    if not isinstance(name, str) or name not in _CREDIT:
        raise ValueError(
            f"unknown credit method {name!r}{_suggest(str(name), _CREDIT)}; "
            f"registered: {', '.join(sorted(_CREDIT))}; or an entry point "
            "'package.module:Class' or 'path/to/file.py:Class'"
        )
    return _CREDIT[name]


def _suggest(word: str, options: Any) -> str:
    close = difflib.get_close_matches(word, list(options), n=3)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
