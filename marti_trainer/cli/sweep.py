"""``marti sweep CONFIG --seeds 0-9 --grid key=v1,v2 ...``: one config over seeds and a grid.

Examples::

    marti sweep baselines/quickstart.yaml --seeds 0-4 --grid algorithm.group_by=agent,role
    marti sweep baselines/quickstart.yaml --seeds 0-9 --grid env.credit=none,quality \\
        --set total_steps=10 --out runs/sweep_credit
    marti sweep baselines/quickstart.yaml --seeds 0-4 --backend ray   # cells as Ray tasks
    marti sweep baselines/quickstart.yaml --seeds 0-4 --list          # the plan, run nothing

Every grid combination x seed is a cell, run in ``OUT/<overrides>__seed=<n>`` by a fresh
``marti train`` process (``--backend local``, one after another) or a Ray task
(``--backend ray``). Starting the same command again reuses finished cells and resumes
unfinished ones from their checkpoint (set ``log.save_every`` to checkpoint often); a
cell whose config changed is refused, naming the keys. Then: ``marti report OUT``.
See docs/evidence.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# An import inside a function keeps a heavy dependency (torch, transformers, vllm, ray)
# lazy: building the parser imports none, so `marti envs` answers instantly.

__all__ = ["add_sweep_parser", "run_sweep_command"]


def add_sweep_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``sweep`` subcommand."""
    parser = subparsers.add_parser(
        "sweep",
        help="run a training config over seeds and a grid of overrides (resumable)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", help="YAML training config, e.g. baselines/quickstart.yaml")
    parser.add_argument("--seeds", default="0", help="seeds: 0-9, 0,1,2 or 0-4,7 (default 0)")
    parser.add_argument(
        "--grid", action="append", default=[], metavar="KEY=V1,V2",
        help="a config key and its values (repeatable: the cells are every combination)",
    )  # fmt: skip
    parser.add_argument(
        "--set", dest="fixed", action="append", default=[], metavar="KEY=VALUE",
        help="an override shared by every cell, e.g. total_steps=6 (repeatable)",
    )  # fmt: skip
    parser.add_argument("--out", default=None, help="sweep folder (default runs/sweep__<config>)")
    parser.add_argument("--backend", choices=("local", "ray"), default="local")
    parser.add_argument(
        "--ray-address",
        default=None,
        help="Ray cluster to join (default $RAY_ADDRESS or a new local one)",
    )
    parser.add_argument("--cpus-per-cell", type=float, default=1.0, help="Ray CPUs per cell (1)")
    parser.add_argument(
        "--keep-checkpoints", choices=("all", "last", "none"), default="all",
        help="what a finished cell keeps of its checkpoints (they are only for resuming "
        "and later evaluation; ~1.5 GiB each with SmolLM2-135M): all (default), the last, none",
    )  # fmt: skip
    parser.add_argument("--list", action="store_true", help="print the cells and their state only")
    parser.set_defaults(func=run_sweep_command)
    return parser


def run_sweep_command(args: argparse.Namespace) -> int:
    """Plan, check, run; prints one line per cell and where the results are."""
    from marti_trainer.sweep import (
        CellChanged,
        cell_status,
        parse_grid,
        parse_seeds,
        plan_sweep,
        run_sweep,
        write_sweep_record,
    )

    if not Path(args.config).is_file():
        raise FileNotFoundError(f"{args.config}: no such config file")
    if args.cpus_per_cell <= 0:
        raise ValueError(f"--cpus-per-cell must be > 0, got {args.cpus_per_cell}")
    seeds, grid = parse_seeds(args.seeds), parse_grid(args.grid)
    out = Path(args.out or f"runs/sweep__{Path(args.config).stem}")
    cells = plan_sweep(args.config, seeds, grid, out, args.fixed)
    if args.list:
        for c in cells:
            try:
                state = cell_status(c)
            except CellChanged as e:
                state = f"changed: {e}"
            print(f"{c.run_dir}  {state}")
        return 0
    print(f"sweep: {len(cells)} cells in {out} (backend {args.backend})", file=sys.stderr)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    outcomes = run_sweep(
        cells, args.backend, log, args.ray_address, args.cpus_per_cell, args.keep_checkpoints
    )
    write_sweep_record(out, args.config, seeds, grid, args.fixed, outcomes)
    counts = {s: sum(o.status == s for o in outcomes) for s in ("reused", "trained", "resumed")}
    bad = [o for o in outcomes if o.status in ("failed", "stopped")]
    left = len(cells) - len(outcomes)
    print(
        f"sweep: {counts['trained']} trained, {counts['resumed']} resumed, {counts['reused']} "
        f"reused, {len(bad)} failed or stopped, {left} not started; report: marti report {out}"
    )
    if bad or left:
        print("run the same command again to continue the unfinished cells", file=sys.stderr)
        return 1
    return 0
