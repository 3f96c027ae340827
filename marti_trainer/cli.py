"""The ``marti`` command line: ``marti envs | eval | train | bench | export | checkpoint``.

Each subcommand lives in its own module and imports its heavy dependencies (torch,
transformers, vllm, ray) only when it runs, so ``marti envs`` answers instantly.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _envs(args: argparse.Namespace) -> int:
    import marti_env

    if args.id:
        spec = marti_env.spec(args.id)
        print(f"{spec.id}: {spec.summary}\n  workflow: {spec.workflow.__module__}")
        print(f"  arguments: {', '.join(spec.allowed_args())}")
        print(f"  defaults: {dict(spec.kwargs)}\n  source: {spec.source}")
        print(spec.workflow.__module__ and sys.modules[spec.workflow.__module__].__doc__)
    else:
        marti_env.pprint_registry()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="marti", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    envs = sub.add_parser("envs", help="list the registered environments, or describe one")
    envs.add_argument("id", nargs="?", help="an env id, e.g. mad-v0")
    envs.set_defaults(func=_envs)
    from marti_trainer.bench_cli import add_bench_parser
    from marti_trainer.eval_cli import add_eval_parser

    add_eval_parser(sub)
    add_bench_parser(sub)
    from marti_trainer.train_cli import add_train_parser

    add_train_parser(sub)
    from marti_trainer.checkpoint_cli import add_checkpoint_parsers

    add_checkpoint_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, FileExistsError) as e:
        print(f"marti {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
