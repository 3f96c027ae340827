"""Writing a :class:`~marti_env.credit.bench.harness.BenchResult`: CSV, JSON and a PNG plot.

matplotlib is imported only by :func:`plot` (and only if installed).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from marti_env.credit.bench.harness import BenchResult


def write_outputs(
    result: BenchResult, out_dir: str | Path, plot_png: bool = True
) -> dict[str, Path]:
    """Write ``results.csv`` (one row per env x method x seed), ``summary.csv`` (mean and
    std per env x method), ``results.json`` (config, rows, summary, curves), ``table.txt``
    and, if matplotlib is installed and ``plot_png``, ``credit_bench.png``. Returns the
    paths written, by kind."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "rows_csv": out / "results.csv",
        "summary_csv": out / "summary.csv",
        "json": out / "results.json",
        "table": out / "table.txt",
    }
    _write_csv(paths["rows_csv"], result.rows)
    _write_csv(paths["summary_csv"], result.summary())
    data = _no_nan(result.to_json())
    paths["json"].write_text(json.dumps(data, indent=1, allow_nan=False), encoding="utf-8")
    paths["table"].write_text(result.table() + "\n", encoding="utf-8")
    if plot_png:
        png = plot(result, out / "credit_bench.png")
        if png is not None:
            paths["plot"] = png
    return paths


def _no_nan(value: Any) -> Any:
    """NaN (a metric that does not apply) as JSON null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_no_nan(v) for v in value]
    return value


def _write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        if not rows:
            return
        fields = list(dict.fromkeys(k for row in rows for k in row))  # every key, in order
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def plot(result: BenchResult, path: str | Path) -> Path | None:
    """Learning curves (team accuracy vs. training episodes, mean over seeds) on top and
    attribution accuracy (mean ± std over seeds) below, one column per env. Returns None
    if matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    envs, methods = result.envs, result.methods
    summary = {(e["env"], e["method"]): e for e in result.summary()}
    scored = any(not math.isnan(e["attr_mean"]) for e in summary.values())
    rows = 2 if scored else 1  # the LLM tier has no attribution scores
    fig, axes = plt.subplots(
        rows, len(envs), figsize=(5 * len(envs), 3.75 * rows + 0.5), squeeze=False
    )
    batch = result.episodes_per_update
    colors = plt.get_cmap("tab10")
    for col, env in enumerate(envs):
        ax = axes[0, col]
        for k, method in enumerate(methods):
            curves = [c for (e, m, _), c in result.curves.items() if e == env and m == method]
            if not curves:
                continue
            # under a token budget seeds stop at different steps: the mean covers the
            # steps every seed trained, and the legend says so
            common = min(len(c) for c in curves)
            mean = np.mean(np.array([c[:common] for c in curves]), axis=0)
            x = batch * np.arange(1, len(mean) + 1)
            cut = "" if all(len(c) == common for c in curves) else f" (first {common} updates)"
            ax.plot(x, _smooth(mean), label=method + cut, color=colors(k % 10))
        ax.set_title(f"{env}: team accuracy while training")
        ax.set_xlabel("episodes")
        ax.set_ylabel("accuracy (smoothed)")
        ax.grid(alpha=0.3)
        if not scored:
            continue
        ax = axes[1, col]
        x = np.arange(len(methods))
        for offset, metric, hatch in ((-0.2, "attr", ""), (0.2, "attr_within", "//")):
            means = [summary[(env, m)][f"{metric}_mean"] for m in methods]
            stds = [summary[(env, m)][f"{metric}_std"] for m in methods]
            ax.bar(
                x + offset,
                np.nan_to_num(means),
                width=0.4,
                yerr=stds,
                hatch=hatch,
                label=metric,
                color=[colors(k % 10) for k in range(len(methods))],
                edgecolor="black",
                linewidth=0.3,
            )
        ax.set_xticks(x, methods, rotation=45, ha="right", fontsize=8)
        ax.axhline(0, color="black", lw=0.5)
        ax.set_ylim(-1, 1)
        ax.set_title(f"{env}: attribution (Spearman vs. true contribution)")
        ax.legend(fontsize=7, loc="lower left")
    axes[0, -1].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"credit benchmark, {result.tier} tier ({len(result.seeds)} seeds)")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _smooth(y: np.ndarray, width: int = 5) -> np.ndarray:
    if len(y) < width:
        return y
    kernel = np.ones(width) / width
    padded = np.concatenate([np.full(width // 2, y[0]), y, np.full(width - 1 - width // 2, y[-1])])
    return np.convolve(padded, kernel, mode="valid")
