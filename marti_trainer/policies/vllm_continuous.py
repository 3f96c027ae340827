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
from typing import Any, Protocol

from marti_trainer.policies.base import (
    Generation,
    SamplingParams,
    tokenize_prompts,
    validate_prompts,
)
from marti_trainer.policies.capabilities import DoneCallback, GenerationRequest
from marti_trainer.policies.worker_driver import WorkerDriver

__all__ = ["EnginePolicy", "VLLMContinuousDriver"]


class EnginePolicy(Protocol):
    """What the driver uses of :class:`~marti_trainer.policies.vllm.VLLMPolicy`."""

    @property
    def llm(self) -> Any:
        """The ``vllm.LLM``; the driver steps its ``llm_engine``."""
        ...

    @property
    def tokenizer(self) -> Any: ...

    @property
    def max_context_tokens(self) -> int: ...

    def lora_request(self, adapter: str | None) -> Any:
        """vLLM's ``LoRARequest`` of an adapter (None: base weights); ValueError if unknown."""
        ...

    def engine_params(self, prompt_ids: list[int], p: SamplingParams) -> Any:
        """vLLM's sampling parameters for one prompt."""
        ...

    def to_generation(self, request: int, completion: Any, prompt_ids: list[int]) -> Generation:
        """One vLLM ``CompletionOutput`` as a checked :class:`Generation`."""
        ...


class VLLMContinuousDriver(WorkerDriver):
    """Requests go into the running vLLM engine as they come (see the module docstring).

    Args:
        policy: The vLLM policy; nothing else may use it while the driver runs.
        on_done: Called from the worker thread for every finished or failed request.
        max_rows: Requests in the vLLM engine at most; the others wait here, in arrival
            order, and are added as requests finish (between engine steps). vLLM's
            scheduler bounds its own batch below that (``max_num_seqs``).

    Attributes:
        stats: ``steps`` (engine steps), ``added`` (requests added to the engine) and
            ``peak_running`` (most requests in the engine at once, at most ``max_rows``).
    """

    kind = "continuous"
    crash_message = "vLLM continuous driver crashed"

    def __init__(self, policy: EnginePolicy, on_done: DoneCallback, max_rows: int) -> None:
        super().__init__(policy, on_done)
        self.max_rows = max_rows
        self.stats: dict[str, int] = {"steps": 0, "added": 0, "peak_running": 0}
        self._vllm = policy
        self._engine = policy.llm.llm_engine
        self._ids = (f"marti-rollout-{k}" for k in itertools.count())
        self._running: dict[str, tuple[GenerationRequest, list[int]]] = {}
        self._start("rollout-vllm")

    # -- worker ---------------------------------------------------------------------------

    def _in_progress(self) -> list[GenerationRequest]:
        return [request for request, _ in self._running.values()]

    def _stopped(self) -> None:
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
                free = max(0, self.max_rows - len(self._running))
                new = [self._pending.popleft() for _ in range(min(free, len(self._pending)))]
            for request in new:
                self._add(request)
            self.stats["peak_running"] = max(self.stats["peak_running"], len(self._running))
            if self._running:
                outputs = self._engine.step()
                self.stats["steps"] += 1
                for output in outputs:
                    if output.finished:
                        self._finish(output)

    def _add(self, request: GenerationRequest) -> None:
        """Render, check and add one request to the engine (errors fail only it)."""
        policy = self._vllm
        try:
            validate_prompts([request.messages])
            if request.params.n != 1:
                raise ValueError(
                    f"rollout requests sample one completion (n=1), got n={request.params.n}"
                )
            lora = policy.lora_request(request.adapter)
            (ids,) = tokenize_prompts(
                policy.tokenizer, [request.messages], request.params, policy.max_context_tokens
            )
            request_id = next(self._ids)
            self._engine.add_request(
                request_id,
                {"prompt_token_ids": ids},
                policy.engine_params(ids, request.params),
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
            gen = self._vllm.to_generation(0, completion, ids)
        except Exception as exc:
            self._fail([request], exc)
            return
        if not self._closed:
            self.on_done(request, gen, None)
