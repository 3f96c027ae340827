"""Typed training configuration: dataclasses with a help string per field.

A run is configured by one :class:`TrainConfig`, built from (lowest precedence first) the
defaults below, a YAML file, and ``key=value`` overrides from the command line::

    cfg = load_config("baselines/quickstart.yaml", ["optim.lr=2e-5", "total_steps=3"])

YAML mirrors the dataclasses: top-level fields, then one mapping per section (``env``,
``model``, ``rollout``, ``algorithm``, ``optim``, ``eval``, ``log``). An unknown key is an
error that names its YAML path and the closest known key; a wrong type is an error naming
the key, the expected type and the value. Incompatible combinations are rejected in
``__post_init__``. ``python -m marti_trainer.config`` prints every field with its help.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from marti_trainer.distributed.config import DistributedConfig

__all__ = [
    "DEVICE_PATTERN",
    "AlgorithmConfig",
    "ConfigError",
    "EnvConfig",
    "EvalConfig",
    "LogConfig",
    "ModelConfig",
    "OptimConfig",
    "RolloutConfig",
    "TrainConfig",
    "config_from_dict",
    "config_help",
    "load_config",
]


class ConfigError(ValueError):
    """An invalid configuration: unknown key, wrong type or incompatible values."""


def _f(default: Any, help: str) -> Any:
    """``field(default=default, metadata={"help": help})`` for an immutable default."""
    return field(default=default, metadata={"help": help})


DEVICE_PATTERN = r"auto|cpu|cuda(:\d+)?"
"""Accepted values of ``model.device`` (and ``marti eval --device``)."""


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


@dataclass
class EnvConfig:
    id: str = _f("mad-v0", "Registered environment id (see `marti envs`).")
    kwargs: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "Arguments for marti_env.make (e.g. {num_agents: 2}); the env checks them."
        },
    )
    credit: str = _f("none", "Credit-assignment method name (marti_env.credit registry).")
    credit_kwargs: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "Options of the credit method (e.g. {alpha: 0.5})."}
    )
    train_tasks: Any = field(
        default_factory=lambda: {"type": "arithmetic", "levels": [1, 2], "split": "train"},
        metadata={"help": "Training task source spec (marti_env.tasks.make_task_source)."},
    )
    eval_tasks: Any = field(
        default_factory=lambda: {
            "type": "arithmetic",
            "levels": [1, 2],
            "split": "test",
            "size": 100,
        },
        metadata={"help": "Held-out task source spec, evaluated greedily."},
    )


@dataclass
class ModelConfig:
    name: str = _f("smollm2-135m-instruct", "Model alias, local directory or cached Hub id.")
    sharing: Literal["shared", "per_agent", "lora"] = _f(
        "shared",
        "How agents map to weights: one shared model, one full model per agent, or one frozen "
        "base model with a LoRA adapter per agent.",
    )
    lora_rank: int = _f(16, "LoRA rank r (sharing=lora).")
    lora_alpha: float = _f(32.0, "LoRA scaling alpha (sharing=lora).")
    lora_targets: list[str] = field(
        default_factory=lambda: [
            "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"
        ],
        metadata={"help": "Module names that get LoRA adapters (sharing=lora)."},
    )  # fmt: skip
    gradient_checkpointing: bool = _f(False, "Recompute activations in backward (less memory).")
    device: str = _f(
        "auto",
        "Where the trained model, its reference copy and an hf rollout copy live: auto (cuda "
        "when torch sees a GPU, else cpu), cpu, cuda or cuda:N. Under Ray each actor resolves "
        "auto against the GPUs Ray gave it. DeepSpeed places its model on its own accelerator.",
    )


@dataclass
class RolloutConfig:
    backend: Literal["hf", "vllm"] = _f("hf", "Generation backend of the rollout policies.")
    dtype: Literal["float32", "bfloat16"] = _f(
        "bfloat16", "Weights of the rollout copy (the trainer keeps fp32 master weights)."
    )
    tasks_per_step: int = _f(4, "Distinct tasks drawn per training step.")
    n_samples: int = _f(8, "Episodes per task (the group size of GRPO-style estimators).")
    temperature: float = _f(1.0, "Sampling temperature of training rollouts.")
    top_p: float = _f(1.0, "Nucleus mass of training rollouts.")
    max_tokens: int = _f(64, "Maximum new tokens per turn.")
    batch_size: int = _f(64, "Rows decoded together by the hf backend.")
    mode: Literal["sync", "async"] = _f("sync", "Rollout scheduling (see marti_trainer.rollout).")


@dataclass
class AlgorithmConfig:
    advantage: Literal["grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline"] = _f(
        "grpo", "Advantage estimator (marti_trainer.algorithms)."
    )
    clip_low: float = _f(0.2, "PPO clip range below 1 (epsilon_low).")
    clip_high: float = _f(0.28, "PPO clip range above 1 (epsilon_high; > clip_low = clip-higher).")
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = _f(
        "token-mean", "How per-token losses are reduced."
    )
    kl_coef: float = _f(0.0, "beta: weight of the KL to the initial policy (0 = no reference).")
    kl_estimator: Literal["k1", "k2", "k3"] = _f("k3", "KL estimator for the KL loss term.")
    kl_in_reward: bool = _f(
        False, "Apply the KL as a reward penalty (REINFORCE++) instead of a loss term."
    )
    entropy_coef: float = _f(0.0, "Weight of an entropy bonus (subtracted from the loss).")
    updates_per_batch: int = _f(
        1, "Optimizer steps per rollout batch (mini-batches); > 1 recomputes old log-probs."
    )
    gamma: float = _f(1.0, "Discount of REINFORCE++ returns.")
    overlong_penalty: float = _f(
        0.0,
        "Weight of DAPO's soft overlong penalty added to each sample's reward: 0 up to "
        "rollout.max_tokens - overlong_buffer tokens, then a linear ramp to -weight at the cut "
        "(marti_trainer.algorithms.overlong_penalty). 0 = off.",
    )
    overlong_buffer: int = _f(
        8, "Tokens before rollout.max_tokens over which the overlong penalty ramps (>= 1)."
    )
    group_by: Literal["agent", "role"] = _f(
        "agent",
        "Advantage groups: 'agent' = one group per (task, agent, turn), as MARTI does; 'role' "
        "= one per (task, role, round), pooling the agents that share a role and a round (MAD's "
        "debaters see the same prompt in round 0 and the same answers, in their own order, "
        "later), so a shared model gets groups of n_samples x agents: a better baseline and "
        "more groups with a reward spread from the same rollouts (quick start, seeds 0-4: +9 to "
        "+18 points, mean +13.4, against +5 to +13, mean +10.0, by agent). Needs "
        "model.sharing=shared.",
    )
    skip_zero_advantage: bool = _f(
        True,
        "Leave samples whose advantage is 0 out of the forward/backward (they carry no gradient "
        "when kl_coef = entropy_coef = 0; the loss normaliser still counts them, so the update "
        "is the same); a batch with no signal at all skips its optimizer step.",
    )


@dataclass
class OptimConfig:
    engine: Literal["torch", "deepspeed"] = _f("torch", "Training engine.")
    zero_stage: int = _f(0, "DeepSpeed ZeRO stage 0-3 (engine=deepspeed).")
    precision: Literal["fp32", "bf16"] = _f(
        "bf16", "bf16 = bf16 autocast over fp32 master weights; fp32 = full precision."
    )
    lr: float = _f(1e-5, "Peak learning rate of AdamW.")
    weight_decay: float = _f(0.0, "AdamW weight decay.")
    betas: list[float] = field(
        default_factory=lambda: [0.9, 0.999], metadata={"help": "AdamW betas."}
    )
    eps: float = _f(1e-8, "AdamW epsilon.")
    scheduler: Literal["constant", "linear", "cosine"] = _f("constant", "LR schedule after warmup.")
    warmup_steps: int = _f(0, "Linear warmup optimizer steps.")
    max_grad_norm: float = _f(1.0, "Gradient clipping norm (0 = off).")
    micro_batch_tokens: int = _f(
        2048,
        "Token budget of one micro-batch (rows x padded length; with share_prompts, distinct "
        "prompts x prompt width + rows x response width); gradients accumulate. Activations "
        "dominate memory: SmolLM2-135M needs ~2 MB per token (fp32 master, bf16 autocast), so "
        "2048 tokens ~ 4-5 GB.",
    )
    share_prompts: bool = _f(
        True,
        "Forward each distinct prompt of a micro-batch once and let every response that "
        "continues it attend to its key/value cache (the same loss and gradient; a group's "
        "samples share their prompt). Needs model.gradient_checkpointing=false.",
    )


@dataclass
class EvalConfig:
    every: int = _f(0, "Evaluate every N steps (0 = only at start and end).")
    at_start: bool = _f(True, "Evaluate before the first update.")
    at_end: bool = _f(True, "Evaluate after the last update.")
    max_tokens: int = _f(0, "Max new tokens at evaluation (0 = rollout.max_tokens).")


@dataclass
class LogConfig:
    output_dir: str = _f("runs", "Runs are written to output_dir/<run name>.")
    tensorboard: bool = _f(True, "Also write TensorBoard event files.")
    progress: bool = _f(True, "Show a tqdm progress bar.")
    save_every: int = _f(0, "Checkpoint every N steps (0 = only at the end).")
    keep_last: int = _f(2, "Checkpoints to keep (oldest removed).")
    plots: bool = _f(True, "Write PNG plots of reward, accuracy and KL per agent at the end.")
    transcripts: bool = _f(True, "Write episode records to transcripts.jsonl.")
    ref_kl_samples: int = _f(
        16,
        "Samples per agent scored each step by the initial (reference) model for the metric "
        "kl/<agent> = KL(current || initial) (0 = off; all samples when algorithm.kl_coef > 0).",
    )


@dataclass
class TrainConfig:
    exp_name: str = _f("run", "Experiment name; runs are named {env}__{exp}__{seed}__{time}.")
    seed: int = _f(0, "Seed of data order, sampling and initialisation.")
    total_steps: int = _f(10, "Training steps (one rollout batch and its updates each).")
    run_name: str = _f("", "Fixed run name (default: generated); --resume reuses the directory.")
    env: EnvConfig = field(default_factory=EnvConfig, metadata={"help": "Environment and tasks."})
    model: ModelConfig = field(default_factory=ModelConfig, metadata={"help": "Model and sharing."})
    rollout: RolloutConfig = field(default_factory=RolloutConfig, metadata={"help": "Sampling."})
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig, metadata={"help": "RL."})
    optim: OptimConfig = field(default_factory=OptimConfig, metadata={"help": "Engine/optimizer."})
    eval: EvalConfig = field(default_factory=EvalConfig, metadata={"help": "Held-out evaluation."})
    log: LogConfig = field(default_factory=LogConfig, metadata={"help": "Outputs."})
    distributed: DistributedConfig = field(
        default_factory=DistributedConfig, metadata={"help": "Ray actors (backend=local: none)."}
    )

    def __post_init__(self) -> None:
        r, a, o, m = self.rollout, self.algorithm, self.optim, self.model
        _require(self.total_steps >= 1, "total_steps must be >= 1")
        _require(self.seed >= 0, "seed must be >= 0")
        _require(r.tasks_per_step >= 1 and r.n_samples >= 1, "rollout sizes must be >= 1")
        _require(r.max_tokens >= 1 and r.batch_size >= 1, "rollout.max_tokens/batch_size >= 1")
        _require(r.temperature > 0, "rollout.temperature must be > 0 for training rollouts")
        _require(0 < r.top_p <= 1, "rollout.top_p must be in (0, 1]")
        _require(
            r.n_samples >= 2 or a.advantage in ("reinforce_pp",),
            f"algorithm.advantage={a.advantage!r} compares samples within a group: "
            "rollout.n_samples must be >= 2",
        )
        _require(0 <= a.clip_low < 1 and a.clip_high >= 0, "clip_low in [0, 1), clip_high >= 0")
        _require(a.kl_coef >= 0 and a.entropy_coef >= 0, "kl_coef and entropy_coef must be >= 0")
        _require(
            not a.kl_in_reward or a.advantage in ("reinforce_pp", "reinforce_pp_baseline"),
            "algorithm.kl_in_reward needs a REINFORCE++ advantage (it adds the KL to rewards)",
        )
        _require(
            a.group_by == "agent" or m.sharing == "shared",
            f"algorithm.group_by=role pools several agents' samples under one baseline, which "
            f"needs them to share one policy: set model.sharing=shared (it is {m.sharing!r})",
        )
        _require(a.updates_per_batch >= 1, "algorithm.updates_per_batch must be >= 1")
        _require(a.overlong_penalty >= 0, "algorithm.overlong_penalty must be >= 0")
        _require(a.overlong_buffer >= 1, "algorithm.overlong_buffer must be >= 1")
        _require(
            a.overlong_penalty == 0 or a.overlong_buffer <= r.max_tokens,
            "algorithm.overlong_buffer cannot exceed rollout.max_tokens",
        )
        _require(
            a.updates_per_batch <= r.tasks_per_step * r.n_samples,
            "algorithm.updates_per_batch cannot exceed the episodes per step",
        )
        _require(o.lr > 0 and o.max_grad_norm >= 0 and o.warmup_steps >= 0, "bad optim values")
        _require(len(o.betas) == 2, "optim.betas must have two values")
        _require(o.micro_batch_tokens >= 1, "optim.micro_batch_tokens must be >= 1")
        _require(0 <= o.zero_stage <= 3, "optim.zero_stage must be 0, 1, 2 or 3")
        _require(
            o.engine == "deepspeed" or o.zero_stage == 0,
            f"optim.zero_stage={o.zero_stage} needs optim.engine=deepspeed",
        )
        _require(
            not (m.sharing == "lora" and o.engine == "deepspeed"),
            "model.sharing=lora trains several adapters of one model; use optim.engine=torch",
        )
        _require(m.lora_rank >= 1, "model.lora_rank must be >= 1")
        _require(
            not (o.share_prompts and m.gradient_checkpointing),
            "model.gradient_checkpointing turns the key/value cache off, which "
            "optim.share_prompts needs: set optim.share_prompts=false",
        )
        _require(
            re.fullmatch(DEVICE_PATTERN, m.device) is not None,
            f"model.device must be auto, cpu, cuda or cuda:N, got {m.device!r}",
        )
        _require(self.log.keep_last >= 1, "log.keep_last must be >= 1")
        _require(self.eval.every >= 0 and self.log.save_every >= 0, "every-N values must be >= 0")

    def to_dict(self) -> dict[str, Any]:
        """Nested plain values (objects passed in from Python, e.g. a reward function, become
        their ``repr``), ready for YAML."""
        return _plain(dataclasses.asdict(self))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


# ----------------------------------------------------------------------------- building


def config_from_dict(data: dict[str, Any], where: str = "<config>") -> TrainConfig:
    """Build a validated :class:`TrainConfig` from a nested mapping (as in the YAML)."""
    try:
        return _build(TrainConfig, data, where, "")
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from e


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> TrainConfig:
    """Defaults, then the YAML file at ``path`` (optional), then ``key=value`` overrides.

    Raises:
        ConfigError: unknown key (with the closest known one and its YAML path), a value of
            the wrong type, a malformed override, or an incompatible combination.
    """
    data: dict[str, Any] = {}
    where = "<defaults>"
    if path is not None:
        where = str(path)
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: invalid YAML: {e}") from e
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping at the top level")
        data = loaded or {}
    for item in overrides or []:
        apply_override(data, item)
    return config_from_dict(data, where)


def apply_override(data: dict[str, Any], item: str) -> None:
    """Set ``a.b.c=value`` in a nested dict; the value is parsed as YAML (``[1, 2]``, ``1e-5``)."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {item!r} is not of the form key=value (e.g. optim.lr=1e-5)")
    parts = key.strip().split(".")
    node = data
    for p in parts[:-1]:
        child = node.setdefault(p, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {item!r}: {p!r} is not a section")
        node = child
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    node[parts[-1]] = value


def _build(cls: type, data: Any, where: str, prefix: str) -> Any:
    if not isinstance(data, dict):
        name = prefix.rstrip(".") or "<top level>"
        raise ConfigError(f"{where}: '{name}' must be a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.6)
            hint = f" (did you mean '{prefix}{close[0]}'?)" if close else ""
            raise ConfigError(
                f"{where}: unknown key '{path}'{hint}; known keys here: {', '.join(fields)}"
            )
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            kwargs[key] = _build(tp, value, where, f"{path}.")
        else:
            kwargs[key] = _coerce(value, tp, f"{where}: '{path}'")
    try:
        return cls(**kwargs)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def _coerce(value: Any, tp: Any, what: str) -> Any:
    """Check ``value`` against the annotation ``tp``, converting where safe (int -> float)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, arg, what)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0])
    if origin is Literal:
        if value not in args:
            close = difflib.get_close_matches(str(value), [str(a) for a in args], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{what} must be one of {list(args)}, got {value!r}{hint}")
        return value
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{what} must be a list, got {value!r}")
        return [_coerce(v, args[0], f"{what}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{what} must be a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{what} must be true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{what} must be an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML reads 1e-5 (no dot) as a string
            with contextlib.suppress(ValueError):
                value = float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{what} must be a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{what} must be a string, got {value!r}")
        return value
    raise ConfigError(f"{what}: unsupported annotation {tp!r}")


def config_help(cls: type = TrainConfig, prefix: str = "") -> str:
    """Every field as ``key (type, default): help``, one per line, sections expanded."""
    lines = []
    hints = typing.get_type_hints(cls)
    instance = cls()
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            lines.append(f"\n[{prefix}{f.name}] {f.metadata.get('help', '')}")
            lines.append(config_help(tp, f"{prefix}{f.name}."))
            continue
        default = getattr(instance, f.name)
        if typing.get_origin(tp) is Literal:
            tname = "|".join(str(a) for a in typing.get_args(tp))
        else:
            tname = getattr(tp, "__name__", None) or str(tp).replace("typing.", "")
        lines.append(f"  {prefix}{f.name} ({tname}, default {default!r}): {f.metadata['help']}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(config_help())
