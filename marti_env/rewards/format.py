"""Format reward: did the response commit to a final ``\\boxed{}`` answer?"""

from __future__ import annotations

from marti_env.rewards.boxed import extract_boxed

__all__ = ["format_score"]


def format_score(response: str) -> float:
    """Return 1.0 if ``response`` has a non-empty, balanced final ``\\boxed{}``, else 0.0.

    Exactly ``extract_boxed(response) is not None`` (see :func:`extract_boxed`): an empty
    ``\\boxed{}`` or a final box cut off before its closing brace scores 0.0. Never raises
    for any ``str``.
    """
    return 0.0 if extract_boxed(response) is None else 1.0
