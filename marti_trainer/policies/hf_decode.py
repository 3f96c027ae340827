"""The ``hf`` backend's decoding steps, shared by its static and continuous batching.

:class:`~marti_trainer.policies.hf.HFPolicy` (a static batch per call) and
:class:`~marti_trainer.policies.hf_continuous.ContinuousDriver` (rows joining and leaving a
running batch) decode with the same pieces, so a request's tokens are the same either way:
a :class:`Row` per sample, its seed (:func:`sample_seed`), the shared-prefix
:func:`prefill`, the inverse-CDF draw with its log-prob (:func:`sample_tokens`, top-p by
:func:`nucleus`) and stop-string matching (:func:`match_stop`). See
:mod:`marti_trainer.policies.hf` for why sampling works this way.
"""

from __future__ import annotations

import contextlib
import hashlib
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from marti_trainer.kv_cache import cache_kwargs, cache_layers, output_cache
from marti_trainer.policies.base import (
    Generation,
    Message,
    PolicyError,
    SamplingParams,
    tokenize_prompts,
)
from marti_trainer.prompt_tree import prompt_tree

__all__ = [
    "Row",
    "eval_mode",
    "match_stop",
    "nucleus",
    "prefill",
    "sample_seed",
    "sample_tokens",
    "to_generation",
    "tokenize_one",
]

_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _MASK64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def sample_seed(seed: int, sample: int, prompt_ids: Sequence[int]) -> int:
    """A 63-bit seed for sample ``sample`` of a prompt under ``SamplingParams.seed=seed``.

    The prompt's tokens are hashed in so different prompts get independent streams (a shared
    stream would couple their samples through the shared uniforms); position in the batch is
    not, so the result does not depend on batch composition.
    """
    digest = hashlib.blake2b(array("q", prompt_ids).tobytes(), digest_size=8).digest()
    x = _splitmix64(seed & _MASK64)
    x = _splitmix64(x ^ sample)
    x = _splitmix64(x ^ int.from_bytes(digest, "little"))
    return x & ((1 << 63) - 1)


@dataclass
class Row:
    """One sample being decoded: sample ``sample`` of request ``request``, filled in place."""

    request: int
    sample: int
    prompt_ids: list[int]
    budget: int  # max new tokens for this row
    generator: torch.Generator | None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: Literal["stop", "length"] | None = None
    text: str | None = None  # set when a stop string cut it


def sample_tokens(
    logits: torch.Tensor,
    rows: list[Row],
    active: list[bool],
    params: SamplingParams,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row; return (token ids [B], their log-probs [B]) on the CPU.

    Every active row consumes exactly one uniform from its own generator, so its stream
    does not depend on other rows.
    """
    logits = logits.float()  # stays on the model's device; only [B] values come back
    if params.greedy:
        logp = torch.log_softmax(logits, dim=-1)
        tokens = logp.argmax(dim=-1)
        return tokens.cpu(), logp.gather(1, tokens[:, None]).squeeze(1).cpu()
    # u in (0, 1]: the inverse CDF then never lands on a zero-probability token. The
    # generators are CPU generators, so streams are the same on every device.
    u = torch.tensor(
        [
            1.0 - float(torch.rand((), generator=r.generator)) if a else 0.5
            for r, a in zip(rows, active, strict=True)
        ]
    ).to(logits.device)
    logp = torch.log_softmax(logits / params.temperature, dim=-1)
    if params.top_p < 1.0:
        logp, order = nucleus(logp, params.top_p)
    else:
        order = None
    cdf = logp.exp().cumsum(dim=-1)
    index = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(1)).clamp(max=cdf.shape[1] - 1)
    chosen_logp = logp.gather(1, index).squeeze(1)
    tokens = order.gather(1, index).squeeze(1) if order is not None else index.squeeze(1)
    return tokens.cpu(), chosen_logp.cpu()


def match_stop(tokenizer: Any, row: Row, stop: tuple[str, ...]) -> bool:
    """If a stop string occurs in the row's completion, cut ``row.text`` before it."""
    if not stop:
        return False
    text = tokenizer.decode(row.tokens, skip_special_tokens=True)
    cut = min((k for k in (text.find(s) for s in stop) if k >= 0), default=-1)
    if cut < 0:
        return False
    row.text = text[:cut]
    return True


def to_generation(tokenizer: Any, row: Row) -> Generation:
    """The finished (or cut) ``row`` as a :class:`Generation`."""
    text = row.text
    if text is None:
        text = tokenizer.decode(row.tokens, skip_special_tokens=True)
    return Generation(
        text=text,
        token_ids=list(row.tokens),
        logprobs=list(row.logprobs),
        prompt_token_ids=list(row.prompt_ids),
        finish_reason=row.finish or "length",
    )


@contextlib.contextmanager
def eval_mode(model: Any) -> Iterator[None]:
    """Run with ``model.eval()`` and restore its mode after (a trainer's model may be training)."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def prefill(
    model: Any, prompts: Sequence[Sequence[int]], pad_id: int
) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prefill ``prompts`` left-padded, each distinct prompt once and each prefix that
    distinct prompts share once (:func:`~marti_trainer.prompt_tree.prompt_tree`).

    In a rollout the episodes of a group, and the agents of one round, often send the same
    prompt: its rows are copies of one computation. A debate's later rounds send prompts
    that repeat the task statement before the other agents' answers: that prefix is run
    once, and each prompt's rest runs on its cache (the mask spans both, left-padded, so
    the padding between them is never attended to). Returns ``(cache, mask [B, W],
    positions [B, 1], logits [B, V])``, one row per prompt in order: ``positions`` is each
    row's last position id, ``logits`` predict its first new token.
    """
    tree = prompt_tree([tuple(p) for p in prompts])
    device = model.device
    keys = [tuple(prompts[row]) for row in tree.distinct]
    cut = [tree.prefix_len[c] for c in tree.prompt_cluster]
    cache, below = None, None
    if tree.has_prefixes:
        clusters = [c for c, n in enumerate(tree.prefix_len) if n > 0]
        first = [tree.prompt_cluster.index(c) for c in clusters]
        ids, mask = _left_padded(
            [keys[u][: tree.prefix_len[c]] for u, c in zip(first, clusters, strict=True)],
            pad_id, device,
        )  # fmt: skip
        out = model(
            input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
            use_cache=True, logits_to_keep=1,
        )  # fmt: skip
        # Each prompt's row of the prefix cache; a prompt without a prefix reads a zero row
        # (index len(clusters)), fully masked.
        row_of = {c: i for i, c in enumerate(clusters)}
        index = torch.tensor(
            [row_of.get(c, len(clusters)) for c in tree.prompt_cluster], device=device
        )
        cache = output_cache(out)
        for layer in cache_layers(cache):
            layer.keys = _with_zero_row(layer.keys).index_select(0, index)
            layer.values = _with_zero_row(layer.values).index_select(0, index)
        below = _with_zero_row(mask).index_select(0, index)
    ids, mask = _left_padded([k[n:] for k, n in zip(keys, cut, strict=True)], pad_id, device)
    positions = torch.tensor(cut, device=device)[:, None] + (mask.cumsum(-1) - 1).clamp(min=0)
    if below is not None:
        mask = torch.cat([below, mask], dim=1)
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
        **(cache_kwargs(cache) if cache is not None else {}),
    )
    cache, logits, positions = output_cache(out), out.logits[:, -1, :], positions[:, -1:]
    if tree.row_prompt != list(range(len(prompts))):  # duplicates, or distinct prompts sorted
        rows = torch.tensor(tree.row_prompt, dtype=torch.long, device=device)
        for layer in cache_layers(cache):
            layer.keys = layer.keys.index_select(0, rows)
            layer.values = layer.values.index_select(0, rows)
        mask, positions, logits = (t.index_select(0, rows) for t in (mask, positions, logits))
    return cache, mask, positions, logits


def _left_padded(
    seqs: Sequence[Sequence[int]], pad_id: int, device: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, mask)`` ``[N, longest]`` of token sequences, left-padded, on ``device``."""
    width = max(len(x) for x in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for b, seq in enumerate(seqs):
        ids[b, width - len(seq) :] = torch.tensor(list(seq), dtype=torch.long)
        mask[b, width - len(seq) :] = 1
    return ids.to(device), mask.to(device)


def _with_zero_row(t: torch.Tensor) -> torch.Tensor:
    return torch.cat([t, t.new_zeros((1, *t.shape[1:]))])


def nucleus(logp: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-p nucleus of each row of ``logp`` [B, V] (log-probs).

    Returns ``(nucleus_logp [B, k], token_ids [B, k])`` sorted by probability, descending:
    the smallest prefix whose mass reaches ``top_p`` (always >= 1 token), renormalised to
    sum to 1; entries past a row's nucleus are ``-inf``. Uses ``topk`` with a growing ``k``
    instead of a full vocabulary sort (a 49k-entry sort per row per step is slow on a CPU).
    """
    vocab = logp.shape[-1]
    k = min(64, vocab)
    while True:
        top, order = logp.topk(k, dim=-1)  # sorted, descending
        probs = top.exp()
        if k == vocab or bool((probs.sum(dim=-1) >= top_p).all()):
            break
        k = min(4 * k, vocab)
    mass_before = probs.cumsum(dim=-1) - probs
    top = top.masked_fill(mass_before >= top_p, float("-inf"))  # the first token always stays
    return top - top.logsumexp(dim=-1, keepdim=True), order


def tokenize_one(
    tokenizer: Any,
    messages: Sequence[Message],
    params: SamplingParams,
    max_context_tokens: int,
    index: int,
) -> list[int]:
    """Token ids of one prompt (``tokenize_prompts``), errors re-indexed to request ``index``."""
    try:
        (ids,) = tokenize_prompts(tokenizer, [messages], params, max_context_tokens)
    except PolicyError as exc:
        raise type(exc)(str(exc).replace("request 0", f"request {index}"), [index]) from exc
    return ids
