"""Checkpoints: safetensors weights plus everything a run needs to continue exactly.

Layout of ``<run dir>/checkpoints/step_000012/``::

    <unit>.safetensors   trained tensors of each unit (full model, or one LoRA adapter)
    state.pt             per-unit optimizer + LR-scheduler state, the step, the data-order
                         state of the task sampler, the credit method's state, and the
                         python / numpy / torch RNG states
    config.yaml          the run's config

A checkpoint is written to a temporary directory and renamed into place, so a killed run
never leaves a half-written one; only the newest ``keep_last`` are kept.
"""

from __future__ import annotations

import random
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import yaml

if TYPE_CHECKING:
    from marti_trainer.config import TrainConfig

__all__ = [
    "TrainedUnit",
    "find_checkpoint",
    "load_checkpoint",
    "load_trained_unit",
    "rng_state",
    "save_checkpoint",
    "set_rng_state",
]

_NAME = re.compile(r"^step_(\d{6,})$")


def rng_state() -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    weights: dict[str, dict[str, torch.Tensor]],
    state: dict[str, Any],
    config: dict[str, Any],
    keep_last: int = 2,
) -> Path:
    """Write checkpoint ``step`` atomically; delete all but the newest ``keep_last``.

    Args:
        run_dir: The run directory (checkpoints go to ``run_dir/checkpoints``).
        step: Training steps completed.
        weights: unit name -> tensors (saved as ``<unit>.safetensors``).
        state: Anything ``torch.save`` can write (optimizers, sampler, RNG...).
        config: The run's config as a dict.
    """
    from safetensors.torch import save_file

    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".step_{step:06d}.", dir=root))
    try:
        for unit, tensors in weights.items():
            save_file({k: v.contiguous() for k, v in tensors.items()}, tmp / f"{unit}.safetensors")
        torch.save({**state, "step": step, "rng": rng_state()}, tmp / "state.pt")
        (tmp / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    for old in _checkpoints(root)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _checkpoints(root: Path) -> list[Path]:
    found = (
        [p for p in root.iterdir() if p.is_dir() and _NAME.match(p.name)] if root.is_dir() else []
    )
    return sorted(found, key=lambda p: int(_NAME.match(p.name).group(1)))  # type: ignore[union-attr]


def find_checkpoint(path: str | Path) -> Path:
    """The checkpoint to resume from: ``path`` itself, or the newest under a run directory.

    Raises:
        FileNotFoundError: no checkpoint there.
    """
    path = Path(path)
    if (path / "state.pt").is_file():
        return path
    found = _checkpoints(path / "checkpoints")
    if not found:
        raise FileNotFoundError(f"no checkpoint under {path} (expected {path}/checkpoints/step_*)")
    return found[-1]


def load_checkpoint(checkpoint: str | Path) -> tuple[dict[str, dict[str, torch.Tensor]], dict]:
    """``(weights by unit, state)`` of a checkpoint written by :func:`save_checkpoint`.

    The RNG states are restored by the caller with :func:`set_rng_state` (``state["rng"]``).
    """
    from safetensors.torch import load_file

    checkpoint = Path(checkpoint)
    weights = {p.stem: load_file(str(p)) for p in sorted(checkpoint.glob("*.safetensors"))}
    state = torch.load(checkpoint / "state.pt", map_location="cpu", weights_only=False)
    return weights, state


@dataclass
class TrainedUnit:
    """The trained weights of one unit of a checkpoint, for evaluation.

    Attributes:
        checkpoint: The checkpoint directory (``.../checkpoints/step_N``).
        unit: The unit's name (``policy`` for a shared model, the agent's name per agent).
        config: The run's config (its ``config.yaml``); ``config.model.name`` is the base
            model, ``config.env.eval_tasks`` its held-out tasks.
        tensors: The unit's trained tensors, by their plain Hugging Face names.
    """

    checkpoint: Path
    unit: str
    config: TrainConfig
    tensors: dict[str, torch.Tensor]


def load_trained_unit(path: str | Path, unit: str | None = None) -> TrainedUnit:
    """The full-model weights of one unit of a run's newest checkpoint (or of ``path`` itself).

    Args:
        path: A run directory or a checkpoint directory.
        unit: The unit to load; None picks the only one (a run with ``model.sharing:
            per_agent`` has one per agent, and then ``unit`` is required).

    Raises:
        FileNotFoundError: no checkpoint at ``path``.
        ValueError: ``unit`` is not in the checkpoint (the message lists those that are), it
            is ambiguous, or the run trained LoRA adapters (``model.sharing: lora``): those
            hold adapter tensors, not a model.
    """
    from safetensors.torch import load_file

    from marti_trainer.config import load_config

    checkpoint = find_checkpoint(path)
    config = load_config(checkpoint / "config.yaml")
    if config.model.sharing == "lora":
        raise ValueError(
            f"{checkpoint} was trained with model.sharing=lora: its units are LoRA adapters, "
            "and evaluating adapters from a checkpoint is not supported"
        )
    units = sorted(p.stem for p in checkpoint.glob("*.safetensors"))
    if unit is None:
        if len(units) != 1:
            raise ValueError(f"{checkpoint} holds units {units}: choose one")
        unit = units[0]
    if unit not in units:
        raise ValueError(f"{checkpoint} has no unit {unit!r}; it holds {units}")
    tensors = load_file(str(checkpoint / f"{unit}.safetensors"))
    return TrainedUnit(checkpoint, unit, config, tensors)
