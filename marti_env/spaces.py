"""Gymnasium spaces for text observations and actions.

LLM text has spaces, newlines and unicode and may be empty, so the spaces here accept
*any* ``str`` within their length bounds; ``sample()`` draws printable ASCII (what
PettingZoo's conformance tests feed the envs). The observation is a ``Dict`` with a
``"messages"`` key holding chat messages (``{"role", "content"}`` dicts), which a chat
template or an OpenAI-compatible client consumes directly.
"""

from __future__ import annotations

import string
from typing import Any

from gymnasium import spaces

PRINTABLE = string.printable
MAX_MESSAGE_CHARS = 1_000_000
"""Upper bound on one message's length in an observation (contexts are clipped far below)."""


class UnicodeText(spaces.Text):
    """A ``Text`` space whose members are any ``str`` of ``min_length..max_length`` chars.

    Gymnasium's ``Text.contains`` also requires every character to be in the charset; an LLM
    env must not reject a real generation for containing ``×`` or an emoji, so only the
    length is checked here. Sampling still draws from ``charset`` (printable ASCII).
    """

    def __init__(self, max_length: int, *, min_length: int = 0, seed: Any = None) -> None:
        super().__init__(max_length, min_length=min_length, charset=PRINTABLE, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )

    __hash__ = None  # type: ignore[assignment]  # mutable rng, like gymnasium's spaces


def messages_space(max_message_chars: int = MAX_MESSAGE_CHARS) -> spaces.Dict:
    """The observation space: ``{"messages": (message, ...)}``, possibly no messages.

    Each call returns a new space (PettingZoo's seed tests seed each agent's space).
    """
    message = spaces.Dict(
        {
            "role": UnicodeText(16, min_length=1),
            "content": UnicodeText(max_message_chars),
        }
    )
    return spaces.Dict({"messages": spaces.Sequence(message, stack=False)})


def response_space(max_chars: int) -> UnicodeText:
    """The action space: a generation of up to ``max_chars`` characters (empty allowed)."""
    return UnicodeText(max_chars)
