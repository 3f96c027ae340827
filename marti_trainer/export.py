"""Trained weights out of the library, in standard form: a Hugging Face model folder or a PEFT
adapter folder that transformers, PEFT and vLLM load without marti.

``marti export RUN_DIR OUT_DIR [--unit NAME] [--merge]``:

- a full-model unit (``model.sharing: shared`` or ``per_agent``) becomes a model folder:
  ``config.json``, ``model.safetensors`` (fp32, the trainer's master weights), the tokenizer
  with its chat template, and ``generation_config.json``;
- a LoRA unit (``model.sharing: lora``) becomes a PEFT adapter folder (``adapter_config.json``,
  ``adapter_model.safetensors``, the tokenizer) whose base is the run's model directory, or,
  with ``--merge``, a model folder with the adapter merged into the base weights.

Each export also holds ``marti_export.json``: the run, checkpoint, step, unit and the sha256
of the weights it came from. The folder is written under a temporary name and renamed into
place; an existing non-empty ``OUT_DIR`` is refused.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from marti_trainer.checkpoint import TrainedUnit, load_trained_unit
from marti_trainer.models import resolve_model

__all__ = ["ADAPTER_NAME", "export_unit", "full_model_tensors", "peft_model_of"]

ADAPTER_NAME = "default"
"""The adapter's name in an exported PEFT folder (PEFT's default: files at the folder's root)."""


def _base_model(trained: TrainedUnit) -> tuple[torch.nn.Module, Path]:
    from transformers import AutoModelForCausalLM

    model_dir = resolve_model(trained.config.model.name)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, local_files_only=True
    )
    return model.eval(), model_dir


def _load_full(model: torch.nn.Module, trained: TrainedUnit) -> None:
    """Copy a full-model unit's tensors into ``model`` (only tied weights may be absent)."""
    missing, unexpected = model.load_state_dict(trained.tensors, strict=False)
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    if unexpected or set(missing) - tied:
        raise ValueError(
            f"{trained.checkpoint}/weights/{trained.unit}.safetensors does not fit "
            f"{trained.config.model.name}: missing {sorted(set(missing) - tied)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]}"
        )


def peft_model_of(trained: TrainedUnit) -> Any:
    """The run's base model with the unit's LoRA adapter loaded as PEFT adapter
    :data:`ADAPTER_NAME` (the LoRA settings come from the run's ``model`` config).

    Raises:
        ValueError: the unit is not a LoRA adapter, or its tensors do not fit.
    """
    from peft import LoraConfig, get_peft_model

    if not trained.is_adapter:
        raise ValueError(f"unit {trained.unit!r} of {trained.checkpoint} is a full model")
    m = trained.config.model
    base, _ = _base_model(trained)
    lora = LoraConfig(
        r=m.lora_rank,
        lora_alpha=m.lora_alpha,
        target_modules=list(m.lora_targets),
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(base, lora, adapter_name=ADAPTER_NAME)
    marker = f".{trained.unit}."
    renamed = {k.replace(marker, f".{ADAPTER_NAME}."): v for k, v in trained.tensors.items()}
    expected = {n for n, _ in model.named_parameters() if "lora_" in n}
    if set(renamed) != expected:
        raise ValueError(
            f"{trained.checkpoint}/weights/{trained.unit}.safetensors holds "
            f"{len(renamed)} adapter tensors, the run's LoRA config expects {len(expected)}"
        )
    model.load_state_dict(renamed, strict=False)
    return model.eval()


def full_model_tensors(trained: TrainedUnit) -> dict[str, torch.Tensor]:
    """The unit as full-model tensors by their Hugging Face names: its own tensors, or (a
    LoRA unit) the base weights with the adapter merged in (``W + B A * alpha / r``)."""
    if not trained.is_adapter:
        return trained.tensors
    merged = peft_model_of(trained).merge_and_unload()
    return {k: v.detach() for k, v in merged.state_dict().items()}


def _provenance(trained: TrainedUnit, kind: str) -> dict[str, Any]:
    manifest = json.loads((trained.checkpoint / "manifest.json").read_text())
    entry = manifest["files"][f"weights/{trained.unit}.safetensors"]
    return {
        "kind": kind,
        "run": str(trained.checkpoint.parent.parent),
        "checkpoint": str(trained.checkpoint),
        "step": manifest["step"],
        "unit": trained.unit,
        "base_model": trained.config.model.name,
        "weights_sha256": entry["sha256"],
    }


def export_unit(
    path: str | Path, out_dir: str | Path, unit: str | None = None, merge: bool = False
) -> Path:
    """Write one unit of a run's newest valid checkpoint (or of the checkpoint ``path``) to
    ``out_dir`` as a model or adapter folder (see the module docstring); returns ``out_dir``.

    Raises:
        FileExistsError: ``out_dir`` exists and is not empty.
        CheckpointError, ValueError: as :func:`~marti_trainer.checkpoint.load_trained_unit`.
    """
    from transformers import AutoTokenizer, GenerationConfig

    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} exists and is not empty: choose a new folder")
    trained = load_trained_unit(path, unit)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        if trained.is_adapter and not merge:
            model = peft_model_of(trained)
            model.save_pretrained(tmp, selected_adapters=[ADAPTER_NAME])
            model_dir = resolve_model(trained.config.model.name)
            kind = "peft-adapter"
        elif trained.is_adapter:
            model = peft_model_of(trained).merge_and_unload()
            model_dir = resolve_model(trained.config.model.name)
            model.save_pretrained(tmp)
            kind = "model (adapter merged)"
        else:
            model, model_dir = _base_model(trained)
            _load_full(model, trained)
            model.save_pretrained(tmp)
            kind = "model"
        AutoTokenizer.from_pretrained(model_dir, local_files_only=True).save_pretrained(tmp)
        if kind != "peft-adapter":
            with contextlib.suppress(OSError):  # no generation_config.json: nothing to copy
                GenerationConfig.from_pretrained(model_dir).save_pretrained(tmp)
        (tmp / "marti_export.json").write_text(json.dumps(_provenance(trained, kind), indent=2))
        if out_dir.exists():
            out_dir.rmdir()
        tmp.rename(out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir
