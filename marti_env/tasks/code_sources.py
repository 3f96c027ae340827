"""Task-source specs for code tasks: ``"humaneval"``, ``"code_gen"`` and their dict forms.

:func:`~marti_env.tasks.make_task_source` asks :func:`code_task_source` first; the specs
are listed in :mod:`marti_env.tasks.code`. The generator also has a string form for command
lines, ``"code_gen:<split>[:<levels>]"``: ``"code_gen:test:1,2"`` is
``{"type": "code_gen", "split": "test", "levels": [1, 2]}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from marti_env.tasks.base import ListTasks, TaskSource
from marti_env.tasks.code import humaneval_tasks, load_code_tasks
from marti_env.tasks.code_gen import CodeGenTasks

__all__ = ["CODE_SPEC_KEYS", "code_task_source"]

CODE_SPEC_KEYS: dict[str, tuple[str, ...]] = {
    "humaneval": (),
    "code_gen": ("seed", "levels", "size", "split"),
    "code_file": ("path",),
}
"""Dict spec types for code tasks and the keys each accepts."""


def _code_gen_string(spec: str) -> dict[str, Any]:
    parts = spec.split(":")
    if len(parts) > 3 or not parts[1]:
        raise ValueError(f"bad code_gen spec {spec!r}: expected 'code_gen:<split>[:<levels>]'")
    out: dict[str, Any] = {"type": "code_gen", "split": parts[1]}
    if len(parts) == 3:
        try:
            out["levels"] = [int(x) for x in parts[2].split(",")]
        except ValueError as e:
            raise ValueError(
                f"bad code_gen spec {spec!r}: levels must be comma-separated integers"
            ) from e
    return out


def code_task_source(spec: Any) -> TaskSource | None:
    """The task source for a code spec, or None when ``spec`` is not one (so the caller
    tries the other forms).

    Raises:
        ValueError: a code spec dict with an unknown or missing key.
        TaskDataError: a malformed row of a ``code_file`` (naming ``file:line``).
    """
    if isinstance(spec, str) and spec in ("humaneval", "code_gen"):
        spec = {"type": spec}
    elif isinstance(spec, str) and spec.startswith("code_gen:"):
        spec = _code_gen_string(spec)
    if not isinstance(spec, Mapping) or spec.get("type") not in CODE_SPEC_KEYS:
        return None
    kind = spec["type"]
    rest = {k: v for k, v in spec.items() if k != "type"}
    unknown = sorted(set(rest) - set(CODE_SPEC_KEYS[kind]))
    if unknown:
        raise ValueError(
            f"unknown key(s) {unknown} for task source type {kind!r}; "
            f"accepted: {list(CODE_SPEC_KEYS[kind])}"
        )
    if kind == "humaneval":
        return ListTasks(humaneval_tasks(), name="humaneval")
    if kind == "code_gen":
        return CodeGenTasks(**rest)
    if "path" not in rest:
        raise ValueError("task source type 'code_file' needs key(s) ['path']")
    return ListTasks(load_code_tasks(rest["path"]), name=str(rest["path"]))
