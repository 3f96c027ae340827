"""Option validation shared by the built-in credit methods (used in ``__post_init__``).

Every error names the method and the field, e.g.
``credit method 'quality': alpha must be a finite number >= 0, got nan``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection
from typing import Any


def check_real(
    method: str,
    field: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
) -> float:
    """``value`` as a finite float in ``[low, high]`` (``(low, high]`` if ``low_open``)."""
    bounds = []
    if low is not None:
        bounds.append(f"{'>' if low_open else '>='} {low:g}")
    if high is not None:
        bounds.append(f"<= {high:g}")
    want = "a finite number" + (" " + " and ".join(bounds) if bounds else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"credit method '{method}': {field} must be {want}, got {value!r}")
    x = float(value)
    ok = math.isfinite(x)
    if ok and low is not None:
        ok = x > low if low_open else x >= low
    if ok and high is not None:
        ok = x <= high
    if not ok:
        raise ValueError(f"credit method '{method}': {field} must be {want}, got {value!r}")
    return x


def check_int(method: str, field: str, value: Any, *, low: int, high: int) -> int:
    """``value`` as an int in ``[low, high]``."""
    integral = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if not integral or not low <= value <= high:
        raise ValueError(
            f"credit method '{method}': {field} must be an integer in [{low}, {high}], "
            f"got {value!r}"
        )
    return int(value)


def check_choice(method: str, field: str, value: Any, choices: Collection[str]) -> str:
    """``value`` if it is one of ``choices``."""
    if value not in choices:
        raise ValueError(
            f"credit method '{method}': {field} must be one of "
            f"{', '.join(repr(c) for c in choices)}, got {value!r}"
        )
    return value
