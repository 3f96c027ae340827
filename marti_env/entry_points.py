"""Entry points: ``"package.module:Attr"`` to the object it names, the one rule by which
plug-ins are named (credit methods, workflows; a credit method may also name
``"file.py:Class"``, through its own loader).

    >>> resolve_entry_point("json:dumps", "example").__name__
    'dumps'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["resolve_entry_point"]


def resolve_entry_point(
    spec: str,
    where: str,
    load: Callable[[str], Any] = importlib.import_module,
    form: str = "'package.module:Class'",
) -> Any:
    """The object ``spec`` (``"target:attr"``, ``attr`` possibly dotted) names: ``load(target)``
    (by default an import), then ``attr`` looked up on it part by part.

    ``where`` opens every error message (e.g. ``"credit method 'my.py:X'"``); ``form`` is the
    shape the message asks for.

    Raises:
        ValueError: ``spec`` is not ``target:attr``; loading the target raised (its type and
            message quoted); or the target has no such attribute.
    """
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise ValueError(f"{where} is not of the form {form}")
    try:
        obj = load(target)
    except Exception as e:  # any error in the user's module or file is reported as is
        raise ValueError(f"{where}: loading {target!r} failed: {type(e).__name__}: {e}") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as e:
            raise ValueError(f"{where}: {target!r} has no attribute {attr!r}") from e
    return obj
