"""marti_env: multi-agent LLM workflows as PettingZoo environments.

>>> import marti_env
>>> env = marti_env.make("mad-v0", num_agents=2, rounds=2)
>>> obs, infos = env.reset(seed=0)
>>> sorted(obs)
['debater_0', 'debater_1']

``marti_env.make_vec(env_id, num_envs, group_size)`` steps many envs together for a custom
RL loop (:mod:`marti_env.vector`).

This package never imports torch, transformers, vllm, deepspeed or ray.
"""

from __future__ import annotations

from marti_env import credit
from marti_env.env import WorkflowEnv
from marti_env.record import EpisodeRecord, Turn, TurnSample, read_jsonl, write_jsonl
from marti_env.registry import (
    EnvSpec,
    load_spec_file,
    make,
    pprint_registry,
    register,
    register_standard_envs,
    registry,
    spec,
)
from marti_env.tasks import Task
from marti_env.vector import AgentRequest, VecEnv, make_vec

__version__ = "0.1.0"

register_standard_envs()

__all__ = [
    "AgentRequest",
    "EnvSpec",
    "EpisodeRecord",
    "Task",
    "Turn",
    "TurnSample",
    "VecEnv",
    "WorkflowEnv",
    "credit",
    "load_spec_file",
    "make",
    "make_vec",
    "pprint_registry",
    "read_jsonl",
    "register",
    "registry",
    "spec",
    "write_jsonl",
]
