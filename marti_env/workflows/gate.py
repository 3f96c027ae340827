"""Generator-verifier gate (``gate-v0``): verifiers decide whether a proposal goes through.

A credit-assignment probe: a verifier's contribution is exactly computable (the outcome
with its decision flipped), and its decisions can be scored against the ground truth
(balanced accuracy), apart from the team outcome.

Agents
    ``generator_0`` (role ``generator``) and a panel of ``verifier_0 .. verifier_{K-1}``
    (role ``verifier``, ``K = num_verifiers``, 1 by default).

Observation
    Round 0: the generator is shown the task (template ``solve``). Round 1: every
    verifier is shown the task and the generator's response (template ``verify``),
    clipped to ``max_shared_chars``; the verifiers do not see each other.

Action
    Any text; its answer is the last ``\\boxed{}``. The verifier boxes ``ACCEPT`` or
    ``REJECT`` (case and surrounding spaces ignored); anything else is no decision,
    which lets the proposal through (no veto).

Rewards
    Final answer: the generator's answer unless the panel rejects it (more than half of
    the ``K`` verifiers box REJECT: :func:`panel_rejects`; with one verifier, its REJECT),
    else the answer of a scripted fallback solver that is right with probability
    ``fallback_accuracy`` (its answer is drawn from the episode's generator at reset,
    whatever the agents do; wrong answers are near misses of the reference):
    :func:`gate_answer`. The outcome is the verifier (default ``math``) on that answer.
    Each turn is scored on its own boxed answer: the generator's proposal, and 0 for a
    verifier (a decision is not an answer). A verifier's exact contribution is
    :func:`flip_contribution`, ``R - R(its decision flipped)``, the others' decisions
    kept: with ``K > 1`` a verifier is pivotal only when the rest of the panel is split,
    so the team outcome says less about each verifier's decision as ``K`` grows. Its
    decisions against whether the proposal was right give :func:`balanced_accuracy`. The
    rule reads the fallback's answer as one more input, ``"fallback"`` (a player of the
    coalition game, with no turns). With ``binding=False`` the decisions are recorded and
    scored but never applied: the final answer is always the generator's, so no verifier
    can change the outcome (each one's contribution is 0 in every episode) and the env is
    the credit-irrelevant variant of the probe: only the generator matters, and every
    method that pays it the outcome trains it alike.

Episode end
    After round 1; every agent terminates.

Arguments
    ``fallback_accuracy`` (q, in [0, 1]), ``binding`` (bool, default True),
    ``num_verifiers`` (K, 1..9, default 1), ``max_shared_chars``. The generator's skill is
    the policy's: the simulated tier of the credit benchmark sweeps it against q. The
    rule's players are the generator, the K verifiers and the fallback, so exact
    ``shapley`` (``max_agents`` 8 by default) takes K <= 6 unless given a larger
    ``max_agents``. The default ``verify`` prompt says one REJECT hands the answer to the
    fallback, true for one verifier; a panel run may want its own wording.

Version history
    v0: initial version; ``binding`` and ``num_verifiers`` added later (their defaults
    are the original rule and agents).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from marti_env.record import Turn
from marti_env.tasks.task import Task
from marti_env.workflows.base import Prompt, Workflow, check_int

GENERATOR, VERIFIER, FALLBACK = "generator_0", "verifier_0", "fallback"
ACCEPT, REJECT = "ACCEPT", "REJECT"
_NEAR_MISSES = (1, -1, 2, -2, 10, -10)
KEPT_EPISODES = 65_536
"""How many episodes' fallback answers a gate workflow keeps (its env copies' episodes
in flight must fit)."""


def decision(answer: str | None) -> str | None:
    """``"ACCEPT"``/``"REJECT"`` if the verifier's boxed answer says so, else None."""
    if answer is None:
        return None
    word = answer.strip().upper()
    return word if word in (ACCEPT, REJECT) else None


def verifier_names(num_verifiers: int) -> tuple[str, ...]:
    """The panel's agent names: ``("verifier_0", ..., "verifier_{K-1}")``."""
    return tuple(f"verifier_{i}" for i in range(num_verifiers))


def panel_rejects(answers: Sequence[str | None]) -> bool:
    """Whether a panel of ``K`` verifiers rejects the proposal: ``#REJECT > K / 2``, a
    strict majority of the whole panel (no decision counts as not rejecting, and an even
    panel's tie lets the proposal through). One verifier rejects by its own REJECT.

    >>> panel_rejects(["REJECT"]), panel_rejects(["REJECT", None])
    (True, False)
    >>> panel_rejects(["REJECT", "reject", "ACCEPT"]), panel_rejects([])
    (True, False)
    """
    return 2 * sum(decision(a) == REJECT for a in answers) > len(answers)


def gate_answer(answers: Mapping[str, str | None], binding: bool = True) -> str | None:
    """The team's answer: the fallback's if the panel rejects (:func:`panel_rejects` over
    the answers of every ``verifier_<i>`` key) and its decision is ``binding``, else the
    generator's.

    >>> gate_answer({"generator_0": "5", "verifier_0": "ACCEPT", "fallback": "7"})
    '5'
    >>> gate_answer({"generator_0": "5", "verifier_0": "reject", "fallback": "7"})
    '7'
    >>> gate_answer({"generator_0": "5", "verifier_0": None, "fallback": "7"})
    '5'
    >>> gate_answer({"generator_0": "5", "verifier_0": "REJECT", "fallback": "7"}, binding=False)
    '5'
    >>> gate_answer({"generator_0": "5", "verifier_0": "REJECT", "verifier_1": "ACCEPT",
    ...              "verifier_2": "REJECT", "fallback": "7"})
    '7'
    """
    panel = [v for k, v in answers.items() if k.rpartition("_")[0] == "verifier"]
    if binding and panel_rejects(panel):
        return answers.get(FALLBACK)
    return answers.get(GENERATOR)


def flip(answer: str | None) -> str:
    """The other decision: REJECT for ACCEPT or no decision, ACCEPT for REJECT."""
    return ACCEPT if decision(answer) == REJECT else REJECT


def flip_contribution(outcome: float, flipped_outcome: float) -> float:
    """The verifier's exact counterfactual contribution: ``R - R(decision flipped)``.

    With a right proposal accepted and a wrong fallback: ``1 - 0 = 1``; a wrong proposal
    rejected and a wrong fallback: ``0 - 0 = 0``; a right proposal rejected and a right
    fallback: ``1 - 1 = 0``.
    """
    return float(outcome) - float(flipped_outcome)


def balanced_accuracy(proposal_correct: Sequence[bool], accepted: Sequence[bool]) -> float:
    """Balanced accuracy of a gate's decisions: ``(TPR + TNR) / 2``.

    TPR = P(accept | proposal right), TNR = P(reject | proposal wrong) (Brodersen et al.
    2010, "The balanced accuracy and its posterior distribution"). A class with no
    examples is left out (the mean of the other); NaN if both are empty. Always-ACCEPT
    scores 0.5 whatever the generator's skill. ``([T, T, F, F], [T, F, F, F])`` -> 0.75.
    """
    if len(proposal_correct) != len(accepted):
        raise ValueError(
            f"balanced_accuracy: {len(proposal_correct)} labels but {len(accepted)} decisions"
        )
    pos = [a for c, a in zip(proposal_correct, accepted, strict=True) if c]
    neg = [not a for c, a in zip(proposal_correct, accepted, strict=True) if not c]
    rates = [sum(x) / len(x) for x in (pos, neg) if x]
    return sum(rates) / len(rates) if rates else float("nan")


def fallback_answer(task: Task, accuracy: float, u: float, v: float) -> str | None:
    """The scripted fallback's answer: the reference if ``u < accuracy``, else a near miss
    of it picked by ``v`` (or ``"<answer>+1"`` for a non-integer answer)."""
    if task.answer is None:
        return None
    if u < accuracy:
        return task.answer
    offset = _NEAR_MISSES[min(int(v * len(_NEAR_MISSES)), len(_NEAR_MISSES) - 1)]
    try:
        return str(int(task.answer) + offset)
    except ValueError:
        return f"{task.answer}+{offset}"


class Gate(Workflow):
    """Rules of ``gate-v0`` (see the module docstring).

    The fallback's answer is drawn at round 0's request (two uniforms from the episode's
    generator, always) and kept, keyed by the transcript it belongs to (the episode
    record's list of turns), for :meth:`rule_inputs`: copies of an env share the workflow
    and play episodes concurrently, so the answer cannot live in one attribute. The last
    :data:`KEPT_EPISODES` episodes are kept.
    """

    name = "gate"
    templates: ClassVar[Mapping[str, frozenset[str]]] = {
        "solve": frozenset({"problem"}),
        "verify": frozenset({"problem", "proposal"}),
    }
    labels = ()
    num_rounds = 2

    def __init__(
        self,
        fallback_accuracy: float = 0.5,
        binding: bool = True,
        num_verifiers: int = 1,
        max_shared_chars: int = 6000,
    ) -> None:
        super().__init__(max_shared_chars=max_shared_chars)
        self.num_verifiers = check_int("num_verifiers", num_verifiers, 1, 9)
        self.verifiers = verifier_names(self.num_verifiers)
        self.agents = (GENERATOR, *self.verifiers)
        q = fallback_accuracy
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0.0 <= q <= 1.0:
            raise ValueError(f"fallback_accuracy must be a number in [0, 1], got {q!r}")
        if not isinstance(binding, bool):
            raise ValueError(f"binding must be a bool, got {binding!r}")
        self.fallback_accuracy = float(q)
        self.binding = binding
        self._fallbacks: OrderedDict[int, tuple[Sequence[Turn], str | None]] = OrderedDict()

    def role(self, agent: str) -> str:
        return agent.rpartition("_")[0]

    def actors(self, round: int) -> tuple[str, ...]:
        return (GENERATOR,) if round == 0 else self.verifiers

    def request(
        self,
        agent: str,
        round: int,
        task: Task,
        transcript: Sequence[Turn],
        rng: np.random.Generator,
    ) -> Prompt:
        if round == 0:
            u, v = rng.random(2)
            key = id(transcript)  # the list is held below, so its id is not reused
            self._fallbacks[key] = (transcript, fallback_answer(task, self.fallback_accuracy, u, v))
            self._fallbacks.move_to_end(key)
            while len(self._fallbacks) > KEPT_EPISODES:
                self._fallbacks.popitem(last=False)
            return Prompt("solve", {"problem": task.prompt})
        proposal = next((t for t in transcript if t.agent == GENERATOR), None)
        shown = self.shown(proposal) if proposal is not None else "(no proposal)"
        return Prompt("verify", {"problem": task.prompt, "proposal": shown})

    def rule_inputs(self, transcript: Sequence[Turn]) -> dict[str, str | None]:
        kept = self._fallbacks.get(id(transcript))
        if kept is None or kept[0] is not transcript:
            raise ValueError(
                "gate: rule_inputs needs the transcript of the episode this workflow posed "
                "(the fallback's answer is drawn at its round 0); use gate_answer() for "
                "hand-written answers"
            )
        answers: dict[str, str | None] = dict.fromkeys(self.agents)
        answers.update({t.agent: t.answer for t in transcript})
        answers[FALLBACK] = kept[1]
        return answers

    def final_rule(self, answers: Mapping[str, str | None], tie_order: Sequence[str]) -> str | None:
        return gate_answer(answers, self.binding)
