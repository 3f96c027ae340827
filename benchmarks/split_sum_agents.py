"""What each role of a split-sum team does, from LLM-tier runs' held-out evaluations.

The team outcome says only whether the sum was right; this says who broke it. For every
evaluation a run saved (``eval/step_*.jsonl``), each agent's boxed answer is scored against
its own job with the env's rule (:func:`marti_env.workflows.split_sum.local_correct`:
solver ``i`` boxes its part ``a_i``; a distractor boxes 0 or nothing), and per role the
fraction of (problem, agent) pairs that did their job is kept, with how often the role
boxed a number at all. Collect from run folders, then render::

    python benchmarks/split_sum_agents.py collect runs/credit_llm_split_sum/runs/* \\
        --out docs/results/credit_llm_split_sum_agents.json
    python benchmarks/split_sum_agents.py render docs/results/credit_llm_split_sum_agents.json

``collect`` reads each run's ``config.yaml`` (its credit method, seed and split-sum size)
and keeps small counts only; ``render`` prints one markdown row per (method, seed, step).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from marti_env.tasks.task import Task
from marti_env.workflows.split_sum import local_correct, parse_int, split_instance

ROLES = ("solver", "distractor")


def role_counts(records: list[dict[str, Any]], kwargs: dict[str, int]) -> dict[str, Any]:
    """Per role: (problem, agent) pairs, how many did their job and how many boxed a number;
    and the team's correct problems. ``kwargs`` are the run's split-sum size
    (``num_solvers``, ``num_distractors``, ``difficulty``)."""
    out: dict[str, Any] = {r: {"pairs": 0, "local": 0, "boxed": 0} for r in ROLES}
    out["problems"] = len(records)
    out["team"] = 0
    for rec in records:
        task = Task(**{k: rec["task"][k] for k in ("id", "prompt", "answer", "source")})
        instance = split_instance(
            task, kwargs["num_solvers"], kwargs["num_distractors"], kwargs.get("difficulty", 0)
        )
        answers = {t["agent"]: t.get("answer") for t in rec["turns"]}
        for agent, ok in local_correct(instance, answers).items():
            counts = out[agent.rpartition("_")[0]]
            counts["pairs"] += 1
            counts["local"] += int(ok)
            counts["boxed"] += int(parse_int(answers[agent]) is not None)
        out["team"] += int(rec["outcome"] == 1.0)
    return out


def collect(run_dirs: list[Path]) -> dict[str, Any]:
    """Every evaluation of every split-sum run, reduced to :func:`role_counts`.

    Raises:
        ValueError: a folder without ``config.yaml`` or one whose env is not split-sum-v0
            (naming the folder).
    """
    runs = []
    for run in sorted(run_dirs):
        config_path = run / "config.yaml"
        if not config_path.is_file():
            raise ValueError(f"{run}: no config.yaml (not a run folder)")
        cfg = yaml.safe_load(config_path.read_text(encoding="utf-8"))
        if cfg["env"]["id"] != "split-sum-v0":
            raise ValueError(f"{run}: env {cfg['env']['id']!r}, not split-sum-v0")
        kwargs = {k: cfg["env"]["kwargs"].get(k, d) for k, d in
                  (("num_solvers", 4), ("num_distractors", 2), ("difficulty", 0))}  # fmt: skip
        steps = {}
        for path in sorted((run / "eval").glob("step_*.jsonl")):
            with path.open(encoding="utf-8") as f:
                records = [json.loads(line) for line in f if line.strip()]
            steps[str(int(path.stem.split("_")[1]))] = role_counts(records, kwargs)
        runs.append({"run": run.name, "method": cfg["env"]["credit"], "seed": cfg["seed"],
                     "split_sum": kwargs, "steps": steps})  # fmt: skip
    return {"runs": runs}


def _pct(num: int, den: int) -> str:
    return "n/a" if den == 0 else f"{100 * num / den:.1f}"


def render(data: dict[str, Any]) -> str:
    """A markdown table: per run and evaluated step, team accuracy and per role the percent
    of agents that did their job (boxed a number)."""
    lines = [
        "| method | seed | step | team correct | solvers: own part boxed (boxed a number) "
        "| distractors: 0 or nothing (boxed a number) |",
        "|---|---|---|---|---|---|",
    ]
    by: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for run in data["runs"]:
        by[(run["method"], run["seed"])].append(run)
    for (method, seed), runs in sorted(by.items()):
        for run in runs:
            for step, c in sorted(run["steps"].items(), key=lambda kv: int(kv[0])):
                s, d = c["solver"], c["distractor"]
                lines.append(
                    f"| {method} | {seed} | {step} | {_pct(c['team'], c['problems'])} "
                    f"| {_pct(s['local'], s['pairs'])} ({_pct(s['boxed'], s['pairs'])}) "
                    f"| {_pct(d['local'], d['pairs'])} ({_pct(d['boxed'], d['pairs'])}) |"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="reduce run folders to per-role counts")
    c.add_argument("runs", nargs="+", type=Path)
    c.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("render", help="print the markdown table of a collected file")
    r.add_argument("path", type=Path)
    args = parser.parse_args(argv)
    if args.cmd == "collect":
        args.out.write_text(json.dumps(collect(args.runs), indent=1) + "\n", encoding="utf-8")
    else:
        print(render(json.loads(args.path.read_text(encoding="utf-8"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
