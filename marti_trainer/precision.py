"""``precision: auto`` and ``dtype: auto``: which number format a run trains and generates in.

One job: turn ``optim.precision`` and ``rollout.dtype`` settings of ``auto`` into a concrete
choice for the device the run uses, with the reason, so that the run's header and
``run.json`` can say what was chosen and why. An explicit setting always wins.

The rule (:func:`choose_precision`), from the per-phase profile
(``benchmarks/bench_quickstart.py``, README "Where a training step's time goes"):

- CUDA: bf16 (autocast over fp32 master weights, bf16 rollout weights) when the GPU supports
  it natively (``torch.cuda.is_bf16_supported(including_emulation=False)``: Ampere or newer),
  else fp32. A Ray driver that sees no GPU but starts GPU trainer actors assumes bf16.
- CPU with native bf16 dot products (the ``avx512_bf16`` or ``amx_bf16`` flag): bf16. On two
  such CPUs the quick start's step took 65 s in bf16 against 135 s in fp32 (AMD EPYC,
  avx512_bf16) and 56 s against 97 s (an Intel Xeon with avx512_bf16, no AMX), although a
  plain fp32 matmul probe was *faster* than bf16 on the Xeon: the step's own kernels, not a
  matmul probe, decide.
- Any other CPU: fp32. bf16 there is emulated: on an AMD EPYC with AVX2 only (no AVX-512),
  a 512x576 @ 576x1536 matmul (SmolLM2-135M's MLP) ran 144 GFLOP/s in fp32, 1.2 in bf16 and
  16 under bf16 autocast; the LLM credit tier's step-0 evaluation in bf16 (1,000 problems,
  8,000 generations) took 6,591 s there, against 614-754 s for 6,000 generations on CPUs
  with avx512_bf16; and the quick-start test (2 steps, 8 held-out problems) ran past its
  900 s limit in bf16 (``python benchmarks/bench_quickstart.py --variant default --variant
  bf16``, README "Where a training step's time goes", compares the whole step side by side).

An explicit ``bf16`` on a CPU without native bf16 is kept (the run asked for it), and the
reason says it is emulated (:func:`emulation_warning`), so the run's header shows why it is
slow.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from marti_trainer.machine import cpu_bf16_flags

if TYPE_CHECKING:
    from marti_trainer.config import OptimConfig, TrainConfig

__all__ = [
    "PrecisionChoice",
    "choose_precision",
    "concrete_precision",
    "emulation_warning",
    "keep_resumed",
    "native_dtype",
    "resolve_config",
    "resolve_precision",
]


@dataclass(frozen=True)
class PrecisionChoice:
    """The concrete settings and why.

    Attributes:
        precision: ``"bf16"`` or ``"fp32"`` (``optim.precision``).
        rollout_dtype: ``"bfloat16"`` or ``"float32"`` (``rollout.dtype``).
        reason: One line: the rule that chose, or ``"set explicitly"``, followed by
            ``"; warning: ..."`` when an explicit bf16 setting is emulated on this CPU.
    """

    precision: str
    rollout_dtype: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {
            "precision": self.precision,
            "rollout_dtype": self.rollout_dtype,
            "reason": self.reason,
        }


def choose_precision(device_type: str, cuda_bf16: bool, cpu_flags: list[str]) -> tuple[str, str]:
    """``(precision, reason)`` for ``auto`` by the module docstring's rule.

    Args:
        device_type: ``"cuda"`` or ``"cpu"`` (the trained model's device).
        cuda_bf16: Whether the GPU supports bf16 (ignored on a CPU).
        cpu_flags: The CPU's native-bf16 flags (:func:`cpu_bf16_flags`; ignored on a GPU).
    """
    if device_type == "cuda":
        if cuda_bf16:
            return "bf16", "auto: a GPU with bf16 support"
        return "fp32", "auto: this GPU does not support bf16"
    if cpu_flags:
        return "bf16", f"auto: a CPU with native bf16 ({', '.join(cpu_flags)})"
    return "fp32", "auto: a CPU without native bf16 (no avx512_bf16 or amx_bf16 flag)"


def emulation_warning(
    device_type: str, cpu_flags: list[str], precision: str, rollout_dtype: str
) -> str | None:
    """A warning when an explicit bf16 setting runs on a CPU without native bf16, else None.

    Args:
        device_type: ``"cuda"`` or ``"cpu"``.
        cpu_flags: The CPU's native-bf16 flags (:func:`cpu_bf16_flags`).
        precision: ``optim.precision`` as set (``auto``, ``bf16`` or ``fp32``).
        rollout_dtype: ``rollout.dtype`` as set (``auto``, ``bfloat16`` or ``float32``).
    """
    if device_type == "cuda" or cpu_flags:
        return None
    asked = [s for s, bf16 in (("optim.precision", precision == "bf16"),
                               ("rollout.dtype", rollout_dtype == "bfloat16")) if bf16]  # fmt: skip
    if not asked:
        return None
    return (
        f"{' and '.join(asked)} set to bf16 on a CPU without native bf16 (no avx512_bf16 or "
        f"amx_bf16 flag): bf16 is emulated here, many times slower than fp32 (auto picks fp32)"
    )


def native_dtype(device: torch.device) -> str:
    """The rollout dtype ``auto`` picks for ``device`` (``"bfloat16"`` or ``"float32"``)."""
    return resolve_precision("auto", "auto", device).rollout_dtype


def resolve_precision(precision: str, rollout_dtype: str, device: torch.device) -> PrecisionChoice:
    """``optim.precision`` and ``rollout.dtype`` with ``auto`` replaced for ``device``.

    An explicit value is kept. ``rollout.dtype: auto`` follows the training precision (bf16
    rollout weights with bf16 training, fp32 with fp32, which lets the hf backend generate
    with the training model in place).
    """
    if precision not in ("auto", "bf16", "fp32"):
        raise ValueError(f"optim.precision must be auto, bf16 or fp32, got {precision!r}")
    if rollout_dtype not in ("auto", "bfloat16", "float32"):
        raise ValueError(f"rollout.dtype must be auto, bfloat16 or float32, got {rollout_dtype!r}")
    given_precision, given_dtype = precision, rollout_dtype
    if precision == "auto":
        if device.type == "cuda" and not torch.cuda.is_available():
            # a Ray driver without a GPU planning for GPU actors: Ampere or newer assumed
            precision, reason = "bf16", "auto: GPU actors (bf16 assumed; this process sees no GPU)"
        else:
            # emulated bf16 (e.g. V100, T4) is slow, and vLLM refuses it: counted as none
            cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported(
                including_emulation=False
            )
            flags = cpu_bf16_flags() if device.type != "cuda" else []
            precision, reason = choose_precision(device.type, cuda_bf16, flags)
    else:
        reason = "set explicitly"
    if rollout_dtype == "auto":
        rollout_dtype = "bfloat16" if precision == "bf16" else "float32"
    # only explicit settings are warned about: auto never picks an emulated bf16
    flags = cpu_bf16_flags() if device.type != "cuda" else []
    warning = emulation_warning(device.type, flags, given_precision, given_dtype)
    if warning:
        reason = f"{reason}; warning: {warning}"
    return PrecisionChoice(precision, rollout_dtype, reason)


def resolve_config(cfg: TrainConfig, device: torch.device) -> tuple[TrainConfig, PrecisionChoice]:
    """``cfg`` with ``optim.precision`` and ``rollout.dtype`` concrete for ``device``, and
    the choice (for the run's header and ``run.json``)."""
    choice = resolve_precision(cfg.optim.precision, cfg.rollout.dtype, device)
    resolved = dataclasses.replace(
        cfg,
        optim=dataclasses.replace(cfg.optim, precision=choice.precision),
        rollout=dataclasses.replace(cfg.rollout, dtype=choice.rollout_dtype),
    )
    return resolved, choice


def concrete_precision(cfg: OptimConfig, device: torch.device) -> OptimConfig:
    """``cfg`` with ``precision: auto`` resolved for ``device`` (engines built outside
    :func:`marti_trainer.train.train`, which resolves the whole config first)."""
    if cfg.precision != "auto":
        return cfg
    return dataclasses.replace(cfg, precision=resolve_precision("auto", "auto", device).precision)


def keep_resumed(cfg: TrainConfig, saved: dict | None) -> TrainConfig:
    """``cfg`` with ``auto`` settings replaced by the concrete ones a resumed run saved
    (``saved``: its ``config.yaml`` as a mapping), so that resuming on another kind of
    machine does not switch the run's precision half-way. Explicit settings win."""
    if not saved:
        return cfg
    optim, rollout = saved.get("optim") or {}, saved.get("rollout") or {}
    if cfg.optim.precision == "auto" and optim.get("precision") in ("bf16", "fp32"):
        cfg = dataclasses.replace(
            cfg, optim=dataclasses.replace(cfg.optim, precision=optim["precision"])
        )
    if cfg.rollout.dtype == "auto" and rollout.get("dtype") in ("bfloat16", "float32"):
        cfg = dataclasses.replace(
            cfg, rollout=dataclasses.replace(cfg.rollout, dtype=rollout["dtype"])
        )
    return cfg
