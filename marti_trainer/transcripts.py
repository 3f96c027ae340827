"""A run's training transcripts read back step by step.

The trainer appends every training episode's record (:class:`marti_env.record.EpisodeRecord`
as a JSON line) to ``<run dir>/transcripts.jsonl`` when ``log.transcripts`` is on: each
step's ``rollout.tasks_per_step x rollout.n_samples`` episodes, in step order, and a resumed
run cuts the file back to its checkpoint. :func:`read_training_steps` is the one reader that
splits the file into those steps and checks it against the run's ``metrics.jsonl``; the
credit benchmark's degeneracy flag and ``benchmarks/credit_roles.py`` both use it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from marti_trainer.metrics import read_metrics

__all__ = ["read_training_steps"]


def read_training_steps(run_dir: str | Path, size: int) -> list[list[dict[str, Any]]]:
    """The episode records of ``run_dir/transcripts.jsonl`` as dicts, one list of ``size``
    (``tasks_per_step x n_samples``) per training step: entry ``s - 1`` holds step ``s``'s
    episodes, and episode ``j`` of it is line ``(s - 1) * size + j + 1`` of the file.

    Raises:
        ValueError: the file is missing, a line is not a JSON object (naming ``path:line``),
            the episodes are not a whole, non-zero number of steps, ``run_dir/metrics.jsonl``
            is missing or has no step, or the episodes' step count differs from its last
            step (a file cut or resumed wrongly), naming the files.
    """
    run_dir = Path(run_dir)
    path = run_dir / "transcripts.jsonl"
    if not path.is_file():
        raise ValueError(f"{path}: missing")
    records = []
    with path.open(encoding="utf-8") as f:
        for line, text in enumerate(f, 1):
            try:
                record = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{line}: not an episode record ({e})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{line}: not an episode record (not a JSON object)")
            records.append(record)
    if not records or len(records) % size:
        raise ValueError(
            f"{path}: {len(records)} episodes, not a whole number of training steps of "
            f"{size} (rollout.tasks_per_step x rollout.n_samples)"
        )
    metrics = run_dir / "metrics.jsonl"
    try:
        trained = max(int(row["step"]) for row in read_metrics(metrics))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{metrics}: no training steps to check {path} against ({e!r})") from None
    if len(records) // size != trained:
        raise ValueError(
            f"{path}: {len(records) // size} steps of {size} episodes, but {metrics} ends at "
            f"step {trained} (a resume that did not cut the file back?)"
        )
    return [records[i : i + size] for i in range(0, len(records), size)]
