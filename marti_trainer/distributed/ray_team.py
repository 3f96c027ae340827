""":class:`RayTeam`: the training loop's :class:`~marti_trainer.team.Team`, over Ray actors.

The loop calls the same names on it: ``units`` (each with ``name``, ``agents``, ``adapter``
and an ``engine`` whose ``step`` / ``weights`` / ``load_weights`` / ``state_dict`` /
``load_state_dict`` / ``save`` run on the unit's trainer actor), ``unit_of``,
``rollout_policies`` (one :class:`RayPolicy` per rollout model), ``sync``, ``tokenizer`` and
``close``. A :class:`RemoteUnit` has no local ``model`` or ``ref``:
:func:`marti_trainer.learner.update_unit` hands it to :meth:`RemoteUnit.remote_update`, which
runs the whole update (reference log-probs, advantages, mini-batch steps) on the actor.
:meth:`RayTeam.update` updates every unit at once, each on its own actor.

Units are grouped onto actors as ``model.sharing`` says: ``shared`` one actor (unit
``policy``), ``per_agent`` one actor per agent, ``lora`` one actor holding every adapter of
the one base model. Unit names, weights and optimizer states are a local run's, so
checkpoints are interchangeable between ``distributed.backend: local`` and ``ray``.

``sync(unit)`` with rollout workers: the trainer exports the unit's tensors (cast to
``rollout.dtype``) or adapter files once into the object store and every worker loads them;
with ``rollout_workers: 0`` the trainer actor updates its own rollout policy. A dead actor
raises :class:`~marti_trainer.distributed.errors.DeadActorError` naming it and how to resume.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
import torch
from transformers import AutoTokenizer

from marti_trainer.config import TrainConfig
from marti_trainer.distributed.actors import RolloutWorker, TrainerActor
from marti_trainer.distributed.errors import DeadActorError, get
from marti_trainer.distributed.ray_cluster import (
    Placement,
    init_ray,
    make_placement_group,
    shutdown_ray,
)
from marti_trainer.distributed.ray_policy import RayPolicy
from marti_trainer.learner import LossFn, TrainBatch
from marti_trainer.models import resolve_model
from marti_trainer.precision import resolve_config
from marti_trainer.team import GreedyDedup, precision_device

__all__ = ["RayTeam", "RemoteEngine", "RemoteUnit", "build_ray_team"]


@dataclass
class RemoteEngine:
    """The :class:`~marti_trainer.engines.Engine` methods of one unit, run on its actor."""

    actor: Any
    unit: str
    agents: tuple[str, ...]

    def _call(self, method: str, *args: Any) -> Any:
        ref = getattr(self.actor, method).remote(self.unit, *args)
        return get(ref, "trainer", self.unit, self.agents)

    def step(self, batch: TrainBatch) -> dict[str, float]:
        return self._call("train_step", batch)

    def weights(self) -> dict[str, torch.Tensor]:
        return self._call("weights")

    def load_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        self._call("load_weights", tensors)

    def state_dict(self) -> dict[str, Any]:
        return self._call("state_dict")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._call("load_state_dict", state)

    def save(self, directory: str | Path) -> None:
        """Write ``model.safetensors`` on the actor's node (a shared path on a cluster)."""
        self._call("save", str(directory))


@dataclass
class RemoteUnit:
    """A trained unit that lives on a :class:`TrainerActor` (see the module docstring)."""

    name: str
    agents: list[str]
    actor: Any
    engine: RemoteEngine
    adapter: str | None = None
    policy_key: str = ""
    model: Any = None  # the model and the reference scorer are on the actor
    ref: Any = None
    in_place: bool = False

    def remote_update(self, samples: list, step: int) -> dict[str, float]:
        """:func:`marti_trainer.learner.update_unit` for this unit, run on its actor."""
        return get(self.start_update(samples, step), "trainer", self.name, self.agents)

    def start_update(self, samples: list, step: int) -> Any:
        return self.actor.update.remote(self.name, samples, step)


@dataclass
class RayTeam:
    """Drop-in for :class:`marti_trainer.team.Team` (see the module docstring)."""

    units: list[RemoteUnit]
    model_dir: Path
    tokenizer: Any
    policies: dict[str, RayPolicy]
    trainers: list[Any]
    workers: list[Any]
    placement: Placement | None = None
    started_ray: bool = False
    rollout_dtype: str | None = None
    _closed: bool = field(default=False, repr=False)

    def unit_of(self, agent: str) -> RemoteUnit:
        for unit in self.units:
            if agent in unit.agents:
                return unit
        raise KeyError(f"no trained unit for agent {agent!r}")

    def rollout_policies(self, greedy_dedup: bool = False) -> dict[str, Any]:
        """agent -> policy (or ``(policy, adapter)``), as ``rollout(policies=...)`` takes.

        With ``greedy_dedup`` each :class:`RayPolicy` is wrapped in one
        :class:`marti_trainer.team.GreedyDedup`, as :meth:`marti_trainer.team.Team.rollout_policies`
        does.
        """
        wrapped: dict[str, Any] = {}
        if greedy_dedup:
            wrapped = {key: GreedyDedup(p) for key, p in self.policies.items()}
        out: dict[str, Any] = {}
        for u in self.units:
            policy = wrapped.get(u.policy_key, self.policies[u.policy_key])
            for agent in u.agents:
                out[agent] = (policy, u.adapter) if u.adapter else policy
        return out

    # ------------------------------------------------------------------ updates
    def update(self, samples: Sequence, step: int) -> dict[str, float]:
        """Every unit's :func:`~marti_trainer.learner.update_unit` at once (each on its actor,
        on its agents' samples), then :meth:`sync` of each; the merged metrics."""
        started = [
            (u, u.start_update([s for s in samples if s.agent in u.agents], step))
            for u in self.units
        ]
        metrics: dict[str, float] = {}
        for unit, ref in started:
            metrics.update(get(ref, "trainer", unit.name, unit.agents))
        with ThreadPoolExecutor(len(self.units)) as pool:
            list(pool.map(self.sync, self.units))
        return metrics

    def sync(self, unit: RemoteUnit) -> None:
        """Push ``unit``'s current weights to the rollout models that serve it."""
        if not self.workers:
            get(unit.actor.sync_local.remote(unit.name), "trainer", unit.name, unit.agents)
            return
        dtype = None if unit.adapter else self.rollout_dtype
        payload = unit.actor.export_weights.remote(unit.name, dtype)  # stays in the object store
        refs = [w.load_weights.remote(unit.policy_key, payload) for w in self.workers]
        for i, ref in enumerate(refs):
            try:
                get(ref, "rollout worker", f"worker {i}", unit.agents)
            except DeadActorError:
                # A worker's call also fails when the export it waits for failed: blame the
                # trainer if it is the one that died.
                get(unit.actor.pid.remote(), "trainer", unit.name, unit.agents)
                raise

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Close the policies, stop every actor, free the placement group; stop Ray if
        :func:`build_ray_team` started it. Idempotent; dead actors are skipped."""
        if self._closed:
            return
        self._closed = True
        for policy in self.policies.values():
            policy.close()
        _stop_actors([*self.trainers, *self.workers])
        if self.placement is not None:
            self.placement.remove()
        shutdown_ray(self.started_ray)


def _stop_actors(actors: list[Any]) -> None:
    refs = [a.close.remote() for a in actors]
    for ref in refs:
        with contextlib.suppress(Exception):  # a dead or stuck actor is killed below anyway
            ray.get(ref, timeout=60)
    for a in actors:
        ray.kill(a)


def _groups(cfg: TrainConfig, agents: list[str]) -> list[list[str]]:
    """The agents of each trainer actor: one actor per model (LoRA adapters share one)."""
    if cfg.model.sharing == "per_agent":
        return [[a] for a in agents]
    return [list(agents)]


def build_ray_team(cfg: TrainConfig, agents: list[str], loss_fn: LossFn, want_ref: bool) -> RayTeam:
    """:func:`marti_trainer.team.build_team`'s counterpart for ``distributed.backend: ray``.

    Starts or joins the cluster (:func:`~marti_trainer.distributed.ray_cluster.init_ray`),
    reserves a bundle per actor, starts the trainer actors and rollout workers, and waits
    until every model is loaded.

    Raises:
        RuntimeError: the actors do not fit the cluster (see
            :func:`~marti_trainer.distributed.ray_cluster.make_placement_group`).
        DeadActorError: an actor failed to start (``during_start``; the cause is in the
            message, e.g. a model missing on that node).
    """
    # "auto" precision and rollout dtype resolved once, here, for every actor alike
    cfg, _ = resolve_config(cfg, precision_device(cfg))
    d = cfg.distributed
    started = init_ray(d)
    actors: list[Any] = []
    placement = None
    try:
        groups = _groups(cfg, agents)
        placement = make_placement_group(d, len(groups))
        colocated = d.rollout_workers == 0
        trainer_cls = ray.remote(TrainerActor)
        trainers = [
            trainer_cls.options(**placement.options(b, d.trainer_cpus, d.trainer_gpus)).remote(
                cfg, members, loss_fn, want_ref, colocated
            )
            for b, members in zip(placement.trainer_bundles, groups, strict=True)
        ]
        actors += trainers
        units: list[RemoteUnit] = []
        for actor, members in zip(trainers, groups, strict=True):
            described = get(actor.describe.remote(), "trainer", "/".join(members), members)
            for u in described:
                engine = RemoteEngine(actor, u["name"], tuple(u["agents"]))
                units.append(RemoteUnit(u["name"], u["agents"], actor, engine, u["adapter"]))
        adapter_units = [u for u in units if u.adapter]
        for u in units:  # all adapters of one base model share its rollout policy
            u.policy_key = adapter_units[0].name if u.adapter else u.name
        keys = list(dict.fromkeys(u.policy_key for u in units))
        worker_cls = ray.remote(RolloutWorker)
        workers = [
            worker_cls.options(**placement.options(b, d.rollout_cpus, d.rollout_gpus)).remote(
                cfg, keys, bool(adapter_units)
            )
            for b in placement.worker_bundles
        ]
        actors += workers
        model_dir = resolve_model(cfg.model.name)
        tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        policies = {}
        for key in keys:
            served = [u for u in units if u.policy_key == key]
            members = [a for u in served for a in u.agents]
            if workers:
                hosts, role = workers, "rollout worker"
            else:
                hosts, role = [served[0].actor], "trainer"
            context = get(hosts[0].max_context_tokens.remote(key), role, key, members)
            policies[key] = RayPolicy(
                hosts, key=key, tokenizer=tokenizer, max_context_tokens=context, role=role,
                agents=members,
            )  # fmt: skip
        for i, w in enumerate(workers):  # every worker loaded: fail now, not mid-rollout
            get(w.pid.remote(), "rollout worker", f"worker {i}", agents)
        team = RayTeam(
            units, model_dir, tokenizer, policies, trainers, workers, placement, started,
            rollout_dtype=cfg.rollout.dtype,
        )  # fmt: skip
        for u in adapter_units:  # register every adapter before the first rollout uses it
            team.sync(u)
    except BaseException:
        for a in actors:
            ray.kill(a)
        if placement is not None:
            placement.remove()
        shutdown_ray(started)
        raise
    return team
