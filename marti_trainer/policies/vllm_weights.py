"""vLLM weight staging: new weights become a complete safetensors checkpoint a vLLM worker reloads.

Shared by the ``vllm`` backend (an in-process engine) and the ``openai`` backend (a ``vllm
serve`` process started with ``--worker-extension-cls``): :class:`WeightStager` checks a
state dict or checkpoint directory against the model's names and shapes and writes a
complete checkpoint; :class:`WorkerExtension` is the code vLLM mixes into its workers to
reload from it (and repair tied LM heads). Importing this module imports neither vllm nor
torch.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["WORKER_EXTENSION", "WORKER_EXTENSION_NAMES", "WeightStager", "WorkerExtension"]

WORKER_EXTENSION = "marti_trainer.policies.vllm_weights.WorkerExtension"
"""Qualified name of :class:`WorkerExtension`, for vLLM's ``worker_extension_cls`` (engine
argument) or ``--worker-extension-cls`` (server flag)."""

WORKER_EXTENSION_NAMES: tuple[str, ...] = (
    WORKER_EXTENSION,
    "marti_trainer.policies.vllm.WorkerExtension",
)
"""Every name that reaches :class:`WorkerExtension`: its own and the re-export in
:mod:`marti_trainer.policies.vllm` (where it lived before; servers may be started with it)."""


def _weight_files(folder: Path) -> list[Path]:
    """The ``*.safetensors`` weight files of a checkpoint directory (adapters excluded)."""
    return sorted(p for p in folder.glob("*.safetensors") if p.name != "adapter_model.safetensors")


def _read_shapes(files: Sequence[Path]) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape from safetensors headers (no tensor data is read)."""
    # torch and safetensors load on first use: the openai backend stays torch-free
    from safetensors import safe_open

    shapes: dict[str, tuple[int, ...]] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open is not a mapping
                shapes[name] = tuple(handle.get_slice(name).get_shape())
    return shapes


class WeightStager:
    """Turns ``load_weights`` sources into complete safetensors checkpoints for a reload.

    Knows the model's parameter names and shapes (read from the safetensors headers of the
    model directory), checks a state dict or checkpoint directory against them, and writes a
    complete checkpoint: a state dict that covers only some parameters is completed with the
    current values, read from the last complete checkpoint loaded. With tied word embeddings
    ``lm_head.weight`` is accepted (HF ``state_dict()`` lists it) and dropped, as
    ``save_pretrained`` does.

    Args:
        model_dir: the model's checkpoint directory (``config.json`` + ``*.safetensors``).
        stage_root: where staged checkpoints are written; a private temporary directory by
            default, removed by :meth:`cleanup`.
        dtype: the engine's weight dtype (``"bfloat16"``, ``"float16"``, ``"float32"``);
            floating-point tensors are staged in it (half the bytes of an fp32 trainer's
            weights in bf16, and the engine loads them without a cast). None keeps each
            tensor's own dtype.
    """

    def __init__(
        self,
        model_dir: str | Path,
        stage_root: str | Path | None = None,
        dtype: str | None = None,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.dtype = dtype
        files = _weight_files(self.model_dir)
        if not files:
            raise ValueError(
                f"{self.model_dir} has no *.safetensors weights: load_weights needs them to know "
                f"the parameter names and shapes"
            )
        self.shapes = _read_shapes(files)
        config = json.loads((self.model_dir / "config.json").read_text())
        self.tied = bool(config.get("tie_word_embeddings", False))
        self.current = self.model_dir  # last complete checkpoint loaded
        self._own_root = stage_root is None
        self.stage_root = Path(
            tempfile.mkdtemp(prefix="marti-weights-") if stage_root is None else stage_root
        )
        self._staged: Path | None = None
        self._count = 0

    def _accepted(self) -> dict[str, tuple[int, ...]]:
        accepted = dict(self.shapes)
        if self.tied and "model.embed_tokens.weight" in self.shapes:
            accepted.setdefault("lm_head.weight", self.shapes["model.embed_tokens.weight"])
        return accepted

    def check(self, shapes: Mapping[str, tuple[int, ...]]) -> None:
        """Raise ValueError on an unknown name or a shape mismatch (all checked first)."""
        accepted = self._accepted()
        unknown = sorted(set(shapes) - set(accepted))
        if unknown:
            raise ValueError(
                f"load_weights: {len(unknown)} unknown parameter name(s), e.g. {unknown[:5]}; "
                f"expected names like {sorted(accepted)[:3]}"
            )
        for name, shape in shapes.items():
            if tuple(shape) != accepted[name]:
                raise ValueError(
                    f"load_weights: {name} has shape {tuple(shape)}, the model expects "
                    f"{accepted[name]}"
                )

    def stage(self, source: Mapping[str, Tensor] | str | Path) -> Path:
        """Check ``source`` and return a directory holding a complete checkpoint of it.

        A complete checkpoint directory is returned as is (not copied); anything else is
        written to a new staging directory. Call :meth:`commit` once the reload succeeded.

        Raises:
            ValueError: unknown names, shape mismatches, a directory without safetensors,
                or a partial source when the current checkpoint is gone.
        """
        if isinstance(source, Mapping):
            tensors = dict(source.items())
            self.check({k: tuple(v.shape) for k, v in tensors.items()})
        else:
            folder = Path(source)
            if not folder.is_dir():
                raise ValueError(f"load_weights: {folder} is not a directory")
            files = _weight_files(folder)
            if not files:
                raise ValueError(f"load_weights: no *.safetensors files in {folder}")
            shapes = _read_shapes(files)
            self.check(shapes)
            if set(self.shapes) <= set(shapes):
                return folder
            # torch and safetensors load on first use: the openai backend stays torch-free
            from safetensors.torch import load_file

            tensors = {}
            for file in files:
                tensors.update(load_file(str(file), device="cpu"))
        return self._write(tensors)

    def _write(self, tensors: dict[str, Tensor]) -> Path:
        # torch and safetensors load on first use: the openai backend stays torch-free
        import torch
        from safetensors.torch import load_file, save_file

        if self.tied:
            tensors.pop("lm_head.weight", None)
        cast = getattr(torch, self.dtype) if self.dtype else None

        def staged(value: Tensor) -> Tensor:
            value = value.detach().to("cpu")
            if cast is not None and value.is_floating_point():
                value = value.to(cast)
            return value.contiguous()

        full = {k: staged(v) for k, v in tensors.items()}
        missing = set(self.shapes) - set(full)
        if missing:
            current_files = _weight_files(self.current)
            if not current_files:
                raise ValueError(
                    f"load_weights: {len(missing)} parameter(s) missing from the new weights "
                    f"and the current checkpoint {self.current} is gone; pass all parameters"
                )
            for file in current_files:
                for name, value in load_file(str(file), device="cpu").items():
                    if name in missing:
                        full[name] = staged(value)
        self._count += 1
        target = self.stage_root / f"step-{self._count:06d}"
        target.mkdir(parents=True)
        save_file(full, str(target / "model.safetensors"), metadata={"format": "pt"})
        return target

    def commit(self, loaded: Path) -> None:
        """Record ``loaded`` as the current weights; delete the previously staged directory."""
        previous = self._staged
        self.current = loaded
        self._staged = loaded if loaded.parent == self.stage_root else None
        if previous is not None and previous != loaded:
            shutil.rmtree(previous, ignore_errors=True)

    def discard(self, staged: Path) -> None:
        """Delete a staged directory whose reload failed (a user's directory is kept)."""
        if staged.parent == self.stage_root and staged != self._staged:
            shutil.rmtree(staged, ignore_errors=True)

    def cleanup(self) -> None:
        """Delete everything staged (the whole staging root if it was created here)."""
        if self._own_root:
            shutil.rmtree(self.stage_root, ignore_errors=True)
        elif self._staged is not None:
            shutil.rmtree(self._staged, ignore_errors=True)
        self._staged = None


class WorkerExtension:
    """Methods vLLM mixes into its worker class (``worker_extension_cls``).

    They run inside each engine worker process, called by name with
    ``LLM.collective_rpc(name, kwargs=...)`` or a vLLM server's ``POST /collective_rpc``
    (development mode), so only strings cross the process boundary. This class imports
    nothing at module level: vLLM imports it in every worker.
    """

    def marti_reload_weights(self, weights_path: str) -> None:
        """Reload all weights from the safetensors in ``weights_path``; re-pack tied heads.

        ``weights_path`` is a directory on the worker's filesystem. After vLLM's own
        ``reload_weights``, every vocabulary embedding and LM head re-runs its
        ``process_weights_after_loading``: on CPU that re-packs the GEMM kernel of an LM
        head whose weight is tied to the (reloaded) input embedding; elsewhere it is a
        no-op.
        """
        # runs inside a vLLM worker, where vllm is loaded
        from vllm.model_executor.layers.vocab_parallel_embedding import (
            VocabParallelEmbedding,
        )

        self.reload_weights(weights_path=weights_path)  # type: ignore[attr-defined]
        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        for module in model.modules():
            method = getattr(module, "quant_method", None)
            if isinstance(module, VocabParallelEmbedding) and method is not None:
                method.process_weights_after_loading(module)
