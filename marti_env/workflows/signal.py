"""Referential game (``signal-v0``): speakers name the target in one token, a listener picks.

A lazy-agent probe: the final-answer rule reads only the listener, so any credit computed
from the rule pays a speaker the outcome whatever it said; its true contribution needs
the listener re-executed with a null message. With several speakers, each one's message is
redundant whenever another speaker names the target: a speaker can free-ride on the
others (the lazy agent of Sunehag et al. 2017, arXiv 1706.05296), and the leave-one-out
contribution of each of two informative speakers is 0.

Agents
    ``speaker_0 .. speaker_{M-1}`` (role ``speaker``, ``M = num_speakers``, 1 by default)
    and ``listener_0`` (role ``listener``).

Observation
    Round 0: every speaker is shown ``K`` candidates and which one is the target
    (template ``speak``); the speakers do not see each other. The template may show the
    task's problem (field ``problem``) instead of the target: a prompt that hides the
    target makes the speaker solve the problem to name it (the LLM tier's variant,
    ``baselines/smollm2/135m_credit_signal.yaml``). Round 1: the listener is
    shown the same candidates in an order shuffled from the episode's generator, and the
    speakers' messages in speaker order, joined by :data:`MESSAGE_SEPARATOR` (template
    ``listen``, field ``message``: :func:`join_messages`). With
    ``listener_sees_target=True`` the listener is also told the target (the ``hint``
    field, ``"The target is <t>. "``; empty otherwise).

Action
    Any text; its answer is the last ``\\boxed{}``. A speaker's *message* is the first
    whitespace-separated token of the last ``\\boxed{}`` of what the listener may be shown
    of its response (:meth:`~marti_env.workflows.base.Workflow.shown`), at most 24
    characters (:func:`message_of`); the listener sees only that, or :data:`NULL_MESSAGE`. The
    listener boxes one candidate.

Rewards
    Final answer: the listener's answer; the outcome is the verifier (default ``math``)
    on it against the target, the task's answer. Candidates are the target and ``K - 1``
    distinct near numbers drawn from the task id (:func:`candidates`), so any task source
    with integer answers works. Each turn is scored on its own boxed answer (a speaker
    that boxes the target scores 1; the listener's score is the outcome). A speaker's
    true contribution is ``success(real messages) - success(its message null, the
    others' kept)`` (:func:`speaker_contribution`), which needs the listener's policy:
    the simulated tier of the credit benchmark replays it. ``listener_sees_target=True``
    is the probe's credit-irrelevant variant: the listener needs no message, so a
    listener that reads the hint makes every speaker's true contribution 0, and every
    method that pays the listener the outcome (all the built-ins: its own score is the
    outcome) trains the team alike.

Episode end
    After round 1; every agent terminates.

Arguments
    ``num_candidates`` (K, 2..16), ``num_speakers`` (M, 1..4, default 1),
    ``listener_sees_target`` (bool, default False), ``max_shared_chars``.

Version history
    v0: initial version; ``listener_sees_target`` (and the ``listen`` template's ``hint``,
    empty by default, so the default prompts are unchanged), ``num_speakers`` (one
    speaker by default: the original agents and prompts) and the ``speak`` template's
    ``problem`` field (unused by the default prompt) added later.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from marti_env.record import Turn
from marti_env.rewards.boxed import extract_boxed
from marti_env.tasks.task import Task
from marti_env.workflows.base import Prompt, Workflow, check_int, defuse_markers
from marti_env.workflows.split_sum import parse_int

LISTENER = "listener_0"
NULL_MESSAGE = "(no message)"
"""What the listener is shown when the speaker boxed nothing (or was ablated)."""
MAX_MESSAGE_CHARS = 24
MESSAGE_SEPARATOR = " / "
"""Between the speakers' messages in the listener's ``message`` field (no message holds
it: a message is one whitespace-free token)."""


def message_of(answer: str | None) -> str:
    """The one-token message the listener sees: the first token of the speaker's boxed
    answer, clipped to 24 characters; :data:`NULL_MESSAGE` if there is none.

    >>> message_of("57 is it")
    '57'
    >>> message_of(None)
    '(no message)'
    """
    tokens = (answer or "").split()
    return tokens[0][:MAX_MESSAGE_CHARS] if tokens else NULL_MESSAGE


def join_messages(messages: Sequence[str]) -> str:
    """The listener's ``message`` field: the speakers' messages in speaker order, joined by
    :data:`MESSAGE_SEPARATOR`; one speaker's message is shown as it is.

    >>> join_messages(["57"]), join_messages(["57", "(no message)"])
    ('57', '57 / (no message)')
    """
    return MESSAGE_SEPARATOR.join(messages)


def candidates(task: Task, k: int) -> tuple[str, ...]:
    """The target (``task.answer``) and ``k - 1`` distinct integers within 20 of it, in a
    fixed order drawn from the CRC-32 of the task id (the target's place included).

    Raises:
        ValueError: the task's answer is not an integer (naming the task).
    """
    target = parse_int(task.answer)
    if target is None:
        raise ValueError(
            f"signal: task {task.id!r} has answer {task.answer!r}, not an integer; use a "
            "task source with integer answers (e.g. 'arithmetic')"
        )
    rng = np.random.default_rng([zlib.crc32(task.id.encode()), k])
    offsets = [o for o in range(-20, 21) if o != 0]
    others = [target + int(o) for o in rng.choice(offsets, size=k - 1, replace=False)]
    values = [target, *others]
    return tuple(str(values[i]) for i in rng.permutation(k))


def speaker_contribution(success_real: float, success_null: float) -> float:
    """The speaker's credit: the listener's success with the real message minus with the
    null message (same listener draws). ``(1, 0) -> 1``; a message the listener ignores
    gives 0."""
    return float(success_real) - float(success_null)


class Signal(Workflow):
    """Rules of ``signal-v0`` (see the module docstring)."""

    name = "signal"
    templates: ClassVar[Mapping[str, frozenset[str]]] = {
        "speak": frozenset({"candidates", "target", "problem"}),
        "listen": frozenset({"candidates", "message", "hint"}),
    }
    num_rounds = 2

    def __init__(
        self,
        num_candidates: int = 4,
        listener_sees_target: bool = False,
        num_speakers: int = 1,
        max_shared_chars: int = 6000,
    ) -> None:
        super().__init__(max_shared_chars=max_shared_chars)
        self.num_candidates = check_int("num_candidates", num_candidates, 2, 16)
        self.num_speakers = check_int("num_speakers", num_speakers, 1, 4)
        self.speakers = tuple(f"speaker_{i}" for i in range(self.num_speakers))
        self.agents = (*self.speakers, LISTENER)
        if not isinstance(listener_sees_target, bool):
            raise ValueError(f"listener_sees_target must be a bool, got {listener_sees_target!r}")
        self.listener_sees_target = listener_sees_target

    def required_fields(self) -> Mapping[str, Mapping[str, str]]:
        if self.listener_sees_target:
            return {"listen": {"hint": "listener_sees_target=True tells the listener the target"}}
        return {}

    def role(self, agent: str) -> str:
        return agent.rpartition("_")[0]

    def actors(self, round: int) -> tuple[str, ...]:
        return self.speakers if round == 0 else (LISTENER,)

    def request(
        self,
        agent: str,
        round: int,
        task: Task,
        transcript: Sequence[Turn],
        rng: np.random.Generator,
    ) -> Prompt:
        options = candidates(task, self.num_candidates)
        if round == 0:
            fields = {"candidates": ", ".join(options), "target": str(task.answer)}
            return Prompt("speak", {**fields, "problem": task.prompt})
        order = rng.permutation(len(options))
        spoken = {t.agent: t for t in transcript if t.agent in self.speakers}
        # through self.shown, as any shown response (clipped, defused; a harness that
        # blanks what agents are shown blanks the message too)
        messages = [
            defuse_markers(
                message_of(extract_boxed(self.shown(spoken[s])) if s in spoken else None)
            )
            for s in self.speakers
        ]
        return Prompt(
            "listen",
            {
                "candidates": ", ".join(options[i] for i in order),
                "message": join_messages(messages),
                "hint": f"The target is {task.answer}. " if self.listener_sees_target else "",
            },
        )

    def rule_inputs(self, transcript: Sequence[Turn]) -> dict[str, str | None]:
        return {LISTENER: next((t.answer for t in transcript if t.agent == LISTENER), None)}

    def final_rule(self, answers: Mapping[str, str | None], tie_order: Sequence[str]) -> str | None:
        return answers.get(LISTENER)
