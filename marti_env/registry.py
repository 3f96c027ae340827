"""The environment registry, after Gymnasium's and PettingZoo's.

Ids are versioned, ``name-vN``: a version is bumped whenever rules, prompts, rewards or
observations change. The standard environments are declared in the YAML files of the
top-level ``envs/`` folder and registered when :mod:`marti_env` is imported.

A YAML spec::

    id: mad-v0                  # name-vN
    workflow: mad               # a key of marti_env.workflows.WORKFLOWS, or an entry point
    summary: one line
    kwargs: {num_agents: 3}     # defaults of the workflow's (and the env's) arguments
    prompts: {system: null, solve: {examples: [...], user: "..."}, ...}

Environments by entry point, as Gymnasium's ``entry_point``: ``workflow`` may name a class
outside the library as ``"package.module:Class"`` (in a YAML spec, or passed to
:func:`register`), so a user's own workflow registers without editing ``marti_env``. The
module is imported when the env is registered (its arguments and prompt templates are
validated then, not at the first ``make``); a module that cannot be imported, a missing
attribute or an object that is not a :class:`~marti_env.workflows.Workflow` subclass is a
``ValueError`` naming the spec file, the entry point and what failed.
"""

from __future__ import annotations

import difflib
import inspect
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from marti_env.credit import credit_params, is_replay_method, make_credit
from marti_env.entry_points import resolve_entry_point
from marti_env.env import WorkflowEnv
from marti_env.prompts import Prompts
from marti_env.rewards import make_reward, reward_params
from marti_env.tasks import ListTasks, TaskSource, make_task_source
from marti_env.tasks.code import code_templates
from marti_env.workflows import WORKFLOWS, Workflow

_ID = re.compile(r"^(?P<name>[a-z][a-z0-9_]*(?:-[a-z0-9_]+)*)-v(?P<version>\d+)$")

ENV_ARGS: dict[str, Any] = {
    "tasks": "arithmetic",
    "reward": "math",
    "credit": "none",
    "max_response_chars": 32_768,
    "render_mode": None,
    "prompts": None,
}
"""Arguments every env accepts, with their defaults:

- ``tasks``: task source spec (``"arithmetic"``, a data file path, ``"gsm8k/test"``,
  ``"hf:<name>"``, a list of ``Task``, a ``TaskSource``); see ``marti_env.tasks``.
- ``reward``: the per-turn verifier (``"math"``, ``"format"``, ``"math+format"``, a
  ``Reward`` or a judge callable), or ``"ttrl"`` for label-free majority-vote rewards.
- ``credit``: a registered credit method name or a ``CreditMethod``; the method's options
  (e.g. ``alpha``) are passed to ``make`` as keyword arguments too.
- The reward's options are passed to ``make`` (or set in a YAML spec's ``kwargs``) as
  keyword arguments the same way (:func:`reward_options` lists them): ``"math"``,
  ``"math+format"`` and ``"ttrl"`` take ``max_answer_chars``, the verifier's cap on an
  answer's length (default 1000; longer answers score 0 and count as rejected).
- ``max_response_chars``: the action space's bound (longer actions are still accepted).
- ``render_mode``: ``None``, ``"ansi"`` or ``"human"``.
- ``prompts``: template overrides, ``{template: str | {user, examples}, "system": str}``,
  or ``"code"``: the env's own prompts asking for a Python function in a code block instead
  of a boxed answer (:func:`marti_env.tasks.code.code_templates`; use with ``reward="code"``
  and code tasks).
"""


@dataclass(frozen=True)
class EnvSpec:
    """A registered environment: which workflow, its default arguments and prompts."""

    id: str
    workflow: type[Workflow]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    prompts: Mapping[str, Any] = field(default_factory=dict)
    summary: str = ""
    source: str = "<python>"

    @property
    def name(self) -> str:
        return _ID.match(self.id).group("name")  # type: ignore[union-attr]

    @property
    def version(self) -> int:
        return int(_ID.match(self.id).group("version"))  # type: ignore[union-attr]

    def workflow_args(self) -> tuple[str, ...]:
        """The workflow's own argument names."""
        params = inspect.signature(self.workflow.__init__).parameters
        return tuple(p for p in params if p != "self")

    def allowed_args(self, credit: Any = None, reward: Any = None) -> tuple[str, ...]:
        """Every keyword ``make`` accepts for this env: credit options for ``credit``,
        reward options for ``reward`` (default: the spec's own reward, ``"math"`` unless
        its kwargs say otherwise)."""
        extra = credit_params(credit) if isinstance(credit, str) else ()
        if reward is None:
            reward = self.kwargs.get("reward", ENV_ARGS["reward"])
        return (*self.workflow_args(), *ENV_ARGS, *extra, *reward_options(reward))


registry: dict[str, EnvSpec] = {}
"""Every registered env, by id."""


def reward_options(reward: Any) -> tuple[str, ...]:
    """The option names of reward spec ``reward``: a registered reward's
    (:func:`marti_env.rewards.reward_params`), ``"math"``'s for ``"ttrl"`` (it scores turns
    against the majority answer with the math reward), none for objects and unknown names."""
    if reward == "ttrl":
        reward = "math"
    if not isinstance(reward, str):
        return ()
    try:
        return reward_params(reward)
    except ValueError:
        return ()  # make_reward names the unknown reward


def register(
    id: str,
    workflow: str | type[Workflow],
    kwargs: Mapping[str, Any] | None = None,
    prompts: Mapping[str, Any] | None = None,
    summary: str = "",
    source: str = "<python>",
) -> EnvSpec:
    """Register an environment; its arguments and prompts are validated now.

    Args:
        id: ``name-vN``.
        workflow: A :class:`~marti_env.workflows.Workflow` subclass, a key of
            :data:`~marti_env.workflows.WORKFLOWS` (``"mad"``), or an entry point
            ``"package.module:Class"``, imported now.
        kwargs: Default arguments (the workflow's, :data:`ENV_ARGS`, credit and reward
            options).
        prompts: The workflow's templates, ``{template: str | {user, examples}, "system": str}``.
        summary: One line for :func:`pprint_registry`.
        source: Where the spec comes from (a YAML path), named in every error.

    Raises:
        ValueError: a malformed or already registered id, an unknown workflow, an entry
            point that cannot be imported or is not a ``Workflow`` subclass, an unknown
            default argument, or prompts that do not fit the workflow.
    """
    if not isinstance(id, str) or not _ID.match(id):
        raise ValueError(f"{source}: env id {id!r} is not of the form 'name-vN' (e.g. 'mad-v0')")
    if id in registry:
        raise ValueError(
            f"{source}: env id {id!r} is already registered (by {registry[id].source})"
        )
    if isinstance(workflow, str):
        workflow = _workflow_class(workflow, source)
    spec = EnvSpec(id, workflow, dict(kwargs or {}), dict(prompts or {}), summary, source)
    allowed = spec.allowed_args()
    for key in spec.kwargs:
        if key not in allowed:
            raise ValueError(
                f"{source}: {id} sets unknown argument {key!r}{_suggest(key, allowed)}; "
                f"allowed: {', '.join(allowed)}"
            )
    Prompts.from_dict(spec.prompts, workflow.templates, where=source)
    registry[id] = spec
    return spec


def _workflow_class(name: str, source: str) -> type[Workflow]:
    """The workflow class a spec names: a key of ``WORKFLOWS`` or ``"package.module:Class"``."""
    if ":" not in name:
        if name not in WORKFLOWS:
            raise ValueError(
                f"{source}: unknown workflow {name!r}{_suggest(name, WORKFLOWS)}; "
                f"known: {', '.join(sorted(WORKFLOWS))}, or an entry point "
                "'package.module:Class'"
            )
        return WORKFLOWS[name]
    where = f"{source}: workflow entry point {name!r}"
    obj = resolve_entry_point(name, where)
    if not (isinstance(obj, type) and issubclass(obj, Workflow)):
        raise ValueError(f"{where} is {obj!r}, not a subclass of marti_env.workflows.Workflow")
    return obj


def spec(id: str) -> EnvSpec:
    """The spec of a registered env; an unknown id errors with the closest registered ones."""
    if id in registry:
        return registry[id]
    match = _ID.match(id) if isinstance(id, str) else None
    if match:
        versions = sorted(s.id for s in registry.values() if s.name == match.group("name"))
        if versions:
            raise ValueError(f"env {id!r} has no such version; registered: {', '.join(versions)}")
    elif isinstance(id, str):
        versions = sorted(s.id for s in registry.values() if s.name == id)
        if versions:
            raise ValueError(f"env ids carry a version: use one of {', '.join(versions)}")
    raise ValueError(
        f"no env {id!r}{_suggest(str(id), registry)}; registered: {', '.join(sorted(registry))}"
    )


def make(id: str, api: Literal["parallel", "aec"] = "parallel", **overrides: Any) -> Any:
    """Build a registered environment.

    Args:
        id: A registered id such as ``"mad-v0"``.
        api: ``"parallel"`` for a PettingZoo ``ParallelEnv`` (default) or ``"aec"`` for the
            AEC form (``pettingzoo.utils.parallel_to_aec``).
        **overrides: The workflow's arguments (see its docstring), the env arguments in
            :data:`ENV_ARGS`, and the chosen credit method's options.

    Raises:
        ValueError: an unknown id (with the closest ones), an unknown argument (naming it,
            the closest and the allowed ones) or a bad value.
    """
    env_spec = spec(id)
    if api not in ("parallel", "aec"):
        raise ValueError(f"api must be 'parallel' or 'aec', got {api!r}")
    args = {**ENV_ARGS, **env_spec.kwargs, **overrides}
    allowed = env_spec.allowed_args(args["credit"], args["reward"])
    for key in overrides:
        if key not in allowed:
            raise ValueError(
                f"{id} got an unknown argument {key!r}{_suggest(key, allowed)}; "
                f"allowed: {', '.join(allowed)}"
            )
    workflow = env_spec.workflow(**{k: args[k] for k in env_spec.workflow_args() if k in args})
    prompt_overrides = args["prompts"]
    if prompt_overrides == "code":
        prompt_overrides = code_templates(env_spec.prompts)
    prompts = Prompts.from_dict(
        _merge_prompts(env_spec.prompts, prompt_overrides), env_spec.workflow.templates, where=id
    )
    for template, needed in workflow.required_fields().items():
        for name, why in needed.items():
            if name not in prompts.templates[template].fields():
                raise ValueError(
                    f"{id}: prompt template {template!r} does not use {{{{{name}}}}}, which "
                    f"this env needs: {why}"
                )
    reward_keys = reward_options(args["reward"])
    reward_opts = {k: v for k, v in args.items() if k in reward_keys}
    credit_options = {
        k: v
        for k, v in overrides.items()
        if k not in env_spec.workflow_args() and k not in ENV_ARGS and k not in reward_keys
    }
    credit = make_credit(args["credit"], **credit_options)
    if is_replay_method(credit):
        raise ValueError(
            f"{id}: credit method '{credit.name}' re-executes episodes with the policies, which "
            "the env cannot do alone: make the env with credit='none' and credit its finished "
            "episodes with marti_env.credit.credit_by_replay(env, records, method, policy)"
        )
    if args["reward"] == "ttrl":  # label-free: turns are scored against the majority answer
        reward, label_free = None, make_reward("math", **reward_opts)
    else:
        reward, label_free = make_reward(args["reward"], **reward_opts), None
    env = WorkflowEnv(
        env_id=id,
        workflow=workflow,
        prompts=prompts,
        tasks=_labelled(make_task_source(args["tasks"]), id)
        if reward
        else make_task_source(args["tasks"]),
        reward=reward,
        label_free_reward=label_free,
        credit=credit,
        max_response_chars=args["max_response_chars"],
        render_mode=args["render_mode"],
    )
    if api == "aec":
        from pettingzoo.utils.conversions import parallel_to_aec

        return parallel_to_aec(env)
    return env


def pprint_registry(print_output: bool = True) -> str | None:
    """Print (or return) every registered env with its summary and default arguments."""
    lines = []
    for env_id in sorted(registry):
        s = registry[env_id]
        defaults = ", ".join(f"{k}={v!r}" for k, v in s.kwargs.items())
        lines.append(f"{env_id:<14} {s.summary}")
        if defaults:
            lines.append(f"{'':<14} defaults: {defaults}")
    text = "\n".join(lines)
    if print_output:
        print(text)
        return None
    return text


def envs_dir() -> Path:
    """Where the standard environments' YAML specs live (the repo's ``envs/`` folder, or
    its copy inside an installed wheel)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_envs", here.parent / "envs"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"no envs/ folder of YAML specs next to {here}")


def load_spec_file(path: str | Path) -> EnvSpec:
    """Register the environment declared in one YAML file (see the module docstring); its
    ``workflow`` may be a registered name or an entry point ``"package.module:Class"``."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: invalid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    known = {"id", "workflow", "summary", "kwargs", "prompts"}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {sorted(unknown)}; known: {sorted(known)}")
    for key in ("id", "workflow", "prompts"):
        if key not in data:
            raise ValueError(f"{path}: missing key {key!r}")
    return register(
        data["id"],
        data["workflow"],
        kwargs=data.get("kwargs") or {},
        prompts=data["prompts"],
        summary=data.get("summary", ""),
        source=str(path),
    )


def register_standard_envs() -> None:
    for path in sorted(envs_dir().glob("*.yaml")):
        load_spec_file(path)


def _labelled(tasks: TaskSource, env_id: str) -> TaskSource:
    """``tasks`` without the tasks that have no reference answer, with a warning naming them
    (e.g. two rows of MATH train have an empty answer); an error if none is left."""
    if not isinstance(tasks, ListTasks):
        return tasks
    missing = [t.id for t in tasks if t.answer is None]
    if not missing:
        return tasks
    if len(missing) == len(tasks):
        raise ValueError(
            f"{env_id}: no task of {tasks.name} has a reference answer; use reward='ttrl' "
            "for label-free rewards"
        )
    warnings.warn(
        f"{env_id}: dropping {len(missing)} of {len(tasks)} tasks of {tasks.name} that have no "
        f"reference answer ({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}); "
        "reward='ttrl' uses them",
        stacklevel=3,
    )
    return tasks.with_tasks([t for t in tasks if t.answer is not None])


def _merge_prompts(base: Mapping[str, Any], override: Mapping[str, Any] | None) -> dict[str, Any]:
    if override is None:
        return dict(base)
    if not isinstance(override, Mapping):
        raise ValueError(
            'prompts must be a mapping of template overrides or "code" (the env\'s prompts '
            f"asking for a program), got {override!r}"
        )
    return {**base, **override}


def _suggest(word: str, options: Any) -> str:
    close = difflib.get_close_matches(word, list(options), n=3)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
