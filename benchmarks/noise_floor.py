"""The evaluation's noise floor: one frozen model evaluated twice with different sampling seeds.

Any difference between the two evaluations is noise (the weights, problems and settings are
the same), so it is the smallest effect one such evaluation can show. Measure with two
``marti eval`` runs that differ only in ``--seed``, then collect and render::

    marti eval --env single-v0 --data arithmetic --levels 1,2 --limit 1000 -k 4 \\
        --temperature 0.7 --max-tokens 32 --mode sync --seed 0 --out s0.json
    marti eval ... --seed 1 --out s1.json
    python benchmarks/noise_floor.py collect s0.json s1.json --out docs/results/noise_floor.json
    python benchmarks/noise_floor.py render docs/results/noise_floor.json

``collect`` keeps each problem's outcomes (one ``0``/``1`` per episode) and the settings;
``render`` recomputes every figure from them: per seed, single-episode accuracy (episode 0,
with its Wilson interval) and avg@k; between seeds, the paired difference over problems
(:func:`marti_env.stats.paired_difference`) for one episode and for avg@k; and the spread of
the ``2k`` one-episode evaluations (sample standard deviation against the binomial
``sqrt(p (1 - p) / n)``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from marti_env.stats import paired_difference, wilson_interval

_KEEP = ("env_id", "model", "num_tasks", "k", "seed", "sampling", "wall_s")


def collect(paths: list[Path]) -> dict[str, Any]:
    """The two evaluations, reduced to settings and per-problem outcome strings.

    Raises:
        ValueError: not two files, or files that differ in anything but the seed (names the
            field), or problems in another order.
    """
    if len(paths) != 2:
        raise ValueError(f"give two marti eval --out files, got {len(paths)}")
    runs = [json.loads(p.read_text()) for p in paths]
    for key in ("env_id", "model", "num_tasks", "k"):
        if runs[0][key] != runs[1][key]:
            raise ValueError(f"{key} differs: {runs[0][key]!r} ({paths[0]}) vs {runs[1][key]!r}")
    ids = [[t["task_id"] for t in r["per_task"]] for r in runs]
    if ids[0] != ids[1]:
        raise ValueError(f"{paths[0]} and {paths[1]} evaluate different problems")
    if runs[0]["seed"] == runs[1]["seed"]:
        raise ValueError(f"both files use seed {runs[0]['seed']}: a noise floor needs two seeds")
    return {
        "task_ids": ids[0],
        "runs": [
            {
                **{k: r[k] for k in _KEEP},
                "outcomes": ["".join(str(int(o)) for o in t["outcomes"]) for t in r["per_task"]],
            }
            for r in runs
        ],
    }


def render(data: dict[str, Any]) -> str:
    """A markdown table: per seed, then the paired differences between the seeds."""
    runs = data["runs"]
    k, n = runs[0]["k"], runs[0]["num_tasks"]
    first = [[int(o[0]) for o in r["outcomes"]] for r in runs]
    avg = [[sum(map(int, o)) / k for o in r["outcomes"]] for r in runs]
    s = runs[0]["sampling"]
    lines = [
        f"{runs[0]['model']} on {runs[0]['env_id']}, {n} problems, k = {k} episodes each, "
        f"temperature {s['temperature']}, {s['max_tokens']} new tokens; seeds "
        f"{runs[0]['seed']} and {runs[1]['seed']}.",
        "",
        "| seed | accuracy, one episode (95% Wilson CI) | avg@k |",
        "| --- | --- | --- |",
    ]
    for r, one, a in zip(runs, first, avg, strict=True):
        w = wilson_interval(sum(one), n)
        lines.append(
            f"| {r['seed']} | {100 * w.mean:.1f} [{100 * w.low:.1f}, {100 * w.high:.1f}] | "
            f"{100 * sum(a) / n:.2f} |"
        )
    lines += ["", "| between the seeds | difference, points (95% CI over problems) | verdict |",
              "| --- | --- | --- |"]  # fmt: skip
    for name, (x, y) in (("one episode", first), (f"avg@{k}", avg)):
        d = paired_difference(x, y, labels=(f"seed {runs[0]['seed']}", f"seed {runs[1]['seed']}"))
        e = d.difference
        lines.append(
            f"| {name} | {100 * e.mean:+.2f} [{100 * e.low:+.2f}, {100 * e.high:+.2f}] | "
            f"{d.verdict} |"
        )
    per_episode = [
        sum(int(o[i]) for o in r["outcomes"]) / n for r in runs for i in range(k)
    ]  # each episode index of each seed is a full one-episode evaluation
    mean = sum(per_episode) / len(per_episode)
    sd = (sum((x - mean) ** 2 for x in per_episode) / (len(per_episode) - 1)) ** 0.5
    lines += [
        "",
        f"The {len(per_episode)} one-episode evaluations (episode i of either seed) range from "
        f"{100 * min(per_episode):.1f}% to {100 * max(per_episode):.1f}% (standard deviation "
        f"{100 * sd:.2f} points; binomial expectation "
        f"{100 * (mean * (1 - mean) / n) ** 0.5:.2f}).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="two marti eval --out files -> one result file")
    c.add_argument("files", nargs="+", type=Path)
    c.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("render", help="the markdown table of a result file")
    r.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    if args.command == "collect":
        args.out.write_text(json.dumps(collect(args.files), indent=0) + "\n")
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(render(json.loads(args.file.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
