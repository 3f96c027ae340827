"""Simulated agents and true contributions for the credit-probe envs of the fast tier.

The probe envs (``split-sum-v0``, ``gate-v0``, ``signal-v0``, ``expr-team-v0``;
:data:`PROBE_WORKFLOWS`) have roles the debate agents of :mod:`marti_env.credit.bench.sim`
do not play. A
:class:`ProbeTeam` is a :class:`~marti_env.credit.bench.sim.SimTeam` (same two logits per
agent, same four uniforms per call, so common-random-number replays work) whose agents
read the observation the real env rendered and answer by role:

==========  =========================================  ====================================
role        ``p = sigmoid(theta[i, SKILL])``            ``q = sigmoid(theta[i, PERSUADE])``
==========  =========================================  ====================================
solver      P(boxing its share's value; else a near    --
            miss)
distractor  P(boxing 0; else it echoes its noise)       --
generator   P(the right answer; else a near miss)       --
verifier    P(checking: ACCEPT iff the proposal is      P(ACCEPT) when it does not check
(gate)      right)
speaker     P(boxing the target; else a lazy ``ok``)    --
listener    --                                          P(picking the candidate the messages
                                                        name most often (the earliest
                                                        speaker's on a tie), or the target
                                                        when told it
                                                        (``listener_sees_target``); else
                                                        uniform at random)
coder       P(writing the reference expression in       P(revising when shown a failing
(expr)      round 0; else a wrong mutant of it)         test: to the reference if a failing
                                                        test is valid, else to a wrong
                                                        mutant; else keeping its expression)
tester      P(tests computed from the reference at      --
(expr)      the hidden inputs; else from a wrong
            mutant)
==========  =========================================  ====================================

The coder and tester play ``code_team`` on expression tasks only (``expr-team-v0``): the
tester helps only through the coder's revision in round 1, so its true contribution (about
``q_coder * (p_tester - p_coder)`` on average, negative for misleading tests) is seen only
by replay.

A probe env's *true contribution* of agent ``i`` in one episode is ``R - R'``, where ``R'``
is the outcome of the same episode replayed (same draws, downstream agents re-executed)
with agent ``i`` absent (it answers ``""``), except a gate verifier, whose
counterfactual is its decision flipped (:func:`counterfactuals`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from marti_env.credit.bench.sim import PERSUADE, SKILL, Decision, SimTeam, sigmoid, wrong_answer
from marti_env.record import Message
from marti_env.rewards.boxed import extract_boxed
from marti_env.tasks.expr import ExprTask, evaluate_all, format_test
from marti_env.tasks.task import Task
from marti_env.workflows.code_team import expr_wrong_mutants
from marti_env.workflows.gate import flip
from marti_env.workflows.signal import MESSAGE_SEPARATOR, NULL_MESSAGE
from marti_env.workflows.split_sum import evaluate, parse_int

PROBE_WORKFLOWS: tuple[str, ...] = ("split_sum", "gate", "signal", "code_team")
"""Workflow names whose envs a :class:`ProbeTeam` plays."""

CREDIT_IRRELEVANT: dict[str, dict[str, Any]] = {
    "split-sum-v0": {"num_solvers": 1, "num_distractors": 0},
    "gate-v0": {"binding": False},
    "signal-v0": {"listener_sees_target": True},
    "expr-team-v0": {"rounds": 1},
}
"""Per probe env, the ``make`` arguments of its credit-irrelevant variant: one agent alone
decides the outcome (one solver sees the whole total; the verifier's decision is not
applied; the listener is told the target; the tester has no round to help in), so credit
cannot matter and every method must tie with ``none``. A method that gives that agent
another reward than the outcome (a per-turn score) may still train it differently: that is
reward shaping, not credit. The ties hold for agents with separate policies (the simulated
tier); agents sharing one model (``model.sharing: shared`` in the LLM tier) also learn from
the other agent's reward, so a method can move the deciding agent through the shared weights."""


def is_credit_irrelevant(env_id: str, kwargs: Mapping[str, Any]) -> bool:
    """Whether ``make(env_id, **kwargs)`` is a credit-irrelevant variant
    (:data:`CREDIT_IRRELEVANT`'s arguments, others allowed beside them).

    >>> is_credit_irrelevant("gate-v0", {"binding": False, "fallback_accuracy": 0.2})
    True
    >>> is_credit_irrelevant("gate-v0", {})
    False
    """
    variant = CREDIT_IRRELEVANT.get(env_id)
    return variant is not None and all(
        k in kwargs and kwargs[k] == v and type(kwargs[k]) is type(v) for k, v in variant.items()
    )


ROLE_RANGES: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {
    "solver": ((0.6, 0.95), (0.5, 0.5)),
    "distractor": ((0.2, 0.6), (0.5, 0.5)),
    "generator": ((0.5, 0.8), (0.5, 0.5)),
    "verifier": ((0.1, 0.4), (0.3, 0.7)),
    "speaker": ((0.1, 0.4), (0.5, 0.5)),
    "listener": ((0.5, 0.5), (0.1, 0.4)),
    "coder": ((0.3, 0.7), (0.4, 0.9)),
    "tester": ((0.4, 0.9), (0.5, 0.5)),
}
"""Initial ``(p range, q range)`` of a random probe team, by role (columns that a role does
not use stay at 0.5: their logits get no gradient)."""

_SHARE = re.compile(r"share of the total is (.+?)\. ")
_SENSOR = re.compile(r"sensor reads (-?\d+)")
_TARGET = re.compile(r"The target is (-?\d+)\.")
_CANDIDATES = re.compile(r"Candidates: ([^.]*)\.")
_MESSAGE = re.compile(r"message: (.*?)\. Give the target")
_FIRST_BOX = re.compile(r"\\boxed\{([^{}]*)\}")  # the proposal comes before the template's boxes
_LAST_EXPR = re.compile(r"\\boxed\{([^{}]+)\}")  # a revising coder's shown expression
_FAILED = re.compile(r"^Test \d+ failed \(.*\): f\((-?\d+)\) == (-?\d+)$", re.MULTILINE)


class ProbeTeam(SimTeam):
    """Simulated agents for the probe envs (see the module docstring for each role)."""

    @classmethod
    def random_by_role(
        cls, agents: Sequence[str], roles: Sequence[str], rng: np.random.Generator
    ) -> ProbeTeam:
        """A team with ``p``, ``q`` drawn uniformly from :data:`ROLE_RANGES` per role."""
        unknown = sorted(set(roles) - set(ROLE_RANGES))
        if unknown:
            raise ValueError(f"ProbeTeam: no simulated agent for role(s) {unknown}")
        skill = [rng.uniform(*ROLE_RANGES[r][0]) for r in roles]
        persuade = [rng.uniform(*ROLE_RANGES[r][1]) for r in roles]
        theta = np.array(
            [
                [np.log(p / (1 - p)), np.log(q / (1 - q))]
                for p, q in zip(skill, persuade, strict=True)
            ]
        )
        return cls(tuple(agents), theta)

    def copy(self) -> ProbeTeam:
        return ProbeTeam(self.agents, self.theta.copy(), self.num_distractors)

    def act(
        self,
        agent: str,
        role: str,
        messages: Sequence[Message],
        task: Task,
        rng: np.random.Generator,
    ) -> tuple[str, list[Decision]]:
        u_q, u_p, u_wrong, u_pick = rng.random(4)
        p, q = sigmoid(self.theta[self.index(agent)])
        content = messages[-1]["content"] if messages else ""
        decisions: list[Decision] = []

        def draw(column: int, prob: float, u: float) -> bool:
            taken = bool(u < prob)
            decisions.append((column, taken))
            return taken

        if role == "solver":
            share = _SHARE.search(content)
            value = evaluate(share.group(1)) if share else 0
            right = draw(SKILL, p, u_p)
            return (
                f"\\boxed{{{value if right else wrong_answer(str(value), u_wrong, 3)}}}",
                decisions,
            )
        if role == "distractor":
            noise = _SENSOR.search(content)
            silent = draw(SKILL, p, u_p)
            return f"\\boxed{{{0 if silent or not noise else noise.group(1)}}}", decisions
        if role == "generator":
            right = draw(SKILL, p, u_p)
            answer = task.answer if right else wrong_answer(task.answer, u_wrong, 3)
            return f"I solved it: \\boxed{{{answer}}}", decisions
        if role == "verifier":
            first = _FIRST_BOX.search(content)
            proposal = first.group(1) if first else None
            if proposal is not None and draw(SKILL, p, u_p):
                accept = parse_int(proposal) == parse_int(task.answer)
            else:
                accept = draw(PERSUADE, q, u_q)
            return f"\\boxed{{{'ACCEPT' if accept else 'REJECT'}}}", decisions
        if role == "speaker":
            target = _TARGET.search(content)
            informative = draw(SKILL, p, u_p)
            said = target.group(1) if informative and target else "ok"
            return f"My message: \\boxed{{{said}}}", decisions
        if role == "listener":
            found = _CANDIDATES.search(content)
            options = found.group(1).split(", ") if found else [""]
            message = _MESSAGE.search(content)
            said = message.group(1).split(MESSAGE_SEPARATOR) if message else []
            said = [m for m in said if m in options]
            named = max(said, key=said.count) if said else NULL_MESSAGE  # max: first on ties
            told = _TARGET.search(content)  # the credit-irrelevant variant's hint
            if told:
                named = told.group(1)
            if named in options and draw(PERSUADE, q, u_q):
                return f"\\boxed{{{named}}}", decisions
            pick = options[min(int(u_pick * len(options)), len(options) - 1)]
            return f"\\boxed{{{pick}}}", decisions
        if role in ("coder", "tester"):
            if not isinstance(task, ExprTask):
                raise ValueError(
                    f"ProbeTeam: the simulated {role} plays expression tasks (expr-team-v0), "
                    f"and task {task.id!r} is a {type(task).__name__}"
                )
            wrong = expr_wrong_mutants(task)
            mutant = wrong[min(int(u_wrong * len(wrong)), len(wrong) - 1)]
            if role == "tester":
                valid = draw(SKILL, p, u_p)
                return _expr_tests(task, task.answer if valid else mutant), decisions
            last = _LAST_EXPR.search(content)
            if last is None:  # round 0 (or its expression is not shown): solve
                right = draw(SKILL, p, u_p)
                return f"f(x) = \\boxed{{{task.answer if right else mutant}}}", decisions
            expression = last.group(1)
            failing = [(int(a), int(b)) for a, b in _FAILED.findall(content)]
            if failing and draw(PERSUADE, q, u_q):
                ref = evaluate_all(task.answer or "", [a for a, _ in failing])
                real_bug = any(v == b for (v, _), (_, b) in zip(ref, failing, strict=True))
                expression = str(task.answer) if real_bug else mutant
            return f"f(x) = \\boxed{{{expression}}}", decisions
        raise ValueError(f"ProbeTeam: agent {agent!r} has role {role!r}, which it cannot play")


def _expr_tests(task: ExprTask, source: str | None) -> str:
    """Tests ``f(x) == source(x)`` at the task's hidden inputs (inputs where ``source``
    fails to evaluate are left out)."""
    inputs = [x for x, _ in task.tests]
    lines = [
        format_test(x, v)
        for x, (v, _) in zip(inputs, evaluate_all(source or "", inputs), strict=True)
        if v is not None
    ]
    return "```\n" + "\n".join(lines) + "\n```"


def _flip_response(text: str) -> str:
    return f"\\boxed{{{flip(extract_boxed(text))}}}"


def counterfactuals(
    workflow_name: str, agents: Sequence[str]
) -> dict[str, Mapping[str, Callable[[str], str]]]:
    """Per agent, the ``replace`` argument of :func:`~marti_env.credit.bench.sim.play` that
    realises its counterfactual: absent (answers ``""``), or for each of the gate's
    verifiers its decision flipped (the rest of the panel kept)."""
    out: dict[str, Mapping[str, Callable[[str], str]]] = {}
    for a in agents:
        if workflow_name == "gate" and a.rpartition("_")[0] == "verifier":
            out[a] = {a: _flip_response}
        else:
            out[a] = {a: lambda text: ""}
    return out
