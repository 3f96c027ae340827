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

``collect`` reads each run's ``config.yaml`` (its method label ``exp_name``, seed and the
env's kwargs) and keeps small counts only; ``render`` prints one markdown row per (method,
seed, step).
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
from marti_env.workflows.split_sum import SplitSum, local_correct, parse_int

ROLES = ("solver", "distractor")


def role_counts(records: list[dict[str, Any]], workflow: SplitSum, where: str) -> dict[str, Any]:
    """Per role: (problem, agent) pairs, how many did their job and how many boxed a number;
    and the problems whose team outcome is 1. ``workflow`` is the run's
    :class:`~marti_env.workflows.split_sum.SplitSum` (its size and difficulty); ``where``
    names the records' file in errors.

    Raises:
        ValueError: a record without a turn for each of the workflow's agents, or a turn
            without an ``answer`` field (naming ``where:line``).
    """
    out: dict[str, Any] = {r: {"pairs": 0, "local": 0, "boxed": 0} for r in ROLES}
    out["problems"] = len(records)
    out["team"] = 0
    for line, rec in enumerate(records, 1):
        try:
            answers = {t["agent"]: t["answer"] for t in rec["turns"]}
            task = Task(**{k: rec["task"][k] for k in ("id", "prompt", "answer", "source")})
        except KeyError as e:
            raise ValueError(f"{where}:{line}: no {e} field in the episode record") from None
        if sorted(answers) != sorted(workflow.agents) or len(rec["turns"]) != len(answers):
            raise ValueError(
                f"{where}:{line}: turns by {[t['agent'] for t in rec['turns']]}, expected one "
                f"each by {list(workflow.agents)} (is the run's split-sum size the config's?)"
            )
        for agent, ok in local_correct(workflow.instance(task), answers).items():
            counts = out[workflow.role(agent)]
            counts["pairs"] += 1
            counts["local"] += int(ok)
            counts["boxed"] += int(parse_int(answers[agent]) is not None)
        out["team"] += int(rec["outcome"] == 1.0)
    return out


def collect(run_dirs: list[Path]) -> dict[str, Any]:
    """Every evaluation of every split-sum run, reduced to :func:`role_counts`; a run is
    labelled by its ``exp_name`` (the benchmark's method label, options included) and seed.

    Raises:
        ValueError: a folder without ``config.yaml`` or one whose env is not split-sum-v0
            (naming the folder), or records that do not fit the run's workflow.
    """
    import marti_env

    runs = []
    for run in sorted(run_dirs):
        config_path = run / "config.yaml"
        if not config_path.is_file():
            raise ValueError(f"{run}: no config.yaml (not a run folder)")
        cfg = yaml.safe_load(config_path.read_text(encoding="utf-8"))
        if cfg["env"]["id"] != "split-sum-v0":
            raise ValueError(f"{run}: env {cfg['env']['id']!r}, not split-sum-v0")
        workflow = marti_env.make("split-sum-v0", **cfg["env"]["kwargs"]).workflow
        steps = {}
        for path in sorted((run / "eval").glob("step_*.jsonl")):
            with path.open(encoding="utf-8") as f:
                records = [json.loads(line) for line in f if line.strip()]
            steps[str(int(path.stem.split("_")[1]))] = role_counts(records, workflow, str(path))
        size = {"num_solvers": workflow.num_solvers, "num_distractors": workflow.num_distractors,
                "difficulty": workflow.difficulty}  # fmt: skip
        runs.append({"run": run.name, "method": cfg["exp_name"], "seed": cfg["seed"],
                     "split_sum": size, "steps": steps})  # fmt: skip
    return {"runs": runs}


def _pct(num: int, den: int) -> str:
    return "n/a" if den == 0 else f"{100 * num / den:.1f}"


def render(data: dict[str, Any]) -> str:
    """A markdown table: per run and evaluated step, the percent of problems with team
    outcome 1 (the held-out accuracy) and per role the percent of agents that did their job
    (and that boxed a number)."""
    lines = [
        "| method | seed | step | team outcome 1 | solvers: own part boxed (boxed a number) "
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
