"""The one interface every generation backend implements (``hf``, ``vllm``, ``openai``).

A :class:`Policy` turns chat prompts into sampled completions and accepts new weights from a
trainer. Prompts are lists of chat messages ``{"role": ..., "content": ...}``; a backend
renders each with the tokenizer's chat template (``add_generation_prompt=True``) and
tokenises the result without adding special tokens again.

Contracts shared by all backends:

- ``generate`` returns one list of ``params.n`` :class:`Generation` per prompt, in order.
- A prompt whose token count leaves no room in the context (``len(prompt) >=
  max_context_tokens``) is rejected before anything is generated, with a
  :class:`PromptTooLongError` naming the request index and the lengths, unless
  ``SamplingParams.truncate_prompt`` is set (then it is clipped from the left).
  Generation stops at the context limit with ``finish_reason == "length"``.
- Any other failure inside the backend is re-raised as :class:`PolicyError` naming the
  request(s) it concerned.

This module imports no torch, so ``import marti_trainer.policies`` stays light.
"""

from __future__ import annotations

import importlib
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from marti_env.record import Message

if TYPE_CHECKING:
    from torch import Tensor

__all__ = [
    "BACKENDS",
    "Generation",
    "Message",
    "Policy",
    "PolicyError",
    "PromptTooLongError",
    "SamplingParams",
    "make_policy",
    "run_grouped",
    "tokenize_prompts",
    "validate_prompts",
]


FinishReason = Literal["stop", "length"]


class PolicyError(RuntimeError):
    """A generation request failed.

    Attributes:
        request_indices: indices (into the ``prompts`` passed to ``generate``) of the
            requests the failure concerns; empty if it is not tied to requests.
    """

    def __init__(self, message: str, request_indices: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.request_indices: tuple[int, ...] = tuple(request_indices)


class PromptTooLongError(PolicyError, ValueError):
    """A prompt does not fit in the model's context (raised before any generation)."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample completions. Validated on construction.

    Attributes:
        n: completions per prompt (>= 1).
        temperature: softmax temperature (>= 0); 0 means greedy decoding (argmax).
        top_p: nucleus sampling mass in (0, 1]; 1 disables it.
        max_tokens: maximum number of generated tokens per completion (>= 1); fewer are
            generated if the context would overflow.
        seed: if set, completions are reproducible: sample ``j`` of a prompt depends only on
            ``(seed, j)``, the prompt and the weights (backends document how far this holds
            across batch compositions). ``None`` draws fresh randomness.
        stop: strings that end a completion; the returned text is cut before the first
            occurrence and ``finish_reason`` is ``"stop"``.
        truncate_prompt: if True, prompts too long for ``max_tokens`` new tokens are clipped
            from the left (the start of the conversation is dropped) to
            ``max_context_tokens - max_tokens`` tokens (at least 1) instead of raising
            :class:`PromptTooLongError`.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int | None = None
    stop: tuple[str, ...] = ()
    truncate_prompt: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"SamplingParams.n must be an int >= 1, got {self.n!r}")
        if (
            isinstance(self.temperature, bool)
            or not isinstance(self.temperature, (int, float))
            or not math.isfinite(self.temperature)
            or self.temperature < 0
        ):
            raise ValueError(
                f"SamplingParams.temperature must be a finite number >= 0 (0 = greedy), "
                f"got {self.temperature!r}"
            )
        if (
            isinstance(self.top_p, bool)
            or not isinstance(self.top_p, (int, float))
            or not 0 < self.top_p <= 1
        ):
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p!r}")
        if (
            isinstance(self.max_tokens, bool)
            or not isinstance(self.max_tokens, int)
            or self.max_tokens < 1
        ):
            raise ValueError(
                f"SamplingParams.max_tokens must be an int >= 1, got {self.max_tokens!r}"
            )
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise ValueError(f"SamplingParams.seed must be an int or None, got {self.seed!r}")
        if isinstance(self.stop, str):
            raise ValueError(
                f"SamplingParams.stop must be a tuple of strings, got the string {self.stop!r}; "
                f"write stop=({self.stop!r},)"
            )
        stop = tuple(self.stop)
        for s in stop:
            if not isinstance(s, str) or not s:
                raise ValueError(f"SamplingParams.stop entries must be non-empty str, got {s!r}")
        object.__setattr__(self, "stop", stop)
        if not isinstance(self.truncate_prompt, bool):
            raise ValueError(
                f"SamplingParams.truncate_prompt must be a bool, got {self.truncate_prompt!r}"
            )

    @property
    def greedy(self) -> bool:
        """True when decoding is greedy (temperature 0)."""
        return self.temperature == 0


@dataclass
class Generation:
    """One sampled completion.

    Attributes:
        text: the completion as text, special tokens removed, cut before the first stop
            string if one matched.
        token_ids: the sampled token ids, in order. They include the end-of-sequence token
            when the model emitted it, and run up to and including the token that completed a
            stop string (so ``text`` may be shorter than ``decode(token_ids)``): these are
            exactly the tokens the policy chose, the ones to train on.
        logprobs: one float per entry of ``token_ids``: the natural-log probability of that
            token under the distribution it was sampled from, i.e. ``log_softmax(logits /
            temperature)``, renormalised over the top-p nucleus when ``top_p < 1``. For
            greedy decoding (temperature 0) it is the untempered ``log_softmax(logits)``.
            All are finite and <= 0.
        prompt_token_ids: the tokenised prompt (after the chat template and any clipping).
        finish_reason: ``"stop"`` if the model emitted an end-of-sequence token or a stop
            string matched; ``"length"`` if ``max_tokens`` or the context limit was reached.
    """

    text: str
    token_ids: list[int]
    logprobs: list[float]
    prompt_token_ids: list[int]
    finish_reason: FinishReason

    @property
    def truncated(self) -> bool:
        """True if the completion was cut by the token budget (``finish_reason == "length"``)."""
        return self.finish_reason == "length"

    @property
    def num_tokens(self) -> int:
        """Number of generated tokens."""
        return len(self.token_ids)


class Policy(ABC):
    """A language-model policy that samples chat completions and accepts weight updates.

    Backends: ``hf`` (:class:`marti_trainer.policies.hf.HFPolicy`), ``vllm`` and ``openai``.
    Build one with :func:`make_policy`. A policy is also a context manager that calls
    :meth:`close` on exit.

    Optional abilities are declared, not probed: ``concurrent_requests`` below, and the
    protocols of :mod:`marti_trainer.policies.capabilities` (``submit``,
    ``generate_each``, ``continuous_driver``) that a backend implements and lists among its
    bases; the rollout picks its driver from them.
    """

    concurrent_requests: bool = False
    """True if the backend serves many concurrent ``generate`` calls itself (a server, a
    simulator): a rollout then sends each request on its own (the ``concurrent`` driver)."""

    @abstractmethod
    def generate(
        self,
        prompts: Sequence[Sequence[Message]],
        params: SamplingParams,
        adapter: str | None = None,
    ) -> list[list[Generation]]:
        """Sample ``params.n`` completions for each chat prompt.

        Args:
            prompts: one list of messages per request.
            params: sampling parameters shared by all requests.
            adapter: name of a LoRA adapter registered with :meth:`add_adapter`, or None for
                the base weights.

        Returns:
            ``result[i][j]`` is completion ``j`` of ``prompts[i]``; ``len(result) ==
            len(prompts)`` and ``len(result[i]) == params.n``.

        Raises:
            ValueError: a prompt is not a list of ``{"role", "content"}`` messages, or the
                adapter is unknown.
            PromptTooLongError: a prompt leaves no room in the context (and
                ``params.truncate_prompt`` is False).
            PolicyError: the backend failed; ``request_indices`` names the requests.
        """

    @abstractmethod
    def load_weights(self, source: Mapping[str, Tensor] | str | Path) -> None:
        """Replace the base model's weights.

        Args:
            source: a state dict with the model's own parameter names (as in
                ``model.state_dict()`` of the HF model; a subset is allowed), or a
                checkpoint directory saved with ``save_pretrained``.

        Raises:
            ValueError: an unknown parameter name or a shape mismatch.
        """

    def add_adapter(self, name: str, path: str | Path) -> None:
        """Register a LoRA adapter (a PEFT adapter directory) under ``name``.

        Raises:
            NotImplementedError: the backend does not support adapters.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support LoRA adapters")

    @property
    @abstractmethod
    def tokenizer(self) -> Any:
        """The Hugging Face tokenizer used to render and tokenise prompts."""

    @property
    @abstractmethod
    def max_context_tokens(self) -> int:
        """Context length in tokens: prompt plus completion never exceed it."""

    @abstractmethod
    def close(self) -> None:
        """Release the model and any engine or server; later calls raise :class:`PolicyError`.

        Idempotent.
        """

    def __enter__(self) -> Policy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def validate_prompts(prompts: Sequence[Sequence[Message]]) -> None:
    """Check that every prompt is a non-empty list of ``{"role": str, "content": str}``.

    Raises:
        ValueError: naming the first bad request index and what is wrong with it.
    """
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
        raise ValueError(f"prompts must be a list of chat prompts, got {type(prompts).__name__}")
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, (str, bytes)) or not isinstance(prompt, Sequence):
            raise ValueError(
                f"request {i}: a prompt must be a list of messages "
                f'[{{"role": "user", "content": ...}}], got {type(prompt).__name__}'
            )
        if not prompt:
            raise ValueError(f"request {i}: the prompt has no messages")
        for k, message in enumerate(prompt):
            if not isinstance(message, Mapping):
                raise ValueError(
                    f"request {i}, message {k}: expected a mapping with 'role' and 'content', "
                    f"got {type(message).__name__}"
                )
            for key in ("role", "content"):
                if not isinstance(message.get(key), str):
                    raise ValueError(
                        f"request {i}, message {k}: '{key}' must be a str, "
                        f"got {type(message.get(key)).__name__}"
                    )


def run_grouped(
    prompts: Sequence[Sequence[Message]],
    params: Sequence[SamplingParams],
    key: Callable[[SamplingParams], Hashable],
    run: Callable[[list[Sequence[Message]], list[SamplingParams]], Sequence[Generation]],
) -> list[Generation]:
    """One completion per prompt, computed by ``run`` once per group of requests whose
    ``key(params[i])`` are equal; results in input order. A :class:`PolicyError` raised by
    ``run`` is re-raised with its ``request_indices`` mapped to indices into ``prompts``."""
    if len(prompts) != len(params):
        raise ValueError(f"{len(prompts)} prompts but {len(params)} SamplingParams")
    groups: dict[Hashable, list[int]] = {}
    for i, p in enumerate(params):
        groups.setdefault(key(p), []).append(i)
    out: list[Generation | None] = [None] * len(prompts)
    for members in groups.values():
        try:
            gens = run([prompts[i] for i in members], [params[i] for i in members])
        except PolicyError as exc:
            exc.request_indices = tuple(
                members[i] for i in exc.request_indices if 0 <= i < len(members)
            )
            raise
        for i, g in zip(members, gens, strict=True):
            out[i] = g
    return out  # type: ignore[return-value]


def tokenize_prompts(
    tokenizer: Any,
    prompts: Sequence[Sequence[Message]],
    params: SamplingParams,
    max_context_tokens: int,
) -> list[list[int]]:
    """Render chat prompts with the tokenizer's chat template and check them against the context.

    The shared prompt rule of every backend: ``apply_chat_template(messages,
    add_generation_prompt=True)``, then tokenised without adding special tokens (the template
    wrote them). A prompt of ``max_context_tokens`` tokens or more leaves no room for a new
    token and is rejected, unless ``params.truncate_prompt``: then every prompt longer than
    ``max(1, max_context_tokens - params.max_tokens)`` tokens keeps only its last that many.

    Returns:
        The token ids of each prompt, in order.

    Raises:
        PolicyError: the chat template failed on a request (named).
        PromptTooLongError: prompts that do not fit, each named with its length.
    """
    texts = []
    for i, messages in enumerate(prompts):
        try:
            texts.append(
                tokenizer.apply_chat_template(
                    [dict(m) for m in messages], tokenize=False, add_generation_prompt=True
                )
            )
        except Exception as exc:
            raise PolicyError(
                f"request {i}: the chat template failed: {type(exc).__name__}: {exc}", [i]
            ) from exc
    ids: list[list[int]] = [
        list(p) for p in tokenizer(texts, add_special_tokens=False)["input_ids"]
    ]
    ctx = max_context_tokens
    if params.truncate_prompt:
        keep = max(1, ctx - params.max_tokens)
        return [p[-keep:] if len(p) > keep else p for p in ids]
    too_long = [(i, len(p)) for i, p in enumerate(ids) if len(p) >= ctx]
    if too_long:
        shown = ", ".join(f"request {i}: {n} tokens" for i, n in too_long[:10])
        more = f" and {len(too_long) - 10} more" if len(too_long) > 10 else ""
        raise PromptTooLongError(
            f"{len(too_long)} prompt(s) do not fit the context of {ctx} tokens "
            f"(max_context_tokens; a prompt must leave room for >= 1 new token): "
            f"{shown}{more}. Shorten them or pass SamplingParams(truncate_prompt=True).",
            [i for i, _ in too_long],
        )
    return ids


BACKENDS: dict[str, tuple[str, str]] = {
    "hf": ("marti_trainer.policies.hf", "HFPolicy"),
    "vllm": ("marti_trainer.policies.vllm", "VLLMPolicy"),
    "openai": ("marti_trainer.policies.openai", "OpenAIPolicy"),
}
"""Backend name -> (module, class). Modules are imported only when their backend is used."""


def make_policy(
    backend: Literal["hf", "vllm", "openai"], model: str | Path, **kwargs: Any
) -> Policy:
    """Build a policy of the given backend for ``model``.

    Args:
        backend: ``"hf"`` (transformers; always available), ``"vllm"`` or ``"openai"``.
        model: a model alias, local directory or Hub id (see
            :func:`marti_trainer.models.resolve_model`), or what the backend accepts.
        **kwargs: passed to the backend's constructor (e.g. ``dtype``, ``batch_size``).

    Raises:
        ValueError: unknown backend.
        NotImplementedError: the backend's module is not part of this installation yet.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown policy backend {backend!r}; choose one of {sorted(BACKENDS)}")
    module_name, class_name = BACKENDS[backend]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise  # the backend exists but one of its dependencies is missing
        raise NotImplementedError(
            f"the {backend!r} policy backend is not implemented yet ({module_name} is "
            f"missing); use backend='hf'"
        ) from exc
    policy_class = getattr(module, class_name)
    return policy_class(model, **kwargs)
