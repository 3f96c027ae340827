"""PNG plots of a run: reward, held-out accuracy and KL per agent (from ``metrics.jsonl``)."""

from __future__ import annotations

from pathlib import Path

from marti_trainer.metrics import read_metrics

__all__ = ["plot_run"]


def _series(history: list[dict], key: str) -> tuple[list[int], list[float]]:
    rows = [(h["step"], h[key]) for h in history if key in h]
    return [r[0] for r in rows], [r[1] for r in rows]


def _panel(ax, history: list[dict], keys: list[str], label_of, title: str, ylabel: str) -> None:
    for key in keys:
        steps, values = _series(history, key)
        if steps:
            ax.plot(steps, values, marker="o", markersize=3, label=label_of(key))
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


_NAMES = {"eval/accuracy": "team (final answer)", "eval/boxed_rate": "boxed rate"}


def _last_round_keys(keys: list[str]) -> list[str]:
    """``eval/<agent>/round<r>_accuracy`` of each agent's last round."""
    last: dict[str, tuple[int, str]] = {}
    for k in keys:
        parts = k.split("/")
        if len(parts) == 3 and parts[0] == "eval" and parts[2].startswith("round"):
            r = int(parts[2].removeprefix("round").split("_")[0])
            last[parts[1]] = max(last.get(parts[1], (r, k)), (r, k))
    return [last[a][1] for a in sorted(last)]


def plot_run(run_dir: str | Path) -> list[Path]:
    """Write ``reward.png``, ``accuracy.png`` and ``kl.png`` into ``run_dir/plots``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    history = read_metrics(run_dir)
    keys = sorted({k for h in history for k in h})
    out_dir = run_dir / "plots"
    out_dir.mkdir(exist_ok=True)
    panels = {
        "reward": (
            [k for k in keys if k.startswith("rollout/") and k.endswith("/reward")]
            + ["rollout/outcome"],
            lambda k: "team outcome" if k == "rollout/outcome" else k.split("/")[1],
            "Training reward per agent",
            "mean reward",
        ),
        "accuracy": (
            ["eval/accuracy", "eval/boxed_rate", *_last_round_keys(keys)],
            lambda k: _NAMES.get(k, k.split("/")[1]),
            "Held-out greedy accuracy",
            "fraction",
        ),
        "kl": (
            [k for k in keys if k.startswith("kl/")],
            lambda k: k.removeprefix("kl/"),
            "KL(current || initial policy) per agent",
            "KL (nats/token)",
        ),
    }
    written = []
    for name, (panel_keys, label_of, title, ylabel) in panels.items():
        fig, ax = plt.subplots(figsize=(6, 4))
        _panel(ax, history, panel_keys, label_of, title, ylabel)
        fig.tight_layout()
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
