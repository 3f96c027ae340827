"""Log-probs of the responses under a model, including the shared-prompt trick.

Shared prompts: in a group every sample continues the same prompt (the same task, agent
and turn), and debaters of one episode often see the same transcript. With
``share_prompts`` a micro-batch runs each distinct prompt through the model once
(``use_cache=True``), gathers its key/value cache for every row that continues it, and runs
only the responses on top. The gradient flows back through the gathered cache, so loss and
gradient are those of the plain forward (up to float rounding); prompt tokens, most of the
tokens of a debate's update, are computed once per distinct prompt instead of once per row.
With ``share_prefixes`` the prompts that start alike (a debate's round-1 prompts: the same
task statement, then the other agents' answers in their own order) also run their common
prefix once: three levels, prefix -> prompt -> response (:class:`PromptTree`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor
from transformers import DynamicCache

from marti_trainer.algorithms import logprobs_from_logits
from marti_trainer.config import TrainConfig
from marti_trainer.kv_cache import cache_kwargs, cache_layers, output_cache
from marti_trainer.learner.batch import TrainBatch
from marti_trainer.precision import concrete_precision
from marti_trainer.prompt_tree import PromptTree

__all__ = ["forward_logprobs", "score_batch", "score_with"]


def forward_logprobs(
    model: torch.nn.Module, batch: TrainBatch, temperature: float = 1.0
) -> tuple[Tensor, Tensor]:
    """``(logprobs [B, R], logits [B, R, V])`` of the response tokens under ``model``.

    ``logprobs`` are at the sampling ``temperature`` (``log softmax(logits / temperature)``,
    :func:`~marti_trainer.algorithms.logprobs_from_logits`); ``logits`` are the model's own,
    not divided by the temperature.

    With ``batch.share_prompts`` and a prompt that several rows continue, each distinct
    prompt is forwarded once, and with ``share_prefixes`` each prefix that distinct prompts
    share too (see the module docstring and :class:`PromptTree`); the result is the same.
    """
    r = batch.response_ids.shape[1]
    tree = batch.prompt_tree()
    if tree is None:
        out = model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
            logits_to_keep=r + 1,
            use_cache=False,
        )
        logits = out.logits[:, :-1, :]
    else:
        logits = _shared_prompt_logits(model, batch, tree)
    return logprobs_from_logits(logits, batch.response_ids, temperature), logits


def _left_padded(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple:
    """``(ids, mask)`` ``[N, max len]`` long tensors of token sequences, left-padded."""
    width = max(len(x) for x in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, x in enumerate(seqs):
        if x:
            ids[i, width - len(x) :] = torch.tensor(list(x), dtype=torch.long)
            mask[i, width - len(x) :] = 1
    return ids.to(device), mask.to(device)


def _repeated_cache(cache: object, onehot: Tensor) -> object:
    return DynamicCache(
        [(_repeat_rows(layer.keys, onehot), _repeat_rows(layer.values, onehot))
         for layer in cache_layers(cache)]
    )  # fmt: skip


def _checked_cache(out: object) -> object:
    cache = output_cache(out)
    if cache is None:
        raise RuntimeError(
            "share_prompts needs the model to return its key/value cache, and this one returned "
            "none (gradient checkpointing turns the cache off): set optim.share_prompts=false"
        )
    return cache


def _shared_prompt_logits(model: torch.nn.Module, batch: TrainBatch, tree: PromptTree) -> Tensor:
    """Logits ``[B, R, V]`` predicting each response token, each shared prefix and each
    distinct prompt run once (:class:`PromptTree`).

    Each level's key/value cache is repeated for the next level's rows (a prompt's rows, a
    prefix's prompts) and they attend to it; the backward sums the rows' gradients into
    what they share. Each level is left-padded, and its attention mask spans the padded
    levels below it, so padding between levels is never attended to; positions are the
    real token counts. The logit of response token 0 comes from the prompt's last token.
    """
    device = batch.input_ids.device
    pad = 0  # any valid id: padding is masked
    keys = batch.prompt_keys()
    num_prompts = len(tree.distinct)
    cut = [tree.prefix_len[tree.prompt_cluster[u]] for u in range(num_prompts)]
    cache, below = None, None  # the repeated cache and mask of the level below, per prompt
    if tree.has_prefixes:
        clusters = [c for c, n in enumerate(tree.prefix_len) if n > 0]
        first = {c: tree.distinct[tree.prompt_cluster.index(c)] for c in clusters}
        ids, mask = _left_padded(
            [keys[first[c]][: tree.prefix_len[c]] for c in clusters], pad, device
        )
        out = model(
            input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
            logits_to_keep=1, use_cache=True,
        )  # fmt: skip
        row_of = {c: i for i, c in enumerate(clusters)}
        onehot = torch.zeros((num_prompts, len(clusters)), dtype=torch.long, device=device)
        for u, c in enumerate(tree.prompt_cluster):
            if c in row_of:  # a prompt without a prefix gets a zero row, fully masked
                onehot[u, row_of[c]] = 1
        cache = _repeated_cache(_checked_cache(out), onehot)
        below = onehot @ mask
    ids, mask = _left_padded(
        [keys[row][cut[u] :] for u, row in enumerate(tree.distinct)], pad, device
    )
    offset = torch.tensor(cut, dtype=torch.long, device=device)[:, None]
    prompt_mask = mask if below is None else torch.cat([below, mask], dim=1)
    head = model(
        input_ids=ids,
        attention_mask=prompt_mask,
        position_ids=offset + (mask.cumsum(-1) - 1).clamp(min=0),
        logits_to_keep=1,
        use_cache=True,
        **(cache_kwargs(cache) if cache is not None else {}),
    )
    p = batch.prompt_width
    row_prompt = torch.tensor(tree.row_prompt, dtype=torch.long, device=device)
    onehot = torch.nn.functional.one_hot(row_prompt, num_prompts)
    tail = model(
        input_ids=batch.input_ids[:, p:],
        attention_mask=torch.cat([prompt_mask[row_prompt], batch.attention_mask[:, p:]], dim=1),
        position_ids=batch.position_ids[:, p:],
        use_cache=True,
        **cache_kwargs(_repeated_cache(_checked_cache(head), onehot)),
    )
    return torch.cat([_repeat_rows(head.logits, onehot), tail.logits[:, :-1, :]], dim=1)


def _repeat_rows(x: Tensor, onehot: Tensor) -> Tensor:
    """``x[inverse]`` computed as ``onehot @ x``: the same values (``1 * a + 0 * b = a``), and
    a backward that sums each prompt's row gradients in a fixed order. Indexing's backward
    accumulates with several threads in no fixed order on a CPU, so repeated runs would
    differ in the last bits (and a resumed run would not repeat the uninterrupted one)."""
    flat = x.reshape(x.shape[0], -1)
    with torch.autocast(x.device.type, enabled=False):  # keep x's dtype: the copy stays exact
        out = onehot.to(flat.dtype) @ flat
    return out.reshape(onehot.shape[0], *x.shape[1:])


@torch.no_grad()
def score_batch(
    model: torch.nn.Module,
    batch: TrainBatch,
    token_budget: int,
    temperature: float = 1.0,
    share_prompts: bool = False,
    share_prefixes: bool = False,
) -> Tensor:
    """Log-probs ``[B, R]`` of every response under ``model`` (no grad, micro-batched as
    :meth:`TrainBatch.split` does).

    Micro-batches run on the model's device; the result is on ``batch``'s device.
    """
    out = torch.zeros_like(batch.response_mask)
    device = next(model.parameters()).device
    for rows in batch.chunks(token_budget, share_prompts, share_prefixes):
        micro = replace(
            batch.select(rows), share_prompts=share_prompts, share_prefixes=share_prefixes
        )
        logprobs, _ = forward_logprobs(model, micro.to(device), temperature)
        width = logprobs.shape[1]
        out[torch.tensor(rows), :width] = logprobs.float().to(out.device) * micro.response_mask
    return out


def score_with(model: torch.nn.Module, batch: TrainBatch, cfg: TrainConfig) -> Tensor:
    """:func:`score_batch` with a run's settings: its micro-batch budget, rollout
    temperature, prompt sharing and (``optim.precision == "bf16"``) bf16 autocast."""
    device = next(model.parameters()).device
    ctx = (
        torch.autocast(device.type, torch.bfloat16)
        if concrete_precision(cfg.optim, device).precision == "bf16"
        else contextlib.nullcontext()
    )
    with ctx:
        return score_batch(
            model,
            batch,
            cfg.optim.micro_batch_tokens,
            cfg.rollout.temperature,
            cfg.optim.share_prompts,
            cfg.optim.share_prefixes,
        )
