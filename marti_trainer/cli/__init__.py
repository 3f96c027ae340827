"""The ``marti`` command line: ``marti envs | eval | train | sweep | report | bench | export |
checkpoint | data``.

This module assembles the parser and runs the chosen subcommand (:func:`main`, the
``marti`` console script). Each subcommand lives in the module named for it:

* :mod:`marti_trainer.cli.envs`: ``marti envs [ID]``
* :mod:`marti_trainer.cli.eval`: ``marti eval``
* :mod:`marti_trainer.cli.train`: ``marti train CONFIG [key=value ...]``
* :mod:`marti_trainer.cli.sweep`: ``marti sweep CONFIG --seeds 0-9 --grid key=v1,v2``
* :mod:`marti_trainer.cli.report`: ``marti report RUN_OR_SWEEP_DIRS... --out docs/results.md``
* :mod:`marti_trainer.cli.bench`: ``marti bench credit``
* :mod:`marti_trainer.cli.checkpoint`: ``marti export`` and ``marti checkpoint verify | convert``
* :mod:`marti_trainer.cli.data`: ``marti data list | get NAME``

Building the parser imports nothing heavier than :mod:`marti_env` (no torch): each module
imports its heavy dependencies (torch, transformers, vllm, ray) inside the function that
runs the subcommand, so ``marti envs`` and ``marti --help`` answer instantly.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from marti_trainer.cli.bench import add_bench_parser
from marti_trainer.cli.checkpoint import add_checkpoint_parsers
from marti_trainer.cli.data import add_data_parser
from marti_trainer.cli.envs import add_envs_parser
from marti_trainer.cli.eval import add_eval_parser
from marti_trainer.cli.report import add_report_parser
from marti_trainer.cli.sweep import add_sweep_parser
from marti_trainer.cli.train import add_train_parser

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``marti`` parser with every subcommand; each sets ``func`` (returns an exit code)."""
    parser = argparse.ArgumentParser(prog="marti", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    add_envs_parser(sub)
    add_eval_parser(sub)
    add_bench_parser(sub)
    add_train_parser(sub)
    add_sweep_parser(sub)
    add_report_parser(sub)
    add_checkpoint_parsers(sub)
    add_data_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``marti`` with ``argv`` (default: the command line); returns the exit code.

    A ``ValueError``, ``FileNotFoundError`` or ``FileExistsError`` from a subcommand is a
    user error: printed as ``marti <command>: error: ...``, exit code 2.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, FileExistsError) as e:
        print(f"marti {args.command}: error: {e}", file=sys.stderr)
        return 2
