"""Extract the final ``\\boxed{...}`` answer from a model response.

The extractor is a plain linear scan, not a regular expression: it must stay fast on
megabyte responses full of braces and never raise, whatever the model wrote.
"""

from __future__ import annotations

import re

__all__ = ["extract_boxed"]

# Commands whose braced argument is an answer box. ``\fbox`` is the plain-TeX spelling.
_BOX_COMMANDS: tuple[str, ...] = ("\\boxed", "\\fbox")


def _find_last_box(text: str, end: int, cache: dict[str, int]) -> tuple[int, str] | None:
    """Return ``(start, command)`` of the last box command starting before ``end``.

    ``cache`` keeps, per command, the last position found so that each command's
    occurrences are searched once from right to left (linear in total).
    """
    best: tuple[int, str] | None = None
    for cmd in _BOX_COMMANDS:
        pos = cache.get(cmd, len(text) + 1)
        if pos >= end:
            # Search again only below the current bound.
            pos = text.rfind(cmd, 0, end)
            cache[cmd] = pos
        if pos >= 0 and (best is None or pos > best[0]):
            best = (pos, cmd)
    return best


def _is_letter(ch: str) -> bool:
    return ("a" <= ch <= "z") or ("A" <= ch <= "Z")


def _match_braces(text: str, open_pos: int) -> int:
    """Return the index of the ``}`` closing the ``{`` at ``open_pos``, or -1.

    Escaped braces (``\\{``, ``\\}``) and any other backslash-escaped character are
    skipped, so ``\\boxed{\\{1, 2\\}}`` closes at the last brace. Short tails are scanned
    in Python; long ones (hostile input: a megabyte inside one box) in numpy, so the cost
    stays a few milliseconds per megabyte whatever the text holds.
    """
    if len(text) - open_pos > _LONG_TAIL:
        return _match_braces_long(text, open_pos)
    depth = 0
    i = open_pos
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


_LONG_TAIL = 4096
_ESCAPED = re.compile(r"\\.", re.DOTALL)


def _match_braces_long(text: str, open_pos: int) -> int:
    """:func:`_match_braces` in numpy: escapes blanked (same length, left to right, as the
    loop skips them), then the first brace where the running depth is back to 0."""
    import numpy as np

    tail = _ESCAPED.sub("  ", text[open_pos:])
    codes = np.frombuffer(tail.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    braces = np.flatnonzero((codes == _OPEN) | (codes == _CLOSE))
    depth = np.cumsum(np.where(codes[braces] == _OPEN, 1, -1))
    closed = np.flatnonzero(depth == 0)
    return open_pos + int(braces[closed[0]]) if closed.size else -1


_OPEN, _CLOSE = ord("{"), ord("}")
_last: tuple[str, str | None] = ("", None)


def extract_boxed(text: str) -> str | None:
    """Return the content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``.

    Contract:
        * "Last" means the box command that *starts* last; for nested boxes
          (``\\boxed{\\boxed{5}}``) that is the inner one. Whitespace between the command
          and its brace is allowed (``\\boxed {5}``).
        * Occurrences not followed by ``{`` (prose mentioning ``\\boxed``, or a longer
          command such as ``\\boxedanswer``) are skipped and earlier ones are tried.
        * If the last braced box is unbalanced (e.g. a response cut off by the token limit)
          the result is ``None``: the final answer is incomplete, and earlier boxes are
          not used as a fallback.
        * Braces are matched with nesting; backslash-escaped characters (``\\{``) do not
          count. The content is returned with surrounding whitespace stripped; empty or
          whitespace-only content gives ``None``.
        * Runs in time linear in ``len(text)`` (a few milliseconds for a megabyte) and
          never raises for any ``str``. The last result is remembered for the same string
          object, since an env and its reward both extract from each response.

    Examples:
        >>> extract_boxed(r"so \\boxed{1} ... finally \\boxed{\\frac{1}{2}}.")
        '\\\\frac{1}{2}'
        >>> extract_boxed(r"\\boxed{}") is None
        True
    """
    global _last
    if not isinstance(text, str):
        return None
    last = _last
    if last[0] is text:
        return last[1]
    answer = _extract(text)
    _last = (text, answer)
    return answer


def _extract(text: str) -> str | None:
    cache: dict[str, int] = {}
    end = len(text)
    while True:
        found = _find_last_box(text, end, cache)
        if found is None:
            return None
        start, cmd = found
        i = start + len(cmd)
        n = len(text)
        if i < n and _is_letter(text[i]):
            # A longer control word (``\boxedanswer``): not a box.
            end = start
            continue
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i >= n or text[i] != "{":
            end = start
            continue
        close = _match_braces(text, i)
        if close < 0:
            return None
        content = text[i + 1 : close].strip()
        return content or None
