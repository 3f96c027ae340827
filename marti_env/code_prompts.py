"""Code prompts for a registered env: its own prompts, asking for a program, not a boxed answer.

``marti_env.make(env_id, tasks=..., reward="code", prompts=code_prompts(env_id))`` runs any
math workflow on code tasks (:mod:`marti_env.tasks.code`). It lives above the registry (it
reads an env's spec), apart from the tasks the registry imports.
"""

from __future__ import annotations

from typing import Any

from marti_env.registry import spec
from marti_env.tasks.code import code_templates

__all__ = ["code_prompts"]


def code_prompts(env_id: str) -> dict[str, Any]:
    """The prompts of registered env ``env_id`` for code: ``code_templates`` of its
    registered prompts (:func:`marti_env.tasks.code.code_templates`).
    ``marti_env.make(env_id, prompts="code")`` is the same.

    Raises:
        ValueError: an unknown env id.
    """
    return code_templates(spec(env_id).prompts)
