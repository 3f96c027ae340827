"""A cheap canonical form of a final answer, for voting and fast equality checks.

``canonical_answer`` is not a symbolic normaliser: it removes LaTeX noise that never changes
an answer's meaning (``$``, ``\\left``, thin spaces, ``\\dfrac``, degree signs, ``\\text``
around words, thousands separators, whitespace) and maps plain numbers to one exact form,
so that ``142.0``, ``142`` and ``\\text{142}`` vote together and compare equal without
calling a computer-algebra system. Anything cleverer (``2\\sqrt{2}`` vs ``\\sqrt{8}``) is
left to :class:`marti_env.rewards.MathVerifier`.
"""

from __future__ import annotations

import functools
import hashlib
import re
from fractions import Fraction

__all__ = ["MAX_CANONICAL_CHARS", "OVERLONG_PREFIX", "canonical_answer", "numeric_value"]

MAX_CANONICAL_CHARS = 1000
"""Inputs longer than this are not normalised (see :func:`canonical_answer`)."""

OVERLONG_PREFIX = "\x00overlong:"
"""Prefix of the marker returned for overlong inputs. Normal canonical forms never contain
``"\\x00"`` (it is deleted from every input), so a marker never equals the canonical form of
an answer of at most ``MAX_CANONICAL_CHARS`` characters."""

# All patterns are ASCII-only on purpose: ``\d`` would also accept e.g. Arabic-Indic digits.
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_LEFT_RIGHT = re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big)(?![a-zA-Z])")
# ``\\\\`` (a row break) is matched first so that its second backslash is not read as ``\\ ``.
_SPACING = re.compile(r"\\\\|\\[,;: ]|~")
# ``\!`` (negative thin space) glues, as in MATH's ``10,\!000``; ``\,`` between digits is
# an SI thousands separator (``1\,000``).
_GLUE = re.compile(r"\\!|(?<=[0-9])\\,(?=[0-9]{3}(?![0-9]))")
_FRAC_VARIANTS = re.compile(r"\\[dt]frac(?![a-zA-Z])")
_DEGREES = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ(?![a-zA-Z])|°")
_TEXT_WORDS = re.compile(r"\\(?:text|textbf|textrm|textit|mbox|mathrm)\s*\{([^{}\\]*)\}")
_THOUSANDS = re.compile(r"[+-]?[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?", re.ASCII)
_WHITESPACE = re.compile(r"\s+")
# A space is kept only where it ends a control word before a letter (``\pi r``) or
# separates two digits (``1 2`` must not become ``12``).
_SIGNIFICANT_SPACE = re.compile(r"(\\[a-zA-Z]+) (?=[a-zA-Z])|(?<=[0-9]) (?=[0-9])")
_CHOICE = re.compile(r"\(([A-Z])\)")

_DECIMAL = re.compile(r"([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
_SLASH_FRACTION = re.compile(r"([+-]?)([0-9]+)/([0-9]+)")
# ``\frac{a}{b}``, ``\frac12``, ``\frac1{2}``, ``\frac{1}2`` with unsigned decimal a, b.
_NUM = r"[0-9]+(?:\.[0-9]+)?"
_LATEX_FRACTION = re.compile(rf"([+-]?)\\frac(?:\{{({_NUM})\}}|([0-9]))(?:\{{({_NUM})\}}|([0-9]))")


def _to_fraction(s: str) -> Fraction | None:
    """Exact value of ``s`` if it is a plain number, else ``None``. Bounded by ``len(s)``."""
    m = _DECIMAL.fullmatch(s)
    if m:
        value = Fraction(m.group(2))
        return -value if m.group(1) == "-" else value
    m = _SLASH_FRACTION.fullmatch(s)
    if m:
        num, den = int(m.group(2)), int(m.group(3))
        if den == 0:
            return None
        value = Fraction(num, den)
        return -value if m.group(1) == "-" else value
    m = _LATEX_FRACTION.fullmatch(s)
    if m:
        num = Fraction(m.group(2) or m.group(3))
        den = Fraction(m.group(4) or m.group(5))
        if den == 0:
            return None
        value = num / den
        return -value if m.group(1) == "-" else value
    return None


def _overlong_marker(ans: str) -> str:
    digest = hashlib.sha256(ans.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{OVERLONG_PREFIX}{len(ans)}:{digest}"


def _canonicalize(ans: str) -> tuple[str, Fraction | None]:
    """Return ``(canonical form, exact value or None)``; see :func:`canonical_answer`."""
    if len(ans) > MAX_CANONICAL_CHARS:
        return _overlong_marker(ans), None
    return _canonicalize_short(ans)


# Pure and called on every turn (scoring, voting), so cached; only inputs of at most
# MAX_CANONICAL_CHARS characters reach it, which bounds the cache's memory (~70 MB).
@functools.lru_cache(maxsize=65_536)
def _canonicalize_short(ans: str) -> tuple[str, Fraction | None]:
    s = _CONTROL_CHARS.sub("", ans)
    s = s.replace("\u2212", "-")  # unicode minus
    s = s.replace("\\$", "").replace("$", "")
    s = _LEFT_RIGHT.sub("", s)
    s = _GLUE.sub("", s)
    s = _SPACING.sub(lambda m: m.group(0) if m.group(0) == "\\\\" else " ", s)
    s = _FRAC_VARIANTS.sub(r"\\frac", s)
    s = _DEGREES.sub("", s)
    s = _TEXT_WORDS.sub(lambda m: m.group(1), s)
    s = s.replace("{,}", ",").strip()
    if s.endswith(".") and not s.endswith("\\."):
        s = s[:-1].rstrip()
    # Thousands separators only when the whole answer is one such number: "1,000" is a
    # number, "(1,000)" and "1, 000" are left alone (they may be tuples or lists).
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    s = _WHITESPACE.sub(" ", s)
    s = (
        _SIGNIFICANT_SPACE.sub(lambda m: (m.group(1) or "") + "\x00", s)
        .replace(" ", "")
        .replace("\x00", " ")
    )
    m = _CHOICE.fullmatch(s)
    if m:
        s = m.group(1)
    value = _to_fraction(s)
    if value is not None:
        return str(value), value
    return s, None


def canonical_answer(ans: str) -> str:
    """Return a cheap canonical form of the final answer ``ans``.

    Steps, in order: delete ASCII control characters; map ``−`` to ``-``; delete ``$`` and
    ``\\$``; delete ``\\left``/``\\right`` (and ``\\big``-family) delimiters sizes; turn
    ``\\,``, ``\\;``, ``\\:``, ``\\ `` and ``~`` into spaces, except that ``\\!`` and
    ``\\,`` between digits (``10,\\!000``, ``1\\,000``) are deleted; ``\\dfrac``/``\\tfrac``
    → ``\\frac``; delete ``^\\circ``, ``^{\\circ}`` and ``°``; unwrap ``\\text{...}``
    (also ``\\textbf``, ``\\textrm``, ``\\textit``, ``\\mbox``, ``\\mathrm``) around
    brace-free, backslash-free content; ``{,}`` → ``,``; strip surrounding whitespace and
    one trailing period; delete thousands separators when the *whole* answer is a number
    like ``1,000`` or ``-12,345.5`` (so ``(1,2)`` and ``1, 000`` are untouched, and an
    ambiguous ``1,234`` is read as one thousand two hundred thirty-four); delete all
    whitespace except one space ending a control word before a letter (``\\pi r``) or
    between two digits; map a
    lone choice ``(C)`` to ``C``.

    If the result is a plain number (integer, decimal, ``a/b``, ``\\frac{a}{b}``,
    ``\\frac12``, optionally signed; ASCII digits only, no exponent notation) the exact
    reduced fraction is returned as ``str(Fraction)``: ``142.0`` → ``142``, ``0.5``,
    ``\\frac12``, ``\\frac{1}{2}``, ``1/2`` → ``1/2``, ``-3.50`` → ``-7/2``. A zero
    denominator is not a number. Otherwise the cleaned LaTeX string is returned.

    Bounded work: an input longer than :data:`MAX_CANONICAL_CHARS` characters is not
    normalised; the result is ``OVERLONG_PREFIX + "<length>:<sha256 hex>"``. Equal overlong
    inputs give equal markers (they still vote together), and a marker never equals the
    canonical form of a shorter input because those never contain ``"\\x00"``.

    Never raises for any ``str``.
    """
    return _canonicalize(ans)[0]


def numeric_value(ans: str) -> Fraction | None:
    """Exact value of ``ans`` if :func:`canonical_answer` treats it as a number, else None."""
    return _canonicalize(ans)[1]
