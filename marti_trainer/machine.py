"""The machine a run or benchmark ran on, in one line, for ``run.json`` and result files.

One job: say what hardware produced a figure, from ``/proc/cpuinfo`` and the visible CUDA
devices. Results from different machines are not interchangeable even for the same seed:
bf16 kernels differ between CPUs (an AMX CPU and an AVX512-BF16 one need not round alike),
so a greedy evaluation of the same model on the same problems can flip a few problems
between them. ``marti report`` lists each run's machine. Imports no ML framework until it
asks torch for the GPUs.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

__all__ = ["NATIVE_BF16_FLAGS", "cpu_bf16_flags", "cpu_flags", "describe_machine"]

NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
"""x86 ``/proc/cpuinfo`` flags of native bf16 dot products (AMX tiles, AVX512-BF16)."""


def _read_cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_flags(cpuinfo: str | None = None) -> list[str]:
    """Every feature flag this CPU reports in ``/proc/cpuinfo`` (x86 ``flags``, ARM
    ``Features``), sorted; empty where unreadable."""
    if cpuinfo is None:
        cpuinfo = _read_cpuinfo()
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith(("flags", "Features")):
            flags.update(line.split(":", 1)[1].split())
    return sorted(flags)


def cpu_bf16_flags(cpuinfo: str | None = None) -> list[str]:
    """The native-bf16 flags this CPU reports in ``/proc/cpuinfo`` (empty where unreadable)."""
    flags = set(cpu_flags(cpuinfo))
    return [f for f in NATIVE_BF16_FLAGS if f in flags]


def _cpu_name(cpuinfo: str) -> str:
    """x86 ``model name``; else (ARM) the architecture with ``CPU implementer``/``CPU part``;
    else ``platform.processor()``; else the architecture alone."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    if fields.get("model name"):
        return fields["model name"]
    arch = platform.machine() or "unknown architecture"
    if "CPU implementer" in fields:
        part = fields.get("CPU part", "?")
        return f"{arch} CPU (implementer {fields['CPU implementer']}, part {part})"
    return platform.processor() or f"{arch} CPU"


def _usable_cpus() -> int:
    """CPUs this process may run on (affinity, e.g. a container's share), else all."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def describe_machine(
    cpuinfo: str | None = None, gpus: list[str] | None = None, cpus: int | None = None
) -> str:
    """``"<CPU model>, <n> cores[, <bf16 flags>][ + <k> x <GPU name>]"``.

    Args:
        cpuinfo: The text of ``/proc/cpuinfo`` (read when None; empty where unreadable).
        gpus: Names of the visible CUDA devices (asked of torch when None).
        cpus: Usable CPU count (this process's affinity when None).
    """
    if cpuinfo is None:
        cpuinfo = _read_cpuinfo()
    cpus = _usable_cpus() if cpus is None else cpus
    text = f"{_cpu_name(cpuinfo)}, {cpus} core{'s' if cpus != 1 else ''}"
    flags = cpu_bf16_flags(cpuinfo)
    if flags:
        text += ", " + " ".join(sorted(flags))
    if gpus is None:
        gpus = _cuda_devices()
    for gpu in sorted(set(gpus)):
        text += f" + {gpus.count(gpu)} x {gpu}"
    return text


def _cuda_devices() -> list[str]:
    import torch

    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
