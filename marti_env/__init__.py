"""marti_env: multi-agent LLM workflows as PettingZoo environments.

>>> import marti_env
>>> env = marti_env.make("mad-v0", num_agents=2, rounds=2)
>>> obs, infos = env.reset(seed=0)
>>> sorted(obs)
['debater_0', 'debater_1']

This package never imports torch, transformers, vllm, deepspeed or ray.
"""

from __future__ import annotations

from marti_env import credit
from marti_env.env import WorkflowEnv
from marti_env.record import EpisodeRecord, Turn, read_jsonl, write_jsonl
from marti_env.registry import (
    EnvSpec,
    make,
    pprint_registry,
    register,
    register_standard_envs,
    registry,
    spec,
)
from marti_env.tasks import Task

__version__ = "0.1.0"

register_standard_envs()

__all__ = [
    "EnvSpec",
    "EpisodeRecord",
    "Task",
    "Turn",
    "WorkflowEnv",
    "credit",
    "make",
    "pprint_registry",
    "read_jsonl",
    "register",
    "registry",
    "spec",
    "write_jsonl",
]
