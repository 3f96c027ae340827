"""What a policy can do beyond ``generate``, declared, and the request types a driver speaks.

A :class:`~marti_trainer.policies.Policy` needs only ``generate``. A backend that can serve
a rollout better says so by implementing one of these small protocols (HF, vLLM and the
OpenAI-compatible backends list them among their bases), and the rollout
(:mod:`marti_trainer.rollout.drivers`) asks ``isinstance`` instead of probing for names:

``Policy.concurrent_requests`` (a class attribute, default False)
    The backend serves many concurrent ``generate`` calls itself (a server, a simulator):
    the rollout sends each request on its own (the ``concurrent`` driver).
:class:`SubmitsRequests`
    ``submit(prompts, params, adapter) -> Future``: a non-blocking ``generate``, so
    concurrent requests need no thread each.
:class:`GeneratesEach`
    ``generate_each(prompts, params, adapter)``: one completion per prompt, each with its
    own :class:`SamplingParams`, in as few batched calls as the backend allows.
:class:`ContinuousBatching`
    ``continuous_driver(on_done, max_rows) -> Driver``: the backend's own iteration-level
    batching driver (the ``continuous`` driver).

The driver contract lives here too, below both the backends that bring a driver and the
rollout that uses them: a :class:`GenerationRequest`, the :data:`DoneCallback` and the
:class:`Driver` interface.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from marti_trainer.policies.base import Generation, Message, Policy, SamplingParams

__all__ = [
    "ContinuousBatching",
    "DoneCallback",
    "Driver",
    "GeneratesEach",
    "GenerationRequest",
    "SubmitsRequests",
]


@dataclass(eq=False)
class GenerationRequest:
    """One generation request of a rollout.

    Attributes:
        messages: The chat prompt.
        params: Sampling parameters; ``n == 1`` and ``seed`` set per request.
        adapter: LoRA adapter name, or None for the base weights.
        tag: The engine's bookkeeping (which episode, agent and round); drivers ignore it.
        submitted_at: ``time.perf_counter()`` when it was handed to a driver.
    """

    messages: tuple[Message, ...]
    params: SamplingParams
    adapter: str | None
    tag: Any = None
    submitted_at: float = field(default=0.0, compare=False)


DoneCallback = Callable[[GenerationRequest, Generation | None, BaseException | None], None]
"""``on_done(request, generation, error)``: exactly one of generation / error is None."""


class Driver(ABC):
    """Serves a rollout's requests for one policy in the background.

    ``submit`` returns at once; the driver calls ``on_done(request, generation, error)``
    from its own thread when a request finished. ``kind`` names it in metrics.
    """

    kind: str

    def __init__(self, policy: Policy, on_done: DoneCallback) -> None:
        self.policy = policy
        self.on_done = on_done

    @abstractmethod
    def submit(self, requests: Sequence[GenerationRequest]) -> None:
        """Start serving ``requests`` (returns at once)."""

    @abstractmethod
    def close(self) -> None:
        """Stop: drop requests not started; a call already inside the backend may finish
        in the background but its result is discarded. Idempotent."""


@runtime_checkable
class SubmitsRequests(Protocol):
    """A policy with a non-blocking ``generate``."""

    def submit(
        self,
        prompts: Sequence[Sequence[Message]],
        params: SamplingParams,
        adapter: str | None = None,
    ) -> Future[list[list[Generation]]]:
        """Start ``generate(prompts, params, adapter)``; its result (or error) is the future's.

        Bad arguments (an unknown adapter) raise here, in the caller.
        """
        ...


@runtime_checkable
class GeneratesEach(Protocol):
    """A policy that samples requests with different parameters in one batched call."""

    def generate_each(
        self,
        prompts: Sequence[Sequence[Message]],
        params: Sequence[SamplingParams],
        adapter: str | None = None,
    ) -> list[Generation]:
        """One completion per prompt, ``params[i]`` (``n == 1``) for ``prompts[i]``.

        ``result[i]`` equals ``generate([prompts[i]], params[i], adapter)[0][0]`` up to the
        floating-point effect of batching; errors as ``Policy.generate``, with
        ``request_indices`` into ``prompts``.
        """
        ...


@runtime_checkable
class ContinuousBatching(Protocol):
    """A policy that brings its own iteration-level batching driver."""

    def continuous_driver(self, on_done: DoneCallback, max_rows: int) -> Driver:
        """A driver whose requests join and leave the running batch at every step.

        ``on_done`` is called from the driver's thread; at most ``max_rows`` requests are in
        the batch at once; nothing else may use the policy while the driver is open.
        """
        ...
