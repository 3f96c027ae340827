"""Majority vote with an explicit tie rule (pure functions, no env state)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence


def majority_vote(
    answers: Mapping[str, str | None],
    tie_order: Sequence[str],
    key: Callable[[str], str],
) -> str | None:
    """The answer most agents gave; ties broken by ``tie_order``.

    Rule: answers are grouped by ``key`` (a canonical form, so ``0.5`` and ``\\frac{1}{2}``
    count as one answer); ``None`` (no answer) never votes. The group with the most votes
    wins. Among tied groups, the winner is the group of the agent that comes first in
    ``tie_order`` (environments draw that order from the episode's seed, so ties are
    deterministic for a seed yet favour no fixed agent across episodes). The returned
    answer is that group's answer as written by its first supporter in ``tie_order``.
    Returns ``None`` if nobody answered.

    >>> majority_vote({"a": "1", "b": "2", "c": "2"}, ["a", "b", "c"], str)
    '2'
    >>> majority_vote({"a": "1", "b": "2", "c": None}, ["b", "a", "c"], str)
    '2'
    """
    counts: dict[str, int] = {}
    for answer in answers.values():
        if answer is not None:
            k = key(answer)
            counts[k] = counts.get(k, 0) + 1
    if not counts:
        return None
    best = max(counts.values())
    for agent in tie_order:
        answer = answers.get(agent)
        if answer is not None and counts[key(answer)] == best:
            return answer
    missing = [a for a in answers if a not in tie_order]
    raise ValueError(f"tie_order {list(tie_order)} lacks agents {missing}")
