"""Ray distribution (``marti_trainer.distributed``) on a real local cluster.

One ``ray.init(num_cpus=2)`` for the whole session; every actor reserves half a CPU, so two
teams (trainer + worker each) fit at once. The model is the tiny random Llama (6.6 M
parameters) in fp32 everywhere, so remote and local numbers agree: a Ray team must generate,
train and checkpoint exactly as the local one does.

    RayPolicy over a worker            == local HFPolicy (greedy and seeded sampling)
    TrainerActor step                  == local engine step on the same batch and state
    team.sync(unit)                    -> workers generate with the trainer's new weights
    a killed actor                     -> DeadActorError naming it and `--resume`
    train(ray, stop at 1) + --resume   == train(local) for 2 steps
    train(ray, vLLM rollout workers)   == train(local, vLLM) for 2 steps
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

from marti_trainer.config import config_from_dict  # noqa: E402
from marti_trainer.distributed import (  # noqa: E402
    DeadActorError,
    DistributedConfig,
    RayPolicy,
    build_ray_team,
    init_ray,
    shutdown_ray,
)
from marti_trainer.distributed.ray_cluster import bundles  # noqa: E402
from marti_trainer.distributed.ray_policy import shards  # noqa: E402
from marti_trainer.learner import collate, make_loss_fn, set_norm  # noqa: E402
from marti_trainer.models import tiny_random_model  # noqa: E402
from marti_trainer.policies import SamplingParams, make_policy  # noqa: E402
from marti_trainer.rollout.drivers import generate_each  # noqa: E402
from marti_trainer.team import build_team  # noqa: E402

AGENTS = ["debater_0", "debater_1"]
PROMPTS = [[{"role": "user", "content": f"What is {i} + {2 * i}?"}] for i in range(5)]
GREEDY = SamplingParams(temperature=0.0, max_tokens=8)


@pytest.fixture(scope="session")
def ray_cluster():
    started = init_ray(DistributedConfig(backend="ray", num_cpus=2))
    yield
    shutdown_ray(started)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """One intra-op thread here too (the actors get one each): equal sums, no oversubscription."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return tiny_random_model(tmp_path_factory.mktemp("tiny-ray") / "m0", seed=0)


def make_cfg(tiny_dir, out_dir=None, **overrides):
    """A 2-debater, 1-round MAD run on the tiny model; ``section={key: value}`` overrides."""
    data = {
        "exp_name": "ray",
        "total_steps": 2,
        "env": {
            "id": "mad-v0",
            "kwargs": {"num_agents": 2, "rounds": 1},
            "train_tasks": {"type": "arithmetic", "levels": [1], "split": "train", "seed": 0},
            "eval_tasks": {"type": "arithmetic", "levels": [1], "split": "test", "seed": 1,
                           "size": 2},
        },
        "model": {"name": str(tiny_dir), "sharing": "shared"},
        "rollout": {"tasks_per_step": 2, "n_samples": 2, "max_tokens": 8, "batch_size": 8,
                    "dtype": "float32"},
        # A random model earns no reward: the entropy bonus gives every step a gradient.
        "algorithm": {"entropy_coef": 0.01, "skip_zero_advantage": False},
        "optim": {"precision": "fp32", "lr": 0.05},
        "eval": {"at_start": False, "at_end": False},
        "log": {"output_dir": str(out_dir or "runs"), "tensorboard": False, "progress": False,
                "plots": False, "transcripts": False},
        "distributed": {"backend": "ray", "trainer_cpus": 0.5, "rollout_cpus": 0.5},
    }  # fmt: skip
    for section, values in overrides.items():
        if isinstance(values, dict):
            data[section] = {**data.get(section, {}), **values}
        else:
            data[section] = values
    return config_from_dict(copy.deepcopy(data))


def make_batch(tokenizer, seed=0):
    """Four fake samples with non-zero advantages, as the loop would collate them."""
    g = torch.Generator().manual_seed(seed)
    samples = [
        SimpleNamespace(
            prompt_token_ids=torch.randint(0, 1000, (3 + i,), generator=g).tolist(),
            response_token_ids=torch.randint(0, 1000, (4 + i,), generator=g).tolist(),
            logprobs=[-1.0] * (4 + i),
        )
        for i in range(4)
    ]
    batch = collate(
        samples, tokenizer.pad_token_id, advantages=torch.tensor([1.0, -1.0, 0.5, -0.5])
    )
    return set_norm(batch, "token-mean")


def local_policy(tiny_dir, weights):
    policy = make_policy("hf", str(tiny_dir), dtype="float32")
    policy.load_weights(weights)
    return policy


def texts(generations):
    return [g[0].text if isinstance(g, list) else g.text for g in generations]


# ----------------------------------------------------------------------------- no cluster


def test_config_rejects_bad_distributed_values(tiny_dir):
    from marti_trainer.config import ConfigError

    with pytest.raises(ConfigError, match=r"distributed\.rollout_workers"):
        make_cfg(tiny_dir, distributed={"rollout_workers": -1})
    with pytest.raises(ConfigError, match="placement"):
        make_cfg(tiny_dir, distributed={"placement": "PAKC"})
    with pytest.raises(ConfigError, match="num_cpus/num_gpus"):
        make_cfg(tiny_dir, distributed={"address": "auto", "num_cpus": 2})
    assert make_cfg(tiny_dir, distributed={"backend": "local"}).distributed.backend == "local"


def test_bundles_and_shards():
    cfg = DistributedConfig(backend="ray", trainer_cpus=1, trainer_gpus=1, rollout_workers=2,
                            rollout_cpus=0.5)  # fmt: skip
    assert bundles(cfg, 2) == [{"CPU": 1, "GPU": 1}] * 2 + [{"CPU": 0.5}] * 2
    assert shards(5, 2) == [(0, 2), (2, 5)]
    assert shards(1, 3) == [(0, 1)]


@pytest.mark.slow
def test_placement_larger_than_the_local_cluster_is_refused(ray_cluster):
    from marti_trainer.distributed import make_placement_group

    cfg = DistributedConfig(backend="ray", trainer_cpus=1, rollout_workers=2, rollout_cpus=1)
    with pytest.raises(RuntimeError, match=r"need \{CPU: 4\}.*has \{CPU: 2\}.*fractions"):
        make_placement_group(cfg, trainers=2)


# ----------------------------------------------------------------------------- one team
# Every test below starts actors on the session's cluster: about 2 minutes in all on 2 busy
# CPU cores (each team's actors take ~10-25 s to import torch and load the model).


@pytest.fixture(scope="class")
def team(ray_cluster, tiny_dir):
    cfg = make_cfg(tiny_dir)
    loss_fn = make_loss_fn(cfg.algorithm, cfg.rollout.max_tokens, cfg.rollout.temperature)
    team = build_ray_team(cfg, AGENTS, loss_fn, want_ref=False)
    yield team
    team.close()


@pytest.mark.slow
class TestRayTeam:
    """One shared-model team: a trainer actor and a rollout worker."""

    def test_units_and_policies(self, team):
        assert [u.name for u in team.units] == ["policy"]
        policies = team.rollout_policies()
        assert set(policies) == set(AGENTS) and policies[AGENTS[0]] is policies[AGENTS[1]]
        assert isinstance(policies[AGENTS[0]], RayPolicy)

    def test_ray_policy_generates_what_a_local_policy_does(self, team, tiny_dir):
        policy = team.rollout_policies()[AGENTS[0]]
        with local_policy(tiny_dir, team.units[0].engine.weights()) as local:
            assert texts(policy.generate(PROMPTS, GREEDY)) == texts(local.generate(PROMPTS, GREEDY))
            params = [SamplingParams(temperature=1.0, max_tokens=8, seed=s) for s in range(5)]
            expected = texts(generate_each(local, PROMPTS, params))
        assert texts(policy.generate_each(PROMPTS, params)) == expected
        # Sharded over two handles (the same worker twice): same results, same order.
        two = RayPolicy(team.workers * 2, key=policy.key, tokenizer=policy.tokenizer,
                        max_context_tokens=policy.max_context_tokens)  # fmt: skip
        assert texts(two.generate_each(PROMPTS, params)) == expected
        assert len(expected) == len(set(expected))  # the prompts are told apart

    def test_trainer_step_matches_local_engine(self, team, tiny_dir):
        cfg = make_cfg(tiny_dir, distributed={"backend": "local"})
        loss_fn = make_loss_fn(cfg.algorithm, cfg.rollout.max_tokens, cfg.rollout.temperature)
        local = build_team(cfg, AGENTS, loss_fn, want_ref=False)
        remote = team.units[0].engine
        local.units[0].engine.load_weights(remote.weights())  # same weights and optimizer state
        local.units[0].engine.load_state_dict(remote.state_dict())
        batch = make_batch(local.tokenizer)
        expected = local.units[0].engine.step(batch)
        got = remote.step(batch)
        assert set(got) == set(expected)
        for key in ("losses/policy_loss", "losses/entropy", "optim/grad_norm"):
            assert got[key] == pytest.approx(expected[key], rel=1e-5), key
        after = remote.weights()
        for name, value in local.units[0].engine.weights().items():
            torch.testing.assert_close(after[name], value, rtol=1e-5, atol=1e-6)
        local.close()

    def test_sync_sends_new_weights_to_rollout_workers(self, team, tiny_dir):
        policy, unit = team.rollout_policies()[AGENTS[0]], team.units[0]
        before = texts(policy.generate(PROMPTS, GREEDY))
        unit.engine.step(make_batch(team.tokenizer, seed=1))  # lr 0.05: a large step
        assert texts(policy.generate(PROMPTS, GREEDY)) == before  # not synced yet
        team.sync(unit)
        after = texts(policy.generate(PROMPTS, GREEDY))
        assert after != before
        with local_policy(tiny_dir, unit.engine.weights()) as local:
            assert after == texts(local.generate(PROMPTS, GREEDY))

    def test_update_runs_on_the_actor_and_syncs(self, team, tiny_dir):
        g = torch.Generator().manual_seed(2)
        samples = [
            SimpleNamespace(
                agent=AGENTS[i % 2], reward=float(i % 3), group_key=("t0", AGENTS[i % 2], 0),
                prompt_token_ids=torch.randint(0, 1000, (4,), generator=g).tolist(),
                response_token_ids=torch.randint(0, 1000, (5,), generator=g).tolist(),
                logprobs=[-1.0] * 5,
            )
            for i in range(6)
        ]  # fmt: skip
        metrics = team.update(samples, step=1)
        assert metrics["optim/policy/grad_norm"] > 0 and "losses/policy/policy_loss" in metrics
        policy = team.rollout_policies()[AGENTS[0]]
        with local_policy(tiny_dir, team.units[0].engine.weights()) as local:
            assert texts(policy.generate(PROMPTS, GREEDY)) == texts(local.generate(PROMPTS, GREEDY))

    def test_dead_rollout_worker_is_named(self, team):  # last: it kills the worker
        policy = team.rollout_policies()[AGENTS[0]]
        ray.kill(team.workers[0])
        with pytest.raises(DeadActorError, match=r"rollout worker 'worker 0'.*--resume") as info:
            policy.generate(PROMPTS, GREEDY)
        assert info.value.agents == tuple(AGENTS) and not info.value.during_start
        with pytest.raises(DeadActorError, match="rollout worker"):
            team.sync(team.units[0])


# ----------------------------------------------------------------------------- colocated


@pytest.mark.slow
def test_colocated_team_and_dead_trainer(ray_cluster, tiny_dir):
    """rollout_workers: 0 generates on the trainer actor; killing it names the unit."""
    cfg = make_cfg(tiny_dir, distributed={"rollout_workers": 0})
    loss_fn = make_loss_fn(cfg.algorithm, cfg.rollout.max_tokens, cfg.rollout.temperature)
    team = build_ray_team(cfg, AGENTS, loss_fn, want_ref=False)
    try:
        assert not team.workers
        policy = team.rollout_policies()[AGENTS[0]]
        with local_policy(tiny_dir, team.units[0].engine.weights()) as local:
            assert texts(policy.generate(PROMPTS, GREEDY)) == texts(local.generate(PROMPTS, GREEDY))
        ray.kill(team.trainers[0])
        with pytest.raises(DeadActorError, match=r"trainer 'policy' \(agents debater_0, debater_1\)"
                           r".*marti train CONFIG --resume"):  # fmt: skip
            team.units[0].remote_update([], step=1)
        with pytest.raises(DeadActorError, match="trainer 'policy'"):
            policy.generate(PROMPTS, GREEDY)
    finally:
        team.close()


@pytest.mark.slow
def test_lora_adapters_reach_workers(ray_cluster, tiny_dir):
    """sharing=lora: one trainer actor with an adapter per agent; a step and sync of one
    adapter changes that agent's generations on the worker and no other's."""
    pytest.importorskip("peft")
    lora = {"sharing": "lora", "lora_rank": 4, "lora_targets": ["q_proj", "v_proj"]}
    cfg = make_cfg(tiny_dir, model=lora, optim={"lr": 0.5})
    loss_fn = make_loss_fn(cfg.algorithm, cfg.rollout.max_tokens, cfg.rollout.temperature)
    team = build_ray_team(cfg, AGENTS, loss_fn, want_ref=False)
    try:
        assert [(u.name, u.adapter) for u in team.units] == [(a, a) for a in AGENTS]
        assert len(team.trainers) == 1
        policies = team.rollout_policies()
        (policy, adapter0), (same, adapter1) = policies[AGENTS[0]], policies[AGENTS[1]]
        assert policy is same and (adapter0, adapter1) == tuple(AGENTS)
        before = {a: texts(policy.generate(PROMPTS, GREEDY, adapter=a)) for a in AGENTS}
        assert before[AGENTS[0]] == before[AGENTS[1]]  # LoRA B starts at zero
        unit = team.unit_of(AGENTS[0])
        for seed in range(2):  # the first step only moves B off zero
            unit.engine.step(make_batch(team.tokenizer, seed=seed))
        assert set(unit.engine.weights()) and all("lora_" in k for k in unit.engine.weights())
        team.sync(unit)
        assert texts(policy.generate(PROMPTS, GREEDY, adapter=AGENTS[0])) != before[AGENTS[0]]
        assert texts(policy.generate(PROMPTS, GREEDY, adapter=AGENTS[1])) == before[AGENTS[1]]
    finally:
        team.close()


# ----------------------------------------------------------------------------- the loop


@pytest.mark.slow
def test_ray_training_resumes_and_matches_local(ray_cluster, tiny_dir, tmp_path):
    """Per-agent trainer actors: 1 step, stop, `marti train --resume` 1 more; the metrics of
    both steps equal an uninterrupted local run's."""
    import yaml

    from marti_trainer.cli import main
    from marti_trainer.metrics import read_metrics
    from marti_trainer.train import train

    sections = {
        "model": {"sharing": "per_agent"},
        "run_name": "r",
        "log": {"save_every": 1},
        "eval": {"at_end": True},  # greedy evaluation over the RayPolicy too
    }
    local = train(
        make_cfg(tiny_dir, tmp_path / "local", distributed={"backend": "local"}, **sections)
    )
    cfg = make_cfg(tiny_dir, tmp_path / "ray", **sections)
    first = train(cfg, stop_at_step=1)
    assert [h["step"] for h in first.history] == [1]
    config_file = tmp_path / "ray.yaml"
    config_file.write_text(yaml.safe_dump(cfg.to_dict()))
    assert main(["train", str(config_file), "--resume", str(first.run_dir)]) == 0

    resumed = [h for h in read_metrics(first.run_dir) if "charts/step_s" in h]
    expected = [h for h in local.history if "charts/step_s" in h]
    assert [h["step"] for h in resumed] == [1, 2]
    assert all(h[f"optim/{a}/grad_norm"] > 0 for h in resumed for a in AGENTS)  # it trained
    assert "eval/accuracy" in resumed[1]
    assert_same_metrics(resumed, expected)
    assert (
        first.run_dir / "checkpoints" / "step_000002" / "weights" / "debater_1.safetensors"
    ).is_file()


@pytest.mark.slow
def test_vllm_rollout_workers_train_as_a_local_vllm_run(ray_cluster, tiny_dir, tmp_path):
    """rollout.backend=vllm: each rollout worker holds a vLLM engine that gets every update's
    weights; two steps give the metrics of the same run with a local vLLM engine."""
    from marti_trainer.train import train
    from tests.test_policy_vllm import _require_vllm

    _require_vllm()
    sections = {"rollout": {"backend": "vllm"}, "run_name": "r", "eval": {"at_end": True}}
    local = train(
        make_cfg(tiny_dir, tmp_path / "local", distributed={"backend": "local"}, **sections)
    )
    remote = train(make_cfg(tiny_dir, tmp_path / "ray", **sections))
    got = [h for h in remote.history if "charts/step_s" in h]
    assert [h["step"] for h in got] == [1, 2]
    assert all(h["optim/policy/grad_norm"] > 0 for h in got) and "eval/accuracy" in got[1]
    # Step 2's rollout metrics come from the synced weights: a missed sync would differ here.
    assert_same_metrics(got, [h for h in local.history if "charts/step_s" in h])


def assert_same_metrics(got: list[dict], want: list[dict]) -> None:
    """Equal training, rollout and eval metrics, step by step (timings excluded)."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        for key, value in w.items():
            if key.startswith(("losses/", "optim/", "rollout/", "eval/")) and "per_s" not in key:
                assert g[key] == pytest.approx(value, rel=1e-4, abs=1e-6), (g["step"], key)
