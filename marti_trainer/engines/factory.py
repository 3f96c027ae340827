"""Builds the engine a config names: :func:`make_engine` (``torch`` or ``deepspeed``).

DeepSpeed itself is imported only when its engine is built (inside
:mod:`~marti_trainer.engines.deepspeed_engine`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from marti_trainer.config import OptimConfig
from marti_trainer.engines.base import Engine
from marti_trainer.engines.deepspeed_engine import DeepSpeedEngine
from marti_trainer.engines.torch_engine import TorchEngine
from marti_trainer.learner import LossFn

__all__ = ["make_engine"]


def make_engine(
    model: torch.nn.Module,
    cfg: OptimConfig,
    loss_fn: LossFn,
    total_steps: int,
    params: list[torch.nn.Parameter] | None = None,
    activate: Callable[[], None] | None = None,
) -> Engine:
    """Build the engine ``cfg.engine`` names.

    Args:
        model: The module to train (fp32 master weights).
        cfg: Optimizer and engine settings.
        loss_fn: ``loss_fn(model, micro_batch) -> (weighted loss, metrics, weight)``.
        total_steps: Optimizer steps of the run (for LR decay).
        params: The parameters to update (default: every trainable one).
        activate: Called before each step (e.g. selects this agent's LoRA adapter).
    """
    if cfg.engine == "torch":
        return TorchEngine(model, cfg, loss_fn, total_steps, params=params, activate=activate)
    if cfg.engine == "deepspeed":
        return DeepSpeedEngine(model, cfg, loss_fn, total_steps, params=params)
    raise ValueError(f"unknown engine {cfg.engine!r}")
