"""Prompt templates: how a workflow's requests become chat messages.

A template's ``user`` text names its fields as ``{{field}}`` (double braces, so LaTeX such
as ``\\boxed{}`` needs no escaping). A workflow declares which templates it uses and which
fields each may name; a template that names an unknown field or misses a required template
is rejected when the env is made, not when an episode reaches it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from marti_env.record import Message

_FIELD = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


@dataclass(frozen=True)
class Template:
    """One request: optional worked examples (chat turns) then the user message.

    Attributes:
        user: The user message, with ``{{field}}`` placeholders.
        examples: ``(user, assistant)`` pairs shown as earlier chat turns. A worked example
            is what makes a small model use ``\\boxed{}`` at all (without one the default
            model boxed none of 50 answers: docs/model.md).
    """

    user: str
    examples: tuple[tuple[str, str], ...] = ()

    def fields(self) -> set[str]:
        return set(_FIELD.findall(self.user))


@dataclass(frozen=True)
class Prompts:
    """A workflow's prompts: an optional system message and named templates."""

    templates: Mapping[str, Template]
    system: str | None = None
    _cache: dict[str, tuple[Message, ...]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], allowed: Mapping[str, frozenset[str]], where: str
    ) -> Prompts:
        """Build and validate prompts.

        Args:
            data: ``{"system": str | None, <template>: {"user": str, "examples": [...]}}``.
            allowed: Template name -> the fields it may use; every name must be present.
            where: Names the origin in error messages (e.g. ``"envs/mad-v0.yaml"``).
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"{where}: 'prompts' must be a mapping, got {type(data).__name__}")
        system = data.get("system")
        if system is not None and not isinstance(system, str):
            raise ValueError(f"{where}: prompts.system must be a string or null")
        unknown = set(data) - set(allowed) - {"system"}
        if unknown:
            raise ValueError(
                f"{where}: unknown prompt template(s) {sorted(unknown)}; "
                f"this workflow uses {sorted(allowed)} (and 'system')"
            )
        templates = {}
        for name, fields in allowed.items():
            if name not in data:
                raise ValueError(f"{where}: missing prompt template '{name}'")
            templates[name] = _template(data[name], f"{where}: prompts.{name}")
            bad = templates[name].fields() - fields
            if bad:
                raise ValueError(
                    f"{where}: prompts.{name} uses unknown field(s) "
                    f"{sorted('{{' + b + '}}' for b in bad)}; allowed: "
                    f"{sorted('{{' + f + '}}' for f in fields)}"
                )
        return cls(templates=templates, system=system)

    def headings(self) -> tuple[str, ...]:
        """The headings of the templates' user messages, in order, without repeats.

        A heading is the fixed text at the start of a line up to and including its first
        colon, when that colon comes before any ``{{field}}``: ``"Proposed solution:"``
        from ``Proposed solution:``, ``"Problem:"`` from ``Problem: {{problem}}``, none from
        ``Here are {{num_responses}} solutions ...:``. The env defuses lines of shown
        responses that start with one (see :func:`marti_env.workflows.base.defuse_markers`).
        """
        found: dict[str, None] = {}
        for template in self.templates.values():
            for line in template.user.splitlines():
                fixed = line.split("{{", 1)[0]
                head, colon, _ = fixed.partition(":")
                if colon and head.strip():
                    found[head.strip() + ":"] = None
        return tuple(found)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"system": self.system}
        for name, t in self.templates.items():
            out[name] = {"user": t.user, "examples": [list(e) for e in t.examples]}
        return out

    def render(self, name: str, values: Mapping[str, str]) -> tuple[Message, ...]:
        """The chat messages for template ``name`` with its fields filled from ``values``."""
        template = self.templates[name]
        head = self._cache.get(name)
        if head is None:
            msgs: list[Message] = []
            if self.system:
                msgs.append({"role": "system", "content": self.system})
            for user, assistant in template.examples:
                msgs.append({"role": "user", "content": user})
                msgs.append({"role": "assistant", "content": assistant})
            head = self._cache[name] = tuple(msgs)
        user = _FIELD.sub(lambda m: values[m.group(1)], template.user)
        return (*({**m} for m in head), {"role": "user", "content": user})


def _template(data: Any, where: str) -> Template:
    if isinstance(data, str):
        return Template(user=data)
    if not isinstance(data, Mapping) or "user" not in data:
        raise ValueError(f"{where}: expected a string or a mapping with a 'user' key")
    unknown = set(data) - {"user", "examples"}
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: user, examples")
    examples = []
    for i, ex in enumerate(data.get("examples") or []):
        if not isinstance(ex, Mapping) or set(ex) != {"user", "assistant"}:
            raise ValueError(f"{where}.examples[{i}]: expected {{user: ..., assistant: ...}}")
        examples.append((str(ex["user"]), str(ex["assistant"])))
    return Template(user=str(data["user"]), examples=tuple(examples))
