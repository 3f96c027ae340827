"""Continuous (iteration-level) batching for :class:`~marti_trainer.policies.hf.HFPolicy`.

``HFPolicy.generate`` decodes a static batch: every row is fed until the longest one ends,
and a new request waits for the whole batch. :class:`ContinuousDriver` instead runs one
decode loop in a worker thread over a *changing* set of rows, as vLLM does:

- at every token step, requests that arrived since the last step are tokenised, prefilled
  together (left-padded) and their key/value cache is merged into the running batch's
  (both left-padded to the longer length; positions stay per row, so padding changes no
  row's attention);
- a row that finished (end-of-sequence, a stop string or its token budget) leaves the batch
  at once and its result is delivered; all-padding columns at the left are dropped.

So a short response returns after its own tokens and its episode can submit the next
round's request while long responses are still decoding: the gain of asynchronous rollout
is real on this backend, not only with a serving engine.

Rows in one batch share the adapter and the sampling parameters other than ``seed`` and
``max_tokens`` (each row has its own random stream and token budget). When the oldest
waiting request needs another adapter or other parameters, the batch stops admitting rows,
drains, and the next batch starts with that request (first come, first served, so no
adapter starves; but agents with different LoRA adapters do not share a decode step).

Sampling reuses ``HFPolicy``'s own code (per-row ``torch.Generator`` seeded as
``HFPolicy`` seeds it, inverse-CDF draws, the same log-probs), so a request's tokens equal
``HFPolicy.generate``'s for the same seed up to the floating-point effect of a different
padding.

This module is part of the ``hf`` backend: it decodes with the steps of
:mod:`marti_trainer.policies.hf_decode`, as ``HFPolicy.generate`` does, and uses only the
policy's public side (:class:`DecodingPolicy`); users reach it through
:meth:`~marti_trainer.policies.hf.HFPolicy.continuous_driver` (which the rollout engine's
``continuous`` driver calls). It needs transformers' ``DynamicCache`` with ``.layers``
(transformers >= 4.56). The tests compare it with ``HFPolicy.generate`` token for token.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from typing import Any, Protocol

import torch

from marti_trainer.kv_cache import cache_kwargs, cache_layers, output_cache
from marti_trainer.policies.base import Generation, PolicyError, SamplingParams, validate_prompts
from marti_trainer.policies.capabilities import DoneCallback, GenerationRequest
from marti_trainer.policies.hf_decode import (
    Row,
    eval_mode,
    match_stop,
    prefill,
    sample_tokens,
    to_generation,
    tokenize_one,
)
from marti_trainer.policies.worker_driver import WorkerDriver

__all__ = ["ContinuousDriver", "DecodingPolicy"]


class DecodingPolicy(Protocol):
    """What the driver uses of :class:`~marti_trainer.policies.hf.HFPolicy`."""

    @property
    def model(self) -> Any:
        """The transformers model (with the LoRA layers of any adapter)."""
        ...

    @property
    def tokenizer(self) -> Any: ...

    @property
    def max_context_tokens(self) -> int: ...

    @property
    def eos_ids(self) -> frozenset[int]: ...

    @property
    def pad_id(self) -> int: ...

    def make_rows(
        self, prompt_ids: list[list[int]], params: SamplingParams, first_request: int = 0
    ) -> list[Row]:
        """Rows seeded as ``HFPolicy.generate`` seeds them."""
        ...

    def use_adapter(self, adapter: str | None) -> contextlib.AbstractContextManager[Any]:
        """A context in which the model runs with ``adapter``."""
        ...


# -- KV-cache surgery ----------------------------------------------------------------------


def _policy_error(what: str, exc: BaseException) -> PolicyError:
    error = PolicyError(f"{what}: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def _left_pad(t: torch.Tensor, length: int, dim: int) -> torch.Tensor:
    missing = length - t.shape[dim]
    if missing <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([t.new_zeros(shape), t], dim=dim)


class _Batch:
    """The running decode batch: rows, their requests, KV cache, attention mask, positions.

    Shapes: ``B`` rows, ``T`` cached positions. ``mask`` ``[B, T]`` (1 = real token),
    ``positions`` ``[B, 1]`` (position id of each row's last token), cache layers
    ``[B, heads, T, head_dim]``. A row that finished stays in the tensors, *dead*, until a
    quarter of the rows are dead or new rows are merged in: removing rows copies the whole
    cache, so it is done in bulk (a dead row costs one row of each step's compute).
    """

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.requests: list[GenerationRequest] = []
        self.alive: list[bool] = []
        self.cache: Any = None
        self.mask: torch.Tensor | None = None
        self.positions: torch.Tensor | None = None
        self.key: Any = None
        self.logits: torch.Tensor | None = None  # [B, vocab] after a prefill

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def live(self) -> int:
        return sum(self.alive)

    def clear(self) -> None:
        self.__init__()

    def compact(self, force: bool = False) -> None:
        """Remove dead rows (all of them when ``force``, else once they are a quarter)."""
        dead = len(self.rows) - self.live
        if dead and (force or 4 * dead >= len(self.rows)):
            self.keep([i for i, alive in enumerate(self.alive) if alive])

    def keep(self, keep: list[int]) -> None:
        """Keep only rows ``keep`` (indices, in order); drop all-padding leading columns."""
        if len(keep) == len(self.rows):
            return
        if not keep:
            self.clear()
            return
        index = torch.tensor(keep, dtype=torch.long, device=self.mask.device)
        self.rows = [self.rows[k] for k in keep]
        self.requests = [self.requests[k] for k in keep]
        self.alive = [self.alive[k] for k in keep]
        self.mask = self.mask.index_select(0, index)
        self.positions = self.positions.index_select(0, index)
        lead = int(self.mask.any(dim=0).int().argmax())  # first column some row uses
        for layer in cache_layers(self.cache):
            layer.keys = layer.keys.index_select(0, index)[:, :, lead:]
            layer.values = layer.values.index_select(0, index)[:, :, lead:]
        self.mask = self.mask[:, lead:]

    def merge(self, other: _Batch) -> None:
        """Append ``other``'s rows (both caches left-padded to the longer length)."""
        self.compact(force=True)
        if not self.rows:
            self.rows, self.requests, self.alive = other.rows, other.requests, other.alive
            self.cache, self.mask, self.positions = other.cache, other.mask, other.positions
            self.key = other.key
            return
        length = max(self.mask.shape[1], other.mask.shape[1])
        for mine, theirs in zip(cache_layers(self.cache), cache_layers(other.cache), strict=True):
            mine.keys = torch.cat(
                [_left_pad(mine.keys, length, 2), _left_pad(theirs.keys, length, 2)]
            )
            mine.values = torch.cat(
                [_left_pad(mine.values, length, 2), _left_pad(theirs.values, length, 2)]
            )
        self.mask = torch.cat([_left_pad(self.mask, length, 1), _left_pad(other.mask, length, 1)])
        self.positions = torch.cat([self.positions, other.positions])
        self.rows += other.rows
        self.requests += other.requests
        self.alive += other.alive


def _key(request: GenerationRequest) -> tuple[Any, ...]:
    p = request.params
    return (request.adapter, p.temperature, p.top_p, p.stop)


class ContinuousDriver(WorkerDriver):
    """Iteration-level batching of an ``HFPolicy`` in one worker thread (module docstring).

    Args:
        policy: The HF policy; nothing else may use it while the driver runs.
        on_done: Called from the worker thread for every finished or failed request.
        max_rows: Rows decoded together at most (the rollout's ``max_concurrency``).

    Attributes:
        stats: ``steps`` (decode steps), ``row_steps`` (sum of batch sizes over steps, so
            ``row_steps / steps`` is the mean occupancy), ``prefills``, ``prefill_rows``,
            ``prefill_distinct`` (distinct prompts among them: each is computed once), and
            seconds in prefills (with their first token), in decode steps (sampling and
            row removal included) and in merging new rows' caches (``prefill_s``,
            ``step_s``, ``cache_s``).
    """

    kind = "continuous"
    crash_message = "HF continuous driver crashed"

    def __init__(self, policy: DecodingPolicy, on_done: DoneCallback, max_rows: int) -> None:
        super().__init__(policy, on_done)
        self.max_rows = max_rows
        self.stats: dict[str, float] = dict.fromkeys(
            ("steps", "row_steps", "prefills", "prefill_rows", "prefill_distinct", "prefill_s",
             "step_s", "cache_s"),
            0,
        )  # fmt: skip
        self._hf = policy
        self._batch = _Batch()
        self._start("rollout-continuous")

    # -- worker ---------------------------------------------------------------------------

    def _in_progress(self) -> list[GenerationRequest]:
        batch = self._batch
        return [r for r, alive in zip(batch.requests, batch.alive, strict=True) if alive]

    def _stopped(self) -> None:
        self._batch.clear()  # frees the KV cache

    def _serve(self) -> None:
        with eval_mode(self._hf.model), torch.inference_mode():
            while True:
                with self._cond:
                    while not self._pending and not self._batch.live and not self._closed:
                        self._cond.wait()
                    if self._closed:
                        return
                    admitted = self._take()
                if admitted:
                    self._admit(admitted)
                try:
                    if self._batch.live:
                        self._step()
                    elif self._batch.rows:
                        self._batch.clear()  # only dead rows left
                except Exception as exc:  # fail the whole batch, keep serving
                    failed = self._in_progress()
                    self._batch.clear()
                    self._fail(failed, _policy_error("HF continuous batching failed", exc))

    def _take(self) -> list[GenerationRequest]:
        """Pending requests that fit the batch (same key, free rows), in arrival order."""
        free = self.max_rows - self._batch.live
        if free <= 0 or not self._pending:
            return []
        key = _key(self._pending[0])
        if self._batch.live and key != self._batch.key:
            return []  # the oldest request needs other settings: let the batch drain first
        taken: list[GenerationRequest] = []
        rest: deque[GenerationRequest] = deque()
        while self._pending:
            request = self._pending.popleft()
            if len(taken) < free and _key(request) == key:
                taken.append(request)
            else:
                rest.append(request)
        self._pending = rest
        return taken

    def _admit(self, requests: list[GenerationRequest]) -> None:
        """Tokenise, prefill and sample the first token of new requests; merge them in.

        A failure here fails exactly the admitted requests (the running batch is untouched).
        """
        policy = self._hf
        rows: list[Row] = []
        kept: list[GenerationRequest] = []
        for request in requests:
            try:
                validate_prompts([request.messages])
                ids = tokenize_one(
                    policy.tokenizer, request.messages, request.params,
                    policy.max_context_tokens, 0,
                )  # fmt: skip
                (row,) = policy.make_rows([ids], request.params, len(rows))  # n == 1
                rows.append(row)
            except Exception as exc:
                self._fail([request], exc)
                continue
            kept.append(request)
        if not rows:
            return
        try:
            t0 = time.perf_counter()
            new = self._prefill(rows, kept)
            finished = self._advance(new, new.logits, kept[0].params)
            t1 = time.perf_counter()
            if new.rows:
                self._batch.merge(new)
            self.stats["prefill_s"] += t1 - t0
            self.stats["cache_s"] += time.perf_counter() - t1
        except Exception as exc:
            self._fail(kept, _policy_error("HF prefill failed", exc))
            return
        self._deliver(finished)

    def _prefill(self, rows: list[Row], requests: list[GenerationRequest]) -> _Batch:
        """A batch of new rows, left-padded, prefilled (``logits`` of the last position)."""
        policy = self._hf
        prompts = [r.prompt_ids for r in rows]
        with policy.use_adapter(requests[0].adapter):
            cache, mask, positions, logits = prefill(policy.model, prompts, policy.pad_id)
        self.stats["prefills"] += 1
        self.stats["prefill_rows"] += len(rows)
        self.stats["prefill_distinct"] += len({tuple(p) for p in prompts})
        new = _Batch()
        new.rows, new.requests, new.key = rows, requests, _key(requests[0])
        new.alive = [True] * len(rows)
        new.cache, new.mask, new.positions = cache, mask, positions
        new.logits = logits
        return new

    def _step(self) -> None:
        """One decode step of the running batch (a failure fails the whole batch)."""
        t0 = time.perf_counter()
        policy, batch = self._hf, self._batch
        device = batch.mask.device
        next_ids = torch.tensor([[row.tokens[-1]] for row in batch.rows], dtype=torch.long)
        batch.mask = torch.cat([batch.mask, batch.mask.new_ones((len(batch), 1))], dim=1)
        batch.positions = batch.positions + 1
        with policy.use_adapter(batch.requests[0].adapter):
            out = policy.model(
                input_ids=next_ids.to(device),
                attention_mask=batch.mask,
                position_ids=batch.positions,
                use_cache=True,
                **cache_kwargs(batch.cache),
            )
        batch.cache = output_cache(out)
        self.stats["steps"] += 1
        self.stats["row_steps"] += len(batch)
        self.stats["step_s"] += time.perf_counter() - t0
        self._deliver(self._advance(batch, out.logits[:, -1, :], batch.requests[0].params))

    def _advance(
        self, batch: _Batch, logits: torch.Tensor, params: SamplingParams
    ) -> list[tuple[GenerationRequest, Generation]]:
        """Sample one token per row; drop finished rows from ``batch`` and return them."""
        policy = self._hf
        tokens, logprobs = sample_tokens(logits, batch.rows, [True] * len(batch), params)
        finished: list[tuple[GenerationRequest, Generation]] = []
        for b, row in enumerate(batch.rows):
            if not batch.alive[b]:
                continue
            token = int(tokens[b])
            row.tokens.append(token)
            row.logprobs.append(float(logprobs[b]))
            if token in policy.eos_ids or match_stop(policy.tokenizer, row, params.stop):
                row.finish = "stop"
            elif len(row.tokens) >= row.budget:
                row.finish = "length"
            if row.finish is not None:
                batch.alive[b] = False
                finished.append((batch.requests[b], to_generation(policy.tokenizer, row)))
        batch.compact()
        return finished

    def _deliver(self, finished: list[tuple[GenerationRequest, Generation]]) -> None:
        if not self._closed:
            for request, gen in finished:
                self.on_done(request, gen, None)
