"""The two kinds of Ray actor of a distributed run, as plain classes.

:class:`TrainerActor` holds the trained units of one group of agents, built in the actor's
own process with :func:`marti_trainer.team.build_team` (so the model, engine, reference
scorer and LoRA adapters are exactly a local run's), and runs
:func:`marti_trainer.learner.update_unit` next to the weights: only the rollout samples travel
in, only metrics travel out. :class:`RolloutWorker` holds one rollout :class:`Policy` per
policy key (``hf`` or ``vllm``, built like the local team's) and serves ``generate`` /
``generate_each`` and weight updates.

Both are ordinary classes: :func:`marti_trainer.distributed.ray_team.build_ray_team` makes
them actors with ``ray.remote(cls).options(...)`` on placement-group bundles, and a test
can also call them in-process. Weights reach a worker as a :class:`WeightUpdate` (tensors,
or a LoRA adapter's files) that Ray moves through its object store, node to node: no shared
filesystem is needed.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from marti_trainer.config import TrainConfig
from marti_trainer.learner import LossFn, TrainBatch, update_unit
from marti_trainer.models import resolve_model
from marti_trainer.policies import Generation, Message, Policy, SamplingParams
from marti_trainer.rollout.drivers import generate_each
from marti_trainer.team import build_team, make_rollout_policy, resolve_device

__all__ = ["RolloutWorker", "TrainerActor", "WeightUpdate"]


def _node_id() -> str:
    import ray  # ray is optional: imported only inside an actor

    return ray.get_runtime_context().get_node_id()


@dataclasses.dataclass
class WeightUpdate:
    """New weights for a rollout model: full tensors, or one LoRA adapter's saved files.

    Attributes:
        tensors: Parameter name -> tensor (HF names), for a full model.
        adapter: The adapter's name, for a LoRA unit.
        files: The PEFT adapter directory's files (name -> bytes), for a LoRA unit.
    """

    tensors: dict[str, torch.Tensor] | None = None
    adapter: str | None = None
    files: dict[str, bytes] | None = None


class TrainerActor:
    """The trained units of ``agents`` (one unit, or one LoRA unit per agent) in one process.

    Args:
        cfg: The run's config; ``cfg.model.sharing`` decides the units as in a local run.
        agents: The agents this actor trains (all of them for ``shared``/``lora``, one for
            ``per_agent``).
        loss_fn: As :func:`marti_trainer.team.build_team` takes it.
        want_ref: Build the frozen reference scorer (``algorithm.kl_coef > 0``).
        colocated: The rollout runs on this actor's own policies (no rollout workers). If
            False, the units are built as for an ``hf`` float32 rollout, which with the
            torch engine generates with the training model itself (no second copy).
    """

    def __init__(
        self,
        cfg: TrainConfig,
        agents: Sequence[str],
        loss_fn: LossFn,
        want_ref: bool,
        colocated: bool = False,
    ) -> None:
        torch.manual_seed(cfg.seed)  # as train() does before build_team (LoRA init)
        build_cfg = cfg
        if not colocated:
            rollout = dataclasses.replace(cfg.rollout, backend="hf", dtype="float32")
            build_cfg = dataclasses.replace(cfg, rollout=rollout)
        self.cfg = cfg
        self.team = build_team(build_cfg, list(agents), loss_fn, want_ref)
        self.units = {u.name: u for u in self.team.units}
        self.pad_id = self.team.tokenizer.pad_token_id

    # ------------------------------------------------------------------ description
    def describe(self) -> list[dict[str, Any]]:
        """One ``{"name", "agents", "adapter"}`` per unit, in the local team's order."""
        return [
            {"name": u.name, "agents": list(u.agents), "adapter": u.adapter}
            for u in self.team.units
        ]

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        """The hex id of the Ray node this actor runs on (only inside a Ray actor)."""
        return _node_id()

    def max_context_tokens(self, key: str) -> int:
        return int(self.units[key].policy.max_context_tokens)

    # ------------------------------------------------------------------ training
    def update(self, unit: str, samples: list, step: int) -> dict[str, float]:
        """:func:`marti_trainer.learner.update_unit` on ``unit`` (advantages, ref, steps)."""
        return update_unit(self.units[unit], samples, self.cfg, self.pad_id, step)

    def train_step(self, unit: str, batch: TrainBatch) -> dict[str, float]:
        """One ``engine.step(batch)`` of ``unit``."""
        return self.units[unit].engine.step(batch)

    # ------------------------------------------------------------------ weights and state
    def weights(self, unit: str) -> dict[str, torch.Tensor]:
        return self.units[unit].engine.weights()

    def load_weights(self, unit: str, tensors: dict[str, torch.Tensor]) -> None:
        self.units[unit].engine.load_weights(tensors)

    def state_dict(self, unit: str) -> dict[str, Any]:
        return self.units[unit].engine.state_dict()

    def load_state_dict(self, unit: str, state: dict[str, Any]) -> None:
        self.units[unit].engine.load_state_dict(state)

    def save(self, unit: str, directory: str) -> None:
        """``engine.save(directory)`` on the actor's node."""
        self.units[unit].engine.save(directory)

    def export_weights(self, unit: str, dtype: str | None = None) -> WeightUpdate:
        """What a rollout worker needs to match ``unit``: tensors (cast to ``dtype``, e.g. the
        rollout's ``"bfloat16"``, to halve the transfer) or the LoRA adapter's files."""
        u = self.units[unit]
        if u.adapter is None:
            cast = getattr(torch, dtype) if dtype else None
            tensors = u.engine.weights()
            if cast is not None:
                tensors = {k: v.to(cast) for k, v in tensors.items()}
            return WeightUpdate(tensors=tensors)
        with tempfile.TemporaryDirectory(prefix="marti-export-") as tmp:
            u.model.save_pretrained(tmp, selected_adapters=[u.adapter])
            folder = next(Path(tmp).rglob("adapter_config.json")).parent
            files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
        return WeightUpdate(adapter=u.adapter, files=files)

    def sync_local(self, unit: str) -> None:
        """Colocated rollout: push ``unit``'s weights to this actor's own policy."""
        self.team.sync(self.units[unit])

    # ------------------------------------------------------------------ colocated generation
    def generate(
        self,
        prompts: Sequence[Sequence[Message]],
        params: SamplingParams,
        adapter: str | None,
        key: str,
    ) -> list[list[Generation]]:
        return self.units[key].policy.generate(prompts, params, adapter)

    def generate_each(
        self,
        prompts: Sequence[Sequence[Message]],
        params: Sequence[SamplingParams],
        adapter: str | None,
        key: str,
    ) -> list[Generation]:
        return generate_each(self.units[key].policy, prompts, params, adapter)

    def close(self) -> None:
        self.team.close()


class RolloutWorker:
    """Rollout policies for the given keys (one per key, or one shared by all for LoRA).

    Args:
        cfg: The run's config, read by :func:`marti_trainer.team.make_rollout_policy` exactly
            as for a local team's rollout policy.
        keys: The policy keys (unit names) this worker serves.
        shared: One policy object for every key (LoRA: adapters of one base model).
    """

    def __init__(self, cfg: TrainConfig, keys: Sequence[str], shared: bool = False) -> None:
        model_dir = resolve_model(cfg.model.name)
        # Ray hides the GPUs it did not give this actor (CUDA_VISIBLE_DEVICES), so "auto"
        # is cuda exactly when the worker reserved a GPU.
        device = resolve_device(cfg.model.device)
        self.policies: dict[str, Policy] = {}
        for key in keys:
            if shared and self.policies:
                self.policies[key] = next(iter(self.policies.values()))
            else:  # as a local team's rollout policy (LoRA flags and seed for vLLM too)
                self.policies[key] = make_rollout_policy(cfg, model_dir, device=device)
        self._tmp = Path(tempfile.mkdtemp(prefix="marti-worker-"))
        self._adapter_dirs: dict[tuple[int, str], Path] = {}
        self._version = 0

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        """The hex id of the Ray node this actor runs on (only inside a Ray actor)."""
        return _node_id()

    def max_context_tokens(self, key: str) -> int:
        return int(self.policies[key].max_context_tokens)

    def generate(
        self,
        prompts: Sequence[Sequence[Message]],
        params: SamplingParams,
        adapter: str | None,
        key: str,
    ) -> list[list[Generation]]:
        return self.policies[key].generate(prompts, params, adapter)

    def generate_each(
        self,
        prompts: Sequence[Sequence[Message]],
        params: Sequence[SamplingParams],
        adapter: str | None,
        key: str,
    ) -> list[Generation]:
        return generate_each(self.policies[key], prompts, params, adapter)

    def load_weights(self, key: str, update: WeightUpdate | Mapping[str, Any] | str) -> None:
        """Apply a :class:`WeightUpdate`, a state dict, or a checkpoint directory on this node."""
        policy = self.policies[key]
        if isinstance(update, WeightUpdate) and update.adapter is not None:
            self._add_adapter(policy, update.adapter, update.files or {})
        elif isinstance(update, WeightUpdate):
            policy.load_weights(update.tensors or {})
        else:
            policy.load_weights(update)

    def _add_adapter(self, policy: Policy, name: str, files: Mapping[str, bytes]) -> None:
        # A fresh directory per update: vLLM reads adapter files lazily and they must stay
        # in place while registered; the previous version is deleted once replaced.
        self._version += 1
        folder = self._tmp / f"{name}.{self._version}"
        folder.mkdir(parents=True)
        for file_name, data in files.items():
            (folder / Path(file_name).name).write_bytes(data)
        policy.add_adapter(name, folder)
        old = self._adapter_dirs.get((id(policy), name))
        self._adapter_dirs[(id(policy), name)] = folder
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def close(self) -> None:
        for policy in {id(p): p for p in self.policies.values()}.values():
            policy.close()
        shutil.rmtree(self._tmp, ignore_errors=True)
