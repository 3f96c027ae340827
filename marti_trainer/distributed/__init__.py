"""Ray distribution of a training run: trainer actors, rollout workers, placement groups.

With ``distributed.backend: ray`` the training loop is unchanged; :func:`build_ray_team`
returns a :class:`RayTeam`, a drop-in for :class:`marti_trainer.team.Team`::

    driver (the loop, envs, rewards, checkpoints)
      |-- TrainerActor  one per trained unit (shared model: 1; per_agent: 1 per agent;
      |                 lora: 1 holding every adapter); runs update_unit() where the model is
      |-- RolloutWorker x distributed.rollout_workers; each holds every unit's rollout model
      '-- RayPolicy     a Policy per unit whose generate() is sharded over the workers, so the
                        rollout engine runs unchanged over remote models

After each update ``team.sync(unit)`` sends the unit's new weights (or LoRA adapter files)
from its trainer to every worker through Ray's object store: no shared filesystem is needed.
All actors sit in one placement group (a ``{CPU, GPU}`` bundle per actor, strategy
``distributed.placement``). Checkpoints are written by the driver, in the same format as a
local run, so a run may be resumed with either backend. An actor that dies (node lost,
out-of-memory kill, ``ray.kill``) is not restarted: the next call raises
:class:`DeadActorError` naming the unit or worker and how to resume.

On a multi-node cluster every node needs the same marti installation, and ``model.name``
must resolve on every node (a cached alias, or a directory on a shared filesystem): each
actor loads the model itself. Checkpoints are written on the driver's node only.

A Ray run computes what a local run computes, in the same order: with one intra-op thread
per process on both sides, the tests find the same losses, gradients and sampled tokens (fp32,
tiny model). On an Intel Xeon they once differed in the last bit between processes, which
sampling amplified into a different token; the tests therefore pin MKL's reproducible mode to
one code path, ``MKL_CBWR=AVX2,STRICT``, in every process (set it before starting Ray; the
actors of a local cluster inherit it). MKL's run-time choice of Intel kernels is the likely
cause, not one confirmed on an Intel machine.

Importing this package imports neither ray nor torch; the names below load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from marti_trainer.config_distributed import DistributedConfig

__all__ = [
    "DeadActorError",
    "DistributedConfig",
    "RayPolicy",
    "RayTeam",
    "RolloutWorker",
    "TrainerActor",
    "build_ray_team",
    "init_ray",
    "make_placement_group",
    "shutdown_ray",
]

_LAZY = {
    "DeadActorError": "marti_trainer.distributed.errors",
    "RayPolicy": "marti_trainer.distributed.ray_policy",
    "RayTeam": "marti_trainer.distributed.ray_team",
    "build_ray_team": "marti_trainer.distributed.ray_team",
    "RolloutWorker": "marti_trainer.distributed.actors",
    "TrainerActor": "marti_trainer.distributed.actors",
    "init_ray": "marti_trainer.distributed.ray_cluster",
    "make_placement_group": "marti_trainer.distributed.ray_cluster",
    "shutdown_ray": "marti_trainer.distributed.ray_cluster",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
