"""``marti export`` and ``marti checkpoint verify | convert``: a run's saved weights, out of
marti (a Hugging Face or PEFT folder), checked against their manifest, or converted from the
first (pickle) format.

Examples::

    marti export runs/mad-v0__quickstart__0__1764 out/debater        # a HF model folder
    marti export runs/lora-run out/adapter --unit debater_1           # a PEFT adapter folder
    marti export runs/lora-run out/merged --unit debater_1 --merge    # adapter merged in
    marti checkpoint verify runs/mad-v0__quickstart__0__1764          # sizes and sha256
    marti checkpoint convert runs/old-run/checkpoints/step_000015     # first-format state.pt
"""

from __future__ import annotations

import argparse
from typing import Any

# An import inside a function keeps a heavy dependency (torch, transformers, vllm, ray)
# lazy: building the parser imports none, so `marti envs` answers instantly.

__all__ = ["add_checkpoint_parsers"]


def add_checkpoint_parsers(subparsers: Any) -> None:
    """Register the ``export`` and ``checkpoint`` subcommands."""
    export = subparsers.add_parser(
        "export",
        help="write a run's trained weights as a Hugging Face model or PEFT adapter folder",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    export.add_argument("run", help="a run directory (newest valid checkpoint) or a checkpoint")
    export.add_argument("out", help="the folder to write (must not exist or be empty)")
    export.add_argument("--unit", default=None, help="the unit (per-agent and LoRA runs)")
    export.add_argument(
        "--merge", action="store_true", help="LoRA: merge the adapter into the base model"
    )
    export.set_defaults(func=_export)

    ckpt = subparsers.add_parser(
        "checkpoint",
        help="verify a checkpoint, or convert one of the first (pickle) format",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ckpt.add_subparsers(dest="action", required=True)
    verify = sub.add_parser("verify", help="check every file against the manifest")
    verify.add_argument("path", help="a run directory or a checkpoint directory")
    verify.set_defaults(func=_verify)
    convert = sub.add_parser(
        "convert",
        help="rewrite a first-format checkpoint (state.pt) as safetensors + JSON, in place",
    )
    convert.add_argument("path", help="the checkpoint directory (.../checkpoints/step_N)")
    convert.add_argument(
        "--trust-pickle",
        action="store_true",
        help="if torch's restricted unpickler refuses state.pt, use the full one, which runs "
        "whatever the file says: only for files from a source you trust",
    )
    convert.set_defaults(func=_convert)


def _export(args: argparse.Namespace) -> int:
    from marti_trainer.export import export_unit

    out = export_unit(args.run, args.out, args.unit, args.merge)
    print(f"wrote {out}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from marti_trainer.checkpoint import find_checkpoint

    skipped: list[str] = []
    checkpoint = find_checkpoint(args.path, skipped)
    for problem in skipped:
        print(f"unusable: {problem}")
    print(f"ok: {checkpoint}")
    return 1 if skipped else 0


def _convert(args: argparse.Namespace) -> int:
    from marti_trainer.checkpoint import convert_checkpoint

    print(f"converted {convert_checkpoint(args.path, trust_pickle=args.trust_pickle)}")
    return 0
