"""Run metrics: one JSON line per step in ``metrics.jsonl``, TensorBoard scalars, a progress bar.

Metric names are namespaced like CleanRL's: ``losses/policy/approx_kl`` (unit ``policy``),
``rollout/debater_0/reward``, ``eval/accuracy``, ``charts/SPS``. Each JSONL line is
``{"step": s, "time": unix seconds, <name>: value, ...}``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["MetricsLogger", "read_metrics", "step_tokens", "training_tokens"]


class MetricsLogger:
    """Appends metrics to ``run_dir/metrics.jsonl`` and (optionally) TensorBoard.

    Args:
        run_dir: The run directory.
        tensorboard: Also write event files to ``run_dir/tb``.
        progress_total: Steps of the run; shows a tqdm bar when given.
        start_step: Steps already done (a resumed run). Lines of later steps left by the
            interrupted run are dropped so the log reads as one uninterrupted run.
    """

    def __init__(
        self,
        run_dir: str | Path,
        tensorboard: bool = True,
        progress_total: int | None = None,
        start_step: int = 0,
    ) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if start_step > 0 and self.path.exists():
            kept = [r for r in read_metrics(self.path) if r["step"] <= start_step]
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        elif start_step == 0 and self.path.exists():
            self.path.unlink()
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(Path(run_dir) / "tb"), purge_step=start_step + 1)
        self.bar = None
        if progress_total is not None:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=progress_total, initial=start_step, desc="train", unit="step")

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        clean = {k: float(v) for k, v in metrics.items() if _is_number(v)}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, "time": time.time(), **clean}) + "\n")
        if self.writer is not None:
            for key, value in clean.items():
                self.writer.add_scalar(key, value, step)
            self.writer.flush()

    def advance(self, summary: dict[str, float]) -> None:
        """Move the progress bar one step and show ``summary``."""
        if self.bar is not None:
            self.bar.set_postfix({k: f"{v:.3g}" for k, v in summary.items()}, refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.writer is not None:
            self.writer.close()


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Every line of a ``metrics.jsonl`` as a dict, in order."""
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def step_tokens(metrics: Mapping[str, Any]) -> float:
    """Response tokens one training step generated, from its metrics line:
    ``rollout/tokens`` (the rollout's turns) plus ``rollout/replay_tokens`` (a re-execution
    credit method's replays, 0 without); 100 and 30 give 130.0."""
    return float(metrics["rollout/tokens"] + metrics.get("rollout/replay_tokens", 0.0))


def training_tokens(history: Sequence[Mapping[str, Any]], upto: int) -> float:
    """Response tokens training generated in steps ``1..upto`` of a run's metrics: the sum
    of :func:`step_tokens` over those steps' lines, what ``total_tokens`` budgets. Steps of
    100 and 120 tokens, one with 30 replay tokens, give 250.0.

    Raises:
        ValueError: a step in ``1..upto`` logged no ``rollout/tokens`` (a run trained before
            the trainer counted tokens, or a missing line), naming it.
    """
    logged = {h["step"]: h for h in history if "rollout/tokens" in h and 0 < h["step"] <= upto}
    missing = [s for s in range(1, upto + 1) if s not in logged]
    if missing:
        raise ValueError(
            f"step {missing[0]} logged no rollout/tokens (trained before the trainer counted "
            "tokens?), so the tokens its run spent are unknown"
        )
    return float(sum(step_tokens(h) for h in logged.values()))
