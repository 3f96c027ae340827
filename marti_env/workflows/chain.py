"""Chain-of-Agents (``chain-v0``): generator -> verifier -> refiner.

Agents
    ``generator_0`` (role ``generator``), ``verifier_0`` (role ``verifier``),
    ``refiner_0`` (role ``refiner``).

Rounds
    Three, one agent each. Round 0: the generator solves the task (template ``solve``).
    Round 1: the verifier sees the generator's solution and critiques it, instructed not
    to solve the problem itself (template ``verify``). Round 2: the refiner sees the
    solution and the critique and gives the final solution (template ``refine``).
    Agents that do not act in a round are inactive (see :mod:`marti_env.env`).

Final answer
    The refiner's answer (the last ``\\boxed{}`` of its response), or None.

Scores
    Every turn is scored on its own boxed answer; a verifier that follows its instructions
    boxes nothing and scores 0 (credit methods see it through the outcome instead).

Arguments
    ``max_shared_chars``.

Version history
    v0: initial version. Amended without a new id: in what other agents are shown, lines
    imitating the template headings (``Proposed solution:``, ...) and chat-template
    control tokens are defused (:func:`~marti_env.workflows.base.defuse_markers`);
    observations are unchanged for responses without them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from marti_env.record import Turn
from marti_env.tasks.task import Task
from marti_env.workflows.base import Prompt, Workflow

GENERATOR, VERIFIER, REFINER = "generator_0", "verifier_0", "refiner_0"


class ChainOfAgents(Workflow):
    name = "chain"
    templates: ClassVar[Mapping[str, frozenset[str]]] = {
        "solve": frozenset({"problem"}),
        "verify": frozenset({"problem", "solution"}),
        "refine": frozenset({"problem", "solution", "critique"}),
    }
    agents = (GENERATOR, VERIFIER, REFINER)
    num_rounds = 3

    def role(self, agent: str) -> str:
        return agent.rsplit("_", 1)[0]

    def actors(self, round: int) -> tuple[str, ...]:
        return (self.agents[round],)

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
        solution = self.shown(transcript[0])
        if round == 1:
            return Prompt("verify", {"problem": task.prompt, "solution": solution})
        critique = self.shown(transcript[1])
        return Prompt(
            "refine", {"problem": task.prompt, "solution": solution, "critique": critique}
        )

    def rule_inputs(self, transcript: Sequence[Turn]) -> dict[str, str | None]:
        return {t.agent: t.answer for t in transcript if t.agent == REFINER}

    def final_rule(self, answers: Mapping[str, str | None], tie_order: Sequence[str]) -> str | None:
        return answers.get(REFINER)
