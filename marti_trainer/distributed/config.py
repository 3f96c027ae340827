"""``distributed``: where a run's trainers and rollout engines live (typed, no ray import).

``backend: local`` (the default) runs everything in the calling process. ``backend: ray``
puts each trained unit on a :class:`~marti_trainer.distributed.actors.TrainerActor` and the
rollout models on ``rollout_workers`` :class:`~marti_trainer.distributed.actors.RolloutWorker`
actors, all in one placement group (one bundle per actor). The same YAML runs on a laptop and
on a multi-node GPU cluster; only this section changes::

    distributed:            # 2 CPU cores, no GPU: a local cluster, fractional CPUs
      backend: ray
      num_cpus: 2
      trainer_cpus: 1
      rollout_cpus: 1

    distributed:            # an existing cluster (`ray start --head` + workers), one GPU each
      backend: ray
      address: auto
      trainer_gpus: 1
      rollout_workers: 4
      rollout_gpus: 1
      placement: SPREAD
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["DistributedConfig"]

PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


def _f(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass
class DistributedConfig:
    backend: Literal["local", "ray"] = _f(
        "local", "local: everything in this process; ray: trainer and rollout actors."
    )
    address: str | None = _f(
        None,
        "Ray cluster to join ('auto', 'ray://host:10001', 'host:6379'); null starts a local "
        "cluster in this process.",
    )
    num_cpus: float | None = _f(
        None, "CPUs of a local cluster (address null); null lets Ray count them."
    )
    num_gpus: float | None = _f(
        None, "GPUs of a local cluster (address null); null lets Ray count them."
    )
    trainer_cpus: float = _f(1.0, "CPUs reserved per trainer actor (fractions allowed).")
    trainer_gpus: float = _f(0.0, "GPUs reserved per trainer actor.")
    rollout_workers: int = _f(
        1,
        "Rollout worker actors; each holds every unit's rollout model and requests are "
        "sharded over them. 0 = generate inside the trainer actors (colocated).",
    )
    rollout_cpus: float = _f(1.0, "CPUs reserved per rollout worker (fractions allowed).")
    rollout_gpus: float = _f(0.0, "GPUs reserved per rollout worker.")
    placement: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = _f(
        "PACK", "Placement group strategy over the actors' bundles (one bundle per actor)."
    )
    placement_timeout_s: float = _f(
        300.0, "Give up (with the missing resources named) if the bundles are not placed by then."
    )

    def __post_init__(self) -> None:
        from marti_trainer.config import ConfigError  # lazy: marti_trainer.config imports us

        def require(ok: bool, message: str) -> None:
            if not ok:
                raise ConfigError(f"distributed.{message}")

        for name in ("trainer_cpus", "trainer_gpus", "rollout_cpus", "rollout_gpus"):
            require(getattr(self, name) >= 0, f"{name} must be >= 0")
        require(
            self.trainer_cpus + self.trainer_gpus > 0,
            "trainer_cpus/trainer_gpus: a trainer actor must reserve some CPU or GPU",
        )
        require(self.rollout_workers >= 0, "rollout_workers must be >= 0")
        require(
            self.rollout_workers == 0 or self.rollout_cpus + self.rollout_gpus > 0,
            "rollout_cpus/rollout_gpus: a rollout worker must reserve some CPU or GPU",
        )
        require(self.num_cpus is None or self.num_cpus > 0, "num_cpus must be > 0 or null")
        require(self.num_gpus is None or self.num_gpus >= 0, "num_gpus must be >= 0 or null")
        require(
            self.address is None or (self.num_cpus is None and self.num_gpus is None),
            "num_cpus/num_gpus size a local cluster; with an address the cluster has its own",
        )
        require(self.placement_timeout_s > 0, "placement_timeout_s must be > 0")
        require(
            self.placement in PLACEMENT_STRATEGIES, f"placement must be in {PLACEMENT_STRATEGIES}"
        )
