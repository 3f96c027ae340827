"""Credit-assignment methods x envs x seeds: fast tier (simulated agents) or --tier llm.

    python benchmarks/bench_credit.py --methods none,score,quality,shapley --seeds 0,1,2
    python benchmarks/bench_credit.py --import docs/examples/my_credit.py \\
        --methods none,round_relative

The same as ``marti bench credit`` (same options; see marti_trainer/cli/bench.py). Prints
the table (mean ± std over seeds of attr, attr_within, acc_final, acc_auc per env and
method) and writes CSV, JSON and a PNG to ``--out`` (default runs/bench_credit__<time>).
About 10 s per env and seed for the nine built-ins on one core with the default budget.

    python benchmarks/bench_credit.py --leaderboard docs/results/credit_sim_*.json

writes docs/credit_leaderboard.md (or --leaderboard-out) from result files instead.
"""

from __future__ import annotations

import argparse
import sys

from marti_env.credit.bench.leaderboard import DEFAULT_PAGE, write_leaderboard
from marti_trainer.cli.bench import add_credit_arguments, run_credit_bench


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_credit_arguments(parser)
    parser.add_argument(
        "--leaderboard", nargs="+", metavar="RESULTS_JSON",
        help="write the leaderboard page from these results.json files (runs nothing)",
    )  # fmt: skip
    parser.add_argument(
        "--leaderboard-out", default=DEFAULT_PAGE, help=f"the page to write ({DEFAULT_PAGE})"
    )
    args = parser.parse_args(argv)
    try:
        if args.leaderboard:
            print(write_leaderboard(args.leaderboard, args.leaderboard_out))
            return 0
        return run_credit_bench(args)
    except (ValueError, FileNotFoundError) as e:
        print(f"bench_credit: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
