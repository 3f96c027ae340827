"""``marti envs [ID]``: list the registered environments, or print one env's documentation.

Examples::

    marti envs            # every registered id, its summary and default arguments
    marti envs mad-v0     # its workflow, arguments, defaults, spec file and rules
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import marti_env  # light: no torch, transformers, vllm or ray

__all__ = ["add_envs_parser", "run_envs"]


def add_envs_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``envs`` subcommand."""
    parser = subparsers.add_parser(
        "envs",
        help="list the registered environments, or describe one",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("id", nargs="?", help="an env id, e.g. mad-v0")
    parser.set_defaults(func=run_envs)
    return parser


def run_envs(args: argparse.Namespace) -> int:
    """Print the registry, or the spec and workflow documentation of ``args.id``."""
    if args.id:
        spec = marti_env.spec(args.id)
        module = spec.workflow.__module__
        print(f"{spec.id}: {spec.summary}\n  workflow: {module}")
        print(f"  arguments: {', '.join(spec.allowed_args())}")
        print(f"  defaults: {dict(spec.kwargs)}\n  source: {spec.source}")
        print(sys.modules[module].__doc__ or spec.workflow.__doc__)
    else:
        marti_env.pprint_registry()
    return 0
