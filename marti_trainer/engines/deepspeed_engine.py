"""DeepSpeed engine: the same update as :class:`TorchEngine`, through ``deepspeed.initialize``.

ZeRO stage 0-3 with fp32 or bf16 (DeepSpeed's own bf16: bf16 module weights, fp32 master
copy in the optimizer). The optimizer is torch's AdamW handed to DeepSpeed as a client
optimizer (no compiled DeepSpeed op is needed), and gradient accumulation is left to the
caller (``managed_gradient_accumulation: false``): every micro-batch of a step is one
``engine.backward``, then one ``engine.step``, so a step may have any number of
micro-batches, as the token budget decides.

On a machine without a GPU, DeepSpeed runs on its CPU accelerator over gloo: this module
sets ``DS_ACCELERATOR=cpu`` (unless set), a single-process ``MASTER_ADDR/PORT/RANK/
WORLD_SIZE`` when no launcher did, and caches compiled ops under
``$TORCH_EXTENSIONS_DIR`` (default ``~/.cache/marti/torch_extensions``). Under
``deepspeed``/``torchrun`` on GPUs it uses nccl.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import torch

from marti_trainer.config import OptimConfig
from marti_trainer.engines.base import Engine, MetricSum, lr_lambda, work_metrics
from marti_trainer.flops import model_size
from marti_trainer.learner import LossFn, TrainBatch
from marti_trainer.models import cache_dir
from marti_trainer.precision import concrete_precision

__all__ = ["DeepSpeedEngine", "ds_config", "init_distributed"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_distributed() -> None:
    """Set up DeepSpeed's accelerator and process group for this process (idempotent)."""
    gpu = torch.cuda.is_available()
    if not gpu:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(cache_dir() / "torch_extensions"))
    for key, value in (
        ("MASTER_ADDR", "127.0.0.1"),
        ("RANK", "0"),
        ("LOCAL_RANK", "0"),
        ("WORLD_SIZE", "1"),
    ):
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    # deepspeed is optional and heavy: imported only when this engine runs
    import deepspeed

    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend="nccl" if gpu else "gloo", verbose=False)


def ds_config(cfg: OptimConfig) -> dict[str, Any]:
    """The DeepSpeed config for ``cfg`` (one micro-batch per backward, caller-managed GAS)."""
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,
        "gradient_clipping": cfg.max_grad_norm,
        # memory_efficient_linear (ZeRO-3's default) replaces torch.nn.functional.linear
        # process-wide and never puts it back: every later model in the process, trained
        # or not, went through DeepSpeed's autograd function.
        "zero_optimization": {"stage": cfg.zero_stage, "memory_efficient_linear": False},
        "bf16": {"enabled": cfg.precision == "bf16"},  # "auto" is resolved by the engine
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


class DeepSpeedEngine(Engine):
    """See the module docstring; arguments as :func:`marti_trainer.engines.make_engine`."""

    def __init__(
        self,
        model: torch.nn.Module,
        cfg: OptimConfig,
        loss_fn: LossFn,
        total_steps: int,
        params: list[torch.nn.Parameter] | None = None,
    ) -> None:
        init_distributed()
        # deepspeed is optional and heavy: imported on use
        import deepspeed
        from deepspeed.accelerator import get_accelerator

        cfg = concrete_precision(cfg, torch.device(get_accelerator().device_name()))
        self.cfg = cfg
        self.loss_fn = loss_fn
        params = (
            list(params)
            if params is not None
            else [p for p in model.parameters() if p.requires_grad]
        )
        optimizer = torch.optim.AdamW(
            params, lr=cfg.lr, betas=(cfg.betas[0], cfg.betas[1]), eps=cfg.eps,
            weight_decay=cfg.weight_decay,
        )  # fmt: skip
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg, total_steps))
        self.ds, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config(cfg)
        )
        self.model = self.ds.module
        self.params = params
        self.steps = 0
        self.size = model_size(self.model)  # for the update's FLOP count

    def step(self, batch: TrainBatch) -> dict[str, float]:
        self.ds.train()
        metrics = MetricSum()
        micro_batches = batch.split(
            self.cfg.micro_batch_tokens, self.cfg.share_prompts, self.cfg.share_prefixes
        )
        t0 = time.perf_counter()
        for micro in micro_batches:
            loss, values, weight = self.loss_fn(self.ds, micro.to(self.ds.device))
            self.ds.backward(loss, scale_wrt_gas=False)
            metrics.add(values, weight)
        t1 = time.perf_counter()
        lr = self.scheduler.get_last_lr()[0]
        own_norm = None
        if self.cfg.zero_stage == 0 and self.cfg.precision == "fp32":  # DS does not report it
            own_norm = torch.nn.utils.get_total_norm(
                [p.grad for p in self.params if p.grad is not None]
            )
        self.ds.step()
        self.steps += 1
        self.ds.eval()
        grad_norm = own_norm if own_norm is not None else self.ds.get_global_grad_norm()
        out = metrics.result()
        out.update(
            {
                "optim/grad_norm": float(grad_norm) if grad_norm is not None else float("nan"),
                "optim/lr": float(lr),
                "optim/micro_batches": float(len(micro_batches)),
                **work_metrics(self.size, micro_batches, t1 - t0, time.perf_counter() - t1),
            }
        )
        return out

    def state_dict(self) -> dict[str, Any]:
        """The base engine's state with DeepSpeed's objects as plain values (checkpoints hold
        tensors and plain values only): the loss scaler as its scale, the ZeRO stage as an
        int; the parameter slice map (rebuilt by DeepSpeed itself) is left out."""
        state = super().state_dict()
        opt = dict(state["optimizer"])
        opt.pop("param_slice_mappings", None)
        if "loss_scaler" in opt:
            opt["loss_scaler"] = {"cur_scale": float(opt["loss_scaler"].cur_scale)}
        if "zero_stage" in opt:
            opt["zero_stage"] = int(opt["zero_stage"])
        return {**state, "optimizer": opt}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # deepspeed is optional and heavy: imported on use
        from deepspeed.runtime.zero.config import ZeroStageEnum

        opt = dict(state["optimizer"])
        if "loss_scaler" in opt:
            scaler = self.optimizer.loss_scaler
            scaler.cur_scale = opt["loss_scaler"]["cur_scale"]
            opt["loss_scaler"] = scaler
        if "zero_stage" in opt:
            opt["zero_stage"] = ZeroStageEnum(opt["zero_stage"])
        if self.cfg.zero_stage in (1, 2):  # ZeRO-1/2 take one state per data-parallel rank
            opt["param_slice_mappings"] = self.optimizer._param_slice_mappings
            self.optimizer.load_state_dict([opt], load_from_fp32_weights=True)
        elif self.cfg.zero_stage == 3:
            self.optimizer.load_state_dict([opt])
        else:
            self.optimizer.load_state_dict(opt)
        self.scheduler.load_state_dict(state["scheduler"])
        self.steps = int(state["steps"])

    def weights(self) -> dict[str, torch.Tensor]:
        """Full fp32 tensors (gathered from ZeRO-3 partitions; from the fp32 master copy)."""
        names = {id(p): n for n, p in self.model.named_parameters()}
        out = {}
        for p in self.params:
            out[names[id(p)]] = self._full_fp32(p)
        return out

    def _full_fp32(self, p: torch.nn.Parameter) -> torch.Tensor:
        # deepspeed is optional and heavy: imported on use
        from deepspeed.utils import safe_get_full_fp32_param

        value = safe_get_full_fp32_param(p)
        if value is None:  # stage 0 without a master copy: the parameter itself is fp32
            value = p.detach()
        return value.detach().float().cpu().clone()

    def load_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        # deepspeed is optional and heavy: imported on use
        from deepspeed.utils import safe_set_full_fp32_param

        by_name = dict(self.model.named_parameters())
        for name, value in tensors.items():
            if name not in by_name:
                raise ValueError(f"checkpoint has unknown parameter {name!r}")
            p = by_name[name]
            try:
                safe_set_full_fp32_param(p, value.float())
            except Exception:
                with torch.no_grad():
                    p.copy_(value.to(p.dtype))
                continue
            if self.cfg.zero_stage < 3:  # the model's own (bf16) copy, as a step leaves it
                with torch.no_grad():
                    p.copy_(value.to(p.dtype))
