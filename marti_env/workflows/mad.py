"""Multi-Agent Debate (``mad-v0``).

Agents
    ``debater_0 .. debater_{N-1}`` (role ``debater``), ``N = num_agents`` (default 3).

Rounds
    ``rounds`` rounds (default 2); every debater acts in every round.
    Round 0: each debater answers the task alone (template ``solve``).
    Round r > 0: each debater sees the previous round's responses, relabelled
    ``Response 1..k`` in an order shuffled per debater and round from the episode's seed,
    its own included unless ``include_self=False``, and answers again (template ``debate``).
    Responses longer than ``max_shared_chars`` are shown clipped (head and tail).

Observation
    ``{"messages": (chat message, ...)}`` for each debater (see :mod:`marti_env.env`).

Action
    The debater's generation (any string). Its answer is the content of the last
    ``\\boxed{}``.

Final answer
    Majority vote over the last round's answers, compared by canonical form; no answer does
    not vote. Ties go to the answer of the debater that comes first in the episode's tie
    order, a seeded permutation of the debaters drawn at reset (deterministic per seed,
    favouring no fixed debater across episodes).

Arguments
    ``num_agents`` (1..16), ``rounds`` (1..8), ``include_self`` (bool), ``max_shared_chars``.

Version history
    v0: initial version. Amended without a new id: in what other agents are shown, lines
    imitating the ``Response k:`` labels and chat-template control tokens are defused
    (:func:`~marti_env.workflows.base.defuse_markers`); observations are unchanged for
    responses without them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from marti_env.record import Turn
from marti_env.tasks.task import Task
from marti_env.workflows.base import Prompt, Workflow, check_int, numbered


class Debate(Workflow):
    name = "mad"
    templates: ClassVar[Mapping[str, frozenset[str]]] = {
        "solve": frozenset({"problem"}),
        "debate": frozenset({"problem", "responses", "num_responses"}),
    }
    labels = ("Response",)

    def __init__(
        self,
        num_agents: int = 3,
        rounds: int = 2,
        include_self: bool = True,
        max_shared_chars: int = 6000,
    ) -> None:
        super().__init__(max_shared_chars=max_shared_chars)
        self.num_agents = check_int("num_agents", num_agents, 1, 16)
        self.num_rounds = check_int("rounds", rounds, 1, 8)
        if not isinstance(include_self, bool):
            raise ValueError(f"include_self must be a bool, got {include_self!r}")
        if not include_self and self.num_agents == 1 and self.num_rounds > 1:
            raise ValueError("include_self=False with num_agents=1 leaves nothing to debate")
        self.include_self = include_self
        self.agents = tuple(f"debater_{i}" for i in range(self.num_agents))

    def role(self, agent: str) -> str:
        return "debater"

    def actors(self, round: int) -> tuple[str, ...]:
        return self.agents

    def request(
        self,
        agent: str,
        round: int,
        task: Task,
        transcript: Sequence[Turn],
        rng: np.random.Generator,
    ) -> Prompt:
        if round == 0:
            return Prompt("solve", {"problem": task.prompt})
        previous = [t for t in transcript if t.round == round - 1]
        if not self.include_self:
            previous = [t for t in previous if t.agent != agent]
        order = rng.permutation(len(previous))
        shown = [self.shown(previous[i]) for i in order]
        return Prompt(
            "debate",
            {
                "problem": task.prompt,
                "responses": numbered(shown, self.labels[0]),
                "num_responses": str(len(shown)),
            },
        )

    def rule_inputs(self, transcript: Sequence[Turn]) -> dict[str, str | None]:
        last = self.num_rounds - 1
        return {t.agent: t.answer for t in transcript if t.round == last}

    def final_rule(self, answers: Mapping[str, str | None], tie_order: Sequence[str]) -> str | None:
        return self.vote(answers, tie_order)
