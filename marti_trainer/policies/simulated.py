"""A simulated generation backend for benchmarks and fast tests: no model, no tokenizer.

**Not a language model.** :class:`SimulatedPolicy` models the *timing* of a serving engine
(vLLM, an OpenAI-compatible server) and returns well-formed, seeded :class:`Generation`
objects with boxed answers, so the rollout engine, the evaluation harness and the async
scheduler can be exercised and benchmarked in seconds on two CPU cores.

Timing model
------------
Each request draws a response length ``L`` (tokens) from an empirical distribution
(:data:`SMOLLM2_RESPONSE_LENGTHS` by default: response lengths the real default model
produced on the arithmetic prompts of ``chain-v0`` and ``mad-v0``), capped at
``max_tokens``. Its **service time** is ``overhead_s + L / tokens_per_s`` seconds. The
policy owns ``max_concurrency`` slots: a request waits (first come, first served) for a
free slot, holds it for its service time, then returns. So up to ``max_concurrency``
requests progress in parallel, each at ``tokens_per_s``, whatever else is running: the
behaviour of a continuous-batching engine below its throughput limit. One server thread
keeps the clock (no thread per request). ``generate`` with several prompts queues all of
them and returns when the last one is done; ``submit`` is the non-blocking form (a
``concurrent.futures.Future``), which the rollout engine uses to keep many requests in
flight without threads (the class sets ``concurrent_requests = True``).
``tokens_per_s=None`` makes every request instant (for tests).

Content model
-------------
The answer is computed from the problem when it can be (``answer_fn``; the default reads
``What is <arithmetic>?`` in the last user message), given correctly with probability
``accuracy`` and otherwise off by 1..9, and boxed with probability ``boxed_rate``. A
response cut at ``max_tokens`` (``finish_reason="length"``) has no final answer. Token ids
are placeholders (``L`` seeded random ids, the last one ``eos_token_id`` when the response
stopped), not an encoding of the text; log-probs are seeded negative floats. Sample ``j`` of a
request with ``SamplingParams.seed=s`` depends only on ``(s, j)`` and the prompt, as for the
real backends.
"""

from __future__ import annotations

import ast
import hashlib
import heapq
import itertools
import math
import operator
import random
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

from marti_trainer.policies.base import (
    Generation,
    Message,
    Policy,
    PolicyError,
    PromptTooLongError,
    SamplingParams,
    validate_prompts,
)
from marti_trainer.policies.capabilities import SubmitsRequests

__all__ = ["SMOLLM2_RESPONSE_LENGTHS", "SimulatedPolicy", "arithmetic_answer"]

SMOLLM2_RESPONSE_LENGTHS: tuple[int, ...] = (
    7, 11, 17, 17, 18, 18, 19, 19, 19, 20, 20, 20, 23, 30, 35, 38, 39, 43, 43, 44, 45, 45,
    51, 51, 51, 58, 65, 67, 77, 89, 109, 113, 115, 115, 146, 172, 175,
    256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256,
)  # fmt: skip
"""Response lengths (tokens) of the real default model, measured once on this project's CPU
machine: SmolLM2-135M-Instruct in bf16 through ``HFPolicy``, temperature 1.0, ``max_tokens``
256 (so 256 means "cut"), arithmetic tasks (levels 1-2, seed 7); 24 responses from 8
``chain-v0`` episodes (generators are short, verifiers' critiques mostly hit the limit) and
24 from 4 ``mad-v0`` episodes (3 debaters x 2 rounds). ``benchmarks/bench_rollout.py --part
real`` prints fresh ones. Median 51, 23% cut at 256."""

_WHAT_IS = re.compile(r"What is ([0-9+\-*/() ]+)\?")
_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _eval_arithmetic(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _eval_arithmetic(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval_arithmetic(node.left), _eval_arithmetic(node.right))
    raise ValueError("not plain arithmetic")


def arithmetic_answer(messages: Sequence[Message]) -> str | None:
    """The value of the first ``What is <expr>?`` in the last user message, or None.

    Handles the prompts of the procedural arithmetic tasks (levels 1-3); word problems give
    None. Never raises.
    """
    content = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    match = _WHAT_IS.search(content)
    if match is None:
        return None
    try:
        value = _eval_arithmetic(ast.parse(match.group(1).strip(), mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return None
    if value != int(value):
        return None
    return str(int(value))


class _PlaceholderTokenizer:
    """Just enough of a tokenizer: a ChatML-like template over UTF-8 bytes (ids 0..255)."""

    eos_token_id = 2
    pad_token_id = 2
    chat_template = "simulated"

    def apply_chat_template(
        self,
        messages: Sequence[Message],
        tokenize: bool = False,
        add_generation_prompt: bool = True,
    ) -> str | list[int]:
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        if add_generation_prompt:
            text += "<|im_start|>assistant\n"
        return self.encode(text) if tokenize else text

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")

    def __len__(self) -> int:
        return 256


class SimulatedPolicy(Policy, SubmitsRequests):
    """A timing-faithful stand-in for a serving engine; see the module docstring.

    Args:
        lengths: The empirical response-length distribution in tokens (each >= 1); a request
            draws one uniformly.
        tokens_per_s: Decode speed of one request in tokens/s (> 0), or None for instant
            responses.
        max_concurrency: Slots: requests served at the same time (>= 1).
        overhead_s: Fixed seconds added to each request's service time (>= 0), e.g. prefill.
        accuracy: Probability that a known answer is given correctly, in [0, 1].
        boxed_rate: Probability that a complete response boxes its answer, in [0, 1].
        answer_fn: Computes the right answer from the prompt (None if unknown: a random
            number is given). Default: :func:`arithmetic_answer`.
        seed: Seeds the generator used for requests whose ``SamplingParams.seed`` is None.
        max_context_tokens: Context length in (placeholder) tokens.

    Subclasses that change responses or inject failures override :meth:`submit` (which
    :meth:`generate` and the rollout engine both go through), not ``generate``.
    """

    concurrent_requests = True
    """Serves concurrent ``generate`` calls (the rollout engine submits requests one by one)."""

    def __init__(
        self,
        lengths: Sequence[int] = SMOLLM2_RESPONSE_LENGTHS,
        tokens_per_s: float | None = None,
        max_concurrency: int = 64,
        overhead_s: float = 0.0,
        accuracy: float = 0.5,
        boxed_rate: float = 1.0,
        answer_fn: Callable[[Sequence[Message]], str | None] | None = None,
        seed: int = 0,
        max_context_tokens: int = 1 << 20,
    ) -> None:
        lengths = tuple(int(n) for n in lengths)
        if not lengths or min(lengths) < 1:
            raise ValueError("lengths must be a non-empty sequence of token counts >= 1")
        if tokens_per_s is not None and not (math.isfinite(tokens_per_s) and tokens_per_s > 0):
            raise ValueError(
                f"tokens_per_s must be a positive number or None, got {tokens_per_s!r}"
            )
        if (
            isinstance(max_concurrency, bool)
            or not isinstance(max_concurrency, int)
            or max_concurrency < 1
        ):
            raise ValueError(f"max_concurrency must be an int >= 1, got {max_concurrency!r}")
        if not (math.isfinite(overhead_s) and overhead_s >= 0):
            raise ValueError(f"overhead_s must be a finite number >= 0, got {overhead_s!r}")
        for name, value in (("accuracy", accuracy), ("boxed_rate", boxed_rate)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value!r}")
        self.lengths = lengths
        self.tokens_per_s = tokens_per_s
        self.max_concurrency = max_concurrency
        self.overhead_s = float(overhead_s)
        self.accuracy = float(accuracy)
        self.boxed_rate = float(boxed_rate)
        self.answer_fn = answer_fn or arithmetic_answer
        self._tokenizer = _PlaceholderTokenizer()
        self._max_context = int(max_context_tokens)
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()
        self._slot_server: _SlotServer | None = None
        self._closed = False
        self.weights_version = 0
        """Incremented by every :meth:`load_weights` call (weights are not used)."""
        self.adapters: dict[str, Path] = {}

    # -- Policy interface -----------------------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def max_context_tokens(self) -> int:
        return self._max_context

    def service_time(self, num_tokens: int) -> float:
        """Seconds a request that generates ``num_tokens`` tokens holds a slot."""
        if self.tokens_per_s is None:
            return 0.0
        return self.overhead_s + num_tokens / self.tokens_per_s

    def generate(
        self,
        prompts: Sequence[Sequence[Message]],
        params: SamplingParams,
        adapter: str | None = None,
    ) -> list[list[Generation]]:
        return self.submit(prompts, params, adapter).result()

    def submit(
        self,
        prompts: Sequence[Sequence[Message]],
        params: SamplingParams,
        adapter: str | None = None,
    ) -> Future[list[list[Generation]]]:
        """``generate`` without blocking: the future resolves when the last sample is done.

        The responses are computed at once (in the caller's thread); only their service
        times are waited for, by the policy's one server thread (its callbacks run there).

        Raises:
            ValueError, PromptTooLongError, PolicyError: as ``generate``, immediately.
        """
        if self._closed:
            raise PolicyError("this SimulatedPolicy is closed")
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be SamplingParams, got {type(params).__name__}")
        validate_prompts(prompts)
        if adapter is not None and adapter not in self.adapters:
            raise ValueError(f"unknown adapter {adapter!r}; registered: {sorted(self.adapters)}")
        results = [self._respond(i, p, params) for i, p in enumerate(prompts)]
        future: Future[list[list[Generation]]] = Future()
        future.set_running_or_notify_cancel()
        times = [self.service_time(g.num_tokens) for gens in results for g in gens]
        if self.tokens_per_s is None or not times:
            future.set_result(results)
        else:
            self._server().enqueue(future, results, times)
        return future

    def load_weights(self, source: Mapping[str, Any] | str | Path) -> None:
        """Accept and ignore new weights (counts them in :attr:`weights_version`)."""
        self.weights_version += 1

    def add_adapter(self, name: str, path: str | Path) -> None:
        """Register an adapter name (its weights are not used)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"adapter name must be a non-empty str, got {name!r}")
        self.adapters[name] = Path(path)

    def close(self) -> None:
        self._closed = True
        with self._lock:
            server, self._slot_server = self._slot_server, None
        if server is not None:
            server.stop()

    # -- internals --------------------------------------------------------------------------

    def _server(self) -> _SlotServer:
        with self._lock:
            if self._slot_server is None:
                self._slot_server = _SlotServer(self.max_concurrency)
            return self._slot_server

    def _respond(
        self, index: int, messages: Sequence[Message], params: SamplingParams
    ) -> list[Generation]:
        prompt_ids = self._tokenizer.apply_chat_template(messages, tokenize=True)
        assert isinstance(prompt_ids, list)
        if params.truncate_prompt:
            keep = max(1, self._max_context - params.max_tokens)
            prompt_ids = prompt_ids[-keep:]
        elif len(prompt_ids) >= self._max_context:
            raise PromptTooLongError(
                f"request {index}: prompt of {len(prompt_ids)} tokens does not fit the context "
                f"of {self._max_context} tokens",
                [index],
            )
        budget = min(params.max_tokens, self._max_context - len(prompt_ids))
        digest = hashlib.blake2b(digest_size=16)
        for m in messages:
            digest.update(m["role"].encode() + b"\0" + m["content"].encode("utf-8", "replace"))
        prompt_key = int.from_bytes(digest.digest(), "little")
        right = self.answer_fn(messages)
        out = []
        for j in range(params.n):
            if params.seed is not None:
                words = [params.seed & _MASK64, j, prompt_key & _MASK64, prompt_key >> 64]
            else:
                with self._lock:
                    words = [int(k) for k in self._rng.integers(0, 2**63, size=4)]
            out.append(self._sample(random.Random(_mix(words)), right, prompt_ids, budget))
        return out

    def _sample(
        self, rng: random.Random, right: str | None, prompt_ids: list[int], budget: int
    ) -> Generation:
        # Fixed draw order, so every field is a function of the seed alone.
        length = self.lengths[rng.randrange(len(self.lengths))]
        u_right, u_boxed, offset, guess = (
            rng.random(),
            rng.random(),
            rng.randrange(1, 10),
            rng.randrange(100),
        )
        if right is None:
            answer = str(guess)
        elif u_right < self.accuracy:
            answer = right
        else:
            answer = _wrong(right, offset)
        if length > budget:
            length, finish = budget, "length"
            text = "Let me work through this step by step. First, "
        else:
            finish = "stop"
            final = f"\\boxed{{{answer}}}" if u_boxed < self.boxed_rate else answer
            text = f"Let me work through this step by step. The answer is {final}."
        noise = np.frombuffer(rng.randbytes(4 * length), dtype=np.uint16).reshape(2, length)
        ids: list[int] = (noise[0] % 49_149 + 3).tolist()
        if finish == "stop":
            ids[-1] = self._tokenizer.eos_token_id
        logprobs: list[float] = (noise[1] / -32768.0).tolist()  # in (-2, 0]
        return Generation(text, ids, logprobs, prompt_ids, finish)  # type: ignore[arg-type]


_MASK64 = (1 << 64) - 1


def _mix(words: Sequence[int]) -> int:
    """A 128-bit seed from 64-bit words (BLAKE2b; stable across platforms and versions)."""
    digest = hashlib.blake2b(b"".join(int(w).to_bytes(8, "little") for w in words), digest_size=16)
    return int.from_bytes(digest.digest(), "little")


def _wrong(answer: str, offset: int) -> str:
    try:
        return str(int(answer) + offset)
    except ValueError:
        return f"{answer}+{offset}"


class _SlotServer:
    """``slots`` servers and a FIFO queue, simulated by one thread with a clock.

    A job is a future and the service times of its samples; each sample occupies a slot for
    its service time, the future resolves when its last sample finishes. Timing is exact up
    to the thread's wake-up latency (``Condition.wait`` with a deadline).
    """

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._cond = threading.Condition()
        self._waiting: deque[tuple[int, float]] = deque()  # (job id, service time)
        self._running: list[tuple[float, int, int]] = []  # heap of (finish, seq, job id)
        self._jobs: dict[int, list[Any]] = {}  # job id -> [future, result, samples left]
        self._ids = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="simulated-server", daemon=True)
        self._thread.start()

    def enqueue(self, future: Future, result: Any, times: Sequence[float]) -> None:
        with self._cond:
            job = next(self._ids)
            self._jobs[job] = [future, result, len(times)]
            self._waiting.extend((job, t) for t in times)
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _loop(self) -> None:
        seq = itertools.count()
        while True:
            done: list[tuple[Future, Any]] = []
            with self._cond:
                if self._stopped:
                    return
                now = time.perf_counter()
                while self._running and self._running[0][0] <= now:
                    _, _, job = heapq.heappop(self._running)
                    entry = self._jobs[job]
                    entry[2] -= 1
                    if entry[2] == 0:
                        del self._jobs[job]
                        done.append((entry[0], entry[1]))
                while self._waiting and len(self._running) < self.slots:
                    job, t = self._waiting.popleft()
                    heapq.heappush(self._running, (now + t, next(seq), job))
                if not done:
                    timeout = self._running[0][0] - now if self._running else None
                    self._cond.wait(timeout)
            for future, result in done:  # callbacks run outside the lock
                future.set_result(result)
