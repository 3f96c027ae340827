"""``marti report RUN_OR_SWEEP_DIRS... --out docs/results.md``: a results page from run files.

Examples::

    marti report runs/sweep__quickstart --out docs/results.md
    marti report runs/sweep__quickstart --baseline algorithm.group_by=agent --min-effect 0.02
    marti report runs/sweeps/suite --versus exp_name=135m_single_none   # across config files
    marti report runs/credit_llm_gate/runs --versus exp_name=none --modes 0.9  # where seeds ended
    marti report runs/sweep__quickstart --summary-into README.md   # tables into its README block
    marti report --check docs/results.md       # still what its cited run files give?
    marti report --update docs/results.md      # rewrite it with its own arguments (new runs)

Groups the finished runs by config (without the seed), and writes markdown tables (mean
and CI over seeds, paired differences against ``--baseline``, every run with its Wilson
interval), PNG plots next to the page, and the list of files read with their SHA-256.
See docs/evidence.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# An import inside a function keeps a heavy dependency (torch, transformers, vllm, ray)
# lazy: building the parser imports none, so `marti envs` answers instantly.

__all__ = ["add_report_parser", "run_report"]

PAGE_OPTIONS = {
    "out": "docs/results.md", "baseline": None, "versus": None, "min_effect": 0.0,
    "confidence": 0.95, "seed": 0, "title": "Results", "summary_into": None, "note": None,
    "modes": None,
}  # fmt: skip
"""What a page is written with (the defaults): recorded in the page, so ``--check`` and
``--update`` take none of them."""


def add_report_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``report`` subcommand."""
    parser = subparsers.add_parser(
        "report",
        help="write a results page (tables with CIs, paired differences, plots) from runs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="*", metavar="RUN_OR_SWEEP_DIR", help="runs to report")
    parser.add_argument("--out", help="page to write (docs/results.md)")
    parser.add_argument(
        "--baseline", metavar="KEY=VALUE",
        help="compare each config with the one that has KEY=VALUE and is otherwise equal "
        "(the options of KEY's value, KEY_kwargs.*, may differ: --baseline env.credit=none)",
    )  # fmt: skip
    parser.add_argument(
        "--versus", action="append", metavar="KEY=VALUE",
        help="compare every other config with the one config that has KEY=VALUE, whatever "
        "else differs (e.g. exp_name=135m_single_none); repeatable",
    )  # fmt: skip
    parser.add_argument(
        "--min-effect", type=float,
        help="differences below this (accuracy, e.g. 0.02 = 2 points) are called negligible",
    )  # fmt: skip
    parser.add_argument("--confidence", type=float, help="CI level (0.95)")
    parser.add_argument("--seed", type=int, help="bootstrap seed (0)")
    parser.add_argument("--title", help="the page's heading (Results)")
    parser.add_argument(
        "--summary-into", metavar="FILE",
        help="also put the per-config and paired tables into FILE (e.g. README.md), between "
        "its lines <!-- marti report summary: begin PAGE --> and <!-- marti report summary: end "
        "PAGE --> (PAGE: the --out file name)",
    )  # fmt: skip
    parser.add_argument(
        "--note",
        help="a paragraph under the heading: what the figures do not show",
    )  # fmt: skip
    parser.add_argument(
        "--modes", type=float, metavar="KAPPA",
        help="add a table of where the seeds ended: runs whose final per-problem outcomes "
        "agree with Cohen's kappa >= KAPPA (e.g. 0.9), or differ on at most 1%% of the "
        "problems, joined into one mode",
    )  # fmt: skip
    parser.add_argument("--no-plots", action="store_true", help="write the markdown only")
    parser.add_argument(
        "--save-digests", metavar="DIR", default=None,
        help="write a small digest (<run>.run.json) of each finished run into DIR and stop: "
        "commit them and report from DIR (docs/evidence.md)",
    )  # fmt: skip
    parser.add_argument(
        "--check", metavar="PAGE", default=None,
        help="regenerate PAGE from the files it cites and report any difference (exit 1)",
    )  # fmt: skip
    parser.add_argument(
        "--update", metavar="PAGE", default=None,
        help="rewrite PAGE (its plots and README summary too) with the arguments recorded in "
        "it, from the files under its folders now: e.g. after new runs or digests",
    )  # fmt: skip
    parser.set_defaults(func=run_report, **PAGE_OPTIONS)
    return parser


def run_report(args: argparse.Namespace) -> int:
    """Write the page (or check one); prints what it wrote."""
    from marti_trainer.report import (
        ReportOptions,
        check_report,
        page_options,
        write_digests,
        write_report,
    )

    if args.check and args.update:
        raise ValueError("give --check PAGE or --update PAGE, not both")
    if args.check or args.update:
        given = [name for name, default in PAGE_OPTIONS.items() if getattr(args, name) != default]
        if given:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise ValueError(
                f"--check and --update use the options recorded in the page; drop {flags} "
                "(or write the page anew without --check/--update)"
            )
    if args.save_digests:
        if not args.paths or args.check or args.update:
            raise ValueError(
                "--save-digests DIR takes run or sweep folders (and no --check or --update)"
            )
        written = write_digests(args.paths, args.save_digests)
        print(f"wrote {len(written)} digests into {args.save_digests}")
        return 0
    if args.update:
        if args.paths:
            raise ValueError("--update PAGE takes no run folders: they are recorded in the page")
        opts = page_options(args.update)
        missing = [p for p in opts.paths if not Path(p).exists()]
        if missing:
            raise FileNotFoundError(
                f"{args.update} reports {missing}, not found here: its paths are relative to "
                "the folder it was written from"
            )
        paths = write_report(opts, args.update, plots=not args.no_plots)
        print("wrote " + ", ".join(str(p) for p in paths))
        return 0
    if args.check:
        if args.paths:
            raise ValueError("--check PAGE takes no run folders: they are recorded in the page")
        problems = check_report(args.check)
        for p in problems:
            print(p, file=sys.stderr)
        if not problems:
            print(f"{args.check}: matches its run files")
        return 1 if problems else 0
    if not args.paths:
        raise ValueError("give at least one run or sweep folder (or --check PAGE)")
    opts = ReportOptions(
        tuple(args.paths), args.baseline, args.min_effect, args.confidence, args.seed,
        args.title, args.summary_into, args.note, tuple(args.versus or ()), args.modes,
    )  # fmt: skip
    paths = write_report(opts, args.out, plots=not args.no_plots)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
