"""Which prompts of a batch share what: the plan by which a batch's prompts are computed
once (the learner's forward, the hf backend's prefill).

In a debate, the samples of a group share their prompt, and a round's prompts of one task
share a long prefix (the task statement) before the other agents' answers. A
:class:`PromptTree` says which rows share a prompt, which prompts share a prefix, and how
long each shared prefix is; :func:`prompt_tree` builds it from the prompts' token ids.
Pure Python (no torch).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace

__all__ = ["MIN_SHARED_PREFIX", "PromptTree", "lcp_of", "prompt_tree", "tree_of_run"]


MIN_SHARED_PREFIX = 16
"""Distinct prompts share a computed prefix only if they have at least this many leading
tokens in common (:func:`prompt_tree`)."""


@dataclass(frozen=True)
class PromptTree:
    """How the prompts of a batch's rows are computed when they are shared.

    Level 1 (``share_prefixes``): each *cluster* of distinct prompts that start alike runs
    its common prefix once (``prefix_len[c]`` tokens). Level 2: each distinct prompt runs
    the rest of itself (its suffix) once, on the repeated prefix cache. Level 3: every row
    runs its response on the repeated cache of its prompt. Without ``share_prefixes`` every
    distinct prompt is its own cluster with an empty prefix (two levels).

    Attributes:
        distinct: Row index of the first occurrence of each distinct prompt.
        row_prompt: Row -> index into ``distinct``.
        prompt_cluster: Distinct prompt -> cluster index.
        prefix_len: Cluster -> length of its shared prefix (0: no prefix level).
        prompt_len: Distinct prompt -> its length.
    """

    distinct: list[int]
    row_prompt: list[int]
    prompt_cluster: list[int]
    prefix_len: list[int]
    prompt_len: list[int]

    @property
    def has_prefixes(self) -> bool:
        return any(n > 0 for n in self.prefix_len)

    def tokens(self, response_width: int) -> int:
        """Positions computed: ``C * Pc + U * Ps + B * R``, with ``Pc`` the longest prefix,
        ``Ps`` the longest suffix (prompt minus its cluster's prefix), ``R`` the response
        width, for ``C`` clusters with a prefix, ``U`` distinct prompts, ``B`` rows (padding
        included: each level is a padded batch)."""
        prefix = max(self.prefix_len)
        suffix = max(
            n - self.prefix_len[c]
            for n, c in zip(self.prompt_len, self.prompt_cluster, strict=True)
        )
        clusters = sum(n > 0 for n in self.prefix_len)
        rows = len(self.row_prompt)
        return clusters * prefix + len(self.distinct) * suffix + rows * response_width


def lcp_of(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def prompt_tree(keys: Sequence[tuple[int, ...]], share_prefixes: bool = True) -> PromptTree:
    """The :class:`PromptTree` of rows with these prompt ``keys`` (token tuples).

    Rule: distinct prompts are sorted lexicographically and cut into contiguous clusters
    (:func:`_clusters`: the cut that saves the most positions); a cluster's prefix is the
    common prefix of all its prompts, at least :data:`MIN_SHARED_PREFIX` tokens, shortened
    so that every prompt keeps one token of its own (the response's first logit comes from
    that last token). A cluster of one prompt has no prefix (0): it runs whole at the prompt
    level; a batch whose clusters are all single prompts runs two levels.
    """
    order = sorted(range(len(keys)), key=lambda i: keys[i])
    lcp = [0] + [lcp_of(keys[a], keys[b]) for a, b in itertools.pairwise(order)]
    tree = tree_of_run([keys[i] for i in order], lcp, share_prefixes)
    # tree_of_run numbers rows in sorted order: map back to the caller's row order.
    row_prompt = [0] * len(keys)
    for sorted_row, row in enumerate(order):
        row_prompt[row] = tree.row_prompt[sorted_row]
    distinct = [order[i] for i in tree.distinct]
    return replace(tree, distinct=distinct, row_prompt=row_prompt)


def tree_of_run(
    keys: Sequence[tuple[int, ...]], lcp: Sequence[int], share_prefixes: bool
) -> PromptTree:
    """:func:`prompt_tree` of rows already in sorted order, ``lcp[i]`` the common prefix of
    row ``i`` with row ``i - 1`` (``lcp[0]`` ignored). Rows are numbered in that order."""
    distinct: list[int] = []
    row_prompt: list[int] = []
    prompt_len: list[int] = []
    joint: list[int] = []  # per distinct prompt: common prefix with the previous distinct one
    for i, key in enumerate(keys):
        if i > 0 and lcp[i] == len(key) == len(keys[i - 1]):  # the same prompt again
            row_prompt.append(len(distinct) - 1)
            continue
        row_prompt.append(len(distinct))
        joint.append(lcp[i] if i > 0 else 0)
        distinct.append(i)
        prompt_len.append(len(key))
    starts = _clusters(joint, prompt_len) if share_prefixes else list(range(len(distinct)))
    prompt_cluster, prefix_len = [], []
    for c, (a, b) in enumerate(itertools.pairwise([*starts, len(distinct)])):
        prompt_cluster += [c] * (b - a)
        prefix_len.append(_shared(joint, prompt_len, a, b - 1) if b - a > 1 else 0)
    return PromptTree(distinct, row_prompt, prompt_cluster, prefix_len, prompt_len)


def _shared(joint: Sequence[int], lengths: Sequence[int], first: int, last: int) -> int:
    """Prefix that distinct prompts ``first..last`` (sorted) run once: their common prefix,
    shortened so that each keeps one token of its own."""
    common = min(joint[first + 1 : last + 1])
    return min(common, min(lengths[first : last + 1]) - 1)


def _clusters(joint: Sequence[int], lengths: Sequence[int], window: int = 64) -> list[int]:
    """First index of each cluster of sorted distinct prompts: the contiguous partition that
    saves the most positions, ``sum over clusters of (size - 1) x shared prefix``, clusters
    sharing at least :data:`MIN_SHARED_PREFIX` tokens (dynamic programming over the
    partition's last cluster, at most ``window`` prompts long). A debate's round-1 prompts of
    one task share the task statement and more; its round-0 prompt shares less: it is left
    out rather than shortening everyone's prefix."""
    m = len(joint)
    best = [0] * (m + 1)  # best[j]: most positions saved by prompts 0..j-1
    start = [0] * (m + 1)
    for j in range(1, m + 1):
        best[j], start[j] = best[j - 1], j - 1  # prompt j-1 alone
        for i in range(max(0, j - window), j - 1):  # cluster i..j-1
            shared = _shared(joint, lengths, i, j - 1)
            if shared < MIN_SHARED_PREFIX:
                continue
            gain = best[i] + (j - 1 - i) * shared
            if gain > best[j]:
                best[j], start[j] = gain, i
    starts, j = [], m
    while j > 0:
        starts.append(start[j])
        j = start[j]
    return starts[::-1]
