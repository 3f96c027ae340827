"""Checkpoints: safetensors and JSON only, verified before use, never unpickled.

Layout of ``<run dir>/checkpoints/step_000012/``::

    weights/<unit>.safetensors  trained tensors of each unit (full model, or one LoRA adapter)
    state.safetensors           every tensor of the training state (optimizer moments...)
    state.json                  the rest of the state as JSON: the step, the optimizer and
                                scheduler settings, the data order, the credit method's state,
                                the python / numpy / torch RNG states as integer arrays, the
                                log offsets and wall time so far; tensors appear as
                                ``{"$tensor": "<key in state.safetensors>"}``
    config.yaml                 the run's config
    manifest.json               the size and sha256 of every file above; written last

A checkpoint is written to a temporary directory and renamed into place, so a killed run
never leaves a half-written one under its final name; only the newest ``keep_last`` are
kept. Loading parses JSON, YAML with ``yaml.safe_load`` and tensors with safetensors: no
file of a checkpoint can run code. :func:`verify_checkpoint` checks every file against the
manifest first, so a truncated or altered file is named rather than half-read;
:func:`find_checkpoint` skips such a checkpoint and falls back to the previous valid one.

Checkpoints of the first format (``state.pt``, a pickle) are refused with the command
that converts them: ``marti checkpoint convert PATH`` (:func:`convert_checkpoint`).
"""

from __future__ import annotations

import hashlib
import json
import math
import pickle
import random
import re
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import torch
import yaml
from safetensors.torch import load_file, save_file

from marti_trainer.config import TrainConfig, load_config

__all__ = [
    "FORMAT",
    "CheckpointError",
    "FirstFormatCheckpoint",
    "TrainedUnit",
    "convert_checkpoint",
    "decode_tree",
    "encode_tree",
    "find_checkpoint",
    "load_checkpoint",
    "load_trained_unit",
    "rng_state",
    "save_checkpoint",
    "set_rng_state",
    "verify_checkpoint",
]

FORMAT = "marti-checkpoint/2"
"""The ``format`` written in ``manifest.json`` and ``state.json``."""

_NAME = re.compile(r"^step_(\d{6,})$")
_MANIFEST_MAX_BYTES = 1 << 20
_STATE_JSON_MAX_BYTES = 64 << 20


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: missing, truncated, altered, or of an old format.

    The message names the checkpoint and the file at fault.
    """


class FirstFormatCheckpoint(CheckpointError):
    """A checkpoint of the first format (a pickled ``state.pt``): intact, but it must be
    converted (``marti checkpoint convert``) before use, so resume does not skip it."""


# ------------------------------------------------------------------ state tree <-> JSON


def encode_tree(tree: Any, prefix: str = "") -> tuple[Any, dict[str, torch.Tensor]]:
    """``(json_value, tensors)``: a nested state as JSON plus the tensors it holds.

    Containers become JSON: a ``dict`` with string keys an object, a ``list`` an array; a
    ``tuple`` is ``{"$tuple": [...]}``, a dict with other keys (an optimizer's parameter
    ids) ``{"$map": [[key, value], ...]}``, a non-finite float ``{"$float": "nan"}``; each
    tensor is ``{"$tensor": key}`` with ``tensors[key]`` a contiguous CPU copy. Keys are
    ``prefix`` plus the tensor's path (``engines/policy/optimizer/state/0/exp_avg``).

    Raises:
        TypeError: a value of another type, naming its path (checkpoints hold tensors,
            numbers, strings, booleans, None and these containers only).
    """
    tensors: dict[str, torch.Tensor] = {}
    storages: set[int] = set()

    def enc(x: Any, path: str) -> Any:
        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, (int, np.integer)):
            return int(x)
        if isinstance(x, (float, np.floating)):
            x = float(x)
            return x if math.isfinite(x) else {"$float": repr(x)}
        if isinstance(x, torch.Tensor):
            t = x.detach().cpu().contiguous()
            ptr = t.untyped_storage().data_ptr()
            if ptr in storages and t.numel() > 0:  # safetensors refuses shared storage
                t = t.clone()
            storages.add(t.untyped_storage().data_ptr())
            tensors[path] = t
            return {"$tensor": path}
        if isinstance(x, tuple):
            return {"$tuple": [enc(v, f"{path}/{i}") for i, v in enumerate(x)]}
        if isinstance(x, list):
            return [enc(v, f"{path}/{i}") for i, v in enumerate(x)]
        if isinstance(x, dict):
            if all(isinstance(k, str) and not k.startswith("$") for k in x):
                return {k: enc(v, f"{path}/{k}") for k, v in x.items()}
            pairs = [[enc(k, f"{path}/<key>"), enc(v, f"{path}/{k}")] for k, v in x.items()]
            return {"$map": pairs}
        raise TypeError(
            f"cannot store a {type(x).__name__} at {path or '/'} in a checkpoint: checkpoints "
            "hold tensors, numbers, strings, booleans, None, lists, tuples and dicts only"
        )

    return enc(tree, prefix), tensors


def decode_tree(value: Any, tensors: dict[str, torch.Tensor], where: str = "state.json") -> Any:
    """The inverse of :func:`encode_tree`; builds only those types.

    Raises:
        CheckpointError: an unknown ``$`` tag or a tensor key missing from ``tensors``,
            naming ``where``.
    """
    if isinstance(value, list):
        return [decode_tree(v, tensors, where) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((tag, body),) = value.items()
        if tag == "$tensor":
            if not isinstance(body, str) or body not in tensors:
                raise CheckpointError(f"{where}: tensor {body!r} is not in state.safetensors")
            return tensors[body]
        if tag == "$tuple" and isinstance(body, list):
            return tuple(decode_tree(v, tensors, where) for v in body)
        if tag == "$float" and body in ("nan", "inf", "-inf"):
            return float(body)
        if tag == "$map" and isinstance(body, list):
            if not all(isinstance(kv, list) and len(kv) == 2 for kv in body):
                raise CheckpointError(f"{where}: malformed $map entry")
            return {decode_tree(k, tensors, where): decode_tree(v, tensors, where) for k, v in body}
    bad = [k for k in value if k.startswith("$")]
    if bad:
        raise CheckpointError(f"{where}: unknown tag {bad[0]!r}")
    return {k: decode_tree(v, tensors, where) for k, v in value.items()}


# ------------------------------------------------------------------------------ RNG


def rng_state() -> dict[str, Any]:
    """The python, numpy and torch global RNG states as plain JSON (integer arrays)."""
    version, internal, gauss = random.getstate()
    name, key, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": {"version": version, "state": list(internal), "gauss_next": gauss},
        "numpy": {
            "bit_generator": name,
            "key": [int(k) for k in key],
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state().tolist(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore the states :func:`rng_state` returned.

    Raises:
        CheckpointError: a state of the wrong shape.
    """
    try:
        py, npy = state["python"], state["numpy"]
        random.setstate((int(py["version"]), tuple(int(v) for v in py["state"]), py["gauss_next"]))
        np.random.set_state(
            (
                str(npy["bit_generator"]),
                np.asarray(npy["key"], dtype=np.uint32),
                int(npy["pos"]),
                int(npy["has_gauss"]),
                float(npy["cached_gaussian"]),
            )
        )
        torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"state.json: bad RNG state ({type(e).__name__}: {e})") from e


# ------------------------------------------------------------------------------ saving


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _write_manifest(directory: Path, step: int) -> None:
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    entries = {
        p.relative_to(directory).as_posix(): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
        for p in files
    }
    manifest = {"format": FORMAT, "step": step, "files": entries}
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


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
        weights: unit name -> tensors (saved as ``weights/<unit>.safetensors``).
        state: The training state (see :func:`encode_tree` for what it may hold); the
            RNG states are added as ``state["rng"]``.
        config: The run's config as a dict.
    """
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".step_*"):  # left by a process killed while saving
        shutil.rmtree(stale, ignore_errors=True)
    final = root / f"step_{step:06d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".step_{step:06d}.", dir=root))
    try:
        (tmp / "weights").mkdir()
        for unit, tensors in weights.items():
            _check_unit_name(unit)
            save_file(
                {k: v.contiguous() for k, v in tensors.items()},
                tmp / "weights" / f"{unit}.safetensors",
            )
        tree, tensors = encode_tree({**state, "rng": rng_state()})
        save_file(tensors, tmp / "state.safetensors")
        doc = {"format": FORMAT, "step": step, "units": sorted(weights), "state": tree}
        (tmp / "state.json").write_text(json.dumps(doc, allow_nan=False))
        (tmp / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        _write_manifest(tmp, step)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    for old in _checkpoints(root)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _check_unit_name(unit: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", unit):
        raise ValueError(f"unit name {unit!r} cannot be a checkpoint file name")


def _checkpoints(root: Path) -> list[Path]:
    found = (
        [p for p in root.iterdir() if p.is_dir() and _NAME.match(p.name)] if root.is_dir() else []
    )
    return sorted(found, key=lambda p: int(_NAME.match(p.name).group(1)))  # type: ignore[union-attr]


# ------------------------------------------------------------------------ verifying


def _old_format_message(checkpoint: Path) -> str:
    return (
        f"{checkpoint} is a checkpoint of the first format: its state.pt is a pickle, which "
        "can run arbitrary code when loaded, so marti no longer reads it. If you trust where "
        f"it came from, convert it once with: marti checkpoint convert {checkpoint}"
    )


def _manifest(checkpoint: Path) -> dict[str, Any]:
    path = checkpoint / "manifest.json"
    if not path.is_file():
        if (checkpoint / "state.pt").is_file():
            raise FirstFormatCheckpoint(_old_format_message(checkpoint))
        raise CheckpointError(f"{path}: missing (an incomplete or foreign checkpoint)")
    if path.is_symlink() or path.stat().st_size > _MANIFEST_MAX_BYTES:
        raise CheckpointError(f"{path}: not a regular file of at most 1 MiB")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else None
        raise CheckpointError(f"{path}: format {got!r}, expected {FORMAT!r}")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise CheckpointError(f"{path}: 'files' must be a non-empty mapping")
    for name, entry in files.items():
        pure = PurePosixPath(name)
        if pure.is_absolute() or ".." in pure.parts or "\\" in name or not name:
            raise CheckpointError(f"{path}: file name {name!r} leaves the checkpoint")
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("bytes"), int)
            and isinstance(entry.get("sha256"), str)
        ):
            raise CheckpointError(f"{path}: entry {name!r} needs integer 'bytes' and 'sha256'")
    return manifest


def verify_checkpoint(checkpoint: str | Path, only: list[str] | None = None) -> dict[str, Any]:
    """Check the files of ``checkpoint`` (or the ``only`` ones) against its manifest.

    Returns:
        The manifest.

    Raises:
        CheckpointError: an old-format checkpoint (with the command that converts it), a
            missing or malformed manifest, or a file that is missing, a link, or has another
            size or sha256 than the manifest says (naming the file).
    """
    checkpoint = Path(checkpoint)
    manifest = _manifest(checkpoint)
    files = manifest["files"]
    for name in only if only is not None else list(files):
        if name not in files:
            raise CheckpointError(f"{checkpoint}: {name} is not in its manifest")
        path = checkpoint / name
        if path.is_symlink() or not path.is_file():
            raise CheckpointError(f"{path}: missing or not a regular file")
        size = path.stat().st_size
        if size != files[name]["bytes"]:
            raise CheckpointError(
                f"{path}: {size} bytes, the manifest says {files[name]['bytes']} (truncated?)"
            )
        if _sha256(path) != files[name]["sha256"]:
            raise CheckpointError(f"{path}: sha256 differs from the manifest (altered or corrupt)")
    return manifest


def find_checkpoint(path: str | Path, skipped: list[str] | None = None) -> Path:
    """The checkpoint to resume from: ``path`` itself, or the newest valid one of a run.

    Under a run directory the checkpoints are tried newest first; one that fails
    :func:`verify_checkpoint` is skipped, so resume falls back to the previous valid
    checkpoint; what was wrong with each skipped one (naming the bad file) is appended to
    ``skipped``, or issued as a warning when ``skipped`` is None. It never silently starts
    from step 0, and it stops at a first-format checkpoint (which needs converting, not
    skipping).

    Raises:
        FileNotFoundError: no checkpoint there.
        CheckpointError: ``path`` is a checkpoint that fails verification, or every
            checkpoint of the run does (each problem listed).
    """
    path = Path(path)
    if (path / "manifest.json").is_file() or (path / "state.pt").is_file():
        verify_checkpoint(path)
        return path
    found = _checkpoints(path / "checkpoints")
    if not found:
        raise FileNotFoundError(f"no checkpoint under {path} (expected {path}/checkpoints/step_*)")
    problems = []
    for checkpoint in reversed(found):
        try:
            verify_checkpoint(checkpoint)
        except FirstFormatCheckpoint:
            raise
        except CheckpointError as e:
            problems.append(str(e))
            continue
        if skipped is not None:
            skipped.extend(problems)
        elif problems:
            warnings.warn(
                f"skipped {len(problems)} unusable checkpoint(s), using {checkpoint.name}: "
                + "; ".join(problems),
                stacklevel=2,
            )
        return checkpoint
    raise CheckpointError(f"no usable checkpoint under {path}: " + "; ".join(problems))


def _read_state(checkpoint: Path) -> dict[str, Any]:
    path = checkpoint / "state.json"
    if path.stat().st_size > _STATE_JSON_MAX_BYTES:
        raise CheckpointError(f"{path}: larger than {_STATE_JSON_MAX_BYTES >> 20} MiB")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or "state" not in doc:
        raise CheckpointError(f"{path}: not a {FORMAT} state file")
    tensors = load_file(str(checkpoint / "state.safetensors"))
    state = decode_tree(doc["state"], tensors, str(path))
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: the state must be a mapping")
    state["step"] = doc.get("step")
    state["units"] = doc.get("units")
    if not isinstance(state["step"], int) or not isinstance(state["units"], list):
        raise CheckpointError(f"{path}: 'step' must be an integer and 'units' a list")
    return state


def load_checkpoint(checkpoint: str | Path) -> tuple[dict[str, dict[str, torch.Tensor]], dict]:
    """``(weights by unit, state)`` of a checkpoint written by :func:`save_checkpoint`.

    Every file is verified first. ``state`` holds what was saved plus ``step``, ``units``
    and ``rng`` (restored by the caller with :func:`set_rng_state`).

    Raises:
        CheckpointError: see :func:`verify_checkpoint`.
    """
    checkpoint = Path(checkpoint)
    verify_checkpoint(checkpoint)
    state = _read_state(checkpoint)
    weights = {}
    for unit in state["units"]:
        _check_unit_name(unit)
        weights[unit] = load_file(str(checkpoint / "weights" / f"{unit}.safetensors"))
    return weights, state


# ------------------------------------------------------------------ old-format conversion


def _legacy_rng(rng: Any) -> dict[str, Any]:
    """The first format's RNG states (tuples, an ndarray, a ByteTensor) as :func:`rng_state`."""
    version, internal, gauss = rng["python"]
    name, key, pos, has_gauss, cached = rng["numpy"]
    return {
        "python": {"version": version, "state": list(internal), "gauss_next": gauss},
        "numpy": {
            "bit_generator": name,
            "key": [int(k) for k in key],
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": rng["torch"].tolist(),
    }


def _load_legacy_state(path: Path, trust_pickle: bool) -> dict[str, Any]:
    """``state.pt`` with torch's restricted unpickler (tensors, containers and numpy's RNG
    array only); the full unpickler only with ``trust_pickle``."""
    safe = [np.ndarray, np.dtype, np.dtypes.UInt32DType]
    core = getattr(np, "_core", None) or np.core  # numpy 2, numpy 1
    reconstruct = core.multiarray._reconstruct
    try:
        with torch.serialization.safe_globals([*safe, reconstruct]):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        if not trust_pickle:
            raise CheckpointError(
                f"{path}: refused by the restricted unpickler ({str(e).splitlines()[0]}). It "
                "holds objects other than tensors and plain values, which can run code when "
                "loaded. Only if you trust its source: marti checkpoint convert --trust-pickle"
            ) from e
    return torch.load(path, map_location="cpu", weights_only=False)


def convert_checkpoint(checkpoint: str | Path, trust_pickle: bool = False) -> Path:
    """Rewrite a first-format checkpoint (``state.pt``) in this format, in place.

    ``state.pt`` is read with torch's restricted unpickler, which builds tensors and plain
    values only; ``trust_pickle=True`` allows the full unpickler (runs whatever the file
    says: for files from a trusted source only). The converted checkpoint is written beside
    the old one and swapped in atomically; ``state.pt`` is then gone.

    Raises:
        CheckpointError: not a first-format checkpoint, or refused by the restricted
            unpickler.
    """
    checkpoint = Path(checkpoint)
    legacy = checkpoint / "state.pt"
    if not legacy.is_file() or (checkpoint / "manifest.json").is_file():
        raise CheckpointError(f"{checkpoint}: no first-format state.pt to convert")
    old = _load_legacy_state(legacy, trust_pickle)
    step = int(old.pop("step"))
    rng = _legacy_rng(old.pop("rng"))
    weights = {p.stem: load_file(str(p)) for p in sorted(checkpoint.glob("*.safetensors"))}
    config = yaml.safe_load((checkpoint / "config.yaml").read_text(encoding="utf-8"))
    staging = Path(tempfile.mkdtemp(prefix=".convert.", dir=checkpoint.parent))
    saved_rng = rng_state()
    try:
        set_rng_state(rng)  # save_checkpoint records the global RNG states
        written = save_checkpoint(staging, step, weights, old, config, keep_last=1)
    finally:
        set_rng_state(saved_rng)
    backup = checkpoint.with_name(f".{checkpoint.name}.legacy")
    checkpoint.rename(backup)
    written.rename(checkpoint)
    shutil.rmtree(backup, ignore_errors=True)
    shutil.rmtree(staging, ignore_errors=True)
    verify_checkpoint(checkpoint)
    return checkpoint


# ------------------------------------------------------------------- trained weights


@dataclass
class TrainedUnit:
    """The trained weights of one unit of a checkpoint, for evaluation and export.

    Attributes:
        checkpoint: The checkpoint directory (``.../checkpoints/step_N``).
        unit: The unit's name (``policy`` for a shared model, the agent's name per agent).
        config: The run's config (its ``config.yaml``); ``config.model.name`` is the base
            model, ``config.env.eval_tasks`` its held-out tasks.
        tensors: The unit's trained tensors: a full model's by their plain Hugging Face
            names, or (``config.model.sharing == "lora"``) one LoRA adapter's, by their PEFT
            names (``...lora_A.<unit>.weight``).
    """

    checkpoint: Path
    unit: str
    config: TrainConfig
    tensors: dict[str, torch.Tensor]

    @property
    def is_adapter(self) -> bool:
        return self.config.model.sharing == "lora"


def load_trained_unit(path: str | Path, unit: str | None = None) -> TrainedUnit:
    """The weights of one unit of a run's newest valid checkpoint (or of ``path`` itself).

    Only the config and that unit's weights are read (after checking them against the
    manifest).

    Args:
        path: A run directory or a checkpoint directory.
        unit: The unit to load; None picks the only one (a run with ``model.sharing:
            per_agent`` or ``lora`` has one per agent, and then ``unit`` is required).

    Raises:
        FileNotFoundError: no checkpoint at ``path``.
        CheckpointError: see :func:`verify_checkpoint`.
        ValueError: ``unit`` is not in the checkpoint (the message lists those that are), or
            it is ambiguous.
    """
    checkpoint = find_checkpoint(path)
    manifest = verify_checkpoint(checkpoint, only=["config.yaml"])
    config = load_config(checkpoint / "config.yaml", check_env=False)
    units = sorted(
        PurePosixPath(name).stem
        for name in manifest["files"]
        if name.startswith("weights/") and name.endswith(".safetensors")
    )
    if unit is None:
        if len(units) != 1:
            raise ValueError(f"{checkpoint} holds units {units}: choose one")
        unit = units[0]
    if unit not in units:
        raise ValueError(f"{checkpoint} has no unit {unit!r}; it holds {units}")
    name = f"weights/{unit}.safetensors"
    verify_checkpoint(checkpoint, only=[name])
    tensors = load_file(str(checkpoint / name))
    return TrainedUnit(checkpoint, unit, config, tensors)
