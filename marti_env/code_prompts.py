"""Code prompts for a registered env: its own prompts, asking for a program, not a boxed answer.

``marti_env.make(env_id, tasks=..., reward="code", prompts=code_prompts(env_id))`` runs any
math workflow on code tasks (:mod:`marti_env.tasks.code`). It lives above the registry (it
reads an env's spec), apart from the tasks the registry imports.
"""

from __future__ import annotations

from typing import Any

from marti_env.registry import spec
from marti_env.tasks.code import CODE_INSTRUCTION

__all__ = ["code_prompts"]

_BOXED_INSTRUCTION = "Give the final answer in \\boxed{}."
"""The answer instruction of the math prompts, which :func:`code_prompts` replaces."""


def code_prompts(env_id: str) -> dict[str, Any]:
    """The prompts of registered env ``env_id`` for code: every ``Give the final answer in
    \\boxed{}.`` becomes :data:`CODE_INSTRUCTION` and the worked examples become one code
    example. Pass it as ``marti_env.make(env_id, tasks=..., reward="code",
    prompts=code_prompts(env_id))``.

    Raises:
        ValueError: an unknown env id.
    """
    example_user = f"Write a Python function `add_two(x)` that returns x plus 2. {CODE_INSTRUCTION}"
    example_answer = "```python\ndef add_two(x):\n    return x + 2\n```"
    out: dict[str, Any] = {}
    for name, template in spec(env_id).prompts.items():
        if name == "system" or template is None:
            out[name] = template
            continue
        user = template if isinstance(template, str) else template["user"]
        user = user.replace(_BOXED_INSTRUCTION, CODE_INSTRUCTION)
        user = user.replace("give the final answer", "give the final program")
        if isinstance(template, str) or not template.get("examples"):
            out[name] = {"user": user}
        else:
            out[name] = {
                "user": user,
                "examples": [{"user": example_user, "assistant": example_answer}],
            }
    return out
