"""Ray distribution over two Ray nodes: ``ray.cluster_utils.Cluster`` on this machine.

A head node and a worker node of 1 CPU each: two raylets, each with its own object store
(150 MiB) and worker processes, joined in one cluster; this process is the driver, connected
to the head. Every actor reserves a whole CPU and ``distributed.placement: STRICT_SPREAD``
puts each bundle on a different node, so the trainer actor and the rollout worker run on
different raylets and every weight sync crosses from one object store to the other.

    trainer and rollout worker             -> on different Ray nodes
    step + team.sync(unit) across nodes    -> the worker generates with the new weights
    train(ray, STRICT_SPREAD over 2 nodes) == train(local) for 2 steps

Not covered: separate hosts. Both nodes share this machine's filesystem, marti installation
and model directory, and talk over loopback; a real multi-host cluster (a model path that
must resolve on every host, checkpoints on the driver's disk only, a real network) is not
tested here.

Ray allows one connection per process: if test_ray.py's session cluster is up, the module
fixture shuts it down first (its teardown then finds Ray stopped and does nothing), and on
teardown stops this cluster, so the two files run in one session in either order.
"""

from __future__ import annotations

import os

import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

from ray.cluster_utils import Cluster  # noqa: E402

from marti_trainer.distributed import build_ray_team  # noqa: E402
from marti_trainer.learner import make_loss_fn  # noqa: E402
from marti_trainer.models import tiny_random_model  # noqa: E402
from tests.test_ray import (  # noqa: E402, F401 (_one_thread: an autouse fixture)
    AGENTS,
    GREEDY,
    PROMPTS,
    _one_thread,
    assert_same_metrics,
    local_policy,
    make_batch,
    make_cfg,
    texts,
)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_random_model(tmp_path_factory.mktemp("tiny-ray-2n") / "m0", seed=0)


# A whole CPU per actor on 1-CPU nodes, one bundle per node.
SPREAD = {"placement": "STRICT_SPREAD", "trainer_cpus": 1, "rollout_cpus": 1}


@pytest.fixture(scope="module")
def two_nodes():
    """A head and a worker node of 1 CPU each, this process connected as the driver."""
    if ray.is_initialized():  # test_ray.py's session cluster: one Ray per process
        ray.shutdown()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # as init_ray does
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()  # also removes the address file ray.init() would otherwise join


@pytest.mark.slow
def test_trainer_and_worker_on_different_nodes_sync_across(two_nodes, tiny_dir):
    """STRICT_SPREAD: the trainer and the worker on different nodes; a step on the trainer
    and ``team.sync`` reach the worker through the object stores of both nodes."""
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(alive) == 2 and ray.cluster_resources()["CPU"] == 2
    cfg = make_cfg(tiny_dir, distributed=SPREAD)
    loss_fn = make_loss_fn(cfg.algorithm, cfg.rollout.max_tokens, cfg.rollout.temperature)
    team = build_ray_team(cfg, AGENTS, loss_fn, want_ref=False)
    try:
        (trainer,), (worker,) = team.trainers, team.workers
        nodes = ray.get([trainer.node_id.remote(), worker.node_id.remote()])
        assert nodes[0] != nodes[1] and set(nodes) == alive
        policy, unit = team.rollout_policies()[AGENTS[0]], team.units[0]
        before = texts(policy.generate(PROMPTS, GREEDY))
        unit.engine.step(make_batch(team.tokenizer, seed=1))  # lr 0.05: a large step
        team.sync(unit)
        after = texts(policy.generate(PROMPTS, GREEDY))
        assert after != before
        with local_policy(tiny_dir, unit.engine.weights()) as local:
            assert after == texts(local.generate(PROMPTS, GREEDY))
    finally:
        team.close()


@pytest.mark.slow
def test_training_across_nodes_matches_local(two_nodes, tiny_dir, tmp_path):
    """Two steps with the trainer and the worker on different nodes (two 1-CPU bundles,
    STRICT_SPREAD, on two 1-CPU nodes) give the metrics of the same local run; step 2's
    rollout runs on weights synced across the nodes."""
    from marti_trainer.train import train

    local = train(
        make_cfg(tiny_dir, tmp_path / "local", run_name="r", distributed={"backend": "local"})
    )
    remote = train(make_cfg(tiny_dir, tmp_path / "ray", run_name="r", distributed=SPREAD))
    got = [h for h in remote.history if "charts/step_s" in h]
    assert [h["step"] for h in got] == [1, 2]
    assert all(h["optim/policy/grad_norm"] > 0 for h in got)  # it trained
    assert_same_metrics(got, [h for h in local.history if "charts/step_s" in h])
