"""Agents -> trainable units: which weights each agent's samples train, and how the rollout
backend gets the new weights.

``model.sharing``:

``shared``
    One model (one :class:`Unit` named ``"policy"``) trained on every agent's samples.
``per_agent``
    One full model per agent (a unit per agent, each with its own optimizer).
``lora``
    One frozen fp32 base model with one LoRA adapter per agent (PEFT); each agent's unit
    updates only its adapter, so three agents cost about one model's memory.

Every unit has a training model (fp32 master weights) and a rollout policy. After each
update :meth:`Team.sync` pushes the new weights to the rollout backend: ``hf`` copies the
tensors in place (``HFPolicy.load_weights``) or, with ``rollout.dtype=float32``, generates
with the training model itself; ``vllm`` reloads a saved safetensors directory; LoRA
adapters are saved and re-registered with ``add_adapter``.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from marti_trainer.attention import resolve_attention
from marti_trainer.config import DEVICE_PATTERN, TrainConfig
from marti_trainer.engines import Engine, make_engine
from marti_trainer.learner import LossFn, TrainBatch, score_with
from marti_trainer.models import resolve_model
from marti_trainer.policies import Policy, make_policy
from marti_trainer.policies.capabilities import GeneratesEach
from marti_trainer.precision import resolve_config

__all__ = ["Team", "Unit", "build_team", "make_rollout_policy", "resolve_device"]


@dataclass
class Unit:
    """One set of trained weights and the agents whose samples train it."""

    name: str
    agents: list[str]
    model: torch.nn.Module
    engine: Engine
    policy: Policy
    adapter: str | None = None
    in_place: bool = False  # the policy generates with `model` itself: nothing to sync
    version: int = 0  # adapter versions pushed to the policy
    ref: Callable[[TrainBatch], torch.Tensor] | None = None


@dataclass
class Team:
    units: list[Unit]
    model_dir: Path
    tokenizer: Any
    work_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="marti-sync-")))

    def unit_of(self, agent: str) -> Unit:
        for unit in self.units:
            if agent in unit.agents:
                return unit
        raise KeyError(f"no trained unit for agent {agent!r}")

    def rollout_policies(self, greedy_dedup: bool = False) -> dict[str, Any]:
        """agent -> policy (or ``(policy, adapter)``), as ``rollout(policies=...)`` takes.

        With ``greedy_dedup`` each backend policy is wrapped in one :class:`GreedyDedup`.
        """
        wrapped: dict[int, Policy] = {}
        out = {}
        for u in self.units:
            policy = u.policy
            if greedy_dedup:
                policy = wrapped.setdefault(id(u.policy), GreedyDedup(u.policy))
            for agent in u.agents:
                out[agent] = (policy, u.adapter) if u.adapter else policy
        return out

    def sync(self, unit: Unit) -> None:
        """Push ``unit``'s current weights to its rollout policy."""
        if unit.in_place:
            return
        if unit.adapter is None:  # HF copies in place; vLLM stages the tensors and reloads
            unit.policy.load_weights(unit.engine.weights())
            return
        # A new folder per version: a backend may read an adapter's files lazily.
        unit.version += 1
        folder = self.work_dir / f"{unit.adapter}-{unit.version}"
        unit.model.save_pretrained(folder, selected_adapters=[unit.adapter])
        config = next(folder.rglob("adapter_config.json"))
        unit.policy.add_adapter(unit.adapter, config.parent)
        shutil.rmtree(self.work_dir / f"{unit.adapter}-{unit.version - 2}", ignore_errors=True)

    def close(self) -> None:
        seen: set[int] = set()
        for unit in self.units:
            if id(unit.policy) not in seen:
                seen.add(id(unit.policy))
                unit.policy.close()


class GreedyDedup(Policy, GeneratesEach):
    """Greedy decoding of a rollout's requests, each distinct prompt generated once.

    In a debate with one shared model the debaters see identical prompts; greedy
    evaluation then needs one generation per distinct prompt, not one per agent. The rollout
    engine calls :meth:`generate_each` with every pending request (``driver="batch"``).
    Only the public :class:`Policy` API is used, so any backend works.
    """

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def generate_each(self, prompts, params, adapter=None) -> list:
        if any(p.temperature != 0 for p in params):
            raise ValueError("GreedyDedup serves greedy requests only (temperature 0)")
        unique: dict[tuple, list[int]] = {}
        for i, messages in enumerate(prompts):
            unique.setdefault(tuple((m["role"], m["content"]) for m in messages), []).append(i)
        first = [prompts[rows[0]] for rows in unique.values()]
        outs = self.policy.generate(first, replace(params[0], seed=None), adapter)
        result: list = [None] * len(prompts)
        for rows, out in zip(unique.values(), outs, strict=True):
            for i in rows:
                result[i] = out[0]
        return result

    def generate(self, prompts, params, adapter=None) -> list:
        return self.policy.generate(prompts, params, adapter)

    def load_weights(self, source) -> None:
        self.policy.load_weights(source)

    @property
    def tokenizer(self) -> Any:
        return self.policy.tokenizer

    @property
    def max_context_tokens(self) -> int:
        return self.policy.max_context_tokens

    def close(self) -> None:
        pass


def resolve_device(spec: str, what: str = "model.device") -> torch.device:
    """A device setting (``auto``, ``cpu``, ``cuda``, ``cuda:N``) as a torch device.

    ``auto`` is ``cuda`` when torch sees a GPU, else ``cpu``. ``what`` names the setting in
    errors.

    Raises:
        ValueError: ``spec`` is not a device, or names a CUDA device torch does not see.
    """
    if not re.fullmatch(DEVICE_PATTERN, spec):
        raise ValueError(f"{what} must be auto, cpu, cuda or cuda:N, got {spec!r}")
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (device.index or 0) >= count:
            raise ValueError(
                f"{what}={spec!r}, but torch sees {count} CUDA device(s) (torch "
                f"{torch.__version__}, CUDA build: {torch.version.cuda is not None}); "
                f"use {what}=auto or cpu"
            )
    return device


def precision_device(cfg: TrainConfig) -> torch.device:
    """The device ``precision: auto`` is resolved for: the trained model's (``model.device``)
    in a local run; under Ray the trainer actors' (``cuda`` with ``distributed.trainer_gpus >
    0``, else ``cpu``), which the driver itself may not have."""
    if cfg.distributed.backend == "ray":
        return torch.device("cuda" if cfg.distributed.trainer_gpus > 0 else "cpu")
    return resolve_device(cfg.model.device)


def load_model(
    model_dir: Path,
    gradient_checkpointing: bool,
    device: torch.device | str = "cpu",
    attn_implementation: str = "auto",
) -> torch.nn.Module:
    """The fp32 training (or reference) model, in eval mode, with the attention kernel
    :func:`~marti_trainer.attention.resolve_attention` picks for ``device``."""
    model = AutoModelForCausalLM.from_pretrained(
        model_dir,
        dtype=torch.float32,
        local_files_only=True,
        attn_implementation=resolve_attention(attn_implementation, device),
    ).to(device)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    model.eval()
    return model


def make_rollout_policy(
    cfg: TrainConfig,
    model_dir: Path,
    model: torch.nn.Module | None = None,
    device: torch.device | str = "cpu",
) -> Policy:
    """The rollout policy ``cfg.rollout`` describes (local teams and Ray rollout workers).

    ``model``: generate with this training model itself (hf backend, in place); ``device``:
    where the hf backend loads its copy. ``rollout.dtype: auto`` is resolved for ``device``.
    """
    cfg, _ = resolve_config(cfg, torch.device(device))
    if cfg.rollout.backend == "hf":
        kwargs: dict[str, Any] = {"batch_size": cfg.rollout.batch_size, "seed": cfg.seed}
        if model is not None:  # generate with the training model itself (fp32, in place)
            return make_policy("hf", model, tokenizer=model_dir, **kwargs)
        return make_policy(
            "hf", str(model_dir), dtype=cfg.rollout.dtype, device=device,
            attn_implementation=cfg.model.attn_implementation, **kwargs,
        )  # fmt: skip
    kwargs = {"dtype": cfg.rollout.dtype, "seed": cfg.seed}
    if cfg.model.sharing == "lora":
        kwargs.update(enable_lora=True, max_lora_rank=cfg.model.lora_rank, max_loras=8)
    return make_policy(cfg.rollout.backend, str(model_dir), **kwargs)


def _frozen_scorer(
    model: torch.nn.Module, cfg: TrainConfig
) -> Callable[[TrainBatch], torch.Tensor]:
    for p in model.parameters():
        p.requires_grad_(False)
    return lambda batch: score_with(model, batch, cfg)


def build_team(cfg: TrainConfig, agents: list[str], loss_fn: LossFn, want_ref: bool) -> Team:
    """Models, engines and rollout policies for ``cfg.model.sharing`` (see module docstring)."""
    model_dir = resolve_model(cfg.model.name)
    device = resolve_device(cfg.model.device)
    cfg, _ = resolve_config(cfg, device)  # precision and rollout dtype "auto"
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    steps = cfg.total_steps * cfg.algorithm.updates_per_batch
    in_place = (
        cfg.rollout.backend == "hf"
        and cfg.rollout.dtype == "float32"
        and cfg.optim.engine == "torch"
    )
    if cfg.model.sharing == "lora":
        team = Team(
            _lora_units(cfg, agents, model_dir, loss_fn, steps, want_ref, device),
            model_dir,
            tokenizer,
        )
        for unit in team.units:  # register every adapter with the rollout policy
            team.sync(unit)
        return team
    groups = [("policy", agents)] if cfg.model.sharing == "shared" else [(a, [a]) for a in agents]
    units = []
    for name, members in groups:
        model = load_model(
            model_dir, cfg.model.gradient_checkpointing, device, cfg.model.attn_implementation
        )
        engine = make_engine(model, cfg.optim, loss_fn, steps)
        model = engine.model
        placed = next(model.parameters()).device  # DeepSpeed may have moved it
        policy = make_rollout_policy(cfg, model_dir, model if in_place else None, placed)
        ref = None
        if want_ref:
            ref = _frozen_scorer(
                load_model(model_dir, False, placed, cfg.model.attn_implementation), cfg
            )
        units.append(Unit(name, members, model, engine, policy, in_place=in_place, ref=ref))
    return Team(units, model_dir, tokenizer)


def _lora_units(
    cfg: TrainConfig,
    agents: list[str],
    model_dir: Path,
    loss_fn: LossFn,
    steps: int,
    want_ref: bool,
    device: torch.device,
) -> list[Unit]:
    try:
        from peft import LoraConfig, get_peft_model  # peft is optional: LoRA runs only
    except ImportError as exc:
        raise ImportError("model.sharing=lora needs peft: pip install peft") from exc
    base = load_model(
        model_dir, cfg.model.gradient_checkpointing, device, cfg.model.attn_implementation
    )
    lora = LoraConfig(
        r=cfg.model.lora_rank,
        lora_alpha=cfg.model.lora_alpha,
        target_modules=list(cfg.model.lora_targets),
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(base, lora, adapter_name=agents[0])
    for agent in agents[1:]:
        peft_model.add_adapter(agent, lora)
    policy = make_rollout_policy(cfg, model_dir, device=device)
    ref = None
    if want_ref:

        def ref(batch: TrainBatch) -> torch.Tensor:
            with peft_model.disable_adapter():
                return score_with(peft_model, batch, cfg)

    units = []
    for agent in agents:
        params = [p for n, p in peft_model.named_parameters() if f".{agent}." in n and "lora_" in n]
        for p in params:
            p.requires_grad_(True)

        def activate(name: str = agent) -> None:
            peft_model.set_adapter(name)
            for n, p in peft_model.named_parameters():  # set_adapter freezes the others
                if "lora_" in n:
                    p.requires_grad_(True)

        engine = make_engine(
            peft_model, cfg.optim, loss_fn, steps, params=params, activate=activate
        )
        units.append(Unit(agent, [agent], peft_model, engine, policy, adapter=agent, ref=ref))
    return units
