"""DAPO's soft overlong penalty: what the trainer adds to a credited reward for a response
that nears or hits the token budget.

Not credit assignment: the env's credit methods (MARTI's reward shaping among them) live in
:mod:`marti_env.credit`; this penalty reads only a response's length.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["overlong_penalty"]


def overlong_penalty(lengths: Tensor, max_tokens: int, buffer: int) -> Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, "DAPO", eq. 13), in ``[-1, 0]``.

    With ``L = max_tokens`` and ``B = buffer``, a response of ``n`` tokens gets::

        0                  if n <= L - B
        (L - B - n) / B    if L - B < n <= L      (a linear ramp down to -1 at the cut)
        -1                 if n > L

    Responses are cut at ``max_tokens``, so a truncated one gets -1 and one that ends ``k``
    tokens before the cut gets ``-(B - k) / B`` when ``k < B``. The trainer adds
    ``algorithm.overlong_penalty`` times this to each sample's credited reward.

    Args:
        lengths: ``[N]`` response lengths in tokens (any integer or float dtype).
        max_tokens: ``L``, the generation budget, >= 1.
        buffer: ``B``, tokens before the cut over which the penalty ramps, 1..max_tokens.

    Returns:
        ``[N]`` float32 penalties.
    """
    if max_tokens < 1 or not 1 <= buffer <= max_tokens:
        raise ValueError(
            f"need max_tokens >= 1 and 1 <= buffer <= max_tokens, got {max_tokens}, {buffer}"
        )
    n = lengths.to(torch.float32)
    return ((max_tokens - buffer - n) / buffer).clamp(min=-1.0, max=0.0)
