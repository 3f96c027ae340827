"""The engine interface, :class:`Engine`, and what every engine shares (LR schedule, metrics)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from marti_trainer.config import OptimConfig
from marti_trainer.flops import ModelSize, train_flops
from marti_trainer.learner import TrainBatch

__all__ = ["Engine", "MetricSum", "lr_lambda", "work_metrics"]


class Engine(ABC):
    """Owns a model's optimizer state and turns a :class:`TrainBatch` into one update.

    Attributes:
        model: The module being trained (an HF model, or a PEFT model for LoRA).
        params: The parameters this engine updates (all trainable ones, or one adapter's).
    """

    model: torch.nn.Module
    params: list[torch.nn.Parameter]
    optimizer: Any  # a torch optimizer (DeepSpeed: its wrapper)
    scheduler: Any  # a torch LR scheduler
    steps: int  # optimizer steps taken
    size: ModelSize  # the trained model's sizes, for the update's FLOP count

    @abstractmethod
    def step(self, batch: TrainBatch) -> dict[str, float]:
        """One optimizer step over ``batch`` (micro-batched by the token budget).

        Returns ``losses/*`` metrics averaged over the batch, ``optim/grad_norm``,
        ``optim/lr`` and ``optim/micro_batches``.
        """

    def state_dict(self) -> dict[str, Any]:
        """Optimizer, scheduler and step counter (not the weights)."""
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "steps": self.steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.steps = int(state["steps"])

    def weights(self) -> dict[str, torch.Tensor]:
        """The trained tensors by name, as saved in checkpoints (on the CPU, detached; for a
        model on the CPU these are views of the live parameters, not copies)."""
        names = {id(p): n for n, p in self.model.named_parameters()}
        return {names[id(p)]: p.detach().cpu() for p in self.params}

    def load_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        """Copy tensors saved by :meth:`weights` back into the trained parameters."""
        by_name = dict(self.model.named_parameters())
        missing = [n for n in tensors if n not in by_name]
        if missing:
            raise ValueError(f"checkpoint has unknown parameter(s) {missing[:5]}")
        with torch.no_grad():
            for name, value in tensors.items():
                by_name[name].copy_(value)

    def save(self, directory: str | Path) -> None:
        """Write the trained weights to ``directory/model.safetensors``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        save_file(
            {k: v.contiguous() for k, v in self.weights().items()}, directory / "model.safetensors"
        )


def lr_lambda(cfg: OptimConfig, total_steps: int) -> Callable[[int], float]:
    """LR multiplier at optimizer step ``s``: linear warmup, then constant/linear/cosine decay."""

    def factor(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / (cfg.warmup_steps + 1)
        if cfg.scheduler == "constant":
            return 1.0
        span = max(1, total_steps - cfg.warmup_steps)
        progress = min(1.0, (step - cfg.warmup_steps) / span)
        if cfg.scheduler == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


class MetricSum:
    """Weighted average of micro-batch metrics (weights sum to 1 over a batch)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.weight = 0.0

    def add(self, metrics: dict[str, float], weight: float) -> None:
        self.weight += weight
        for key, value in metrics.items():
            self.sums[key] = self.sums.get(key, 0.0) + weight * value

    def result(self) -> dict[str, float]:
        w = self.weight if self.weight > 0 else 1.0
        return {k: v / w for k, v in self.sums.items()}


def work_metrics(
    size: ModelSize, micro_batches: list[TrainBatch], fwd_bwd_s: float, optim_s: float
) -> dict[str, float]:
    """Timings and arithmetic of one engine step: ``time/forward_backward_s``,
    ``time/optimizer_s`` (gradient clipping, the optimizer and scheduler steps) and
    ``charts/update_flops`` (:func:`~marti_trainer.flops.train_flops` over the
    micro-batches)."""
    flops = 0.0
    for micro in micro_batches:
        tokens, logit_tokens = micro.computed_tokens()
        flops += train_flops(size, tokens, logit_tokens)
    return {
        "time/forward_backward_s": fwd_bwd_s,
        "time/optimizer_s": optim_s,
        "charts/update_flops": flops,
    }
