"""What every config section is built from: :class:`ConfigError`, fields with a help string
and an allowed range, and the check that runs when a section is constructed.

A section is a dataclass deriving from :class:`Section` with a ``section`` name; its fields
are declared with :func:`setting`. Constructing it (from YAML, ``key=value`` overrides or
Python) checks every numeric field: a float must be finite, a number must lie in its
:class:`Range`, and the error names the key, the value and what is allowed::

    ConfigError: 'rollout.tasks_per_step' must be an integer in [1, 100000], got -3
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = ["ConfigError", "Range", "Section", "check_value", "flatten", "setting"]


class ConfigError(ValueError):
    """An invalid configuration: unknown key, wrong type, out-of-range or incompatible values."""


@dataclass(frozen=True)
class Range:
    """Allowed numbers: ``lo <= x <= hi`` (``lo < x`` / ``x < hi`` when open); None = unbounded."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def __contains__(self, x: float) -> bool:
        if self.lo is not None and (x <= self.lo if self.lo_open else x < self.lo):
            return False
        return not (self.hi is not None and (x >= self.hi if self.hi_open else x > self.hi))

    def __str__(self) -> str:
        lo = "-inf" if self.lo is None else _number(self.lo)
        hi = "inf" if self.hi is None else _number(self.hi)
        return f"{'(' if self.lo_open or self.lo is None else '['}{lo}, {hi}" + (
            ")" if self.hi_open or self.hi is None else "]"
        )


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",
    range: Range | None = None,
    *,
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """A dataclass field with its ``help`` and allowed ``range`` in the metadata (for a list
    of numbers the range applies to each element)."""
    metadata = {"help": help, "range": range}
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def check_value(value: Any, rng: Range | None, what: str) -> None:
    """Refuse a non-finite float, or a number outside ``rng``; ``what`` names the key."""
    numbers = value if isinstance(value, list) else [value]
    for x in numbers:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            continue  # types are checked where values are parsed
        kind = "an integer" if isinstance(x, int) else "a number"
        if isinstance(x, float) and not math.isfinite(x):
            raise ConfigError(f"{what} must be a finite number, got {value!r}")
        if rng is not None and x not in rng:
            raise ConfigError(f"{what} must be {kind} in {rng}, got {value!r}")


class Section:
    """Base of config sections: ``__post_init__`` checks every field declared with a range
    (and every float for finiteness). ``section`` is the YAML key ('' for the top level)."""

    section: ClassVar[str] = ""

    def __post_init__(self) -> None:
        prefix = f"{self.section}." if self.section else ""
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            check_value(getattr(self, f.name), f.metadata.get("range"), f"'{prefix}{f.name}'")


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys: ``{"env": {"id": "mad-v0", "kwargs": {}}}`` gives
    ``{"env.id": "mad-v0", "env.kwargs": {}}`` (an empty mapping keeps its own key)."""
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): data}
