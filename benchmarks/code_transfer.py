"""Does the code baseline transfer to kinds of task it never trained on?

``baselines/smollm2/135m_code_single.yaml`` trains on levels 2-3 of the code generator; this
evaluates the base model and each trained seed, greedily, on levels 1 and 4 (kinds of
function it never saw: one-expression tasks, small algorithms), and renders the table in
docs/code.md from the result file.

    python benchmarks/code_transfer.py --sweep runs/sweeps/code_single \\
        --out docs/results/code_transfer.json          # runs marti eval (minutes per model)
    python benchmarks/code_transfer.py --render docs/results/code_transfer.json

The result file keeps, per model, each task's outcome (1: the program passes every hidden
test) and its kind (the function's name without its random suffix).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

DATA = "code_gen:test:1,4"
LIMIT = 200
EVAL = ["--data", DATA, "--limit", str(LIMIT), "--no-progress"]
BASE = [
    "--env", "single-v0", "--env-arg", "reward=code", "--env-arg", "prompts=code", "-k", "1",
    "--temperature", "0", "--max-tokens", "160", "--mode", "sync", "--batch-size", "48",
]  # fmt: skip
"""The base model's settings: the trained runs' own evaluation settings (greedy, 160 tokens)."""


def kind_of(task_id: str, reference: str) -> str:
    """``"L4:fibonacci"``: the level and the reference function's name without the random
    suffix the generator adds (``times_7`` -> ``times``, ``count_e`` -> ``count``)."""
    level = task_id.split("/")[2]
    match = re.search(r"def (\w+)", reference)
    name = match.group(1) if match else "?"
    name = re.sub(r"_(\d+|[a-z])$", "", name)
    return f"{level}:{name}"


def compact(eval_json: dict) -> dict:
    """The parts of a ``marti eval --out`` file the table needs."""
    return {
        "model": eval_json["model"],
        "tasks": {
            t["task_id"]: {"kind": kind_of(t["task_id"], t["answer"]), "outcome": t["outcomes"][0]}
            for t in eval_json["per_task"]
        },
    }


def run(sweep: Path, out: Path, marti: str) -> None:
    models = {"base": [*BASE]}
    for cell in sorted(p for p in sweep.iterdir() if (p / "summary.json").is_file()):
        models[cell.name] = ["--checkpoint", str(cell)]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in models.items():
            path = Path(tmp) / f"{name}.json"
            subprocess.run([marti, "eval", *args, *EVAL, "--out", str(path)], check=True)
            results[name] = compact(json.loads(path.read_text()))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"data": DATA, "limit": LIMIT, "models": results}, indent=1) + "\n")


def render(path: Path) -> str:
    """The markdown table: per kind, tasks solved by each model; then per level and all."""
    data = json.loads(path.read_text())
    models = data["models"]
    names = list(models)
    kinds = sorted({t["kind"] for m in models.values() for t in m["tasks"].values()})

    def solved(model: str, keep) -> str:
        tasks = [t for t in models[model]["tasks"].values() if keep(t["kind"])]
        return f"{int(sum(t['outcome'] for t in tasks))}/{len(tasks)}"

    lines = [
        f"Greedy, on the first {data['limit']} tasks of `{data['data']}` (levels 1 and 4: kinds "
        "of function the baseline never trains on); tasks whose program passes every hidden "
        "test, by kind:",
        "",
        "| kind | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]

    def row(label: str, keep) -> str:
        return f"| {label} | " + " | ".join(solved(m, keep) for m in names) + " |"

    for kind in kinds:
        lines.append(row(kind, lambda k, kind=kind: k == kind))
    for level in sorted({k.split(":")[0] for k in kinds}):
        lines.append(row(f"**{level}**", lambda k, level=level: k.startswith(level + ":")))
    lines.append(row("**all**", lambda k: True))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sweep", type=Path, help="the code baseline's sweep folder")
    parser.add_argument("--out", type=Path, default=Path("docs/results/code_transfer.json"))
    parser.add_argument("--render", type=Path, help="print the table of a result file")
    parser.add_argument(
        "--from-evals", type=Path, help="build the result file from marti eval --out files "
        "(base.json, seed=N.json) in this folder instead of running them",
    )  # fmt: skip
    parser.add_argument("--marti", default=str(Path(sys.executable).with_name("marti")))
    args = parser.parse_args(argv)
    if args.render:
        sys.stdout.write(render(args.render))
    elif args.from_evals:
        results = {
            p.stem: compact(json.loads(p.read_text()))
            for p in sorted(
                args.from_evals.glob("*.json"), key=lambda p: (p.stem != "base", p.stem)
            )
        }
        args.out.write_text(
            json.dumps({"data": DATA, "limit": LIMIT, "models": results}, indent=1) + "\n"
        )
    elif args.sweep:
        run(args.sweep, args.out, args.marti)
    else:
        parser.error("give --sweep, --from-evals or --render")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
