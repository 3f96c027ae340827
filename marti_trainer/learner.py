"""From rollout samples to a policy-gradient loss: padded batches, advantages, the loss.

Layout of a :class:`TrainBatch` row (``P`` = longest prompt, ``R`` = longest response)::

    [pad pad p0 p1 ... p_k | r0 r1 ... r_m pad pad]
     <-- prompt, left-padded --><-- response, right-padded -->

Every response starts at column ``P``, so the model's logits are needed only for the last
``R + 1`` columns (``logits_to_keep``): the vocabulary projection (a fifth of SmolLM2's
compute per token) is never applied to prompt tokens. ``position_ids`` count real tokens,
so a padded row sees the positions it would see alone.

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

Micro-batching keeps the gradient exact: each micro-batch's loss is its aggregate
(token-mean, ...) times ``weight = its share of the batch's normaliser`` (tokens, sequences
or rows), so the sum of micro-batch gradients is the full batch's gradient.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor

from marti_trainer.algorithms import (
    compute_advantages,
    entropy_from_logits,
    group_ids_from_keys,
    kl_estimate,
    kl_loss,
    logprobs_from_logits,
    masked_mean,
    overlong_penalty,
    policy_loss,
)
from marti_trainer.config import AlgorithmConfig
from marti_trainer.kv_cache import cache_kwargs, cache_layers, output_cache
from marti_trainer.prompt_tree import PromptTree, lcp_of, prompt_tree, tree_of_run
from marti_trainer.rollout.samples import group_key_of

__all__ = [
    "LossFn",
    "TrainBatch",
    "collate",
    "make_loss_fn",
    "sample_advantages",
    "score_batch",
]


@dataclass
class TrainBatch:
    """Padded tensors of ``B`` samples (see the module docstring for the layout).

    Attributes:
        input_ids: ``[B, P + R]`` long, prompt left-padded then response right-padded.
        attention_mask: ``[B, P + R]`` long, 1 on real tokens.
        position_ids: ``[B, P + R]`` long, ``cumsum(attention_mask) - 1`` (0 on padding).
        response_ids: ``[B, R]`` long, the sampled tokens (pad id after the end).
        response_mask: ``[B, R]`` float, 1 on trained tokens.
        advantages: ``[B]`` (one per sequence) or ``[B, R]`` (per token).
        rollout_logprobs: ``[B, R]`` log-probs the rollout policy sampled with.
        old_logprobs: ``[B, R]`` log-probs before this batch's first update, or None
            (then the current ones, detached: exactly on-policy, ratio 1).
        ref_logprobs: ``[B, R]`` log-probs under the reference (initial) policy, or None.
        prompt_lengths: ``[B]`` long.  response_lengths: ``[B]`` long.
        norm: The whole batch's aggregation normaliser (kept by micro-batches).
        share_prompts: Forward each distinct prompt once (set by :meth:`split`).
        share_prefixes: With ``share_prompts``, also forward once the prefix that distinct
            prompts share (the task statement of a debate's round-1 prompts), see
            :func:`prompt_tree` (set by :meth:`split`).
    """

    input_ids: Tensor
    attention_mask: Tensor
    position_ids: Tensor
    response_ids: Tensor
    response_mask: Tensor
    advantages: Tensor
    rollout_logprobs: Tensor
    prompt_lengths: Tensor
    response_lengths: Tensor
    old_logprobs: Tensor | None = None
    ref_logprobs: Tensor | None = None
    norm: float = 1.0
    share_prompts: bool = False
    share_prefixes: bool = False

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def prompt_width(self) -> int:
        return int(self.input_ids.shape[1] - self.response_ids.shape[1])

    @property
    def num_tokens(self) -> int:
        """Real (unpadded) tokens, prompts included."""
        return int(self.attention_mask.sum())

    def computed_tokens(self) -> tuple[int, int]:
        """``(tokens, logit_tokens)`` that :func:`forward_logprobs` computes for this batch:
        every position it runs the model on (padding included) and the positions whose
        logits it projects. Plain: ``B * (P + R)`` and ``B * (R + 1)``; with shared prompts
        ``U * P + B * R`` and ``U + B * R`` for ``U`` distinct prompts; with shared prefixes
        ``C * Pc + U * Ps + B * R`` and ``U + B * R`` (:meth:`PromptTree.tokens`)."""
        b, p, r = self.size, self.prompt_width, int(self.response_ids.shape[1])
        tree = self.prompt_tree()
        if tree is None:
            return b * (p + r), b * (r + 1)
        return tree.tokens(r), len(tree.distinct) + b * r

    def prompt_tree(self) -> PromptTree | None:
        """How :func:`forward_logprobs` shares this batch's prompts, or None (plain)."""
        if not self.share_prompts:
            return None
        tree = prompt_tree(self.prompt_keys(), self.share_prefixes)
        return None if len(tree.distinct) == self.size else tree

    def to(self, device: torch.device | str) -> TrainBatch:
        """The same batch with every tensor on ``device`` (itself if they already are)."""
        device = torch.device(device)
        if self.input_ids.device == device:
            return self
        tensors = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(
            self, **{k: v.to(device) for k, v in tensors.items() if isinstance(v, Tensor)}
        )

    def select(self, rows: Sequence[int]) -> TrainBatch:
        """The given rows, with padding trimmed to their own longest prompt and response."""
        idx = torch.as_tensor(list(rows), dtype=torch.long)
        p = int(self.prompt_lengths[idx].max())
        r = max(1, int(self.response_lengths[idx].max()))
        cols = slice(self.prompt_width - p, self.prompt_width + r)

        def rows_of(t: Tensor | None, full: bool = False) -> Tensor | None:
            if t is None:
                return None
            t = t[idx]
            return t[:, cols] if full else (t[:, :r] if t.dim() == 2 else t)

        return replace(
            self,
            input_ids=rows_of(self.input_ids, True),
            attention_mask=rows_of(self.attention_mask, True),
            position_ids=rows_of(self.position_ids, True),
            response_ids=rows_of(self.response_ids),
            response_mask=rows_of(self.response_mask),
            advantages=rows_of(self.advantages),
            rollout_logprobs=rows_of(self.rollout_logprobs),
            old_logprobs=rows_of(self.old_logprobs),
            ref_logprobs=rows_of(self.ref_logprobs),
            prompt_lengths=self.prompt_lengths[idx],
            response_lengths=self.response_lengths[idx],
        )

    def split(
        self, token_budget: int, share_prompts: bool = False, share_prefixes: bool = False
    ) -> list[TrainBatch]:
        """Micro-batches of the rows :meth:`chunks` groups (see there)."""
        return [
            replace(self.select(rows), share_prompts=share_prompts, share_prefixes=share_prefixes)
            for rows in self.chunks(token_budget, share_prompts, share_prefixes)
        ]

    def chunks(
        self, token_budget: int, share_prompts: bool = False, share_prefixes: bool = False
    ) -> list[list[int]]:
        """Row indices of micro-batches whose cost stays within ``token_budget`` tokens.

        The cost of a micro-batch is what is computed: ``rows x padded length``, or with
        ``share_prompts`` the :meth:`PromptTree.tokens` of its rows. With ``share_prompts``
        rows are ordered by their prompt tokens (lexicographically), so that equal prompts,
        and prompts with a common prefix, are neighbours (:meth:`split` marks its
        micro-batches for :func:`forward_logprobs`). Otherwise rows are sorted by length so
        that similar lengths share a micro-batch (little padding). A row over the budget
        forms its own micro-batch.
        """
        lengths = (self.prompt_lengths + self.response_lengths).tolist()
        responses = self.response_lengths.tolist()
        if not share_prompts:
            order = sorted(range(self.size), key=lambda i: lengths[i])
        else:
            keys = self.prompt_keys()
            order = sorted(range(self.size), key=lambda i: (keys[i], lengths[i]))
            # Common prefix of each row's prompt with the previous row's, in this order:
            # a chunk is a run of the order, so its tree needs no token comparison.
            lcp = [0] + [lcp_of(keys[a], keys[b]) for a, b in itertools.pairwise(order)]
            position = {row: n for n, row in enumerate(order)}
        chunks: list[list[int]] = []
        for i in order:
            rows = chunks[-1] if chunks else None
            if rows:
                candidate = [*rows, i]
                if not share_prompts:
                    cost = len(candidate) * max(lengths[j] for j in candidate)
                else:
                    start = position[candidate[0]]
                    tree = tree_of_run(
                        [keys[j] for j in candidate], lcp[start : start + len(candidate)],
                        share_prefixes,
                    )  # fmt: skip
                    cost = tree.tokens(max(responses[j] for j in candidate))
                if cost <= token_budget:
                    rows.append(i)
                    continue
            chunks.append([i])
        return chunks

    def prompt_keys(self) -> list[tuple[int, ...]]:
        """Each row's prompt token ids (without padding), as a hashable key."""
        p = self.prompt_width
        return [
            tuple(self.input_ids[i, p - int(n) : p].tolist())
            for i, n in enumerate(self.prompt_lengths)
        ]


def collate(samples: Sequence, pad_id: int, advantages: Tensor | None = None) -> TrainBatch:
    """Pad rollout :class:`~marti_trainer.rollout.Sample` s into a :class:`TrainBatch`.

    Samples with an empty response get one masked pad token (they train nothing).
    """
    if not samples:
        raise ValueError("collate: no samples")
    prompts = [list(s.prompt_token_ids) for s in samples]
    responses = [list(s.response_token_ids) for s in samples]
    p, r = max(map(len, prompts)), max(1, max(map(len, responses)))
    b = len(samples)
    input_ids = torch.full((b, p + r), pad_id, dtype=torch.long)
    attention = torch.zeros((b, p + r), dtype=torch.long)
    resp_mask = torch.zeros((b, r))
    old = torch.zeros((b, r))
    for i, (pr, rs, s) in enumerate(zip(prompts, responses, samples, strict=True)):
        input_ids[i, p - len(pr) : p] = torch.tensor(pr, dtype=torch.long)
        input_ids[i, p : p + len(rs)] = torch.tensor(rs, dtype=torch.long)
        attention[i, p - len(pr) : p + len(rs)] = 1
        resp_mask[i, : len(rs)] = 1.0
        old[i, : len(rs)] = torch.tensor(list(s.logprobs), dtype=torch.float32)
    if advantages is None:
        advantages = torch.zeros(b)
    return TrainBatch(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=(attention.cumsum(-1) - 1).clamp(min=0),
        response_ids=input_ids[:, p:].clone(),
        response_mask=resp_mask,
        advantages=advantages,
        rollout_logprobs=old,
        prompt_lengths=torch.tensor([len(x) for x in prompts]),
        response_lengths=torch.tensor([len(x) for x in responses]),
    )


def sample_advantages(
    samples: Sequence, batch: TrainBatch, cfg: AlgorithmConfig, max_tokens: int
) -> Tensor:
    """Advantages of one agent's (or one model's) samples from their credited rewards.

    Groups are :func:`~marti_trainer.rollout.group_key_of` under ``cfg.group_by``. With
    ``cfg.overlong_penalty > 0`` each reward first gets that weight times DAPO's soft
    overlong penalty of its length against ``max_tokens`` (the rollout budget). REINFORCE++
    estimators get the per-token KL to the reference when ``cfg.kl_in_reward``.
    """
    rewards = torch.tensor([float(s.reward) for s in samples])
    if cfg.overlong_penalty > 0:
        lengths = torch.tensor([len(s.response_token_ids) for s in samples])
        rewards = rewards + cfg.overlong_penalty * overlong_penalty(
            lengths, max_tokens, cfg.overlong_buffer
        )
    name = cfg.advantage
    groups = group_ids_from_keys([group_key_of(s, cfg.group_by) for s in samples])
    if name in ("grpo", "dr_grpo", "rloo"):
        return compute_advantages(name, rewards=rewards, group_ids=groups)
    token_kl = None
    if cfg.kl_in_reward and batch.ref_logprobs is not None:
        token_kl = kl_estimate(batch.rollout_logprobs, batch.ref_logprobs, "k1")
    kwargs = dict(rewards=rewards, mask=batch.response_mask, token_kl=token_kl, gamma=cfg.gamma)
    kwargs["kl_coef"] = cfg.kl_coef if token_kl is not None else 0.0
    if name == "reinforce_pp_baseline":
        kwargs["group_ids"] = groups
    return compute_advantages(name, **kwargs)


def set_norm(batch: TrainBatch, aggregation: str) -> TrainBatch:
    """Store the whole batch's normaliser for ``aggregation`` (see :func:`micro_weight`)."""
    batch.norm = float(max(1.0, _count(batch, aggregation)))
    return batch


def _count(batch: TrainBatch, aggregation: str) -> float:
    if aggregation == "token-mean":
        return float(batch.response_mask.sum())
    if aggregation == "seq-mean-token-mean":
        return float((batch.response_mask.sum(-1) > 0).sum())
    return float(batch.size)


def forward_logprobs(
    model: torch.nn.Module, batch: TrainBatch, temperature: float = 1.0
) -> tuple[Tensor, Tensor]:
    """``(logprobs [B, R], logits [B, R, V])`` of the response tokens under ``model``.

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
    if temperature != 1.0:
        logits = logits / temperature
    return logprobs_from_logits(logits, batch.response_ids), logits


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
    from transformers import DynamicCache

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


LossFn = Callable[[torch.nn.Module, TrainBatch], tuple[Tensor, dict[str, float], float]]
"""``loss_fn(model, micro_batch) -> (weighted loss, metrics, weight)`` used by engines."""


def make_loss_fn(cfg: AlgorithmConfig, max_tokens: int, temperature: float = 1.0) -> LossFn:
    """The clipped policy loss (+ KL term, - entropy bonus) of one micro-batch.

    Returns a function giving ``(loss * weight, metrics, weight)``; ``metrics`` are the
    micro-batch's own means, which the engine averages with ``weight``.
    """

    def loss_fn(model: torch.nn.Module, mb: TrainBatch) -> tuple[Tensor, dict[str, float], float]:
        logprobs, logits = forward_logprobs(model, mb, temperature)
        mask = mb.response_mask
        old = mb.old_logprobs if mb.old_logprobs is not None else logprobs.detach()
        loss, stats = policy_loss(
            logprobs, old, mb.advantages, mask, cfg.clip_low, cfg.clip_high,
            cfg.aggregation, max_tokens,
        )  # fmt: skip
        metrics = stats.as_dict("losses/")
        metrics["losses/policy_loss"] = float(loss.detach())
        if mb.ref_logprobs is not None:
            kl = kl_loss(
                logprobs, mb.ref_logprobs, mask, cfg.kl_estimator, cfg.aggregation, max_tokens
            )
            metrics["losses/kl_ref"] = float(kl.detach())
            if cfg.kl_coef > 0 and not cfg.kl_in_reward:
                loss = loss + cfg.kl_coef * kl
        if cfg.entropy_coef > 0:
            entropy = masked_mean(entropy_from_logits(logits.float()), mask)
            loss = loss - cfg.entropy_coef * entropy
        else:
            with torch.no_grad():
                entropy = masked_mean(_entropy_rows(logits), mask)
        metrics["losses/entropy"] = float(entropy.detach())
        metrics["losses/rollout_kl"] = float(
            masked_mean(kl_estimate(mb.rollout_logprobs, logprobs.detach().float(), "k3"), mask)
        )
        weight = _count(mb, cfg.aggregation) / mb.norm
        return loss * weight, metrics, weight

    return loss_fn


def _entropy_rows(logits: Tensor) -> Tensor:
    """Entropy ``[B, R]`` in float32, one row at a time (bounded memory)."""
    return torch.stack([entropy_from_logits(row.float()) for row in logits])
