"""Continuous batching for :class:`~marti_trainer.policies.vllm.VLLMPolicy` rollouts.

``VLLMPolicy.generate`` hands the engine a whole batch and returns when its longest request
is done. :class:`VLLMContinuousDriver` instead owns the engine's step loop in one worker
thread: every request the rollout submits is added to the running engine at once
(``LLMEngine.add_request``), the engine schedules it into its next step (vLLM's own
iteration-level batching), and a request whose output is finished is delivered right after
the step that finished it. So an episode whose turn ended early can submit its next round
while other requests are still decoding: asynchronous rollout on this backend overlaps
rounds, as it does on the ``hf`` backend's continuous driver and with a server.

Requests are rendered, seeded and converted exactly as ``VLLMPolicy.generate`` does
(``tokenize_prompts``, per-request ``seed``, the same checks on log-probs and finish
reasons), so a request's result equals ``generate([messages], params, adapter)[0][0]`` up
to batching effects. While the driver is open nothing else may use the policy (its
``generate`` runs the same engine loop); :meth:`close` aborts requests still in the engine,
so the policy is usable again afterwards.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from marti_trainer.policies.base import PolicyError, tokenize_prompts, validate_prompts
from marti_trainer.rollout.backends import DoneCallback, Driver, Request

if TYPE_CHECKING:
    from marti_trainer.policies.vllm import VLLMPolicy

__all__ = ["VLLMContinuousDriver"]

_JOIN_TIMEOUT_S = 120.0  # close() waits at most this long for an engine step in progress


class VLLMContinuousDriver(Driver):
    """Requests go into the running vLLM engine as they come (see the module docstring).

    Args:
        policy: The vLLM policy; nothing else may use it while the driver runs.
        on_done: Called from the worker thread for every finished or failed request.
        max_rows: Accepted for the driver interface; the rollout engine already bounds the
            requests in flight and vLLM's scheduler its own batch (``max_num_seqs``).

    Attributes:
        stats: ``steps`` (engine steps), ``added`` (requests added to the engine).
    """

    kind = "continuous"

    def __init__(self, policy: VLLMPolicy, on_done: DoneCallback, max_rows: int) -> None:
        super().__init__(policy, on_done)
        self.max_rows = max_rows
        self.stats: dict[str, int] = {"steps": 0, "added": 0}
        self._vllm = policy
        self._engine = policy.llm.llm_engine
        self._ids = (f"marti-rollout-{k}" for k in itertools.count())
        self._pending: list[Request] = []
        self._running: dict[str, tuple[Request, list[int]]] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._crash: PolicyError | None = None
        self._thread = threading.Thread(target=self._loop, name="rollout-vllm", daemon=True)
        self._thread.start()

    def submit(self, requests: Sequence[Request]) -> None:
        with self._cond:
            crash = self._crash
            if crash is None:
                self._pending.extend(requests)
                self._cond.notify()
        if crash is not None:
            self._fail(requests, crash)

    def close(self) -> None:
        """Stop after the current engine step; abort what is still in the engine."""
        with self._cond:
            self._closed = True
            self._pending.clear()
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=_JOIN_TIMEOUT_S)

    # -- worker ---------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # never leave a request unanswered
            error = PolicyError(f"vLLM continuous driver crashed: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            with self._cond:
                stranded = [r for r, _ in self._running.values()] + self._pending
                self._pending.clear()
                self._crash = error
            self._fail(stranded, error)
        finally:
            if self._running:  # leave the engine empty for the policy's next generate()
                with contextlib.suppress(Exception):  # the engine may be gone: nothing to free
                    self._engine.abort_request(list(self._running))
                self._running.clear()

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._running and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                new, self._pending = self._pending, []
            for request in new:
                self._add(request)
            if self._running:
                outputs = self._engine.step()
                self.stats["steps"] += 1
                for output in outputs:
                    if output.finished:
                        self._finish(output)

    def _add(self, request: Request) -> None:
        """Render, check and add one request to the engine (errors fail only it)."""
        policy = self._vllm
        try:
            validate_prompts([request.messages])
            if request.params.n != 1:
                raise ValueError(
                    f"rollout requests sample one completion (n=1), got n={request.params.n}"
                )
            lora = policy._lora_request(request.adapter)
            (ids,) = tokenize_prompts(
                policy.tokenizer, [request.messages], request.params, policy.max_context_tokens
            )
            request_id = next(self._ids)
            self._engine.add_request(
                request_id,
                {"prompt_token_ids": ids},
                policy._vllm_params(ids, request.params),
                lora_request=lora,
            )
        except Exception as exc:
            self._fail([request], exc)
            return
        self._running[request_id] = (request, ids)
        self.stats["added"] += 1

    def _finish(self, output: Any) -> None:
        entry = self._running.pop(output.request_id, None)
        if entry is None:  # not ours (cannot happen while we own the engine)
            return
        request, ids = entry
        try:
            (completion,) = output.outputs
            gen = self._vllm._convert(0, completion, ids)
        except Exception as exc:
            self._fail([request], exc)
            return
        if not self._closed:
            self.on_done(request, gen, None)

    def _fail(self, requests: Sequence[Request], error: BaseException) -> None:
        if not self._closed:
            for request in requests:
                self.on_done(request, None, error)
