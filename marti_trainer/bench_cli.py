"""``marti bench credit``: benchmark credit-assignment methods across envs and seeds.

    marti bench credit --methods none,quality,shapley --envs mad-v0,moa-v0,chain-v0 \\
        --seeds 0,1,2 --out runs/bench_credit

Tiers:

* ``fast`` (default): simulated agents of known skill and persuadability, trained by
  REINFORCE through the real envs (:mod:`marti_env.credit.bench`); seconds per method and
  env on a CPU, no LLM. Scores attribution accuracy (rank correlation of each agent's
  credit with its true marginal contribution) and team accuracy after training.
* ``llm``: the real trainer with the default model on arithmetic tasks at a fixed budget.
  Not available until the trainer (issue 5) lands.

A method is a registered name, optionally with options: ``quality:alpha=0.3:scope=agent``
(the whole string is its label in the table). ``--import my_credit.py`` (a file or a
module name, repeatable) runs a file that registers new methods before the benchmark, so
they can be named in ``--methods``. An env may carry ``make`` overrides the same way:
``mad-v0:num_agents=4``.

Outputs in ``--out``: ``results.csv`` (one row per env x method x seed), ``summary.csv``
(mean and std over seeds), ``results.json`` (config, rows, summary, learning curves),
``table.txt`` and ``credit_bench.png``.

Only numpy is imported when the fast tier runs; matplotlib only to draw the plot.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_ENVS = "mad-v0,moa-v0,chain-v0"


def add_bench_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``bench`` (with its ``credit`` subcommand) to a ``marti`` subparsers object.

    The ``credit`` parser sets ``func`` (returns an exit code); errors in the arguments
    raise ``ValueError`` or ``FileNotFoundError`` with a message naming the bad value.
    """
    bench = subparsers.add_parser("bench", help="benchmarks (credit assignment)")
    sub = bench.add_subparsers(dest="bench_command", required=True)
    credit = sub.add_parser(
        "credit",
        help="compare credit-assignment methods (methods x envs x seeds)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_credit_arguments(credit)
    credit.set_defaults(func=run_credit_bench)
    return bench


def add_credit_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``marti bench credit`` (shared with benchmarks/bench_credit.py)."""
    from marti_env.credit.bench import BenchConfig

    d = BenchConfig()
    parser.add_argument(
        "--methods",
        default=None,
        help="comma-separated method specs, e.g. none,quality:alpha=0.3 (default: all built-ins)",
    )
    parser.add_argument(
        "--envs", default=DEFAULT_ENVS, help=f"comma-separated (default {DEFAULT_ENVS})"
    )
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated integers (default 0,1,2)")
    parser.add_argument(
        "--out", default=None, help="output folder (default runs/bench_credit__<time>)"
    )
    parser.add_argument("--tier", choices=("fast", "llm"), default="fast")
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="FILE_OR_MODULE",
        help="a .py file or module that registers credit methods (repeatable)",
    )
    parser.add_argument("--updates", type=int, default=d.updates, help="REINFORCE updates per run")
    parser.add_argument("--batch", type=int, default=d.batch, help="episodes per update")
    parser.add_argument("--lr", type=float, default=d.lr, help="step size on the logits")
    parser.add_argument("--eval-episodes", type=int, default=d.eval_episodes)
    parser.add_argument("--attr-configs", type=int, default=d.attr_configs, help="teams for attr")
    parser.add_argument(
        "--attr-episodes", type=int, default=d.attr_episodes, help="episodes per team"
    )
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG")
    parser.add_argument("--quiet", action="store_true", help="print the table only")


def _csv(text: str, what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise ValueError(f"--{what} is empty")
    return items


def _seeds(text: str) -> list[int]:
    try:
        return [int(x) for x in _csv(text, "seeds")]
    except ValueError as e:
        raise ValueError(f"--seeds must be comma-separated integers, got {text!r}") from e


def import_methods(target: str) -> None:
    """Run a ``.py`` file or import a module (to register credit methods)."""
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise FileNotFoundError(f"--import {target}: no such file")
        spec = importlib.util.spec_from_file_location(f"_marti_bench_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[spec.name] = module  # type: ignore[union-attr]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    else:
        try:
            importlib.import_module(target)
        except ModuleNotFoundError as e:
            if e.name != target:
                raise
            raise ValueError(
                f"--import {target}: no such module (or give a path ending in .py)"
            ) from e


def run_credit_bench(args: argparse.Namespace) -> int:
    """Run ``marti bench credit`` with parsed ``args``; prints the table, writes outputs."""
    if args.tier == "llm":
        raise ValueError(
            "--tier llm trains the default model with the real trainer on arithmetic tasks "
            "at a fixed budget; it needs the trainer (issue 5), which has not landed yet. "
            "Use --tier fast (the default) meanwhile."
        )
    for target in args.imports:
        import_methods(target)
    from marti_env.credit import BUILTIN_METHODS
    from marti_env.credit.bench import BenchConfig, run_benchmark, write_outputs

    methods = _csv(args.methods, "methods") if args.methods else list(BUILTIN_METHODS)
    config = BenchConfig(
        updates=args.updates,
        batch=args.batch,
        lr=args.lr,
        eval_episodes=args.eval_episodes,
        attr_configs=args.attr_configs,
        attr_episodes=args.attr_episodes,
    )
    out = args.out or f"runs/bench_credit__{time.strftime('%Y%m%d-%H%M%S')}"
    log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    start = time.perf_counter()
    result = run_benchmark(methods, _csv(args.envs, "envs"), _seeds(args.seeds), config, log=log)
    print(result.table())
    paths = write_outputs(result, out, plot_png=not args.no_plot)
    if not args.quiet:
        print(
            f"\n{time.perf_counter() - start:.0f}s; wrote "
            + ", ".join(str(p) for p in paths.values())
        )
    return 0
