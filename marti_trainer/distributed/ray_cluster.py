"""Start or join a Ray cluster, and reserve the run's actors in one placement group.

:func:`init_ray` honours ``distributed.address`` (join an existing cluster) or sizes a local
one with ``distributed.num_cpus`` / ``num_gpus``; it sets ``RAY_AUTH_MODE=disabled`` unless
the environment says otherwise (Ray 2.60 otherwise writes an auth token on first start).

:func:`make_placement_group` asks for one bundle per actor: ``trainers`` bundles of
``{CPU: trainer_cpus, GPU: trainer_gpus}`` followed by ``rollout_workers`` bundles of
``{CPU: rollout_cpus, GPU: rollout_gpus}`` (zero amounts are left out), placed with
``distributed.placement``. On a local cluster (which cannot grow) a request larger than the
cluster fails at once; on a joined cluster (which may autoscale) it waits up to
``placement_timeout_s``. Either way the error names what was asked and what is there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from marti_trainer.config_distributed import DistributedConfig

__all__ = ["Placement", "init_ray", "make_placement_group", "shutdown_ray"]


def init_ray(cfg: DistributedConfig) -> bool:
    """Connect this process to the cluster ``cfg`` names; returns True if it started Ray.

    If Ray is already initialised (a test session, a notebook) that connection is used as it
    is and False is returned, so :func:`shutdown_ray` leaves it running.
    """
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # ray is optional: imported on use
    import ray

    if ray.is_initialized():
        return False
    if cfg.address:
        ray.init(address=cfg.address)
    else:
        ray.init(
            num_cpus=_number(cfg.num_cpus), num_gpus=_number(cfg.num_gpus), include_dashboard=False
        )
    return True


def shutdown_ray(started: bool) -> None:
    """Stop Ray if :func:`init_ray` started it (``started``); otherwise leave it running."""
    # ray is optional: imported on use
    import ray

    if started and ray.is_initialized():
        ray.shutdown()


def _number(x: float | None) -> Any:
    return int(x) if x is not None and float(x).is_integer() else x


@dataclass
class Placement:
    """A ready placement group and which bundle each actor uses."""

    group: Any  # ray.util.placement_group.PlacementGroup
    trainer_bundles: list[int]
    worker_bundles: list[int]

    def options(self, bundle: int, cpus: float, gpus: float) -> dict[str, Any]:
        """``.options(...)`` that place an actor on ``bundle`` with those resources."""
        # ray is optional: imported on use
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return {
            "num_cpus": cpus,
            "num_gpus": gpus,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                self.group, placement_group_bundle_index=bundle
            ),
        }

    def remove(self) -> None:
        # ray is optional: imported on use
        from ray.util.placement_group import remove_placement_group

        remove_placement_group(self.group)


def _bundle(cpus: float, gpus: float) -> dict[str, float]:
    return {k: v for k, v in (("CPU", cpus), ("GPU", gpus)) if v > 0}


def bundles(cfg: DistributedConfig, trainers: int) -> list[dict[str, float]]:
    """The bundles of a run with ``trainers`` trainer actors (trainers first, then workers)."""
    return [_bundle(cfg.trainer_cpus, cfg.trainer_gpus)] * trainers + [
        _bundle(cfg.rollout_cpus, cfg.rollout_gpus)
    ] * cfg.rollout_workers


def make_placement_group(cfg: DistributedConfig, trainers: int) -> Placement:
    """Reserve a bundle per actor (see the module docstring) and wait until it is placed.

    Raises:
        RuntimeError: the request exceeds a local cluster, or was not placed within
            ``cfg.placement_timeout_s``; the message names the request and the cluster.
    """
    # ray is optional: imported on use
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    wanted = bundles(cfg, trainers)
    total = _sum(wanted)
    if cfg.address is None:
        have = ray.cluster_resources()
        short = {k: v for k, v in total.items() if v > have.get(k, 0.0) + 1e-9}
        if short:
            raise RuntimeError(
                f"the Ray actors need {_fmt(total)} ({trainers} trainer(s) x "
                f"{_fmt(wanted[0])}, {cfg.rollout_workers} rollout worker(s) x "
                f"{_fmt(_bundle(cfg.rollout_cpus, cfg.rollout_gpus))}) but this cluster has "
                f"{_fmt({k: have.get(k, 0.0) for k in total})}: lower distributed.trainer_cpus / "
                f"rollout_cpus (fractions are fine), rollout_workers or the GPUs, or raise "
                f"distributed.num_cpus"
            )
    group = placement_group(wanted, strategy=cfg.placement)
    try:
        ray.get(group.ready(), timeout=cfg.placement_timeout_s)
    except ray.exceptions.GetTimeoutError:
        remove_placement_group(group)
        raise RuntimeError(
            f"the Ray cluster did not place {len(wanted)} bundles ({_fmt(total)} in all, "
            f"strategy {cfg.placement}) within {cfg.placement_timeout_s:g} s; available now: "
            f"{_fmt(ray.available_resources())}. Free or add resources, or change "
            f"distributed.placement / the per-actor CPUs and GPUs"
        ) from None
    n = trainers
    return Placement(group, list(range(n)), list(range(n, n + cfg.rollout_workers)))


def _sum(items: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for b in items:
        for k, v in b.items():
            out[k] = out.get(k, 0.0) + v
    return out


def _fmt(resources: dict[str, float]) -> str:
    keys = [k for k in ("CPU", "GPU") if k in resources] or sorted(resources)[:4]
    return "{" + ", ".join(f"{k}: {resources.get(k, 0.0):g}" for k in keys) + "}"
