"""Typed training configuration: dataclasses with a help string per field.

A run is configured by one :class:`TrainConfig`, built from (lowest precedence first) the
defaults below, a YAML file, and ``key=value`` overrides from the command line::

    cfg = load_config("baselines/quickstart.yaml", ["optim.lr=2e-5", "total_steps=3"])

YAML mirrors the dataclasses: top-level fields, then one mapping per section (``env``,
``model``, ``rollout``, ``algorithm``, ``optim``, ``eval``, ``log``). An unknown key is an
error that names its YAML path and the closest known key; a wrong type is an error naming
the key, the expected type and the value. Incompatible combinations are rejected in
``__post_init__``. ``python -m marti_trainer.config`` prints every field with its help.

A config saved before a setting existed lacks its key; :data:`ADDED_SETTINGS` says which
value reproduces what such runs did, so ``marti sweep`` does not call them changed.
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
from typing import Any, ClassVar, Literal, Union

import yaml

from marti_trainer.config_distributed import DistributedConfig
from marti_trainer.config_schema import ConfigError, Range, Section, setting

__all__ = [
    "ADDED_SETTINGS",
    "DEVICE_PATTERN",
    "AlgorithmConfig",
    "BuiltEnv",
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


ADDED_SETTINGS: dict[str, Any] = {"eval.seed": None, "log.eval_cache": "", "total_tokens": None}
"""Settings added after runs had been saved, each with the value that reproduces what runs
saved without it did (``eval.seed: null``: the held-out episodes took the run's seed). A saved
config that lacks one of these keys reads as holding that value; any other missing key is a
difference. A new setting whose default changes what runs do is added here with its old
value."""

DEVICE_PATTERN = r"auto|cpu|cuda(:\d+)?"
"""Accepted values of ``model.device`` (and ``marti eval --device``)."""


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


@dataclass
class EnvConfig(Section):
    section: ClassVar[str] = "env"

    id: str = setting("mad-v0", "Registered environment id (see `marti envs`).")
    kwargs: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "Arguments for marti_env.make (e.g. {num_agents: 2}); the env checks them."
        },
    )
    credit: str = setting(
        "none",
        "Credit-assignment method: a registered name (marti_env.credit registry) or an entry "
        "point 'package.module:Class' or 'path/to/file.py:Class' (run.json records the "
        "defining file's path and sha256).",
    )
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
            "size": 1000,
        },
        metadata={
            "help": "Held-out task source spec (see eval.*). 1,000 problems by default: the "
            "binomial standard error of an accuracy near 30% is then 1.4 points (4.6 at 100)."
        },
    )

    def build(self) -> BuiltEnv:
        """The env (a probe instance, on the train tasks), the credit method and both task
        sources, built from these settings without any model; an unknown id, argument,
        method, task-source key or a missing file is a :class:`ConfigError` naming its key."""
        import marti_env
        from marti_env.credit import make_credit
        from marti_env.tasks import make_task_source

        built = {}
        checks = (
            ("train_tasks", "env.train_tasks", lambda: make_task_source(self.train_tasks)),
            ("eval_tasks", "env.eval_tasks", lambda: make_task_source(self.eval_tasks)),
            ("probe", "env.id/env.kwargs",
             lambda: marti_env.make(self.id, **{"tasks": built["train_tasks"], **self.kwargs})),
            ("credit", "env.credit/env.credit_kwargs",
             lambda: make_credit(self.credit, **self.credit_kwargs)),
        )  # fmt: skip
        for name, key, make in checks:
            try:
                built[name] = make()
            except (ValueError, TypeError, KeyError, OSError) as e:
                raise ConfigError(f"'{key}': {e}") from None
        return BuiltEnv(**built)


def _trains_on_siblings(env: EnvConfig) -> bool:
    """Whether ``env``'s credit method trains on sibling samples; False for a method that
    cannot be built (:meth:`EnvConfig.build` reports that, naming the key)."""
    from marti_env.credit import make_credit
    from marti_env.credit.replay import trains_on_siblings

    try:
        return trains_on_siblings(make_credit(env.credit, **env.credit_kwargs))
    except (ValueError, TypeError, KeyError, OSError):
        return False


@dataclass
class BuiltEnv:
    """What :meth:`EnvConfig.build` makes: the pieces a run needs before any model."""

    probe: Any
    credit: Any
    train_tasks: Any
    eval_tasks: Any


@dataclass
class ModelConfig(Section):
    section: ClassVar[str] = "model"

    name: str = setting("smollm2-135m-instruct", "Model alias, local directory or cached Hub id.")
    sharing: Literal["shared", "per_agent", "lora"] = setting(
        "shared",
        "How agents map to weights: one shared model, one full model per agent, or one frozen "
        "base model with a LoRA adapter per agent.",
    )
    lora_rank: int = setting(16, "LoRA rank r (sharing=lora).", Range(1, 4096))
    lora_alpha: float = setting(
        32.0, "LoRA scaling alpha (sharing=lora).", Range(0, 1e6, lo_open=True)
    )
    lora_targets: list[str] = field(
        default_factory=lambda: [
            "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"
        ],
        metadata={"help": "Module names that get LoRA adapters (sharing=lora)."},
    )  # fmt: skip
    gradient_checkpointing: bool = setting(
        False, "Recompute activations in backward (less memory)."
    )
    attn_implementation: Literal["auto", "sdpa", "eager", "marti_gqa"] = setting(
        "auto",
        "Attention kernel of the trained, reference and hf rollout models (transformers' "
        "attn_implementation): auto = marti_gqa on a CPU (grouped-query attention without "
        "copying the key/value cache, marti_trainer.attention), sdpa on a GPU.",
    )
    device: str = setting(
        "auto",
        "Where the trained model, its reference copy and an hf rollout copy live: auto (cuda "
        "when torch sees a GPU, else cpu), cpu, cuda or cuda:N. Under Ray each actor resolves "
        "auto against the GPUs Ray gave it. DeepSpeed places its model on its own accelerator.",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(
            re.fullmatch(DEVICE_PATTERN, self.device) is not None,
            f"'model.device' must be auto, cpu, cuda or cuda:N, got {self.device!r}",
        )
        _require(bool(self.name.strip()), "'model.name' must not be empty")
        if self.name.startswith(("/", "./", "../", "~")):  # a path, not an alias or Hub id
            _require(
                Path(self.name).expanduser().is_dir(),
                f"'model.name' is the path {self.name!r}, which is not a directory",
            )
        _require(bool(self.lora_targets), "'model.lora_targets' must name at least one module")


@dataclass
class RolloutConfig(Section):
    section: ClassVar[str] = "rollout"

    backend: Literal["hf", "vllm"] = setting("hf", "Generation backend of the rollout policies.")
    dtype: Literal["auto", "float32", "bfloat16"] = setting(
        "auto",
        "Weights of the rollout copy (the trainer keeps fp32 master weights). auto = follow "
        "optim.precision (bfloat16 with bf16, float32 with fp32: marti_trainer.precision).",
    )
    tasks_per_step: int = setting(4, "Distinct tasks drawn per training step.", Range(1, 100_000))
    n_samples: int = setting(
        8, "Episodes per task (the group size of GRPO-style estimators).", Range(1, 10_000)
    )
    temperature: float = setting(
        1.0, "Sampling temperature of training rollouts.", Range(0, 100, lo_open=True)
    )
    top_p: float = setting(1.0, "Nucleus mass of training rollouts.", Range(0, 1, lo_open=True))
    max_tokens: int = setting(64, "Maximum new tokens per turn.", Range(1, 1_000_000))
    batch_size: int = setting(64, "Rows decoded together by the hf backend.", Range(1, 100_000))
    mode: Literal["sync", "async"] = setting(
        "sync", "Rollout scheduling (see marti_trainer.rollout)."
    )


@dataclass
class AlgorithmConfig(Section):
    section: ClassVar[str] = "algorithm"

    advantage: Literal[
        "grpo", "dr_grpo", "agent_scale", "rloo", "reinforce_pp", "reinforce_pp_baseline"
    ] = setting(
        "grpo",
        "Advantage estimator (marti_trainer.algorithms). grpo standardises each group (so any "
        "per-group affine map of the reward, e.g. turn discounting, trains like credit=none); "
        "dr_grpo only centres; agent_scale centres in the group, then divides by one scale per "
        "agent over the batch (keeps the reward spread a credit method puts between one "
        "agent's groups).",
    )
    clip_low: float = setting(
        0.2, "PPO clip range below 1 (epsilon_low).", Range(0, 1, hi_open=True)
    )
    clip_high: float = setting(
        0.28, "PPO clip range above 1 (epsilon_high; > clip_low = clip-higher).", Range(0, 100)
    )
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = setting(
        "token-mean", "How per-token losses are reduced."
    )
    kl_coef: float = setting(
        0.0, "beta: weight of the KL to the initial policy (0 = no reference).", Range(0, 1000)
    )
    kl_estimator: Literal["k1", "k2", "k3"] = setting("k3", "KL estimator for the KL loss term.")
    kl_in_reward: bool = setting(
        False, "Apply the KL as a reward penalty (REINFORCE++) instead of a loss term."
    )
    entropy_coef: float = setting(
        0.0, "Weight of an entropy bonus (subtracted from the loss).", Range(0, 1000)
    )
    updates_per_batch: int = setting(
        1,
        "Optimizer steps per rollout batch (mini-batches); > 1 recomputes old log-probs.",
        Range(1, 10_000),
    )
    gamma: float = setting(1.0, "Discount of REINFORCE++ returns.", Range(0, 1))
    overlong_penalty: float = setting(
        0.0,
        "Weight of DAPO's soft overlong penalty added to each sample's reward: 0 up to "
        "rollout.max_tokens - overlong_buffer tokens, then a linear ramp to -weight at the cut "
        "(marti_trainer.algorithms.overlong_penalty). 0 = off.",
        Range(0, 1000),
    )
    overlong_buffer: int = setting(
        8,
        "Tokens before rollout.max_tokens over which the overlong penalty ramps (>= 1).",
        Range(1, 1_000_000),
    )
    group_by: Literal["agent", "role", "node"] = setting(
        "agent",
        "Advantage groups: 'agent' = one group per (task, agent, turn), as MARTI does; 'role' "
        "= one per (task, role, round), pooling the agents that share a role and a round (MAD's "
        "debaters see the same prompt in round 0 and the same answers, in their own order, "
        "later), so a shared model gets groups of n_samples x agents: a better baseline and "
        "more groups with a reward spread from the same rollouts (measured comparison: the "
        "README's quick start); needs model.sharing=shared. 'node' = one per turn of one "
        "episode with its siblings, alternatives sampled from the same context (AT-GRPO's "
        "tree groups); needs env.credit=sibling with credit_kwargs train: true.",
    )
    skip_zero_advantage: bool = setting(
        True,
        "Leave samples whose advantage is 0 out of the forward/backward (they carry no gradient "
        "when kl_coef = entropy_coef = 0; the loss normaliser still counts them, so the update "
        "is the same); a batch with no signal at all skips its optimizer step.",
    )


@dataclass
class OptimConfig(Section):
    section: ClassVar[str] = "optim"

    engine: Literal["torch", "deepspeed"] = setting("torch", "Training engine.")
    zero_stage: int = setting(0, "DeepSpeed ZeRO stage 0-3 (engine=deepspeed).", Range(0, 3))
    precision: Literal["auto", "fp32", "bf16"] = setting(
        "auto",
        "bf16 = bf16 autocast over fp32 master weights; fp32 = full precision; auto = bf16 on "
        "a GPU that supports it and on a CPU with native bf16 (avx512_bf16 or amx_bf16), else "
        "fp32 (the rule and its measurements: marti_trainer.precision). The choice is printed "
        "at the start of a run and saved in its run.json.",
    )
    lr: float = setting(1e-5, "Peak learning rate of AdamW.", Range(0, 1, lo_open=True))
    weight_decay: float = setting(0.0, "AdamW weight decay.", Range(0, 10))
    betas: list[float] = setting(
        help="AdamW betas.", range=Range(0, 1, hi_open=True), default_factory=lambda: [0.9, 0.999]
    )
    eps: float = setting(1e-8, "AdamW epsilon.", Range(0, 1, lo_open=True))
    scheduler: Literal["constant", "linear", "cosine"] = setting(
        "constant", "LR schedule after warmup."
    )
    warmup_steps: int = setting(0, "Linear warmup optimizer steps.", Range(0, 10_000_000))
    max_grad_norm: float = setting(1.0, "Gradient clipping norm (0 = off).", Range(0, 1e6))
    micro_batch_tokens: int = setting(
        2048,
        "Token budget of one micro-batch (rows x padded length; with share_prompts, distinct "
        "prompts x prompt width + rows x response width); gradients accumulate. Activations "
        "dominate memory: SmolLM2-135M needs ~2 MB per token (fp32 master, bf16 autocast), so "
        "2048 tokens ~ 4-5 GB.",
        Range(1, 100_000_000),
    )
    share_prompts: bool = setting(
        True,
        "Forward each distinct prompt of a micro-batch once and let every response that "
        "continues it attend to its key/value cache (the same loss and gradient; a group's "
        "samples share their prompt). Needs model.gradient_checkpointing=false.",
    )
    share_prefixes: bool = setting(
        True,
        "With share_prompts, also forward once the common prefix of prompts that start alike "
        "(a debate's round-1 prompts share the task statement), in a micro-batch: prefix, "
        "then each prompt's rest, then the responses, each on the cache of the level below "
        "(the same loss and gradient).",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(len(self.betas) == 2, f"'optim.betas' must have two values, got {self.betas!r}")


@dataclass
class EvalConfig(Section):
    section: ClassVar[str] = "eval"

    every: int = setting(
        0, "Evaluate every N steps (0 = only at start and end).", Range(0, 10_000_000)
    )
    at_start: bool = setting(True, "Evaluate before the first update.")
    at_end: bool = setting(True, "Evaluate after the last update.")
    max_tokens: int = setting(
        0, "Max new tokens at evaluation (0 = rollout.max_tokens).", Range(0, 1_000_000)
    )
    samples: int = setting(
        0,
        "Episodes per held-out problem. 0 = one greedy episode (eval/accuracy is greedy "
        "accuracy). k >= 1 = avg@k: k episodes sampled at eval.temperature, each with its own "
        "random stream seeded from eval.seed (else the run's seed), the problem and the "
        "episode index; "
        "eval/accuracy is then the mean accuracy over the k (avg@k), eval/pass_at_k the "
        "fraction of problems with a right answer among the k, eval/maj_at_k the accuracy "
        "of their majority answer (marti_trainer.evaluate).",
        Range(0, 10_000),
    )
    temperature: float = setting(
        0.7, "Sampling temperature of the held-out episodes when eval.samples >= 1.",
        Range(0, 100, lo_open=True),
    )  # fmt: skip
    seed: int | None = setting(
        None,
        "Root seed of the held-out episodes (the env's own randomness: shuffled answers, "
        "agent order, scripted fallbacks; and avg@k sampling). null = the run's seed. A fixed "
        "value (benchmarks use 0) evaluates every run on the same episodes, so runs that "
        "differ in seed or method differ at evaluation only by their weights (common random "
        "numbers), and their step-0 evaluations are one (log.eval_cache).",
        Range(0, 2**63 - 1),
    )
    chunk_tasks: int = setting(
        16,
        "Held-out problems are evaluated in fixed consecutive chunks of this many (problem i "
        "in chunk i // chunk_tasks, each chunk its own rollout): a problem's result then "
        "depends only on its chunk and the weights, not on how many problems are evaluated or "
        "which others are present; bf16 forward passes depend on batch composition (left "
        "padding, matrix shapes, shared prefixes). Keep rollout.batch_size >= one round's "
        "requests of a chunk (chunk_tasks x agents x max(1, samples)) so that the batch size "
        "does not matter either. 0 = the whole set in one rollout.",
        Range(0, 1_000_000),
    )


@dataclass
class LogConfig(Section):
    section: ClassVar[str] = "log"

    output_dir: str = setting("runs", "Runs are written to output_dir/<run name>.")
    tensorboard: bool = setting(True, "Also write TensorBoard event files.")
    progress: bool = setting(True, "Show a tqdm progress bar.")
    save_every: int = setting(
        0, "Checkpoint every N steps (0 = only at the end).", Range(0, 10_000_000)
    )
    keep_last: int = setting(2, "Checkpoints to keep (oldest removed).", Range(1, 1000))
    plots: bool = setting(True, "Write PNG plots of reward, accuracy and KL per agent at the end.")
    transcripts: bool = setting(True, "Write training episode records to transcripts.jsonl.")
    eval_transcripts: bool = setting(
        True, "Write each held-out evaluation's episode records to eval/step_<N>.jsonl."
    )
    eval_cache: str | bool = setting(
        "",
        "Folder of step-0 held-out evaluations shared between runs: a path; off (YAML's "
        "false); or '' (the default: off for marti train, <out>/eval_cache under marti sweep "
        "and marti bench credit --tier llm). A run whose initial weights, held-out set, "
        "config (less the keys that act only after step 0), "
        "code, library versions and machine match a stored entry copies its metrics and "
        "episode records instead of evaluating (eval/cached = 1); otherwise it evaluates and "
        "stores them (marti_trainer.eval_cache). Runs that differ only in seed (with eval.seed "
        "set), credit method or optimizer settings share an entry.",
    )
    ref_kl_samples: int = setting(
        16,
        "Samples per agent scored each step by the initial (reference) model for the metric "
        "kl/<agent> = KL(current || initial) (0 = off; all samples when algorithm.kl_coef > 0).",
        Range(0, 1_000_000),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(bool(self.output_dir.strip()), "'log.output_dir' must not be empty")
        _require(
            self.eval_cache is not True,
            "'log.eval_cache' must be a folder, off or '' (the default), got true",
        )
        if self.eval_cache is False:  # YAML reads a bare off as false
            self.eval_cache = "off"


@dataclass
class TrainConfig(Section):
    exp_name: str = setting("run", "Experiment name; runs are named {env}__{exp}__{seed}__{time}.")
    seed: int = setting(0, "Seed of data order, sampling and initialisation.", Range(0, 2**63 - 1))
    total_steps: int = setting(
        10, "Training steps (one rollout batch and its updates each).", Range(1, 10_000_000)
    )
    total_tokens: int | None = setting(
        None,
        "A training budget in response tokens: stop after the first step at which the "
        "tokens generated in training (rollouts, plus a re-execution credit method's "
        "replays) reach this many; that step is the last (checkpointed, and evaluated "
        "with eval.at_end). "
        "total_steps stays the cap, and an LR schedule still follows total_steps. null: "
        "train total_steps steps.",
        Range(1, 10**15),
    )
    run_name: str = setting(
        "", "Fixed run name (default: generated); --resume reuses the directory."
    )
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
        super().__post_init__()  # ranges of the top-level fields; each section checked its own
        r, a, o, m = self.rollout, self.algorithm, self.optim, self.model
        _require(
            r.n_samples >= 2 or a.advantage in ("reinforce_pp",) or a.group_by == "node",
            f"algorithm.advantage={a.advantage!r} compares samples within a group: "
            f"rollout.n_samples must be >= 2, got {r.n_samples}",
        )
        _require(
            not a.kl_in_reward or a.advantage in ("reinforce_pp", "reinforce_pp_baseline"),
            "algorithm.kl_in_reward needs a REINFORCE++ advantage (it adds the KL to rewards), "
            f"got algorithm.advantage={a.advantage!r}",
        )
        siblings = _trains_on_siblings(self.env)
        _require(
            a.group_by != "node" or siblings,
            "algorithm.group_by=node groups each turn with its siblings, which only "
            "env.credit=sibling with env.credit_kwargs {train: true} samples; otherwise every "
            f"group holds one sample (env.credit is {self.env.credit!r}, credit_kwargs "
            f"{dict(self.env.credit_kwargs)})",
        )
        _require(
            a.group_by == "node" or not siblings,
            f"env.credit={self.env.credit!r} with train: true trains each turn against its "
            "siblings, which needs algorithm.group_by=node (one advantage group per turn and "
            f"its siblings); with group_by={a.group_by!r} the siblings would be pooled across "
            "episodes, plain outcome GRPO with extra samples",
        )
        _require(
            a.group_by != "role" or m.sharing == "shared",
            f"algorithm.group_by=role pools several agents' samples under one baseline, which "
            f"needs them to share one policy: set model.sharing=shared (it is {m.sharing!r})",
        )
        _require(
            a.overlong_penalty == 0 or a.overlong_buffer <= r.max_tokens,
            f"algorithm.overlong_buffer ({a.overlong_buffer}) cannot exceed rollout.max_tokens "
            f"({r.max_tokens})",
        )
        _require(
            a.updates_per_batch <= r.tasks_per_step * r.n_samples,
            f"algorithm.updates_per_batch ({a.updates_per_batch}) cannot exceed the episodes "
            f"per step (rollout.tasks_per_step x n_samples = {r.tasks_per_step * r.n_samples})",
        )
        _require(
            r.tasks_per_step * r.n_samples <= 1_000_000,
            f"rollout.tasks_per_step x rollout.n_samples = {r.tasks_per_step * r.n_samples} "
            "episodes per step is over the limit of 1000000",
        )
        _require(
            o.engine == "deepspeed" or o.zero_stage == 0,
            f"optim.zero_stage={o.zero_stage} needs optim.engine=deepspeed",
        )
        _require(
            not (m.sharing == "lora" and o.engine == "deepspeed"),
            "model.sharing=lora trains several adapters of one model; use optim.engine=torch",
        )
        _require(
            not (o.share_prompts and m.gradient_checkpointing),
            "model.gradient_checkpointing turns the key/value cache off, which "
            "optim.share_prompts needs: set optim.share_prompts=false",
        )

    @property
    def heldout_seed(self) -> int:
        """The root seed of the held-out episodes: ``eval.seed``, else the run's ``seed``."""
        return self.seed if self.eval.seed is None else self.eval.seed

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


def config_from_dict(
    data: dict[str, Any], where: str = "<config>", check_env: bool = True
) -> TrainConfig:
    """Build a validated :class:`TrainConfig` from a nested mapping (as in the YAML).

    With ``check_env`` the env, credit method and task sources are also built once
    (:meth:`EnvConfig.build`: no model is loaded); off for a finished run's record, whose
    Python objects (a reward function given in code) were saved as their ``repr``.
    """
    try:
        cfg = _build(TrainConfig, data, where, "")
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from e
    if check_env:
        try:
            cfg.env.build()
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
    return cfg


def load_config(
    path: str | Path | None = None, overrides: list[str] | None = None, check_env: bool = True
) -> TrainConfig:
    """Defaults, then the YAML file at ``path`` (optional), then ``key=value`` overrides;
    ``check_env`` as in :func:`config_from_dict`.

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
    return config_from_dict(data, where, check_env)


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
