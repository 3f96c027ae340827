"""What a rollout returns: one :class:`Sample` per (episode, agent, turn) in a ``RolloutBatch``.

A sample is everything a policy-gradient step needs about one generation: the exact prompt
and response token ids the policy saw and chose, the log-probabilities it sampled them with,
the reward the env's credit method gave the turn, and the group key that puts the
``n_samples`` samples of the same (task, agent, turn) together for group-relative advantages
(GRPO, RLOO, ...). Shapes are given in brackets: ``P`` prompt tokens, ``L`` response tokens.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marti_env.record import EpisodeRecord, write_jsonl

__all__ = ["GROUP_BY", "GroupKey", "RolloutBatch", "RolloutStats", "Sample", "group_key_of"]

GroupKey = tuple[str | int, ...]
"""``(task_id, agent, turn_index)``: the samples of one group answered the same task, as the
same agent, at the same position of the workflow; they differ only by sampling. Under
``group_by="role"`` (:func:`group_key_of`) it is ``(task_id, role, round)``; under
``"node"`` ``(task_id, agent, turn_index, episode)``."""

GROUP_BY = ("agent", "role", "node")
"""How samples are grouped for advantages (``AlgorithmConfig.group_by``)."""


def group_key_of(sample: Any, group_by: str = "agent") -> GroupKey:
    """The key of ``sample``'s advantage group: its ``group_key`` ``(task_id, agent,
    turn_index)`` for ``"agent"``; ``(task_id, role, round)`` for ``"role"``, which pools
    the agents of one role acting in the same round (MAD's debaters); ``(task_id, agent,
    turn_index, episode)`` for ``"node"``: one turn of one episode and its siblings, the
    alternatives sampled from the same context (``sibling`` credit with ``train=True``;
    AT-GRPO's tree groups, arXiv 2510.11062)."""
    if group_by == "agent":
        return sample.group_key
    if group_by == "role":
        return (sample.task_id, sample.role, sample.round)
    if group_by == "node":
        return (*sample.group_key, sample.episode)
    raise ValueError(f"group_by must be one of {GROUP_BY}, got {group_by!r}")


@dataclass
class Sample:
    """One generation of one agent in one episode, ready for training.

    Attributes:
        episode: Index of the episode in :attr:`RolloutBatch.episodes`
            (``task_index * n_samples + sample_index``).
        task_index: Position of the task in the ``tasks`` passed to ``rollout``.
        sample_index: Which of the ``n_samples`` episodes of that task, ``0 <= i < n``.
        task_id: The task's id.
        agent: The agent's name, e.g. ``"debater_1"``.
        role: The agent's role, e.g. ``"debater"``.
        round: The workflow round (env step) in which the agent acted, 0-based.
        turn_index: Position of the turn in the episode (``Turn.index``).
        prompt_token_ids: ``[P]`` the tokenised prompt the policy conditioned on (after the
            chat template and any clipping).
        response_token_ids: ``[L]`` the tokens the policy sampled (including the
            end-of-sequence token when it emitted one).
        logprobs: ``[L]`` natural-log probability of each response token under the
            distribution it was sampled from (see ``Generation.logprobs``).
        truncated: True if the generation hit ``max_tokens`` (``finish_reason == "length"``).
        score: The env's verifier score of the turn's answer, in [0, 1].
        reward: The reward the env's credit method gave this turn (``Turn.reward``).
        policy: Which policy produced it: the key of the ``policies`` mapping entry used
            (the agent or role name), or ``"policy"`` for a single shared policy.
        adapter: The LoRA adapter name used, or None for the base weights.
        latency_s: Seconds from submitting the request to the backend until its result came
            back (queueing included); diagnostics only, never compared.
        branch: 0 for the episode's own turn; ``k >= 1`` for its ``k``-th sibling, an
            alternative sampled from the same prompt by a replay (``sibling`` credit with
            ``train=True``), whose reward is its replay's outcome. A sibling shares its
            turn's ``episode``, agent, round and prompt; the batch's ``episodes`` hold no
            record of it.
    """

    episode: int
    task_index: int
    sample_index: int
    task_id: str
    agent: str
    role: str
    round: int
    turn_index: int
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    logprobs: list[float]
    truncated: bool
    score: float
    reward: float
    policy: str = "policy"
    adapter: str | None = None
    latency_s: float = field(default=0.0, compare=False)
    branch: int = 0

    @property
    def group_key(self) -> GroupKey:
        """``(task_id, agent, turn_index)``, the key of its advantage group."""
        return (self.task_id, self.agent, self.turn_index)

    @property
    def num_response_tokens(self) -> int:
        """``L``, the number of generated tokens."""
        return len(self.response_token_ids)


@dataclass
class RolloutStats:
    """Counters and timings of one rollout.

    Attributes:
        mode: ``"sync"`` or ``"async"``.
        max_concurrency: The bound on requests in flight the rollout ran with.
        num_episodes: Episodes run (``len(tasks) * n_samples``).
        num_requests: Generation requests (= samples).
        tokens_generated: Response tokens over all samples.
        prompt_tokens: Prompt tokens over all samples.
        truncated: Samples cut at ``max_tokens``.
        wall_s: Wall-clock seconds of the whole rollout (env construction to last record).
        backend_s: Seconds during which at least one request was in flight in a backend (the
            union of the in-flight intervals): the time generation could be happening.
        host_s: Seconds the scheduling thread spent working (env resets and steps, prompt
            bookkeeping, building samples) rather than waiting for the backend. In
            asynchronous mode most of it overlaps with generation.
        env_s: Seconds spent in ``env.step`` (scoring the responses with the verifier,
            credit assignment at episode end, building the next prompts).
        drivers: Per policy name: the driver kind that served it and its counters (e.g.
            the continuous HF driver's ``steps`` and ``row_steps``).
        idle_s: ``wall_s - backend_s``: seconds with no request in flight, i.e. host work on
            the critical path (the fraction of wall time spent "outside the backend").
        replay_generations: Generations a replay credit method asked for after the episodes
            (:mod:`marti_env.credit.replay`; 0 without one). Not training samples: their cost.
        replay_tokens: Response tokens of those generations.
        replay_s: Wall-clock seconds of the replays (included in ``wall_s``).
    """

    mode: str
    max_concurrency: int
    num_episodes: int = 0
    num_requests: int = 0
    tokens_generated: int = 0
    prompt_tokens: int = 0
    truncated: int = 0
    wall_s: float = 0.0
    backend_s: float = 0.0
    host_s: float = 0.0
    env_s: float = 0.0
    drivers: dict[str, dict[str, Any]] = field(default_factory=dict)
    replay_generations: int = 0
    replay_tokens: int = 0
    replay_s: float = 0.0

    @property
    def idle_s(self) -> float:
        return max(0.0, self.wall_s - self.backend_s)

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per wall-clock second."""
        return self.tokens_generated / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "max_concurrency": self.max_concurrency,
            "num_episodes": self.num_episodes,
            "num_requests": self.num_requests,
            "tokens_generated": self.tokens_generated,
            "prompt_tokens": self.prompt_tokens,
            "truncated": self.truncated,
            "wall_s": self.wall_s,
            "backend_s": self.backend_s,
            "host_s": self.host_s,
            "idle_s": self.idle_s,
            "tokens_per_s": self.tokens_per_s,
            "drivers": {k: dict(v) for k, v in self.drivers.items()},
            "replay_generations": self.replay_generations,
            "replay_tokens": self.replay_tokens,
            "replay_s": self.replay_s,
        }


@dataclass
class RolloutBatch:
    """The result of :func:`marti_trainer.rollout.rollout`.

    Attributes:
        env_id: The environment the episodes ran in.
        n_samples: Episodes per task.
        samples: One per generation, sorted by ``(episode, turn_index)``.
        episodes: ``[E]`` the finished episode records, ``episodes[s.episode]`` for a sample
            ``s``; ``E = len(tasks) * n_samples``, episode ``j * n_samples + i`` is sample
            ``i`` of task ``j``.
        stats: Counters and timings.
    """

    env_id: str
    n_samples: int
    samples: list[Sample]
    episodes: list[EpisodeRecord]
    stats: RolloutStats

    def __len__(self) -> int:
        return len(self.samples)

    def __iter__(self) -> Iterator[Sample]:
        return iter(self.samples)

    def groups(self, group_by: str = "agent") -> dict[GroupKey, list[Sample]]:
        """Samples by :func:`group_key_of` under ``group_by``, each group in episode order
        (insertion order of keys)."""
        out: dict[GroupKey, list[Sample]] = defaultdict(list)
        for sample in self.samples:
            out[group_key_of(sample, group_by)].append(sample)
        return dict(out)

    def for_agent(self, agent: str) -> list[Sample]:
        """The samples of one agent, in order."""
        return [s for s in self.samples if s.agent == agent]

    def write_transcripts(self, path: str | Path, append: bool = True) -> int:
        """Write every episode record as one JSON line (see ``marti_env.write_jsonl``)."""
        return write_jsonl(self.episodes, path, append=append)
