"""The machine a run or benchmark ran on, in one line, for ``run.json`` and result files.

One job: say what hardware produced a figure. Results from different machines are not
interchangeable even for the same seed: bf16 kernels differ between CPUs (an AMX CPU and an
AVX512-BF16 one round differently), so a greedy evaluation of the same model on the same
problems can flip a few problems between them. ``marti report`` lists each run's machine.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from marti_trainer.precision import cpu_bf16_flags

__all__ = ["describe_machine"]


def describe_machine(cpuinfo: str | None = None, gpus: list[str] | None = None) -> str:
    """``"<CPU model>, <n> cores[, <bf16 flags>][; <k> x <GPU name>]"``.

    Args:
        cpuinfo: The text of ``/proc/cpuinfo`` (read when None; where it cannot be read the
            CPU is ``platform.processor()`` or ``"unknown CPU"``).
        gpus: Names of the visible CUDA devices (asked of torch when None).
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    name = next(
        (ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")),
        "",
    )
    text = f"{name or platform.processor() or 'unknown CPU'}, {os.cpu_count()} cores"
    flags = cpu_bf16_flags(cpuinfo) if cpuinfo else []
    if flags:
        text += ", " + " ".join(sorted(flags))
    if gpus is None:
        gpus = _cuda_devices()
    for gpu in sorted(set(gpus)):
        text += f"; {gpus.count(gpu)} x {gpu}"
    return text


def _cuda_devices() -> list[str]:
    import torch

    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
