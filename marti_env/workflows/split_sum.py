"""Split sum (``split-sum-v0``): solvers each hold one part of a sum, distractors hold noise.

A credit-assignment probe where every solver is necessary and every distractor is
useless: the team's answer is the sum of everyone's boxed numbers, so a missing or wrong
part, or any non-zero distractor output, makes it wrong.

Agents
    ``solver_0 .. solver_{N-1}`` (role ``solver``, ``N = num_solvers``) and
    ``distractor_0 .. distractor_{D-1}`` (role ``distractor``, ``D = num_distractors``).

Observation
    One round; nobody sees anyone else. Solver ``i`` is shown its private part ``a_i`` of
    the total (template ``solve``): a number at ``difficulty=0``, an expression to
    evaluate at 1 (``"17 - 4"``) or 2 (``"3 * 7 - 4"``). Distractor ``j`` is shown a
    noise reading (template ``observe``) unrelated to the total.

Action
    Any text; its answer is the last ``\\boxed{}``. A solver should box its part's value,
    a distractor ``0``.

Rewards
    Final answer: a scripted combiner adds the integers of every agent's boxed answer
    (a missing or non-integer answer adds nothing): :func:`combine`. The outcome is the
    env's verifier on that sum (default ``math``: 1 if it equals the task's answer).
    Each turn is scored on its own boxed answer against the total, so per-turn scores
    carry almost no signal here (a part is not the total): that is the point of the env.
    The parts are a seeded split of the task's integer answer (:func:`split_instance`,
    from the task id), so any task source with integer answers works; the default is the
    procedural arithmetic source, whose ``split`` gives disjoint train/held-out instances.
    Exact per-agent contributions under the combiner (difference rewards and Shapley, a
    ``2^(N+D)`` game) are what ``leave_one_out`` and ``shapley`` compute; a solver's local
    correctness is :func:`local_correct`.

Episode end
    After the single round; every agent terminates.

Arguments
    ``num_solvers`` (1..8), ``num_distractors`` (0..8), ``difficulty`` (0..2),
    ``max_shared_chars``. ``num_solvers=1, num_distractors=0`` is the credit-irrelevant
    variant: one agent sees the whole total and every credit method must tie.

Version history
    v0: initial version.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from marti_env.record import Turn
from marti_env.tasks.task import Task
from marti_env.workflows.base import Prompt, Workflow, check_int

_INT = re.compile(r"^[+-]?\d{1,18}$")
_TOKEN = re.compile(r"\s*(\d+|[+*-])")
PART_RANGE = (1, 50)
"""Range of the random parts ``a_0 .. a_{N-2}`` (the last part completes the total)."""
NOISE_RANGE = (1, 99)
"""Range of a distractor's noise reading."""


@dataclass(frozen=True)
class Instance:
    """One split-sum instance: the total, each solver's part and how it is shown, the noise.

    Attributes:
        total: The task's integer answer; ``sum(parts) == total``.
        parts: Solver ``i``'s value ``a_i``.
        shown: What solver ``i`` is shown: ``str(a_i)`` or an expression equal to it.
        noise: Distractor ``j``'s reading.
    """

    total: int
    parts: tuple[int, ...]
    shown: tuple[str, ...]
    noise: tuple[int, ...]


def parse_int(answer: str | None) -> int | None:
    """The integer an answer states (``"12"``, ``"-3"``, ``"+4"``, ``"1,000"``), else None.

    Spaces, commas and non-printable characters are ignored (as the math verifier reads
    ``"4\\x00"`` as 4); an answer over 64 characters is not a number (bounded time).
    """
    if answer is None or len(answer) > 64:
        return None
    text = "".join(c for c in answer if c.isprintable() and not c.isspace()).replace(",", "")
    return int(text) if _INT.match(text) else None


def combine(answers: Mapping[str, str | None]) -> str:
    """The scripted combiner: ``str(sum of the integer answers)``; others add nothing.

    >>> combine({"solver_0": "3", "solver_1": "4", "distractor_0": "0"})
    '7'
    >>> combine({"solver_0": "3", "solver_1": None, "distractor_0": "5"})
    '8'
    """
    return str(sum(v for v in map(parse_int, answers.values()) if v is not None))


def evaluate(expr: str) -> int:
    """Value of an expression of integers with ``+ - *`` (usual precedence, an optional
    leading minus).

    A real parser, never ``eval``: ``evaluate("3 * 7 - 4") == 17``. Raises ``ValueError``
    naming the expression if it is not of that form.
    """
    tokens = _TOKEN.findall(expr)
    if "".join(tokens) != expr.replace(" ", "") or not tokens:
        raise ValueError(f"not an expression of integers with + - *: {expr!r}")
    sign = 1
    if tokens[0] == "-":
        sign, tokens = -1, tokens[1:]
    total, term, expect_number = 0, None, True
    for tok in [*tokens, "+"]:
        if expect_number:
            if not tok.isdigit():
                raise ValueError(f"not an expression of integers with + - *: {expr!r}")
            term = int(tok) if term is None else term * int(tok)
        elif tok == "*":
            pass
        else:
            total += sign * term  # type: ignore[operator]
            sign, term = (1 if tok == "+" else -1), None
        expect_number = not expect_number
    return total


def _shown(value: int, difficulty: int, rng: np.random.Generator) -> str:
    """``value`` written as a number (0), ``x +/- y`` (1) or ``x * y +/- z`` (2)."""
    if difficulty == 0:
        return str(value)
    if difficulty == 1:
        x = int(rng.integers(1, 60))
        return f"{x} + {value - x}" if value >= x else f"{x} - {x - value}"
    x, y = (int(v) for v in rng.integers(2, 10, size=2))
    z = value - x * y
    return f"{x} * {y} + {z}" if z >= 0 else f"{x} * {y} - {-z}"


def split_instance(task: Task, num_solvers: int, num_distractors: int, difficulty: int) -> Instance:
    """The instance a task poses: a seeded split of its integer answer into parts.

    Parts ``a_0 .. a_{N-2}`` are drawn uniformly from :data:`PART_RANGE`, and ``a_{N-1} =
    total - sum(others)`` (it may be negative); noise from :data:`NOISE_RANGE`. Everything
    depends only on ``(task.id, N, D, difficulty)`` (``numpy.random.default_rng`` seeded
    with the CRC-32 of the id), so every agent and every replay sees the same instance.

    Raises:
        ValueError: the task's answer is not an integer (naming the task).
    """
    total = parse_int(task.answer)
    if total is None:
        raise ValueError(
            f"split-sum: task {task.id!r} has answer {task.answer!r}, not an integer; "
            "use a task source with integer answers (e.g. 'arithmetic')"
        )
    rng = np.random.default_rng(
        [zlib.crc32(task.id.encode()), num_solvers, num_distractors, difficulty]
    )
    head = [int(v) for v in rng.integers(PART_RANGE[0], PART_RANGE[1] + 1, size=num_solvers - 1)]
    parts = (*head, total - sum(head))
    shown = tuple(_shown(a, difficulty, rng) for a in parts)
    noise = tuple(
        int(v) for v in rng.integers(NOISE_RANGE[0], NOISE_RANGE[1] + 1, size=num_distractors)
    )
    return Instance(total, parts, shown, noise)


def local_correct(instance: Instance, answers: Mapping[str, str | None]) -> dict[str, bool]:
    """Each agent's local correctness: solver ``i`` boxed ``a_i``; a distractor boxed 0 or
    nothing (an output that adds nothing to the sum)."""
    out = {}
    for agent, answer in answers.items():
        role, _, index = agent.rpartition("_")
        value = parse_int(answer)
        if role == "solver":
            out[agent] = value == instance.parts[int(index)]
        else:
            out[agent] = not value
    return out


class SplitSum(Workflow):
    """Rules of ``split-sum-v0`` (see the module docstring)."""

    name = "split_sum"
    templates: ClassVar[Mapping[str, frozenset[str]]] = {
        "solve": frozenset({"part", "num_agents"}),
        "observe": frozenset({"noise", "num_agents"}),
    }
    num_rounds = 1

    def __init__(
        self,
        num_solvers: int = 4,
        num_distractors: int = 2,
        difficulty: int = 0,
        max_shared_chars: int = 6000,
    ) -> None:
        super().__init__(max_shared_chars=max_shared_chars)
        self.num_solvers = check_int("num_solvers", num_solvers, 1, 8)
        self.num_distractors = check_int("num_distractors", num_distractors, 0, 8)
        self.difficulty = check_int("difficulty", difficulty, 0, 2)
        self.solvers = tuple(f"solver_{i}" for i in range(self.num_solvers))
        self.distractors = tuple(f"distractor_{j}" for j in range(self.num_distractors))
        self.agents = (*self.solvers, *self.distractors)

    def role(self, agent: str) -> str:
        return "solver" if agent in self.solvers else "distractor"

    def actors(self, round: int) -> tuple[str, ...]:
        return self.agents

    def instance(self, task: Task) -> Instance:
        """This workflow's instance of ``task`` (:func:`split_instance`)."""
        return split_instance(task, self.num_solvers, self.num_distractors, self.difficulty)

    def request(
        self,
        agent: str,
        round: int,
        task: Task,
        transcript: Sequence[Turn],
        rng: np.random.Generator,
    ) -> Prompt:
        inst = self.instance(task)
        n = str(len(self.agents))
        index = int(agent.rpartition("_")[2])
        if agent in self.solvers:
            return Prompt("solve", {"part": inst.shown[index], "num_agents": n})
        return Prompt("observe", {"noise": str(inst.noise[index]), "num_agents": n})

    def rule_inputs(self, transcript: Sequence[Turn]) -> dict[str, str | None]:
        return {t.agent: t.answer for t in transcript}

    def final_rule(self, answers: Mapping[str, str | None], tie_order: Sequence[str]) -> str | None:
        return combine(answers)
