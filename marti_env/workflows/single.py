"""Single agent (``single-v0``): the single-agent RL baseline.

Agents
    ``solver_0`` (role ``solver``).

Rounds
    One: the solver answers the task (template ``solve``).

Final answer
    The solver's answer (the last ``\\boxed{}`` of its response), or None.

Arguments
    ``max_shared_chars`` (unused: nothing is shared).

Version history
    v0: initial version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from marti_env.record import Turn
from marti_env.tasks.task import Task
from marti_env.workflows.base import Prompt, Workflow

SOLVER = "solver_0"


class Single(Workflow):
    name = "single"
    templates: ClassVar[Mapping[str, frozenset[str]]] = {"solve": frozenset({"problem"})}
    agents = (SOLVER,)
    num_rounds = 1

    def role(self, agent: str) -> str:
        return "solver"

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
        return Prompt("solve", {"problem": task.prompt})

    def rule_inputs(self, transcript: Sequence[Turn]) -> dict[str, str | None]:
        return {t.agent: t.answer for t in transcript}

    def final_rule(self, answers: Mapping[str, str | None], tie_order: Sequence[str]) -> str | None:
        return answers.get(SOLVER)
