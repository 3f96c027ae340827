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

from dataclasses import dataclass
from typing import ClassVar, Literal

from marti_trainer.config_schema import ConfigError, Range, Section, setting

__all__ = ["DistributedConfig"]

PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


@dataclass
class DistributedConfig(Section):
    section: ClassVar[str] = "distributed"

    backend: Literal["local", "ray"] = setting(
        "local", "local: everything in this process; ray: trainer and rollout actors."
    )
    address: str | None = setting(
        None,
        "Ray cluster to join ('auto', 'ray://host:10001', 'host:6379'); null starts a local "
        "cluster in this process.",
    )
    num_cpus: float | None = setting(
        None,
        "CPUs of a local cluster (address null); null lets Ray count them.",
        Range(0, 100_000, lo_open=True),
    )
    num_gpus: float | None = setting(
        None, "GPUs of a local cluster (address null); null lets Ray count them.", Range(0, 10_000)
    )
    trainer_cpus: float = setting(
        1.0, "CPUs reserved per trainer actor (fractions allowed).", Range(0, 10_000)
    )
    trainer_gpus: float = setting(0.0, "GPUs reserved per trainer actor.", Range(0, 1000))
    rollout_workers: int = setting(
        1,
        "Rollout worker actors; each holds every unit's rollout model and requests are "
        "sharded over them. 0 = generate inside the trainer actors (colocated).",
        Range(0, 10_000),
    )
    rollout_cpus: float = setting(
        1.0, "CPUs reserved per rollout worker (fractions allowed).", Range(0, 10_000)
    )
    rollout_gpus: float = setting(0.0, "GPUs reserved per rollout worker.", Range(0, 1000))
    placement: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = setting(
        "PACK", "Placement group strategy over the actors' bundles (one bundle per actor)."
    )
    placement_timeout_s: float = setting(
        300.0,
        "Give up (with the missing resources named) if the bundles are not placed by then.",
        Range(0, 1e7, lo_open=True),
    )

    def __post_init__(self) -> None:
        super().__post_init__()  # ranges

        def require(ok: bool, message: str) -> None:
            if not ok:
                raise ConfigError(f"distributed.{message}")

        require(
            self.trainer_cpus + self.trainer_gpus > 0,
            "trainer_cpus/trainer_gpus: a trainer actor must reserve some CPU or GPU",
        )
        require(
            self.rollout_workers == 0 or self.rollout_cpus + self.rollout_gpus > 0,
            "rollout_cpus/rollout_gpus: a rollout worker must reserve some CPU or GPU",
        )
        require(
            self.address is None or (self.num_cpus is None and self.num_gpus is None),
            "num_cpus/num_gpus size a local cluster; with an address the cluster has its own",
        )
        require(
            self.placement in PLACEMENT_STRATEGIES, f"placement must be in {PLACEMENT_STRATEGIES}"
        )
