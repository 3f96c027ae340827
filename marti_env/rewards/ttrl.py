"""Label-free rewards by majority vote (TTRL: Test-Time Reinforcement Learning).

Zuo et al., "TTRL: Test-Time Reinforcement Learning" (2025), arXiv:2504.16084. With no
reference answer, the answer most of a group of samples agree on becomes the pseudo-label
and each sample is rewarded for agreeing with it.

Answers are compared by :func:`canonical_answer` (cheap and exact: ``0.5`` and
``\\frac{1}{2}`` agree, ``2\\sqrt{2}`` and ``\\sqrt{8}`` do not).
"""

from __future__ import annotations

from collections.abc import Sequence

from marti_env.rewards.canonical import canonical_answer

__all__ = ["majority_answer", "ttrl_scores"]


def _canonical_or_none(answer: str | None) -> str | None:
    if answer is None:
        return None
    canon = canonical_answer(answer)
    return canon or None  # an empty answer abstains


def majority_answer(answers: Sequence[str | None]) -> str | None:
    """Return the most common canonical answer, or None if every answer is None.

    With ``c_i = canonical_answer(a_i)`` over the answers ``a_i`` that are not None (and
    whose canonical form is not empty: those abstain), the result is

        ``m = argmax_c |{i : c_i = c}|``,

    ties broken by first occurrence: among the most common forms, the one whose first
    appearance in ``answers`` comes earliest. The result is the canonical form (e.g. ``1/2``
    for ``0.5``), itself a valid answer string to verify against.

    Example: ``["0.5", None, "2", "\\frac{1}{2}", "2"]`` → ``"1/2"`` (2 votes each for
    ``1/2`` and ``2``; ``1/2`` appears first).
    """
    counts: dict[str, int] = {}  # insertion order = first occurrence
    for answer in answers:
        canon = _canonical_or_none(answer)
        if canon is not None:
            counts[canon] = counts.get(canon, 0) + 1
    if not counts:
        return None
    best = max(counts.values())
    return next(c for c, n in counts.items() if n == best)


def ttrl_scores(answers: Sequence[str | None]) -> list[float]:
    """Score each answer by agreement with the group's majority answer.

    ``r_i = 1.0 if canonical_answer(a_i) == m else 0.0`` with ``m = majority_answer(answers)``
    (None, empty answers and an all-None group score 0.0). One float per input, in order.

    Example: ``["3", "3.0", "4", None]`` → ``[1.0, 1.0, 0.0, 0.0]``.
    """
    majority = majority_answer(answers)
    if majority is None:
        return [0.0] * len(answers)
    return [1.0 if _canonical_or_none(a) == majority else 0.0 for a in answers]
