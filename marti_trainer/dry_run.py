"""What a training config would do, worked out without doing it (``marti train --dry-run``).

:func:`plan_run` validates a :class:`~marti_trainer.config.TrainConfig` (the env, credit
method and task sources are built; no model weights are loaded) and reports: the model it
would load (or why it cannot: not available offline, with the way to provide it), its
parameter count read from ``config.json`` (:func:`decoder_param_count`), the units trained
and where each model copy lives, a memory estimate per device (:func:`unit_memory`), and the
number of steps, generations and tokens. :func:`format_plan` renders it for the terminal.

The memory figures are estimates for planning, not measurements: the model states follow
ZeRO's accounting (Rajbhandari et al. 2020, arXiv 1910.02054, section 3.1: AdamW keeps
weights, gradients and two moments per parameter) and the activations Korthikanti et al.
2022 (arXiv 2205.05198, section 4.1: ``34 s b h`` bytes per transformer layer in 16-bit,
without the ``5 a s^2 b`` attention-score term that fused attention kernels do not store).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marti_env.credit import is_replay_method
from marti_env.credit.replay import trains_on_siblings
from marti_env.replay import generations_needed
from marti_trainer.config import TrainConfig

__all__ = [
    "ArchitectureError",
    "Placement",
    "RunPlan",
    "activation_bytes_per_token",
    "decoder_param_count",
    "format_plan",
    "plan_run",
    "turns_per_episode",
    "unit_memory",
]

_GIB = 1024**3


class ArchitectureError(ValueError):
    """A ``config.json`` whose architecture :func:`decoder_param_count` does not know."""


def decoder_param_count(config: Mapping[str, Any]) -> int:
    """Parameters of a Llama-style decoder (llama, mistral, qwen2, qwen3) from its
    ``config.json``.

    With ``V`` vocab, ``H`` hidden, ``I`` intermediate, ``L`` layers, ``n`` query heads,
    ``m`` key/value heads, ``d`` head dim (``H / n`` unless given)::

        embed  = V H                         (+ V H for an untied LM head)
        layer  = H n d + 2 H m d + n d H     (q, k, v, o projections)
               + [n d + 2 m d]               (q/k/v biases: qwen2, or attention_bias)
               + [2 d]                       (q/k RMSNorm weights: qwen3)
               + 3 H I                       (gate, up, down)
               + 2 H                         (two RMSNorm weights)
        total  = embed + L layer + H         (final RMSNorm)

    Raises:
        ArchitectureError: another ``model_type``, or a needed field missing (named).
    """
    kind = config.get("model_type")
    if kind not in ("llama", "mistral", "qwen2", "qwen3"):
        raise ArchitectureError(
            f"parameter count: model_type {kind!r} is not one of llama, mistral, qwen2, qwen3"
        )
    try:
        v, h = int(config["vocab_size"]), int(config["hidden_size"])
        i, n_layers = int(config["intermediate_size"]), int(config["num_hidden_layers"])
        n = int(config["num_attention_heads"])
        m = int(config.get("num_key_value_heads") or n)
    except KeyError as e:
        raise ArchitectureError(f"parameter count: config.json has no {e.args[0]!r}") from None
    d = int(config.get("head_dim") or h // n)
    bias = kind == "qwen2" or bool(config.get("attention_bias", False))
    layer = h * n * d + 2 * h * m * d + n * d * h + 3 * h * i + 2 * h
    layer += (n * d + 2 * m * d) if bias else 0
    layer += 2 * d if kind == "qwen3" else 0
    embed = v * h * (1 if config.get("tie_word_embeddings", False) else 2)
    return embed + n_layers * layer + h


def activation_bytes_per_token(
    num_layers: int, hidden: int, vocab: int, gradient_checkpointing: bool
) -> int:
    """Bytes of activations stored for backward per training token.

    ``34 h`` bytes per layer in 16-bit (Korthikanti et al. 2022, section 4.1, without the
    attention-score term), ``2 h`` per layer with full recomputation (only each layer's
    input is kept), plus ``8 V`` for the float32 logits and their log-softmax::

        per_token = L * (2 h if checkpointing else 34 h) + 8 V
    """
    per_layer = 2 * hidden if gradient_checkpointing else 34 * hidden
    return num_layers * per_layer + 8 * vocab


def unit_memory(params: int, *, trained: bool, reference: bool, rollout_bytes: int) -> int:
    """Bytes of the model states one trained unit keeps on its device.

    ``16`` bytes per trained parameter (fp32 weights 4, gradients 4, AdamW's two moments 8;
    ZeRO paper, section 3.1; bf16 autocast keeps fp32 master weights), ``4`` for an fp32
    reference copy, and ``rollout_bytes`` (2 for a bf16 ``hf`` rollout copy, 0 when the
    rollout generates with the trained model itself or elsewhere)::

        bytes = params * (16 [trained] + 4 [reference] + rollout_bytes)
    """
    return params * ((16 if trained else 0) + (4 if reference else 0) + rollout_bytes)


def turns_per_episode(env: Any) -> int:
    """Generations one episode of ``env`` takes: an episode played with a fixed answer, counting
    the active agents of each round (``env.active_agents``)."""
    return sum(_round_widths(env))


def _round_widths(env: Any) -> list[int]:
    """Active agents in each round of one episode played with a fixed answer."""
    env.reset(seed=0)
    widths = []
    while env.agents:
        actions = {agent: "\\boxed{0}" for agent in env.active_agents}
        widths.append(len(actions))
        env.step(actions)
    return widths


@dataclass
class Placement:
    """One process or actor of the run and what it holds.

    Attributes:
        where: The process/actor and its device, e.g. ``"this process, cuda"``.
        holds: What lives there, in words.
        bytes: Estimated bytes of model states (activations excluded); None without the
            parameter count.
    """

    where: str
    holds: str
    bytes: int | None


@dataclass
class RunPlan:
    """What :func:`plan_run` found (see the module docstring)."""

    config: dict[str, Any]
    model: str
    model_dir: str | None
    model_error: str | None
    params: int | None
    architecture: dict[str, Any] | None
    agents: list[str]
    units: list[tuple[str, list[str]]]
    device: str
    precision: str = ""
    placements: list[Placement] = field(default_factory=list)
    activation_bytes: int | None = None
    turns_per_episode: int = 0
    eval_chunk_rows: int = 0
    generations_per_step: int = 0
    eval_generations: int = 0
    evaluations: int = 0
    total_steps: int = 0
    max_new_tokens: int = 0
    replay_generations_per_step: int = 0
    """Extra generations of a re-execution credit method (``env.credit``), per step."""
    siblings_per_turn: int = 0
    """Sibling samples trained on per turn (``sibling`` with ``train: true``), else 0."""

    @property
    def total_generations(self) -> int:
        per_step = self.generations_per_step + self.replay_generations_per_step
        return self.total_steps * per_step + self.evaluations * self.eval_generations


def _model_dir(name: str) -> tuple[Path | None, str | None]:
    """The model's directory without loading or converting weights, or why it is absent."""
    from marti_trainer.models import MODEL_ALIASES, ModelResolutionError, cache_dir

    try:
        alias = MODEL_ALIASES.get(name.lower())
        if alias is not None:
            source = alias.locate()  # raises with the pip command when not installed
            converted = cache_dir() / "models" / name.lower()
            if (converted / "config.json").is_file():
                return converted, None
            return None, (
                f"is available offline ({source}) but not converted yet: `marti train` "
                "converts it once (about 20 s); its parameter count needs that conversion"
            )
        from marti_trainer.models import resolve_model

        return resolve_model(name), None
    except ModelResolutionError as e:
        return None, (
            f"not available offline: {e} For this plan alone, its config.json is enough "
            f"(`huggingface-cli download {name} config.json`)."
        )


def _device(spec: str) -> str:
    if spec != "auto":
        return spec
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:  # pragma: no cover - the train extra brings torch
        return "cpu"


def plan_run(cfg: TrainConfig) -> RunPlan:
    """Work out what ``marti train`` would do with ``cfg`` (nothing is trained or loaded).

    Raises:
        ConfigError: the env, credit method or a task source cannot be built (named).
    """
    built = cfg.env.build()
    agents = list(built.probe.possible_agents)
    m = cfg.model
    device = _device(m.device)
    # torch (through marti_trainer.precision) only once a plan is made, not on import
    import torch

    from marti_trainer.precision import resolve_config

    cfg, choice = resolve_config(cfg, torch.device(device))
    units = [("policy", agents)] if m.sharing in ("shared", "lora") else [(a, [a]) for a in agents]
    model_dir, error = _model_dir(m.name)
    arch: dict[str, Any] | None = None
    params: int | None = None
    if model_dir is not None:
        arch = json.loads((model_dir / "config.json").read_text())
        try:
            params = decoder_param_count(arch)
        except ArchitectureError as e:
            error = str(e)
    widths = _round_widths(built.probe)
    turns = sum(widths)
    replays = 0
    if is_replay_method(built.credit):  # on the probe episode _round_widths just played
        record = built.probe.unwrapped.record
        replays = sum(generations_needed(record, c) for c in built.credit.interventions(record))
    r, e = cfg.rollout, cfg.eval
    evaluations = int(e.at_start) + int(e.at_end)
    if e.every:
        evaluations += cfg.total_steps // e.every - int(e.at_end and cfg.total_steps % e.every == 0)
    plan = RunPlan(
        config=cfg.to_dict(),
        model=m.name,
        model_dir=str(model_dir) if model_dir is not None else None,
        model_error=error,
        params=params,
        architecture=arch,
        agents=agents,
        units=[(name, list(members)) for name, members in units],
        device=device if cfg.distributed.backend == "local" else "per Ray actor",
        precision=f"{choice.precision}, rollout dtype {choice.rollout_dtype} ({choice.reason})",
        turns_per_episode=turns,
        eval_chunk_rows=(e.chunk_tasks or len(built.eval_tasks)) * max(widths) * max(1, e.samples),
        generations_per_step=r.tasks_per_step * r.n_samples * turns,
        replay_generations_per_step=r.tasks_per_step * r.n_samples * replays,
        siblings_per_turn=built.credit.samples if trains_on_siblings(built.credit) else 0,
        eval_generations=len(built.eval_tasks) * max(1, e.samples) * turns,
        evaluations=evaluations,
        total_steps=cfg.total_steps,
        max_new_tokens=r.max_tokens,
    )
    plan.placements = _placements(cfg, plan, params)
    if params is not None and arch is not None:
        plan.activation_bytes = cfg.optim.micro_batch_tokens * activation_bytes_per_token(
            int(arch["num_hidden_layers"]), int(arch["hidden_size"]), int(arch["vocab_size"]),
            m.gradient_checkpointing,
        )  # fmt: skip
    return plan


def _placements(cfg: TrainConfig, plan: RunPlan, params: int | None) -> list[Placement]:
    """Where each model copy lives; ``params = None`` leaves the byte counts unknown."""
    if params is None:
        return [dataclasses.replace(p, bytes=None) for p in _placements(cfg, plan, 0)]
    m, r, d = cfg.model, cfg.rollout, cfg.distributed
    reference = cfg.algorithm.kl_coef > 0 or cfg.log.ref_kl_samples > 0
    rollout_dtype = 2 if r.dtype == "bfloat16" else 4
    in_place = r.backend == "hf" and r.dtype == "float32" and cfg.optim.engine == "torch"
    lora = m.sharing == "lora"
    if lora:  # one frozen base (fp32), adapters too small to count, one reference base
        holds = f"base model + {len(plan.agents)} LoRA adapters"
        per_unit = [(holds, unit_memory(params, trained=False, reference=reference,
                                        rollout_bytes=rollout_dtype) + 4 * params)]  # fmt: skip
    else:
        per_unit = [
            (
                f"unit {name!r} ({', '.join(members)}): fp32 weights + grads + AdamW"
                + (" + reference" if reference else ""),
                unit_memory(params, trained=True, reference=reference, rollout_bytes=0),
            )
            for name, members in plan.units
        ]
    rollout_copy = 0 if in_place else rollout_dtype * params
    rollout_what = (
        "generates with the trained weights"
        if in_place
        else f"{r.backend} rollout copy ({r.dtype})"
    )
    if d.backend == "local":
        total = sum(b for _, b in per_unit) + (0 if lora else rollout_copy * len(per_unit))
        holds = "; ".join(h for h, _ in per_unit) + f"; {rollout_what} per unit"
        return [Placement(f"this process, {plan.device}", holds, total)]
    trainer_dev = f"{d.trainer_gpus:g} GPU" if d.trainer_gpus else f"{d.trainer_cpus:g} CPU"
    out = [Placement(f"TrainerActor {i} ({trainer_dev})", h, b)
           for i, (h, b) in enumerate(per_unit)]  # fmt: skip
    if d.rollout_workers == 0:
        for p in out:
            p.holds += f"; {rollout_what}"
            p.bytes += rollout_copy
        return out
    worker_dev = f"{d.rollout_gpus:g} GPU" if d.rollout_gpus else f"{d.rollout_cpus:g} CPU"
    units = 1 if lora else len(plan.units)
    out += [
        Placement(
            f"RolloutWorker {i} ({worker_dev})",
            f"{units} x {r.backend} rollout copy ({r.dtype})",
            units * rollout_dtype * params,
        )
        for i in range(d.rollout_workers)
    ]
    return out


def _gib(n: int) -> str:
    return f"{n / _GIB:.1f} GiB"


def format_plan(plan: RunPlan) -> str:
    """The plan as text: resolved config (YAML), model, placement, memory, steps."""
    import yaml

    lines = ["# resolved config", yaml.safe_dump(plan.config, sort_keys=False).rstrip(), ""]
    lines.append("# model")
    if plan.model_dir is not None:
        lines.append(f"model: {plan.model} -> {plan.model_dir}")
    if plan.params is not None and plan.architecture is not None:
        a = plan.architecture
        lines.append(
            f"parameters: {plan.params:,} ({plan.params / 1e9:.2f} B; from config.json: "
            f"{a.get('model_type')}, {a.get('num_hidden_layers')} layers, hidden "
            f"{a.get('hidden_size')}, vocab {a.get('vocab_size')})"
        )
    if plan.model_error is not None:
        lines.append(f"error: model {plan.model!r} {plan.model_error}")
    lines += ["", "# placement"]
    lines.append(f"device: {plan.device}; agents: {', '.join(plan.agents)}")
    lines.append(f"precision: {plan.precision}")
    lines.append("units: " + "; ".join(f"{n} <- {', '.join(members)}" for n, members in plan.units))
    for p in plan.placements:
        size = "size unknown" if p.bytes is None else f"~{_gib(p.bytes)} of model states"
        lines.append(f"{p.where}: {p.holds}: {size}")
    if plan.activation_bytes is not None:
        lines.append(
            "activations per micro-batch (optim.micro_batch_tokens): "
            f"~{_gib(plan.activation_bytes)}"
        )
        peak = max((p.bytes or 0 for p in plan.placements), default=0) + plan.activation_bytes
        lines.append(f"memory estimate, busiest device: ~{_gib(peak)}")
    if plan.params is None:
        lines.append("memory estimate: needs the model's config.json (see the error above)")
    lines += ["", "# work"]
    lines.append(
        f"steps: {plan.total_steps}; generations per step: {plan.generations_per_step} "
        f"({plan.turns_per_episode} per episode); per held-out evaluation: "
        f"{plan.eval_generations} x {plan.evaluations} evaluations"
    )
    budget = plan.config.get("total_tokens")
    if budget is not None:
        per_step = (plan.generations_per_step + plan.replay_generations_per_step) * plan.config[
            "rollout"
        ]["max_tokens"]
        most, early = plan.total_steps * per_step, (plan.total_steps - 1) * per_step
        lines.append(
            f"total_tokens {budget}: training stops at the first step whose generated tokens "
            f"reach it; {plan.total_steps} steps generate at most {most} (rollout.max_tokens "
            "per generation)"
            + (f", so it cannot stop before step {plan.total_steps}" if budget > early else "")
        )
    if plan.replay_generations_per_step:
        trained = "not trained on"
        if plan.siblings_per_turn:
            trained = (
                f"trained on too: {plan.siblings_per_turn} siblings per turn, so "
                f"{plan.siblings_per_turn + 1} training samples per turn"
            )
        lines.append(
            f"credit '{plan.config['env']['credit']}' re-executes episodes: "
            f"{plan.replay_generations_per_step} more generations per step ({trained})"
        )
    e = plan.config["eval"]
    batch = plan.config["rollout"]["batch_size"]
    fits = plan.eval_chunk_rows <= batch or plan.config["rollout"]["backend"] != "hf"
    lines.append(
        f"held-out evaluation in chunks of {e['chunk_tasks'] or 'all'} problems: a round of a "
        f"chunk is at most {plan.eval_chunk_rows} requests; "
        + (
            "results do not depend on the batch size"
            if fits
            else f"over rollout.batch_size {batch}, so results depend on it (raise it to "
            f"{plan.eval_chunk_rows} or lower eval.chunk_tasks)"
        )
    )
    lines.append(
        f"generations in all: {plan.total_generations:,}; new tokens at most "
        f"{plan.total_generations * plan.max_new_tokens:,} ({plan.max_new_tokens} per turn)"
    )
    return "\n".join(lines)
