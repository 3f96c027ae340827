"""The rollout's drivers: how generation requests reach a policy, and which driver serves it.

A rollout turns every active agent of every running episode into a
:class:`~marti_trainer.policies.capabilities.GenerationRequest` (chat messages, sampling
parameters with a per-request seed, adapter). A *driver* owns one policy object and serves
requests asynchronously: ``submit`` returns at once and the driver calls ``on_done(request,
generation, error)`` from its own thread when the request finished. The rollout engine keeps
at most ``max_concurrency`` requests submitted and not yet done, over all drivers; a driver
needs no limit of its own.

Drivers (chosen per policy by :func:`make_driver` from the abilities the policy declares,
:mod:`marti_trainer.policies.capabilities`; ``kind="auto"`` picks the first that fits):

``concurrent``
    For backends that serve concurrent calls themselves (a server behind the ``openai``
    backend, :class:`~marti_trainer.policies.simulated.SimulatedPolicy`; they set
    ``concurrent_requests = True``). Each request is its own ``generate`` call, made on a
    thread of a pool, or without threads through the policy's ``submit``
    (:class:`~marti_trainer.policies.capabilities.SubmitsRequests`) when it has one; the
    backend batches whatever is in flight (vLLM's continuous batching), so a request's
    result returns as soon as *it* is done.
``continuous``
    For backends that bring their own iteration-level batching driver
    (:class:`~marti_trainer.policies.capabilities.ContinuousBatching`):
    :class:`~marti_trainer.policies.hf.HFPolicy`
    (:class:`~marti_trainer.policies.hf_continuous.ContinuousDriver`, one worker thread) and
    :class:`~marti_trainer.policies.vllm.VLLMPolicy`. New requests join the running decode
    batch at the next token step and a finished row leaves it (and returns) at once, so
    short responses never wait for long ones.
``batch``
    Any policy: one worker thread takes *everything* pending whenever it is free and runs
    one batched call per (adapter, sampling parameters up to the seed) with
    :func:`generate_each`. A call returns when its longest response is done: this is
    static batching, the synchronous baseline of the ``hf`` backend.

Per-request seeds: ``Policy.generate`` takes one ``SamplingParams`` per call, but results
must not depend on which requests share a call, so every request carries its own seed.
:func:`generate_each` runs a list of requests with their own parameters in as few calls as
possible: natively if the policy is
:class:`~marti_trainer.policies.capabilities.GeneratesEach` (``HFPolicy``: its per-row
random streams and budgets let requests that differ by seed and ``max_tokens`` share one
batched decode), else one ``generate`` call per distinct parameter set.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Literal

from marti_trainer.policies.base import (
    Generation,
    Message,
    Policy,
    SamplingParams,
    run_grouped,
)
from marti_trainer.policies.capabilities import (
    ContinuousBatching,
    DoneCallback,
    Driver,
    GeneratesEach,
    GenerationRequest,
    SubmitsRequests,
)
from marti_trainer.policies.worker_driver import WorkerDriver

__all__ = [
    "DRIVER_KINDS",
    "BatchDriver",
    "ConcurrentDriver",
    "DoneCallback",
    "Driver",
    "DriverKind",
    "GenerationRequest",
    "WorkerDriver",
    "generate_each",
    "make_driver",
]

DriverKind = Literal["auto", "concurrent", "continuous", "batch"]
DRIVER_KINDS: tuple[str, ...] = ("auto", "concurrent", "continuous", "batch")


def _batch_key(request: GenerationRequest) -> tuple[str | None, SamplingParams]:
    """Requests with equal keys may share one batched call (see :func:`generate_each`)."""
    return request.adapter, dataclasses.replace(request.params, seed=None, max_tokens=1)


def generate_each(
    policy: Policy,
    prompts: Sequence[Sequence[Message]],
    params: Sequence[SamplingParams],
    adapter: str | None = None,
) -> list[Generation]:
    """One completion per prompt, each sampled with its own parameters (``n == 1``).

    ``result[i]`` equals ``policy.generate([prompts[i]], params[i], adapter)[0][0]`` (up to
    the floating-point effect of batching, see the backend's docs), in as few calls as the
    backend allows: the policy's own ``generate_each`` if it declares one
    (:class:`~marti_trainer.policies.capabilities.GeneratesEach`), else one ``generate``
    call per distinct ``SamplingParams``.

    Raises:
        ValueError: lengths differ or some ``params[i].n != 1``.
        PolicyError: as ``Policy.generate``; ``request_indices`` index into ``prompts``.
    """
    if len(prompts) != len(params):
        raise ValueError(f"{len(prompts)} prompts but {len(params)} SamplingParams")
    if any(p.n != 1 for p in params):
        raise ValueError("generate_each samples one completion per prompt: use n=1")
    if not prompts:
        return []
    if isinstance(policy, GeneratesEach):
        return list(policy.generate_each(prompts, params, adapter))

    def run(sub_prompts: list, sub_params: list[SamplingParams]) -> list[Generation]:
        return [g[0] for g in policy.generate(sub_prompts, sub_params[0], adapter)]

    return run_grouped(prompts, params, lambda p: p, run)


class ConcurrentDriver(Driver):
    """One ``generate`` call per request, all of them in flight at once.

    If the policy is :class:`~marti_trainer.policies.capabilities.SubmitsRequests` (a
    non-blocking ``generate``, e.g. :class:`SimulatedPolicy`), requests are submitted
    from the caller's thread and complete through the future's callback: no thread per
    request. Otherwise each call runs on a pool of ``max_workers`` threads.
    """

    kind = "concurrent"

    def __init__(self, policy: Policy, on_done: DoneCallback, max_workers: int) -> None:
        super().__init__(policy, on_done)
        self._native = policy.submit if isinstance(policy, SubmitsRequests) else None
        self._pool = (
            None
            if self._native
            else ThreadPoolExecutor(max_workers, thread_name_prefix="rollout-request")
        )
        self._closed = False

    def submit(self, requests: Sequence[GenerationRequest]) -> None:
        for request in requests:
            if self._pool is not None:
                self._pool.submit(self._run, request)
                continue
            try:
                future = self._native([request.messages], request.params, request.adapter)
            except BaseException as exc:
                self.on_done(request, None, exc)
                continue
            future.add_done_callback(functools.partial(self._finished, request))

    def _finished(self, request: GenerationRequest, future: Future) -> None:
        if self._closed:
            return
        exc = future.exception()
        if exc is not None:
            self.on_done(request, None, exc)
        else:
            self.on_done(request, future.result()[0][0], None)

    def _run(self, request: GenerationRequest) -> None:
        if self._closed:
            return
        try:
            gen = self.policy.generate([request.messages], request.params, request.adapter)[0][0]
        except BaseException as exc:
            if not self._closed:
                self.on_done(request, None, exc)
            return
        if not self._closed:
            self.on_done(request, gen, None)

    def close(self) -> None:
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


class BatchDriver(Driver):
    """Static batching: whenever free, one batched call per group of everything pending."""

    kind = "batch"

    def __init__(self, policy: Policy, on_done: DoneCallback) -> None:
        super().__init__(policy, on_done)
        self._pending: list[GenerationRequest] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="rollout-batch", daemon=True)
        self._thread.start()

    def submit(self, requests: Sequence[GenerationRequest]) -> None:
        with self._cond:
            self._pending.extend(requests)
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                taken, self._pending = self._pending, []
            groups: dict[Any, list[GenerationRequest]] = {}
            for request in taken:
                groups.setdefault(_batch_key(request), []).append(request)
            for (adapter, _), group in groups.items():
                self._run_group(group, adapter)  # reports every request, even on errors

    def _run_group(self, group: list[GenerationRequest], adapter: str | None) -> None:
        try:
            gens = generate_each(
                self.policy, [r.messages for r in group], [r.params for r in group], adapter
            )
        except BaseException as exc:
            if self._closed:
                return
            named = set(getattr(exc, "request_indices", ()))
            # Requests the error names first, so the engine reports one of them.
            for k in sorted(range(len(group)), key=lambda k: k not in named):
                self.on_done(group[k], None, exc)
            return
        if self._closed:
            return
        for request, gen in zip(group, gens, strict=True):
            self.on_done(request, gen, None)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._pending.clear()
            self._cond.notify_all()


def make_driver(
    kind: DriverKind, policy: Policy, on_done: DoneCallback, max_concurrency: int
) -> Driver:
    """Build the driver for ``policy``.

    Args:
        kind: ``"auto"`` (``concurrent`` if the policy sets ``concurrent_requests``,
            ``continuous`` if it is :class:`ContinuousBatching`, else ``batch``) or a
            driver name.
        policy: The backend.
        on_done: Called from the driver's thread when a request finished.
        max_concurrency: The rollout's bound on requests in flight (sizes thread pools and
            the continuous batch).

    Raises:
        ValueError: an unknown kind, or ``continuous`` for a policy without a continuous driver.
    """
    if kind not in DRIVER_KINDS:
        raise ValueError(f"driver must be one of {DRIVER_KINDS}, got {kind!r}")
    continuous = isinstance(policy, ContinuousBatching)
    if kind == "auto":
        if policy.concurrent_requests:
            kind = "concurrent"
        elif continuous:
            kind = "continuous"
        else:
            kind = "batch"
    if kind == "concurrent":
        return ConcurrentDriver(policy, on_done, max_concurrency)
    if kind == "continuous":
        if not isinstance(policy, ContinuousBatching):
            raise ValueError(
                f"driver='continuous' needs a policy with its own continuous batching (the hf "
                f"backend), got {type(policy).__name__}; use 'batch' or 'concurrent'"
            )
        return policy.continuous_driver(on_done, max_concurrency)
    return BatchDriver(policy, on_done)
