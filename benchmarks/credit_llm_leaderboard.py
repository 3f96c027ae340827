"""The credit benchmark's LLM-tier leaderboard: every method on every task, and across tasks.

The per-task pages (``docs/credit_llm_<family>.md``, ``marti report``) pair two methods on one
task; this puts the tasks side by side, from the same committed run digests, in the form of
the fast tier's leaderboard (:mod:`marti_env.credit.bench.leaderboard`):

* **Per task and method**: seeds, the final held-out team accuracy's mean with a bootstrap CI
  (:func:`marti_env.stats.mean_ci`), and against the baseline method on the same seeds
  and held-out problems (:func:`marti_trainer.report.pair_versus` refuses other problems):
  the paired difference with its CI, wins/ties/losses and verdict
  (:func:`marti_env.stats.paired_difference`), and the paired difference of the mean
  training outcome (:attr:`marti_trainer.report.RunRecord.training_outcome`: how soon,
  where the held-out accuracy says where the runs ended).
* **Across tasks**, per method: the interquartile mean of the final accuracy over all its
  runs, with a stratified-bootstrap CI (each task's seeds resampled within it:
  :func:`marti_env.stats.iqm_ci`), and P(method > baseline), the probability that a run of
  the method beats a run of the baseline on a task, averaged over the tasks that have both,
  with its stratified-bootstrap CI (:func:`marti_env.stats.probability_of_improvement_ci`;
  Agarwal et al. 2021, arXiv 2108.13264).
* **Cannot be told apart**: the cells whose verdict is "indistinguishable" or "negligible"
  (the fast tier's rule).

A task is a folder of run digests (``benchmarks/run_llm_credit.sh`` writes one per family),
named on the command line; a method is a run's ``env.credit``::

    python benchmarks/credit_llm_leaderboard.py \\
        gate=docs/results/digests/credit_llm_gate \\
        split-sum-d4=docs/results/digests/credit_llm_split_sum_d4 --baseline none
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from marti_env.stats import iqm_ci, mean_ci, paired_difference, probability_of_improvement_ci
from marti_trainer.report import (
    Group,
    RunRecord,
    find_runs,
    group_runs,
    pair_versus,
    read_run,
    training_pairs,
)

METHOD_KEY = "env.credit"
T = TypeVar("T")


def _method(group: Group) -> str:
    methods = {r.config.get(METHOD_KEY) for r in group.runs}
    if len(methods) != 1 or None in methods:
        raise ValueError(f"{group.runs[0].path}: a run without one {METHOD_KEY}")
    return str(methods.pop())


def read_task(name: str, folder: str | Path) -> dict[str, Group]:
    """The finished runs under ``folder``, grouped by config: method -> its group.

    Raises:
        ValueError: no finished run, or two configs of one method (naming the task and
            method: a task folder holds one config per method).
    """
    runs = [read_run(p) for p in find_runs([folder])]
    finished = [r for r in runs if r.counted]
    if not finished:
        raise ValueError(f"task {name!r} ({folder}): no finished run with a final evaluation")
    out: dict[str, Group] = {}
    for g in group_runs(finished):
        method = _method(g)
        if method in out:
            raise ValueError(
                f"task {name!r} ({folder}): two configs of method {method!r} "
                f"({out[method].label}; {g.label}): keep one per folder"
            )
        out[method] = g
    return out


def render(
    tasks: dict[str, dict[str, Group]],
    baseline: str = "none",
    confidence: float = 0.95,
    seed: int = 0,
) -> str:
    """The leaderboard's markdown (see the module docstring) for ``tasks``: task name ->
    method -> group, the baseline method in every task.

    Raises:
        ValueError: a task without the baseline method (naming it), or whose runs of one seed
            were evaluated on different held-out problems.
    """
    level = f"{100 * confidence:g}%"
    for name, methods in tasks.items():
        if baseline not in methods:
            raise ValueError(f"task {name!r} has no {baseline!r} runs (methods: {sorted(methods)})")
    lines = [
        f"| task | method | seeds | final accuracy, mean [{level} CI] | - {baseline} "
        f"[{level} CI] | W/T/L | verdict | training outcome - {baseline} [{level} CI] |",
        "|---|---|---|---|---|---|---|---|",
    ]
    apart: list[str] = []
    finals: dict[str, dict[str, list[float]]] = {}  # method -> task -> finals
    for name, methods in tasks.items():
        base = methods[baseline]
        pairs = {
            _method(p.group): p
            for p in pair_versus(list(methods.values()), f"{METHOD_KEY}={baseline}")
        }
        for method, group in _baseline_first(methods, baseline):
            acc = {r.seed: r.final_accuracy for r in group.runs}
            finals.setdefault(method, {})[name] = list(acc.values())
            m = mean_ci(list(acc.values()), confidence, seed).format(1, 100)
            if method == baseline:
                lines.append(f"| {name} | {method} | {len(acc)} | {m} | | | | |")
                continue
            seeds = pairs[method].seeds
            if not seeds:
                lines.append(f"| {name} | {method} | {len(acc)} | {m} | n/a | | no common "
                             "seeds | |")  # fmt: skip
                continue
            mine, theirs = group.by_seed(), base.by_seed()
            d = paired_difference(
                {s: mine[s].final_accuracy for s in seeds},
                {s: theirs[s].final_accuracy for s in seeds},
                confidence, seed, labels=(method, baseline),
            )  # fmt: skip
            lines.append(
                f"| {name} | {method} | {len(acc)} | {m} | "
                f"{d.difference.format(1, 100, signed=True)} | {d.wins}/{d.ties}/{d.losses} | "
                f"{d.verdict} | {_training(mine, theirs, seeds, confidence, seed)} |"
            )
            if d.verdict.startswith(("indistinguishable", "negligible")):  # as the fast tier's
                apart.append(f"{method} on {name} ({len(seeds)} paired seeds)")
    lines += [
        "",
        f"Across tasks (IQM over all runs, stratified bootstrap over each task's seeds; "
        f"P(> {baseline}) averaged over the tasks that have both):",
        "",
        f"| method | tasks | runs | IQM of final accuracy [{level} CI] | "
        f"P(method > {baseline}) [{level} CI] |",
        "|---|---|---|---|---|",
    ]
    for method, by_task in _baseline_first(finals, baseline):
        q = iqm_ci(by_task, confidence, seed).format(1, 100)
        poi = ""
        if method != baseline:
            base = {t: finals[baseline][t] for t in by_task}
            poi = probability_of_improvement_ci(by_task, base, confidence, seed).format(2)
        runs = sum(map(len, by_task.values()))
        lines.append(f"| {method} | {len(by_task)} | {runs} | {q} | {poi} |")
    lines += ["", f"Not told apart from {baseline} at {level}: "
              + ("; ".join(apart) if apart else "none") + "."]  # fmt: skip
    return "\n".join(lines) + "\n"


def _baseline_first(by_method: dict[str, T], baseline: str) -> list[tuple[str, T]]:
    """``by_method``'s items, the baseline's first and the others by name."""
    return sorted(by_method.items(), key=lambda m: (m[0] != baseline, m[0]))


def _training(
    mine: dict[int, RunRecord],
    theirs: dict[int, RunRecord],
    seeds: Sequence[int],
    confidence: float,
    seed: int,
) -> str:
    """The paired difference of the mean training outcome with W/T/L, on the seeds whose two
    runs can be paired on it (:func:`marti_trainer.report.training_pairs`); the others are
    named with the reason, and without any it is n/a."""
    same, why = training_pairs(seeds, mine, theirs)
    if not same:
        return f"n/a ({why})"
    d = paired_difference(
        {s: mine[s].training_outcome for s in same},
        {s: theirs[s].training_outcome for s in same},
        confidence, seed,
    )  # fmt: skip
    out = f"{d.difference.format(1, 100, signed=True)}, {d.wins}/{d.ties}/{d.losses}"
    return f"{out} ({len(same)} of {len(seeds)} seeds; {why})" if why else out


def _task_spec(spec: str) -> tuple[str, str]:
    name, sep, folder = spec.partition("=")
    if not sep or not name.strip() or not folder.strip():
        raise argparse.ArgumentTypeError(f"{spec!r}: expected NAME=FOLDER")
    return name.strip(), folder.strip()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "tasks",
        nargs="+",
        type=_task_spec,
        metavar="NAME=FOLDER",
        help="a task's name and its folder of run digests (or run directories)",
    )
    ap.add_argument("--baseline", default="none", help="the method the others are paired with")
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--seed", type=int, default=0, help="the bootstrap's seed")
    args = ap.parse_args(argv)
    names = [n for n, _ in args.tasks]
    if len(set(names)) != len(names):
        ap.error(f"task names must differ: {names}")
    tasks = {name: read_task(name, folder) for name, folder in args.tasks}
    print(render(tasks, args.baseline, args.confidence, args.seed), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
