"""A :class:`~marti_trainer.policies.Policy` whose model lives in Ray actors.

:class:`RayPolicy` forwards ``generate`` and ``generate_each`` to one or more actors that
serve the policy key it names (:class:`~marti_trainer.distributed.actors.RolloutWorker` s,
or a :class:`~marti_trainer.distributed.actors.TrainerActor` in colocated mode). The
requests of a call are split into contiguous shards of near-equal size, one per actor, run
in parallel and reassembled in order. Because every rollout request carries its own seed
(and the ``hf`` backend's samples depend only on that seed, the prompt and the weights), a
sharded call returns what one local policy would: the rollout engine runs unchanged over
remote models. It drives a ``RayPolicy`` with its ``batch`` driver, one ``generate_each``
per round.

``load_weights`` and ``add_adapter`` broadcast to every actor (the payload is put in the
object store once). ``close`` only marks the policy closed: the actors belong to whoever
created them (:class:`~marti_trainer.distributed.ray_team.RayTeam`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import ray
import ray.exceptions as rex

from marti_trainer.distributed.actors import WeightUpdate
from marti_trainer.distributed.errors import DeadActorError, get
from marti_trainer.policies.base import (
    Generation,
    Message,
    Policy,
    PolicyError,
    SamplingParams,
    validate_prompts,
)
from marti_trainer.policies.capabilities import GeneratesEach

__all__ = ["RayPolicy", "shards"]


def shards(n: int, k: int) -> list[tuple[int, int]]:
    """``k`` contiguous ``(start, end)`` ranges covering ``range(n)``, sizes differing by at
    most one; empty ranges are left out (fewer requests than actors)."""
    bounds = [i * n // k for i in range(k + 1)]
    return [(a, b) for a, b in itertools.pairwise(bounds) if b > a]


class RayPolicy(Policy, GeneratesEach):
    """See the module docstring.

    Args:
        actors: Ray actor handles with ``generate(prompts, params, adapter, key)``,
            ``generate_each(...)`` and ``load_weights(key, update)``.
        key: The policy key the actors serve this policy under (a unit name).
        tokenizer: The model's tokenizer (the rollout engine never needs it; callers may).
        max_context_tokens: The model's context length.
        role: How errors name the actors (``"rollout worker"`` or ``"trainer"``).
        agents: The agents this policy serves, for error messages.
    """

    def __init__(
        self,
        actors: Sequence[Any],
        *,
        key: str,
        tokenizer: Any,
        max_context_tokens: int,
        role: str = "rollout worker",
        agents: Sequence[str] = (),
    ) -> None:
        if not actors:
            raise ValueError("RayPolicy needs at least one actor")
        self.actors = list(actors)
        self.key = key
        self.role = role
        self.agents = tuple(agents)
        self._tokenizer = tokenizer
        self._max_context = int(max_context_tokens)
        self._closed = False

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def max_context_tokens(self) -> int:
        return self._max_context

    def _name(self, i: int) -> str:
        return f"worker {i}" if self.role == "rollout worker" else self.key

    # ------------------------------------------------------------------ generation
    def generate(
        self,
        prompts: Sequence[Sequence[Message]],
        params: SamplingParams,
        adapter: str | None = None,
    ) -> list[list[Generation]]:
        self._check_open()
        validate_prompts(prompts)
        prompts = [list(p) for p in prompts]
        parts = shards(len(prompts), len(self.actors))
        refs = [
            self.actors[i].generate.remote(prompts[a:b], params, adapter, self.key)
            for i, (a, b) in enumerate(parts)
        ]
        return [
            g
            for i, (ref, span) in enumerate(zip(refs, parts, strict=True))
            for g in self._get(ref, i, span)
        ]

    def generate_each(
        self,
        prompts: Sequence[Sequence[Message]],
        params: Sequence[SamplingParams],
        adapter: str | None = None,
    ) -> list[Generation]:
        """One completion per prompt with its own parameters (see
        :func:`marti_trainer.rollout.drivers.generate_each`), sharded over the actors."""
        self._check_open()
        if len(prompts) != len(params):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} SamplingParams")
        validate_prompts(prompts)
        prompts = [list(p) for p in prompts]
        parts = shards(len(prompts), len(self.actors))
        refs = [
            self.actors[i].generate_each.remote(prompts[a:b], list(params[a:b]), adapter, self.key)
            for i, (a, b) in enumerate(parts)
        ]
        return [
            g
            for i, (ref, span) in enumerate(zip(refs, parts, strict=True))
            for g in self._get(ref, i, span)
        ]

    def _get(self, ref: Any, i: int, span: tuple[int, int]) -> list:
        start, end = span
        try:
            return get(ref, self.role, self._name(i), self.agents)
        except DeadActorError:
            raise
        except rex.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            where = f"{self.role} {self._name(i)}"
            if isinstance(cause, PolicyError):  # indices are the shard's: map them back
                new = type(cause).__new__(type(cause))
                PolicyError.__init__(
                    new, f"{where}: {cause}", [start + j for j in cause.request_indices]
                )
                raise new from exc
            if isinstance(cause, ValueError):
                raise ValueError(f"{where}: {cause}") from exc
            raise PolicyError(
                f"{where} failed: {type(cause).__name__ if cause else 'error'}: {cause or exc}",
                range(start, end),
            ) from exc

    # ------------------------------------------------------------------ weights
    def load_weights(self, source: Mapping[str, Any] | str | Path | WeightUpdate) -> None:
        """Send new base weights to every actor: a state dict, a :class:`WeightUpdate`, or a
        directory (which must exist on every actor's node)."""
        self._check_open()
        if isinstance(source, Path):
            source = str(source)
        self._broadcast(source if isinstance(source, str) else ray.put(source))

    def add_adapter(self, name: str, path: str | Path) -> None:
        """Send the PEFT adapter directory ``path`` (read here) to every actor as ``name``."""
        self._check_open()
        folder = Path(path)
        if not (folder / "adapter_config.json").is_file():
            raise ValueError(f"{folder} is not a PEFT adapter directory (no adapter_config.json)")
        files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
        self._broadcast(ray.put(WeightUpdate(adapter=name, files=files)))

    def _broadcast(self, payload: Any) -> None:
        refs = [a.load_weights.remote(self.key, payload) for a in self.actors]
        for i, ref in enumerate(refs):
            get(ref, self.role, self._name(i), self.agents)

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise PolicyError("this RayPolicy is closed")
