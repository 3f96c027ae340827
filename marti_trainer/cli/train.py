"""``marti train CONFIG [key=value ...] [--resume [RUN_DIR]]``: train agents from a YAML config.

Examples::

    marti train baselines/quickstart.yaml
    marti train baselines/quickstart.yaml optim.lr=1e-5 total_steps=20
    marti train baselines/quickstart.yaml --resume                 # newest run of this config
    marti train baselines/quickstart.yaml --resume runs/mad-v0__quickstart__0__1732
    marti train --help-config                                      # every config field
    marti train baselines/qwen2.5-3b/3b_mad2x2.yaml --dry-run             # check, plan, no training

``--dry-run`` validates the config without training and prints the resolved config, the
model it would load (or why it is not available offline, and how to provide it), its
parameter count from ``config.json``, the device and placement plan, a memory estimate per
device and the number of steps and generations (:mod:`marti_trainer.dry_run`). Exit code 0:
ready to train; 1: the config is valid but the model is not available; 2: a config error.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# An import inside a function keeps a heavy dependency (torch, transformers, vllm, ray)
# lazy: building the parser imports none, so `marti envs` answers instantly.

__all__ = ["add_train_parser", "run_train"]


def add_train_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``train`` subcommand."""
    parser = subparsers.add_parser(
        "train",
        help="train agents with RL from a YAML config",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", nargs="?", help="YAML config, e.g. baselines/quickstart.yaml")
    parser.add_argument(
        "overrides", nargs="*", metavar="key=value", help="config overrides (dotted keys)"
    )
    parser.add_argument(
        "--resume",
        nargs="?",
        const="latest",
        metavar="RUN_DIR",
        help="continue a run from its newest checkpoint (default: the newest run of this config)",
    )
    parser.add_argument(
        "--help-config", action="store_true", help="list every config field with its help"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="validate and print the resolved config, model, placement, memory estimate and "
        "work (steps, generations) without training",
    )
    parser.set_defaults(func=run_train)
    return parser


def _latest_run(output_dir: str, prefix: str) -> Path:
    runs = sorted(
        (p for p in Path(output_dir).glob(f"{prefix}__*") if (p / "checkpoints").is_dir()),
        key=lambda p: p.stat().st_mtime,
    )
    if not runs:
        raise FileNotFoundError(
            f"no run with checkpoints matching {output_dir}/{prefix}__* to resume"
        )
    return runs[-1]


def run_train(args: argparse.Namespace) -> int:
    # OpenMP threads that spin while waiting made every step 5-10x slower whenever another
    # busy process shared the CPU (measured on 2 cores); sleeping waits cost little alone.
    # Set before torch is imported; export OMP_WAIT_POLICY=ACTIVE to opt out.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from marti_trainer.config import config_help, load_config

    if args.help_config:
        print(config_help())
        return 0
    if args.config is None:
        raise ValueError("give a config file, e.g. marti train baselines/quickstart.yaml")
    cfg = load_config(args.config, args.overrides)
    if args.dry_run:
        from marti_trainer.dry_run import format_plan, plan_run

        plan = plan_run(cfg)
        print(format_plan(plan))
        return 0 if plan.model_error is None else 1
    resume = args.resume
    if resume == "latest":
        if cfg.run_name:
            resume = Path(cfg.log.output_dir) / cfg.run_name
        else:
            resume = _latest_run(cfg.log.output_dir, f"{cfg.env.id}__{cfg.exp_name}__{cfg.seed}")
    from marti_trainer.train import format_summary, train

    again = f"marti train {args.config} {' '.join(args.overrides)}".rstrip()
    try:
        result = train(cfg, resume=resume)
    except KeyboardInterrupt:
        print(
            "\nstopped at once: the current step is lost; to continue from the last "
            f"checkpoint: {again} --resume",
            file=sys.stderr,
        )
        return 130
    if result.stopped_by is not None:
        print(
            f"stopped by {result.stopped_by} after step {result.last_step} of "
            f"{cfg.total_steps}; checkpoint saved: {result.checkpoint}. Resume with: "
            f"{again} --resume {result.run_dir}",
            file=sys.stderr,
        )
        return 130 if result.stopped_by == "SIGINT" else 143
    print(format_summary(result.summary))
    print(f"run directory: {result.run_dir}")
    print(f"export the trained weights: marti export {result.run_dir} OUT_DIR")
    return 0
