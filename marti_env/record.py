"""The episode record: a typed transcript of one episode, serialisable to JSONL.

Every environment returns the record in ``infos[agent]["episode"]`` on the step that ends
the episode (the same object for every agent). It keeps everything: full responses (never
clipped), the prompts each agent saw, extracted answers, verifier scores and the rewards
the credit-assignment method gave each turn.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from marti_env.tasks.task import Task


class Message(TypedDict):
    """One chat message: ``role`` (``"system"``, ``"user"``, ``"assistant"``) and its text.

    The one message type of the library: the env's observations and records hold these, and
    the trainer's policies take lists of them as prompts.
    """

    role: str
    content: str


@dataclass
class Turn:
    """One agent's action in one round.

    Attributes:
        index: Position of the turn in the episode (0-based, in the order turns were taken;
            within a round, in the order of ``workflow.actors(round)``).
        round: The round (stage) in which the agent acted, 0-based.
        agent: The agent's name, e.g. ``"debater_1"``.
        role: The agent's role, e.g. ``"debater"``, ``"aggregator"``, ``"verifier"``.
        messages: The chat messages the agent was asked to answer (its observation).
        response: The agent's full generation (the action), never clipped.
        answer: The final answer extracted from the response (last ``\\boxed{}``), or None.
        score: The verifier score of this turn's answer against the task's answer, in [0, 1]
            (for roles that give no answer, e.g. a verifier that critiques, the score of the
            answer it saw; see the workflow's docstring).
        reward: The reward the credit-assignment method gave this turn.
        meta: Free-form extras filled by harnesses (e.g. ``{"truncated": True}`` when a
            generation hit ``max_tokens``); JSON-serialisable values only.
    """

    index: int
    round: int
    agent: str
    role: str
    messages: tuple[Message, ...]
    response: str
    answer: str | None
    score: float
    reward: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "round": self.round,
            "agent": self.agent,
            "role": self.role,
            "messages": [dict(m) for m in self.messages],
            "response": self.response,
            "answer": self.answer,
            "score": self.score,
            "reward": self.reward,
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Turn:
        return cls(
            index=int(data["index"]),
            round=int(data["round"]),
            agent=str(data["agent"]),
            role=str(data["role"]),
            messages=tuple(dict(m) for m in data["messages"]),
            response=str(data["response"]),
            answer=data["answer"],
            score=float(data["score"]),
            reward=float(data.get("reward", 0.0)),
            meta=dict(data.get("meta", {})),
        )


@dataclass(frozen=True)
class TurnSample:
    """One agent turn as a training row: what a per-turn policy gradient needs.

    :meth:`EpisodeRecord.samples` and :meth:`marti_env.vector.VecEnv.pop_samples` build
    them. They carry the fields the built-in trainer's rows
    (``marti_trainer.rollout.Sample``) use for advantage groups, with the same meaning, so
    ``marti_trainer.rollout.group_key_of(row, group_by)`` groups both kinds alike.

    Attributes:
        env: Index of the env in its vector env (0 for a lone env).
        group: Index of the group of envs that shared the task in that reset (``env //
            group_size``; 0 for a lone env).
        task_id: The episode's task id.
        agent: The agent's name, e.g. ``"debater_1"``.
        role: The agent's role, e.g. ``"debater"``.
        round: The round (env step) in which the agent acted, 0-based.
        turn_index: Position of the turn in the episode (``Turn.index``).
        messages: The chat messages the agent answered (its observation: the prompt).
        response: Its full response (the action).
        reward: The reward the env's credit method gave the turn (``Turn.reward``).
        score: The verifier score of the turn's answer, in [0, 1].
    """

    env: int
    group: int
    task_id: str
    agent: str
    role: str
    round: int
    turn_index: int
    messages: tuple[Message, ...]
    response: str
    reward: float
    score: float

    @property
    def group_key(self) -> tuple[str, str, int]:
        """``(task_id, agent, turn_index)``: MARTI's advantage group, as
        ``marti_trainer.rollout.Sample.group_key``."""
        return (self.task_id, self.agent, self.turn_index)

    @property
    def key(self) -> tuple[int, str, int]:
        """``(env, agent, round)``: equal to the ``key`` of the request it answered
        (:class:`marti_env.vector.AgentRequest`), to join a row with its generation."""
        return (self.env, self.agent, self.round)


@dataclass
class EpisodeRecord:
    """A finished (or running) episode.

    Attributes:
        env_id: The registered id, e.g. ``"mad-v0"``.
        task: The task the team solved.
        turns: Every turn, in order.
        final_answer: The team's answer under the workflow's final-answer rule, or None.
        outcome: The verifier score of ``final_answer`` (1.0 correct, 0.0 otherwise; the
            label-free reward's value when the task has no answer).
        credit: Name of the credit-assignment method that filled ``Turn.reward``.
        seed: The seed the episode was reset with (None if unseeded).
        agent_rewards: Per-agent episode return: the sum of that agent's turn rewards (what
            the env returned in its ``rewards`` dict on the final step).
        start_state: The env generator's state once the task was posed (numpy's
            ``bit_generator.state``, JSON-serialisable): with it
            :meth:`marti_env.env.WorkflowEnv.restart` replays the episode's shuffles and
            tie order. None for records written before it was kept.
    """

    env_id: str
    task: Task
    turns: list[Turn] = field(default_factory=list)
    final_answer: str | None = None
    outcome: float = 0.0
    credit: str = "none"
    seed: int | None = None
    agent_rewards: dict[str, float] = field(default_factory=dict)
    start_state: dict[str, Any] | None = None

    def turns_of(self, agent: str) -> list[Turn]:
        """The turns ``agent`` took, in order."""
        return [t for t in self.turns if t.agent == agent]

    def samples(self, env: int = 0, group: int = 0) -> list[TurnSample]:
        """One :class:`TurnSample` per turn, in turn order: the per-turn training rows.

        Rewards are the credited ones, so call it on a finished episode (before the last
        step every turn's reward is still 0).

        Args:
            env: The env index the rows carry (its position in a vector env).
            group: The group index the rows carry (envs that shared the task).
        """
        return [
            TurnSample(
                env=env,
                group=group,
                task_id=self.task.id,
                agent=t.agent,
                role=t.role,
                round=t.round,
                turn_index=t.index,
                messages=t.messages,
                response=t.response,
                reward=t.reward,
                score=t.score,
            )
            for t in self.turns
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "task": self.task.to_dict(),
            "turns": [t.to_dict() for t in self.turns],
            "final_answer": self.final_answer,
            "outcome": self.outcome,
            "credit": self.credit,
            "seed": self.seed,
            "agent_rewards": dict(self.agent_rewards),
            "start_state": self.start_state,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeRecord:
        return cls(
            env_id=str(data["env_id"]),
            task=Task.from_dict(data["task"]),
            turns=[Turn.from_dict(t) for t in data["turns"]],
            final_answer=data["final_answer"],
            outcome=float(data["outcome"]),
            credit=str(data.get("credit", "none")),
            seed=data.get("seed"),
            agent_rewards={k: float(v) for k, v in data.get("agent_rewards", {}).items()},
            start_state=data.get("start_state"),
        )

    def to_json(self) -> str:
        """One JSON line. Non-ASCII text is written as is, unless the record holds text no
        UTF-8 file can store (a lone surrogate such as ``"\\ud800"``, which a tokenizer's
        decode can produce): then the whole line uses ASCII escapes, which read back to the
        same strings."""
        data = self.to_dict()
        text = json.dumps(data, ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return json.dumps(data)
        return text


def write_jsonl(records: Iterable[EpisodeRecord], path: str | Path, append: bool = True) -> int:
    """Write one JSON line per record; returns how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("a" if append else "w", encoding="utf-8") as f:
        for record in records:
            f.write(record.to_json() + "\n")
            n += 1
    return n


def read_jsonl(path: str | Path) -> Iterator[EpisodeRecord]:
    """Read records written by :func:`write_jsonl`; a bad line errors naming file and line."""
    path = Path(path)
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield EpisodeRecord.from_dict(json.loads(line))
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{lineno}: not an episode record: {e}") from e
