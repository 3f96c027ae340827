"""The page's plots: learning curves and accuracy against generations, mean over seeds
with bootstrap bands (data in :func:`_plot_data`, PNGs in :func:`_draw`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from marti_env.stats import (
    mean_ci,
)
from marti_trainer.report.pairing import Group
from marti_trainer.report.runs import RunRecord


def _band(rows_by_seed: list[dict[float, float]], conf: float, seed: int) -> list[tuple]:
    """(x, mean, low, high) at every x all seeds have."""
    xs = sorted(set.intersection(*[set(r) for r in rows_by_seed])) if rows_by_seed else []
    return [(x, *_mean_band([r[x] for r in rows_by_seed], conf, seed)) for x in xs]


def _mean_band(values: list[float], conf: float, seed: int) -> tuple[float, float, float]:
    e = mean_ci(values, conf, seed, "percentile", 2_000)
    return (e.mean, e.low, e.high) if e.has_ci else (e.mean, e.mean, e.mean)


def _aligned_evals(runs: Sequence[RunRecord]) -> list[list[tuple[int, float]]]:
    """The evaluations of a group's runs that go together, each as every run's (step,
    accuracy): those at a step every run evaluated before any run's last evaluation, then
    every run's last evaluation (a ``total_tokens`` budget stops each seed at its own step,
    so the final evaluations pair with one another, not with another seed's mid-run one)."""
    if not runs:
        return []
    last = min(r.evals[-1][0] for r in runs)
    common = sorted(set.intersection(*[{s for s, _ in r.evals} for r in runs]))
    rows = [[(x, dict(r.evals)[x]) for r in runs] for x in common if x < last]
    return [*rows, [r.evals[-1] for r in runs]]


def _plot_data(groups: Sequence[Group], conf: float, seed: int) -> dict[str, Any]:
    """Per group: the mean reward per step, and the mean held-out accuracy per evaluation
    against steps, generations and tokens (x: the mean over seeds where the runs evaluated
    at different steps), each with its CI band."""
    data: dict[str, Any] = {"reward": {}, "accuracy": {}, "generations": {}, "tokens": {}}
    for g in groups:
        data["reward"][g.label] = _band([dict(r.curve) for r in g.runs], conf, seed)
        points = _aligned_evals(g.runs)
        bands = [_mean_band([a for _, a in p], conf, seed) for p in points]
        data["accuracy"][g.label] = [
            (float(np.mean([s for s, _ in p])), *b) for p, b in zip(points, bands, strict=True)
        ]
        if all(r.generations_per_step for r in g.runs):
            data["generations"][g.label] = [
                (float(np.mean([s * r.generations_per_step for (s, _), r in zip(p, g.runs,
                 strict=True)])), *b)
                for p, b in zip(points, bands, strict=True)
            ]  # fmt: skip
        if all(r.tokens for r in g.runs):  # x: mean over seeds of the tokens at that point
            data["tokens"][g.label] = [
                (float(np.mean([r.tokens[s] for (s, _), r in zip(p, g.runs, strict=True)])), *b)
                for p, b in zip(points, bands, strict=True)
                if all(s in r.tokens for (s, _), r in zip(p, g.runs, strict=True))
            ]
    return data


def _draw(plots: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def panel(ax, series: dict, xlabel: str, ylabel: str, title: str) -> None:
        for label, rows in series.items():
            if not rows:
                continue
            x, m, lo, hi = (np.array(c, dtype=float) for c in zip(*rows, strict=True))
            (line,) = ax.plot(x, 100 * m, marker="o", markersize=3, label=label)
            ax.fill_between(x, 100 * lo, 100 * hi, alpha=0.2, color=line.get_color())
        ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)

    paths = []
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    panel(axes[0], plots["reward"], "step", "training outcome (%)", "training reward")
    panel(axes[1], plots["accuracy"], "step", "held-out accuracy (%)", "held-out accuracy")
    fig.tight_layout()
    paths.append(out_dir / f"{stem}_curves.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    panel(axes[0], plots["generations"], "generations (sampled model calls)",
          "held-out accuracy (%)", "accuracy against training generations")  # fmt: skip
    panel(axes[1], plots["tokens"], "generated tokens (training rollouts, mean over seeds)",
          "held-out accuracy (%)", "accuracy against generated tokens")  # fmt: skip
    fig.tight_layout()
    paths.append(out_dir / f"{stem}_generations.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths
