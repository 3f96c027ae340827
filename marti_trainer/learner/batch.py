"""Collation: rollout samples -> a padded :class:`TrainBatch`, and its micro-batches.

Layout of a :class:`TrainBatch` row (``P`` = longest prompt, ``R`` = longest response)::

    [pad pad p0 p1 ... p_k | r0 r1 ... r_m pad pad]
     <-- prompt, left-padded --><-- response, right-padded -->

Every response starts at column ``P``, so the model's logits are needed only for the last
``R + 1`` columns (``logits_to_keep``): the vocabulary projection (a fifth of SmolLM2's
compute per token) is never applied to prompt tokens. ``position_ids`` count real tokens,
so a padded row sees the positions it would see alone. :meth:`TrainBatch.split` cuts a
batch into micro-batches within a token budget (see
:mod:`marti_trainer.learner.logprobs` for how shared prompts change their cost).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor

from marti_trainer.prompt_tree import PromptTree, lcp_of, prompt_tree, tree_of_run

__all__ = ["TrainBatch", "collate"]


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
