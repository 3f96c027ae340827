"""Mixture-of-Agents (``moa-v0``).

Agents
    ``proposer_0 .. proposer_{P-1}`` (role ``proposer``, ``P = num_proposers``, default 3)
    and ``aggregator_0`` (role ``aggregator``).

Rounds
    Two. Round 0: each proposer answers the task alone (template ``solve``); the
    aggregator does not act. Round 1: the aggregator sees every proposal, relabelled
    ``Proposal 1..P`` in an order shuffled from the episode's seed, and gives the final
    solution (template ``aggregate``); the proposers do not act. Proposals longer than
    ``max_shared_chars`` are shown clipped (head and tail).

Final answer
    The aggregator's answer (the last ``\\boxed{}`` of its response), or None.

Arguments
    ``num_proposers`` (1..16), ``max_shared_chars``.

Version history
    v0: initial version. Amended without a new id: in what other agents are shown, lines
    imitating the ``Proposal k:`` labels and chat-template control tokens are defused
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

AGGREGATOR = "aggregator_0"


class MixtureOfAgents(Workflow):
    name = "moa"
    templates: ClassVar[Mapping[str, frozenset[str]]] = {
        "solve": frozenset({"problem"}),
        "aggregate": frozenset({"problem", "proposals", "num_proposals"}),
    }
    labels = ("Proposal",)
    num_rounds = 2

    def __init__(self, num_proposers: int = 3, max_shared_chars: int = 6000) -> None:
        super().__init__(max_shared_chars=max_shared_chars)
        self.num_proposers = check_int("num_proposers", num_proposers, 1, 16)
        self.proposers = tuple(f"proposer_{i}" for i in range(self.num_proposers))
        self.agents = (*self.proposers, AGGREGATOR)

    def role(self, agent: str) -> str:
        return "aggregator" if agent == AGGREGATOR else "proposer"

    def actors(self, round: int) -> tuple[str, ...]:
        return self.proposers if round == 0 else (AGGREGATOR,)

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
        proposals = [t for t in transcript if t.round == 0]
        order = rng.permutation(len(proposals))
        return Prompt(
            "aggregate",
            {
                "problem": task.prompt,
                "proposals": numbered([self.shown(proposals[i]) for i in order], self.labels[0]),
                "num_proposals": str(len(proposals)),
            },
        )

    def rule_inputs(self, transcript: Sequence[Turn]) -> dict[str, str | None]:
        return {t.agent: t.answer for t in transcript if t.agent == AGGREGATOR}

    def final_rule(self, answers: Mapping[str, str | None], tie_order: Sequence[str]) -> str | None:
        return answers.get(AGGREGATOR)
