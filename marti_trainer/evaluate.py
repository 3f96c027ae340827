"""Evaluation: avg@k and maj@k accuracy of a team of policies on any registered env.

``evaluate(env_id, tasks, policies, k)`` runs ``k`` episodes per task with the rollout
engine and :func:`summarize` turns the batch into an :class:`EvalResult`. Because every env
(``single-v0``, ``majority-v0``, ``mad-v0``, ``chain-v0``, ...) goes through the same
harness and reports the tokens it generated, equal-inference-budget comparisons (MARTI's
"multi-agent vs single agent at the same budget") are one call (or one ``marti eval``
command) each.

Metrics, for ``T`` tasks with ``k`` episodes each, ``o[t][i]`` the outcome (verifier score
of the team's final answer, 1.0 right / 0.0 wrong) of episode ``i`` of task ``t``:

- ``avg@k = (1/T) sum_t (1/k) sum_i o[t][i]``: expected single-episode accuracy.
- ``maj@k = (1/T) sum_t o[t][m_t]`` where ``m_t`` is the first episode whose final answer
  has the most common canonical form among task ``t``'s ``k`` final answers
  (``marti_env.rewards.majority_answer``: episodes without an answer do not vote, ties go
  to the answer seen first); 0 when no episode answered.
- ``pass@k = (1/T) sum_t max_i o[t][i]``.
- ``boxed_rate``: fraction of all turns whose response has a non-empty final ``\\boxed{}``
  (every agent counts, including roles told not to answer, e.g. ``chain-v0``'s verifier);
  ``final_answer_rate``: fraction of episodes whose team produced a final answer.
- ``truncated_rate``: fraction of generations cut at ``max_tokens``.

Batch invariance. A bf16 forward pass is not a per-row function of its input: the left
padding a row gets (the longest prompt of its batch sets it) and the prompt prefixes the
``hf`` backend shares in prefill change the rounding of its logits (the batch size alone did
not: ``benchmarks/bench_batch_invariance.py``), enough to flip greedy tokens (one model
scored 32% and 33% on the same problems batched differently). :func:`chunked_rollout`
therefore evaluates a held-out set in fixed consecutive chunks (problem ``i`` in chunk
``i // chunk_tasks``), each chunk its own rollout with the root seed
``derive_seed(seed, chunk)``: a problem's episodes depend only on its chunk, the weights and
the seed, not on how many problems are evaluated, which others are present, or (while one
round of a chunk fits one decode batch, ``rollout.batch_size``) the batch size.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from marti_env.rewards import canonical_answer, majority_answer
from marti_env.tasks import Task, TaskSource
from marti_trainer.policies.base import SamplingParams
from marti_trainer.rollout import PolicySpec, RolloutBatch, derive_seed, rollout
from marti_trainer.rollout.samples import RolloutStats

__all__ = [
    "EVAL_CHUNK_TASKS",
    "EvalResult",
    "TaskResult",
    "chunk_bounds",
    "chunked_rollout",
    "evaluate",
    "format_table",
    "greedy_heldout_rollout",
    "heldout_rollout",
    "summarize",
]

EVAL_CHUNK_TASKS = 16
"""Default problems per evaluation chunk (see "Batch invariance" above): 16 problems keep a
debate round of a chunk within one decode batch of 64 rows, where a CPU decodes near its
full-batch rate."""


@dataclass
class TaskResult:
    """One task's ``k`` episodes.

    Attributes:
        task_id: The task.
        answer: Its reference answer.
        outcomes: ``[k]`` episode outcomes, in episode order.
        final_answers: ``[k]`` the team's final answers (None: no answer).
        majority: The majority answer's canonical form (None if nobody answered).
        majority_outcome: The outcome of the first episode that gave the majority answer
            (0.0 if None).
    """

    task_id: str
    answer: str | None
    outcomes: list[float]
    final_answers: list[str | None]
    majority: str | None
    majority_outcome: float


@dataclass
class EvalResult:
    """Accuracy and cost of one evaluation (see the module docstring for the formulas).

    Attributes:
        env_id: The environment.
        model: A label for the policy (model name), for tables.
        num_tasks: ``T``.
        k: Episodes per task.
        avg_at_k, maj_at_k, pass_at_k: Accuracies in [0, 1].
        boxed_rate: Fraction of turns with a non-empty final ``\\boxed{}``.
        final_answer_rate: Fraction of episodes with a team answer.
        truncated_rate: Fraction of generations cut at ``max_tokens``.
        tokens_generated: Response tokens over every generation of every episode.
        tokens_per_task: ``tokens_generated / num_tasks`` (the inference budget per problem
            for ``k`` episodes).
        requests: Generations (= turns).
        wall_s: Wall-clock seconds of the rollout.
        mode: Rollout mode.
        max_concurrency: Requests in flight at most.
        seed: Root seed.
        sampling: The sampling parameters (as a dict), if one set was used for all agents.
        per_task: One :class:`TaskResult` per task, in order.
    """

    env_id: str
    model: str
    num_tasks: int
    k: int
    avg_at_k: float
    maj_at_k: float
    pass_at_k: float
    boxed_rate: float
    final_answer_rate: float
    truncated_rate: float
    tokens_generated: int
    tokens_per_task: float
    requests: int
    wall_s: float
    mode: str = ""
    max_concurrency: int = 0
    seed: int = 0
    sampling: dict[str, Any] | None = None
    per_task: list[TaskResult] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def write_json(self, path: str | Path) -> Path:
        """Write :meth:`to_dict` as indented JSON (parent directories created)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1, ensure_ascii=False) + "\n")
        return path

    def table(self) -> str:
        """This result as a one-row table (see :func:`format_table`)."""
        return format_table([self])


def summarize(
    batch: RolloutBatch,
    model: str = "",
    *,
    seed: int = 0,
    sampling: SamplingParams | None = None,
) -> EvalResult:
    """Compute the metrics of a finished rollout (pure: nothing is generated).

    Args:
        batch: A rollout of ``k = batch.n_samples`` episodes per task.
        model: Label for the table.
        seed: The rollout's root seed (recorded).
        sampling: The rollout's sampling parameters (recorded).
    """
    k = batch.n_samples
    episodes = batch.episodes
    if not episodes or len(episodes) % k:
        raise ValueError(f"batch has {len(episodes)} episodes, not a multiple of k={k}")
    per_task: list[TaskResult] = []
    for start in range(0, len(episodes), k):
        group = episodes[start : start + k]
        finals = [e.final_answer for e in group]
        majority = majority_answer(finals)
        maj_outcome = 0.0
        if majority is not None:
            maj_outcome = next(
                e.outcome
                for e in group
                if e.final_answer is not None and canonical_answer(e.final_answer) == majority
            )
        per_task.append(
            TaskResult(
                task_id=group[0].task.id,
                answer=group[0].task.answer,
                outcomes=[e.outcome for e in group],
                final_answers=finals,
                majority=majority,
                majority_outcome=maj_outcome,
            )
        )
    num_tasks = len(per_task)
    turns = [t for e in episodes for t in e.turns]
    stats = batch.stats
    return EvalResult(
        env_id=batch.env_id,
        model=model,
        num_tasks=num_tasks,
        k=k,
        avg_at_k=sum(sum(t.outcomes) / k for t in per_task) / num_tasks,
        maj_at_k=sum(t.majority_outcome for t in per_task) / num_tasks,
        pass_at_k=sum(max(t.outcomes) for t in per_task) / num_tasks,
        boxed_rate=sum(t.answer is not None for t in turns) / max(1, len(turns)),
        final_answer_rate=sum(e.final_answer is not None for e in episodes) / len(episodes),
        truncated_rate=sum(bool(t.meta.get("truncated")) for t in turns) / max(1, len(turns)),
        tokens_generated=stats.tokens_generated,
        tokens_per_task=stats.tokens_generated / num_tasks,
        requests=stats.num_requests,
        wall_s=stats.wall_s,
        mode=stats.mode,
        max_concurrency=stats.max_concurrency,
        seed=seed,
        sampling=asdict(sampling) if sampling is not None else None,
        per_task=per_task,
    )


def chunk_bounds(num_tasks: int, chunk_tasks: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]``: consecutive chunks of ``chunk_tasks`` problems covering
    ``range(num_tasks)`` (the last one may be shorter); ``chunk_tasks = 0`` is one chunk.

    Chunk ``c`` is ``[c * chunk_tasks, min((c + 1) * chunk_tasks, num_tasks))``, so a
    problem's chunk depends only on its index, never on how many problems follow it.

    Raises:
        ValueError: ``num_tasks < 1`` or ``chunk_tasks < 0``.
    """
    if num_tasks < 1 or chunk_tasks < 0:
        raise ValueError(
            f"need num_tasks >= 1 and chunk_tasks >= 0, got {num_tasks} and {chunk_tasks}"
        )
    size = chunk_tasks or num_tasks
    return [(a, min(a + size, num_tasks)) for a in range(0, num_tasks, size)]


def chunked_rollout(
    env_id: str,
    tasks: Sequence[Task] | TaskSource,
    n_samples: int,
    policies: PolicySpec | Mapping[str, PolicySpec],
    sampling: SamplingParams | Mapping[str, SamplingParams],
    *,
    chunk_tasks: int = EVAL_CHUNK_TASKS,
    seed: int = 0,
    **rollout_kwargs: Any,
) -> RolloutBatch:
    """:func:`~marti_trainer.rollout.rollout` over fixed chunks of the tasks, merged.

    Chunk ``c`` (:func:`chunk_bounds`) runs alone with the root seed ``derive_seed(seed, c)``
    (``chunk_tasks = 0``: one rollout with ``seed`` itself, as a plain ``rollout``). The
    merged batch lists episodes and samples in task order, with ``Sample.episode`` and
    ``Sample.task_index`` relative to the whole task list; its stats add up the chunks'
    (wall and backend time included). ``rollout_kwargs`` go to every ``rollout`` call; a
    ``transcript_path`` gets every chunk's records, in order.
    """
    task_list = list(tasks)
    bounds = chunk_bounds(len(task_list), chunk_tasks)
    if len(bounds) == 1:
        return rollout(env_id, task_list, n_samples, policies, sampling, seed=seed,
                       **rollout_kwargs)  # fmt: skip
    parts = [
        rollout(env_id, task_list[a:b], n_samples, policies, sampling,
                seed=derive_seed(seed, c), **rollout_kwargs)
        for c, (a, b) in enumerate(bounds)
    ]  # fmt: skip
    return _merge(parts, [a for a, _ in bounds])


def _merge(parts: Sequence[RolloutBatch], starts: Sequence[int]) -> RolloutBatch:
    """One batch from the batches of consecutive task chunks starting at ``starts``."""
    k = parts[0].n_samples
    samples, episodes = [], []
    for part, start in zip(parts, starts, strict=True):
        offset = len(episodes)
        samples += [
            dataclasses.replace(s, episode=s.episode + offset, task_index=s.task_index + start)
            for s in part.samples
        ]
        episodes += part.episodes
    first = parts[0].stats
    stats = RolloutStats(mode=first.mode, max_concurrency=first.max_concurrency)
    for name in ("num_episodes", "num_requests", "tokens_generated", "prompt_tokens",
                 "truncated", "wall_s", "backend_s", "host_s", "env_s"):  # fmt: skip
        setattr(stats, name, sum(getattr(p.stats, name) for p in parts))
    stats.drivers = dict(first.drivers)
    return RolloutBatch(parts[0].env_id, k, samples, episodes, stats)


def heldout_rollout(
    env_id: str,
    tasks: Sequence[Task],
    policies: PolicySpec | Mapping[str, PolicySpec],
    max_tokens: int,
    seed: int,
    env_kwargs: Mapping[str, Any] | None = None,
    transcript_path: str | Path | None = None,
    *,
    samples: int = 0,
    temperature: float = 0.7,
    chunk_tasks: int = EVAL_CHUNK_TASKS,
) -> RolloutBatch:
    """The held-out evaluation of ``marti train`` (``eval.*``), which ``marti eval
    --checkpoint`` repeats by default.

    ``samples = 0``: one greedy episode per problem; ``policies`` are usually wrapped in
    :class:`~marti_trainer.team.GreedyDedup` (each distinct prompt generated once).
    ``samples = k >= 1``: ``k`` episodes per problem sampled at ``temperature`` (avg@k),
    each request with its own seeded random stream (:mod:`marti_trainer.rollout.seeds`).
    Either way in chunks (:func:`chunked_rollout`), each round's requests of a chunk
    generated as one batch: the same weights give the same figures in both commands.
    """
    if samples < 0:
        raise ValueError(f"samples must be >= 0 (0 = greedy), got {samples}")
    sampling = SamplingParams(temperature=temperature if samples else 0.0, max_tokens=max_tokens)
    return chunked_rollout(
        env_id, tasks, max(1, samples), policies, sampling, chunk_tasks=chunk_tasks, seed=seed,
        mode="sync", env_kwargs=env_kwargs, progress=False, max_concurrency=10**6,
        driver="batch", transcript_path=transcript_path,
    )  # fmt: skip


def greedy_heldout_rollout(
    env_id: str,
    tasks: Sequence[Task],
    policies: PolicySpec | Mapping[str, PolicySpec],
    max_tokens: int,
    seed: int,
    env_kwargs: Mapping[str, Any] | None = None,
    transcript_path: str | Path | None = None,
    chunk_tasks: int = EVAL_CHUNK_TASKS,
) -> RolloutBatch:
    """:func:`heldout_rollout` with ``samples = 0``: one greedy episode per problem."""
    return heldout_rollout(
        env_id, tasks, policies, max_tokens, seed, env_kwargs, transcript_path,
        chunk_tasks=chunk_tasks,
    )  # fmt: skip


def evaluate(
    env_id: str,
    tasks: Sequence[Task] | TaskSource,
    policies: PolicySpec | Mapping[str, PolicySpec],
    k: int = 4,
    sampling: SamplingParams | Mapping[str, SamplingParams] | None = None,
    *,
    model: str = "",
    mode: Literal["sync", "async"] = "async",
    max_concurrency: int = 32,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    progress: bool = True,
    transcript_path: str | Path | None = None,
    json_path: str | Path | None = None,
    chunk_tasks: int = EVAL_CHUNK_TASKS,
) -> EvalResult:
    """Run ``k`` episodes per task and report avg@k, maj@k and cost.

    Args are those of :func:`marti_trainer.rollout.rollout` (``k`` is ``n_samples``), plus
    ``model`` (a label), ``json_path`` (write the result there as JSON) and ``chunk_tasks``
    (evaluate in fixed chunks of that many tasks, :func:`chunked_rollout`, so a task's result
    does not depend on batch composition; 0: one rollout, e.g. for a remote server whose
    throughput needs many requests in flight). Default sampling: temperature 0.7, 256 new
    tokens.

    Raises:
        ValueError, RolloutError: as ``rollout``.
    """
    if sampling is None:
        sampling = SamplingParams(temperature=0.7, max_tokens=256)
    batch = chunked_rollout(
        env_id,
        tasks,
        k,
        policies,
        sampling,
        chunk_tasks=chunk_tasks,
        mode=mode,
        max_concurrency=max_concurrency,
        seed=seed,
        env_kwargs=env_kwargs,
        progress=progress,
        transcript_path=transcript_path,
    )
    result = summarize(
        batch,
        model,
        seed=seed,
        sampling=sampling if isinstance(sampling, SamplingParams) else None,
    )
    if json_path is not None:
        result.write_json(json_path)
    return result


_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("env", "env_id", "s"),
    ("model", "model", "s"),
    ("tasks", "num_tasks", "d"),
    ("k", "k", "d"),
    ("avg@k", "avg_at_k", ".3f"),
    ("maj@k", "maj_at_k", ".3f"),
    ("pass@k", "pass_at_k", ".3f"),
    ("boxed", "boxed_rate", ".3f"),
    ("trunc", "truncated_rate", ".3f"),
    ("tokens", "tokens_generated", "d"),
    ("tok/task", "tokens_per_task", ".0f"),
    ("wall s", "wall_s", ".1f"),
)


def format_table(results: Sequence[EvalResult]) -> str:
    """A plain-text table, one row per result (for the terminal and logs)."""
    header = [c[0] for c in _COLUMNS]
    rows = [[format(getattr(r, attr), fmt) for _, attr, fmt in _COLUMNS] for r in results]
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(x.rjust(w) for x, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)
