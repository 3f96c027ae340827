"""Screening of final answers before computer algebra: reject obvious blow-ups cheaply.

math-verify hands an answer to sympy, which evaluates integer expressions exactly:
``9^{9^9}`` is an integer of 370 million digits and ``100000000!`` one of 757 million. Such
an answer costs :class:`~marti_env.rewards.MathVerifier` its whole time budget, and a kill
and restart of its helper process when the work sits in one C-level big-integer operation
(measured: ~5 s per answer with the default budget). :func:`screen_answer` spots these
answers in microseconds, without parsing, so they are scored wrong at once.
"""

from __future__ import annotations

import math
import re
from typing import Literal

__all__ = [
    "MAX_ANSWER_CHARS",
    "MAX_DIGITS",
    "MAX_NESTING",
    "MAX_TOWER",
    "RejectReason",
    "screen_answer",
]

MAX_ANSWER_CHARS = 1000
"""Default cap on an answer's length (``MathVerifier(max_answer_chars=...)``)."""
MAX_NESTING = 32
"""Default bound on bracket nesting depth. Real answers nest a few levels
(``\\left(\\frac{\\sqrt{3}}{2}, 1\\right)`` is 3 deep)."""
MAX_DIGITS = 10_000
"""Default bound on the digits of any integer an answer spells out or makes sympy compute
(``2^{10000}``, 3011 digits, and ``3000!``, 9131 digits, pass; sympy does these in
milliseconds)."""
MAX_TOWER = 3
"""Default bound on the height of a power tower (``2^{2^{2^2}}`` is 3 high and passes)."""

RejectReason = Literal[
    "length", "characters", "nesting", "digits", "tower", "power", "factorial", "binomial"
]

# One token per match; everything is ASCII on purpose (``\d`` would take other digits).
_TOKEN = re.compile(
    r"(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"|(?P<cmd>\\[A-Za-z]+|\\.)"
    r"|(?P<pow>\*\*|\^)"
    r"|(?P<open>[{(\[])"
    r"|(?P<close>[})\]])"
    r"|(?P<ws>\s+)"
    r"|(?P<other>.)",
    re.DOTALL,
)
_DIGIT_RUN = re.compile(r"[0-9]+")
# Never part of a written answer: control characters (tab, newline, CR aside; ESC starts
# ANSI escapes), C1 controls, lone surrogates, U+FFFD (what a failed decode leaves).
_BAD_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffd]")
_TIMES = frozenset({"\\cdot", "\\times", "\\div", "\\ast"})
_IGNORED = frozenset({"\\left", "\\right", "\\big", "\\Big", "\\bigl", "\\bigr", "\\Bigl"})
_FRACS = frozenset({"\\frac", "\\dfrac", "\\tfrac"})
_BINOMS = frozenset({"\\binom", "\\dbinom", "\\tbinom"})
_LOG10_2 = math.log10(2)


def _literal_size(text: str) -> float:
    """Digits of the exact value of a decimal literal: ``log10 n`` for an integer ``n > 1``,
    0 for 0 and 1; a decimal counts its fraction digits too (``0.5`` is ``1/2``, and
    ``0.5^e`` has a ``2^e`` denominator)."""
    integer, _, fraction = text.partition(".")
    integer = integer.lstrip("0")
    fraction = fraction.rstrip("0")
    if len(integer) > 15:
        size = float(len(integer))
    else:
        size = math.log10(int(integer)) if integer else 0.0
    return max(size, float(len(fraction)))


class _Reject(Exception):
    def __init__(self, reason: RejectReason) -> None:
        self.reason = reason


def screen_answer(
    answer: str,
    *,
    max_chars: int = MAX_ANSWER_CHARS,
    max_nesting: int = MAX_NESTING,
    max_digits: int = MAX_DIGITS,
    max_tower: int = MAX_TOWER,
) -> RejectReason | None:
    """Why ``answer`` must not reach computer algebra, or None if it may.

    Rules, checked in this order (the first that fires is returned):

    ``"length"``
        ``len(answer) > max_chars`` (default 1000).
    ``"characters"``
        A character no written answer holds: an ASCII control character other than tab,
        newline and carriage return (so any ANSI escape), a C1 control (U+0080-U+009F), a
        lone surrogate (U+D800-U+DFFF) or U+FFFD, the replacement character a failed
        decode leaves. (:class:`~marti_env.rewards.MathVerifier` settles plain numbers and
        equal canonical forms first, and the canonical form deletes ASCII controls, so
        ``4\\x00`` still equals ``4``.)
    ``"nesting"``
        Brackets (``{ ( [``, and ``\\{``) nest deeper than ``max_nesting`` (default 32),
        or brackets, command arguments and exponents together deeper than
        ``2 * max_nesting + max_tower`` (``\\sqrt\\sqrt\\sqrt...`` has no brackets).
    ``"digits"``
        A run of more than ``max_digits`` (default 10,000) decimal digits.
    ``"tower"``
        Powers (``^`` or ``**``) nest more than ``max_tower`` (default 3) high:
        ``a^{b^{c^{d^e}}}`` is 4 high.
    ``"power"``, ``"factorial"``, ``"binomial"``
        A power, factorial or binomial coefficient of numbers that evaluates to more than
        ``max_digits`` digits. Sizes are upper bounds on ``log10 |value|`` computed bottom-up
        from the literals: an integer ``n`` is ``log10 n`` (a decimal also counts its fraction
        digits: ``0.5`` is ``1/2``); a sum or product of terms
        ``t_1..t_k`` is ``sum(max(t_i, 0)) + log10 k``; ``\\frac{a}{b}`` is ``a``;
        ``\\sqrt{a}`` is ``a / 2``; ``b^e`` has ``|e| * |log10 b|`` digits (``e`` itself
        bounded the same way, so ``9^{9^9}``: ``9^9 * 0.954`` = 3.7e8 digits); ``n!``
        (or ``n!!``) has ``log10 Γ(n + 1)`` digits (Stirling: ``100000000!`` has 7.6e8);
        ``\\binom{n}{k}`` has at most ``min(n log10 2, k log10 n)``. Anything with a
        letter or an unknown command is symbolic and has no size (sympy keeps
        ``x^{1000000}`` unevaluated), but what it contains is still checked
        (``x^{9^{9^9}}`` is rejected for ``9^{9^9}``).

    The screen reads the answer as LaTeX or plain text, loosely: ``2^10`` is taken as
    ``2^{10}`` (as math-verify reads it), ``**`` is right-associative, unbalanced brackets
    close at the end. It is a bound, not a parser: it passes ``2^{10}``, ``5!``,
    ``\\frac{1}{2}``, ``\\sqrt{8}``, ``10^{6}``, ``2^{2^{2^2}}``, ``3000!``,
    ``\\binom{100000}{3}``; it may reject an answer sympy would manage (a symbolic tower 4
    high) and pass one that still times out (math-verify's budget is the second line of
    defence). Linear time in ``len(answer)``; never raises for any ``str``.

    Source: the sizes are the usual digit counts, ``floor(log10 x) + 1``; Stirling via
    ``math.lgamma``. The bounds were chosen here: none of the 19,240 reference answers of
    the shared GSM8K, MATH, AMC, AIME, Minerva and OlympiadBench files is rejected (the
    longest has 204 characters; ``tests/test_rewards_screen.py`` checks them all).
    """
    if len(answer) > max_chars:
        return "length"
    if _BAD_CHARS.search(answer):
        return "characters"
    if max(map(len, _DIGIT_RUN.findall(answer)), default=0) > max_digits:
        return "digits"
    tokens: list[tuple[str, str]] = []
    depth = 0
    for m in _TOKEN.finditer(answer):
        kind = m.lastgroup
        text = m.group()
        if kind == "ws":
            continue
        if kind == "open" or text == "\\{":
            depth += 1
            if depth > max_nesting:
                return "nesting"
        elif (kind == "close" or text == "\\}") and depth > 0:
            depth -= 1
        tokens.append((kind, text))  # type: ignore[arg-type]
    try:
        _Sizer(tokens, max_nesting, max_digits, max_tower).run()
    except _Reject as reject:
        return reject.reason
    return None


class _Sizer:
    """Walks the tokens once, computing the size bounds of :func:`screen_answer`.

    Sizes are ``log10 |value|`` upper bounds (float, may be ``inf``) or None (symbolic).
    Recursion depth is bounded by the nesting and tower checks.
    """

    def __init__(
        self, tokens: list[tuple[str, str]], max_nesting: int, max_digits: int, max_tower: int
    ) -> None:
        self.tokens = tokens
        self.i = 0
        self.max_digits = max_digits
        self.max_tower = max_tower
        self.tower = 0
        self.depth = 0
        # Brackets are bounded by the token pass; this also bounds command arguments
        # (``\\sqrt\\sqrt\\sqrt...``), counted together with the brackets they open.
        self.max_depth = 2 * max_nesting + max_tower

    def run(self) -> None:
        while self.i < len(self.tokens):
            self.sequence()
            self.i += 1  # a stray closing bracket at the top level

    def sequence(self) -> float | None:
        """Terms and operators up to a closing bracket (not consumed) or the end."""
        total = 0.0
        count = 0
        numeric = True
        while self.i < len(self.tokens):
            kind, text = self.tokens[self.i]
            if kind == "close":
                break
            if (kind == "other" and text in "+-*/=,;<>|") or text in _TIMES or text in _IGNORED:
                self.i += 1
                continue
            size = self.operand()
            count += 1
            if size is None:
                numeric = False
            else:
                total += max(size, 0.0)
        if not numeric:
            return None
        return total + math.log10(count) if count > 1 else total

    def operand(self) -> float | None:
        """An atom with its powers, factorials and subscripts."""
        size = self.atom()
        while self.i < len(self.tokens):
            kind, text = self.tokens[self.i]
            if kind == "pow":
                self.i += 1
                size = self.power(size)
            elif text == "!":
                self.i += 1
                if self.i < len(self.tokens) and self.tokens[self.i][1] == "!":
                    self.i += 1  # n!! <= n!
                size = self.factorial(size)
            elif text == "_":
                self.i += 1
                self.atom()  # checked, but an index does not change the size
            else:
                break
        return size

    def power(self, base: float | None) -> float | None:
        if self.tower >= self.max_tower:
            raise _Reject("tower")
        self.tower += 1
        try:
            exponent = self.atom()
            if self.i < len(self.tokens) and self.tokens[self.i][0] == "pow":
                self.i += 1  # a**b**c is a**(b**c)
                exponent = self.power(exponent)
        finally:
            self.tower -= 1
        if base is None or exponent is None:
            return None
        if base == 0.0:  # the literal 0 or 1
            return 0.0
        digits = math.inf if exponent > 300 else 10.0**exponent * abs(base)
        if digits > self.max_digits:
            raise _Reject("power")
        return digits

    def factorial(self, size: float | None) -> float | None:
        if size is None:
            return None
        if size > 7:  # n >= 10^7: n! has more than 6e7 digits
            raise _Reject("factorial")
        n = round(10.0**size)
        digits = math.lgamma(n + 1) / math.log(10)
        if digits > self.max_digits:
            raise _Reject("factorial")
        return digits

    def atom(self) -> float | None:
        if self.i >= len(self.tokens):
            return None
        self.depth += 1
        if self.depth > self.max_depth:
            raise _Reject("nesting")
        try:
            return self._atom()
        finally:
            self.depth -= 1

    def _atom(self) -> float | None:
        kind, text = self.tokens[self.i]
        self.i += 1
        while kind == "other" and text in "+-" and self.i < len(self.tokens):
            kind, text = self.tokens[self.i]  # a sign: |-x| = |x|
            self.i += 1
        if kind == "num":
            return _literal_size(text)
        if kind == "open":
            size = self.sequence()
            if self.i < len(self.tokens):
                self.i += 1  # the closing bracket
            return size
        if kind == "cmd":
            if text in _FRACS:
                numerator, denominator = self.atom(), self.atom()
                return None if denominator is None else numerator
            if text == "\\sqrt":
                if self.i < len(self.tokens) and self.tokens[self.i][1] == "[":
                    self.atom()  # the root's index
                size = self.atom()
                return None if size is None else size / 2
            if text in _BINOMS:
                return self.binomial(self.atom(), self.atom())
        return None  # a letter, a command, punctuation: symbolic

    def binomial(self, n: float | None, k: float | None) -> float | None:
        if n is None:
            return None
        digits = math.inf if n > 300 else 10.0**n * _LOG10_2
        if k is not None and k <= 300 and n <= 300:
            digits = min(digits, 10.0**k * n)
        if digits > self.max_digits:
            raise _Reject("binomial")
        return digits
