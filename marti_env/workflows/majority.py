"""Majority of k independent samples (``majority-v0``): the Maj@k baseline.

Agents
    ``sampler_0 .. sampler_{k-1}`` (role ``sampler``), ``k = num_samples`` (default 4).

Rounds
    One: every sampler answers the task independently (template ``solve``); nobody sees
    anybody else's response. With one shared policy this is Maj@k of that policy.

Final answer
    Majority vote over the samplers' answers by canonical form, with the same seeded tie
    order as ``mad-v0``; no answer does not vote.

Arguments
    ``num_samples`` (1..64), ``max_shared_chars`` (unused).

Version history
    v0: initial version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from marti_env.record import Turn
from marti_env.tasks.task import Task
from marti_env.workflows.base import Prompt, Workflow, check_int


class MajorityVote(Workflow):
    name = "majority"
    templates: ClassVar[Mapping[str, frozenset[str]]] = {"solve": frozenset({"problem"})}
    num_rounds = 1

    def __init__(self, num_samples: int = 4, max_shared_chars: int = 6000) -> None:
        super().__init__(max_shared_chars=max_shared_chars)
        self.num_samples = check_int("num_samples", num_samples, 1, 64)
        self.agents = tuple(f"sampler_{i}" for i in range(self.num_samples))

    def role(self, agent: str) -> str:
        return "sampler"

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
        return self.vote(answers, tie_order)
