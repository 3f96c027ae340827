"""The training loop on a tiny random-weight model: outputs, weight sync into the rollout
backend, exact resumption; and (slow) one real step with the default model."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from marti_env.tasks import ArithmeticTasks
from marti_trainer.config import config_from_dict, load_config
from marti_trainer.learner import collate, make_loss_fn, set_norm
from marti_trainer.machine import describe_machine
from marti_trainer.metrics import read_metrics, step_tokens, training_tokens
from marti_trainer.models import tiny_random_model
from marti_trainer.policies import SamplingParams
from marti_trainer.team import build_team
from marti_trainer.train import TaskSampler, train

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_random_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def length_reward(task, response: str) -> float:
    """A reward a random model earns: varies with the response, so groups have spread."""
    return float(len(response) % 3) / 2


def tiny_config(tiny_dir, out: Path, **overrides):
    data = {
        "exp_name": "tiny",
        "total_steps": 3,
        "env": {
            "id": "mad-v0",
            "kwargs": {"num_agents": 2, "rounds": 2, "reward": length_reward},
            "credit": "score",
            "train_tasks": {"type": "arithmetic", "levels": [1], "size": 50},
            "eval_tasks": {"type": "arithmetic", "levels": [1], "split": "test", "size": 3},
        },
        "model": {"name": str(tiny_dir)},
        "rollout": {"tasks_per_step": 2, "n_samples": 2, "max_tokens": 6, "dtype": "float32"},
        "optim": {"lr": 1e-3, "precision": "fp32", "micro_batch_tokens": 256},
        "eval": {"at_start": False, "at_end": False},
        "log": {"output_dir": str(out), "progress": False, "tensorboard": False, "plots": False},
    }
    for key, value in overrides.items():
        section, _, name = key.rpartition("__")
        node = data
        for part in section.split("__") if section else []:
            node = node.setdefault(part, {})
        node[name] = value
    return config_from_dict(data)


def losses(history):
    return [
        (h["step"], h["losses/policy/policy_loss"], h["optim/policy/grad_norm"])
        for h in history
        if "losses/policy/policy_loss" in h
    ]


def test_task_sampler_is_seeded_and_resumable():
    source = ArithmeticTasks(size=7)
    a = TaskSampler(source, seed=3)
    first = [t.id for t in a.draw(5)]
    state = a.state_dict()
    rest = [t.id for t in a.draw(6)]  # crosses into epoch 1
    b = TaskSampler(source, seed=3)
    b.load_state_dict(state)
    assert [t.id for t in b.draw(6)] == rest
    assert len(set(first + rest[:2])) == 7  # an epoch visits every task once
    assert [t.id for t in TaskSampler(source, seed=3).draw(5)] == first


def test_zero_spread_groups_follow_the_advantage_grouping():
    from marti_trainer.rollout import RolloutBatch
    from marti_trainer.train import rollout_metrics

    def sample(agent, turn, reward):
        return SimpleNamespace(
            task_id="t", agent=agent, role="debater", round=0, reward=reward, score=reward,
            response_token_ids=[0], num_response_tokens=1, truncated=False, branch=0,
            group_key=("t", agent, turn),
        )  # fmt: skip

    # debater_0 always right, debater_1 always wrong: flat per agent, a spread when pooled.
    samples = [sample("debater_0", 0, 1.0)] * 2 + [sample("debater_1", 1, 0.0)] * 2
    batch = RolloutBatch(
        env_id="mad-v0",
        n_samples=2,
        samples=samples,
        episodes=[SimpleNamespace(outcome=0.5, turns=[SimpleNamespace(answer="1")])],
        stats=SimpleNamespace(tokens_per_s=1.0, tokens_generated=4),
    )
    assert rollout_metrics(batch, "agent")["rollout/zero_spread_groups"] == 1.0
    assert rollout_metrics(batch, "agent")["rollout/tokens"] == 4.0
    assert rollout_metrics(batch, "role")["rollout/zero_spread_groups"] == 0.0


def test_run_writes_metrics_checkpoints_plots_and_summary(tiny_dir, tmp_path):
    cfg = tiny_config(
        tiny_dir, tmp_path, eval__at_end=True, log__plots=True, log__tensorboard=True,
        log__save_every=1, log__keep_last=2, run_name="r",
    )  # fmt: skip
    result = train(cfg)
    run = tmp_path / "r"
    assert result.run_dir == run
    history = read_metrics(run)
    assert [h["step"] for h in history] == [1, 2, 3]
    last = history[-1]
    for key in (
        "rollout/debater_0/reward", "rollout/debater_1/reward", "rollout/zero_spread_groups",
        "losses/policy/approx_kl", "losses/policy/entropy", "losses/policy/clip_frac_high",
        "optim/policy/grad_norm", "charts/step_s", "eval/accuracy", "eval/boxed_rate",
        "kl/debater_0", "kl/debater_1",
    ):  # fmt: skip
        assert key in last, key
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_000002", "step_000003"]
    assert {p.name for p in (run / "checkpoints" / "step_000003").iterdir()} == {
        "weights", "state.safetensors", "state.json", "config.yaml", "manifest.json"
    }  # fmt: skip
    assert [p.name for p in (run / "checkpoints" / "step_000003" / "weights").iterdir()] == [
        "policy.safetensors"
    ]
    assert {p.name for p in (run / "plots").iterdir()} == {"reward.png", "accuracy.png", "kl.png"}
    assert any((run / "tb").iterdir())
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 3 and "accuracy_after" in summary
    assert (run / "transcripts.jsonl").read_text().count("\n") == 3 * 2 * 2  # steps x episodes
    (session,) = json.loads((run / "run.json").read_text())["sessions"]
    assert session["precision"] == {
        "precision": "fp32", "rollout_dtype": "float32", "reason": "set explicitly"
    }  # fmt: skip
    assert session["machine"] == describe_machine()


def test_killed_and_resumed_run_reproduces_the_uninterrupted_losses(tiny_dir, tmp_path):
    full = train(tiny_config(tiny_dir, tmp_path, total_steps=4, run_name="full", log__save_every=2))
    # The same run "killed" after step 3: the newest checkpoint is step 2, step 3 is lost.
    cfg = tiny_config(tiny_dir, tmp_path, total_steps=4, run_name="cut", log__save_every=2)
    train(cfg, stop_at_step=3)
    resumed = train(cfg, resume=tmp_path / "cut")
    expected = losses(full.history)
    assert len(expected) == 4 and all(grad > 0 for _, _, grad in expected)
    assert losses(resumed.history) == expected  # exactly equal, steps 1-2 kept, 3-4 redone
    assert [h["step"] for h in read_metrics(tmp_path / "cut")] == [1, 2, 3, 4]


def test_training_tokens_by_hand():
    history = [{"step": 0, "eval/accuracy": 0.5},
               {"step": 1, "rollout/tokens": 100.0, "rollout/replay_tokens": 30.0},
               {"step": 2, "rollout/tokens": 120.0}]  # fmt: skip
    assert step_tokens(history[1]) == 130.0 and step_tokens(history[2]) == 120.0
    assert training_tokens(history, 2) == 250.0 and training_tokens(history, 1) == 130.0
    with pytest.raises(ValueError, match="step 3 logged no rollout/tokens"):
        training_tokens(history, 3)


def test_token_budget_stops_at_the_step_that_reaches_it_and_resumes_there(
    tiny_dir, tmp_path, capfd
):
    full = train(tiny_config(tiny_dir, tmp_path, total_steps=5, run_name="full"))
    spent = [step_tokens(h) for h in full.history]
    assert len(spent) == 5 and min(spent) >= 1
    budget = int(spent[0] + spent[1]) + 1  # steps 1-2 fall short, step 3 reaches it
    cfg = tiny_config(
        tiny_dir, tmp_path, total_steps=5, total_tokens=budget, run_name="budget",
        eval__at_end=True, log__save_every=2,
    )  # fmt: skip
    result = train(cfg)
    run = tmp_path / "budget"
    assert result.last_step == 3
    assert losses(result.history) == losses(full.history)[:3]  # the same run, cut at step 3
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["steps"], summary["tokens"], summary["total_tokens"]) == (
        3,
        sum(spent[:3]),
        budget,
    )
    assert summary["eval_step_after"] == 3  # the final evaluation runs at the stopping step
    assert (run / "checkpoints" / "step_000003").is_dir()
    # killed after the stopping step's checkpoint, before its summary: nothing left to train
    (run / "summary.json").unlink()
    again = train(cfg, resume=run)
    assert again.last_step == 3 and [h["step"] for h in read_metrics(run)] == [1, 2, 3]
    # killed before the budget was reached: the resumed run counts the steps it kept
    cut = replace(cfg, run_name="cut")
    train(cut, stop_at_step=2)
    resumed = train(cut, resume=tmp_path / "cut")
    assert resumed.last_step == 3 and losses(resumed.history) == losses(result.history)
    # a budget lowered on resume, already spent at the checkpoint's step 2 (which has no
    # evaluation): refused before the run's files change, not ended without an evaluation
    short = replace(cfg, run_name="short")
    train(short, stop_at_step=2)
    saved = (tmp_path / "short" / "config.yaml").read_text()
    for lowered, when in ((int(spent[0] + spent[1]), "at step 2"), (int(spent[0]), "by step 1")):
        with pytest.raises(ValueError, match=f"total_tokens {lowered}: .*met {when}"):
            train(replace(short, total_tokens=lowered), resume=tmp_path / "short")
    assert (tmp_path / "short" / "config.yaml").read_text() == saved
    # a run that ends at total_steps with its budget unspent is not refused as if it had met it
    unspent = replace(cfg, run_name="unspent", total_tokens=10**9)
    train(unspent, stop_at_step=2)
    assert train(replace(unspent, total_steps=2), resume=tmp_path / "unspent").last_step == 2
    # a budget dropped on resume trains on to total_steps, and says so
    train(replace(short, total_tokens=None), resume=tmp_path / "short")
    assert f"the resumed run had total_tokens {budget} and this config has none" in (
        capfd.readouterr().err
    )
    assert [h["step"] for h in read_metrics(tmp_path / "short")] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("backend", "sharing", "dtype"),
    [
        ("hf", "shared", "float32"), ("hf", "shared", "bfloat16"), ("hf", "per_agent", "bfloat16"),
        ("hf", "lora", "float32"),
        pytest.param("vllm", "shared", "float32", marks=pytest.mark.slow),
        pytest.param("vllm", "lora", "float32", marks=pytest.mark.slow),
    ],
)  # fmt: skip
def test_generation_uses_the_updated_weights(tiny_dir, backend, sharing, dtype):
    """Train one agent's weights towards a fixed completion, sync, and generate it."""
    if backend == "vllm":
        from tests.test_policy_vllm import _require_vllm

        _require_vllm()
    overrides = [
        f"model.name={tiny_dir}", f"model.sharing={sharing}", f"rollout.dtype={dtype}",
        f"rollout.backend={backend}", "optim.lr=1e-2", "optim.precision=fp32",
        "model.lora_rank=8", "model.lora_alpha=16",
    ]  # fmt: skip
    cfg = load_config(None, overrides)
    team = build_team(cfg, ["debater_0", "debater_1"], make_loss_fn(cfg.algorithm, 8), False)
    unit = team.unit_of("debater_0")
    policy = team.rollout_policies()["debater_0"]
    policy, adapter = policy if isinstance(policy, tuple) else (policy, None)
    prompt = [{"role": "user", "content": "What is 2 + 2?"}]
    greedy = SamplingParams(temperature=0, max_tokens=4)
    before = policy.generate([prompt], greedy, adapter)[0][0]
    target = [t for t in team.tokenizer.encode(" 4 four 4") if t not in before.token_ids][:4]
    sample = SimpleNamespace(
        prompt_token_ids=before.prompt_token_ids, response_token_ids=target, logprobs=[0.0] * 4
    )
    batch = set_norm(collate([sample], team.tokenizer.pad_token_id, torch.ones(1)), "token-mean")
    for _ in range(30):  # train, push the weights, generate, until it says the target
        for _ in range(5):
            unit.engine.step(batch)
        team.sync(unit)
        after = policy.generate([prompt], greedy, adapter)[0][0]
        if after.token_ids[: len(target)] == target:
            break
    assert after.token_ids[: len(target)] == target != before.token_ids[: len(target)]
    if sharing != "shared":  # the other agent's weights did not move
        other = team.rollout_policies()["debater_1"]
        other, other_adapter = other if isinstance(other, tuple) else (other, None)
        assert other.generate([prompt], greedy, other_adapter)[0][0].token_ids == before.token_ids
    team.close()


@pytest.mark.slow
def test_quickstart_config_runs_two_real_steps(tmp_path):
    """The real default model, the quickstart config, two steps (a few minutes on 2 cores)."""
    cfg = load_config(
        REPO / "baselines" / "quickstart.yaml",
        [
            "total_steps=2", "rollout.tasks_per_step=2", "rollout.n_samples=4",
            "env.eval_tasks={type: arithmetic, levels: [1, 2], split: test, size: 8}",
            f"log.output_dir={tmp_path}", "log.progress=false",
        ],
    )  # fmt: skip
    result = train(cfg)
    history = result.history
    assert [h["step"] for h in history] == [0, 1, 2]
    assert history[0]["eval/boxed_rate"] > 0.5  # the worked example makes it box answers
    assert "losses/policy/entropy" in history[-1]
    assert (result.run_dir / "plots" / "accuracy.png").is_file()


@pytest.mark.parametrize("stage", [1, 3])
def test_deepspeed_engine_trains_and_resumes_exactly(tiny_dir, tmp_path, stage):
    """ZeRO-1 and ZeRO-3 in bf16: a run cut after step 3 and resumed from its step-2
    checkpoint (optimizer partitions, fp32 masters and the bf16 model copy restored) gives
    the uninterrupted run's losses and gradient norms."""
    pytest.importorskip("deepspeed")
    settings = dict(
        total_steps=4, log__save_every=2, rollout__dtype="bfloat16", optim__engine="deepspeed",
        optim__zero_stage=stage, optim__precision="bf16",
    )  # fmt: skip
    full = train(tiny_config(tiny_dir, tmp_path, run_name="full", **settings))
    cfg = tiny_config(tiny_dir, tmp_path, run_name="cut", **settings)
    train(cfg, stop_at_step=3)
    resumed = train(cfg, resume=tmp_path / "cut")
    expected = losses(full.history)
    assert len(expected) == 4 and all(grad > 0 for _, _, grad in expected)
    assert losses(resumed.history) == expected


def test_cli_train_then_resume(tiny_dir, tmp_path, capsys):
    from marti_trainer.cli import main

    config = tmp_path / "tiny.yaml"
    config.write_text(
        f"exp_name: cli\ntotal_steps: 2\nmodel: {{name: {tiny_dir}}}\n"
        "env: {kwargs: {num_agents: 2, rounds: 1}, "
        "train_tasks: {type: arithmetic, levels: [1], size: 20}, "
        "eval_tasks: {type: arithmetic, levels: [1], split: test, size: 2}}\n"
        "rollout: {tasks_per_step: 1, n_samples: 2, max_tokens: 4}\n"
        f"log: {{output_dir: {tmp_path / 'runs'}, progress: false, tensorboard: false}}\n"
    )
    assert main(["train", str(config), "log.save_every=1", "eval.at_start=false"]) == 0
    out = capsys.readouterr().out
    assert "held-out greedy accuracy" in out and "run directory" in out
    # Resuming a finished run reruns nothing and still ends with a summary.
    assert main(["train", str(config), "--resume"]) == 0
    assert main(["train", str(config), "optim.lrr=1"]) == 2
    assert "did you mean 'optim.lr'" in capsys.readouterr().err


@pytest.mark.parametrize("sharing", ["per_agent", "lora"])
def test_each_agent_trains_its_own_weights(tiny_dir, tmp_path, sharing):
    cfg = tiny_config(
        tiny_dir, tmp_path, total_steps=2, run_name=sharing, model__sharing=sharing,
        rollout__dtype="bfloat16", model__lora_rank=4,
    )  # fmt: skip
    result = train(cfg)
    last = result.history[-1]
    for agent in ("debater_0", "debater_1"):  # one engine (and optimizer) per agent
        assert last[f"optim/{agent}/grad_norm"] > 0
    files = {p.name for p in (result.run_dir / "checkpoints" / "step_000002" / "weights").iterdir()}
    assert {"debater_0.safetensors", "debater_1.safetensors"} <= files
    if sharing == "lora":  # only the adapters are trained and saved
        from safetensors.torch import load_file

        names = load_file(
            result.run_dir / "checkpoints" / "step_000002" / "weights" / "debater_0.safetensors"
        )
        assert names and all("lora_" in n and ".debater_0." in n for n in names)


NO_GPU = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)"
)


@pytest.mark.parametrize(
    ("device", "dtype"),
    [("cpu", "bfloat16"), pytest.param("cuda", "float32", marks=NO_GPU),
     pytest.param("cuda", "bfloat16", marks=NO_GPU)],
)  # fmt: skip
def test_training_runs_on_the_configured_device(tiny_dir, tmp_path, device, dtype):
    """model.device: the trained model, its reference copy and the hf rollout copy."""
    cfg = tiny_config(
        tiny_dir, tmp_path, model__device=device, rollout__dtype=dtype, algorithm__kl_coef=0.1,
        total_steps=2, run_name=f"{device}-{dtype}",
    )  # fmt: skip
    result = train(cfg)
    assert [h["step"] for h in result.history] == [1, 2]
    assert all(h["optim/policy/grad_norm"] > 0 for h in result.history)
    assert all(h["losses/policy/kl_ref"] >= 0 for h in result.history)
    assert result.history[-1]["losses/policy/kl_ref"] > 0  # the policy moved off the reference


def test_eval_cli_evaluates_a_runs_checkpoint_in_another_env(tiny_dir, tmp_path, capsys):
    """`marti eval --checkpoint` generates with the trained weights (checked against HF's own
    greedy decoding of the checkpoint), on the run's held-out tasks, in any env."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from marti_trainer.cli import main

    cfg = tiny_config(tiny_dir, tmp_path, total_steps=2, run_name="r", optim__lr=1e-2)
    run = train(cfg).run_dir
    common = ["eval", "--env", "single-v0", "-k", "1", "--temperature", "0", "--max-tokens", "6",
              "--dtype", "float32", "--mode", "sync", "--no-progress"]  # fmt: skip
    trained, base = tmp_path / "trained.jsonl", tmp_path / "base.jsonl"
    assert main([*common, "--checkpoint", str(run), "--transcripts", str(trained)]) == 0
    assert main([*common, "--checkpoint", str(run), "--levels", "2"]) == 2  # not the run's
    assert "--levels needs --data" in capsys.readouterr().err
    data = ["--data", "arithmetic", "--levels", "1", "--limit", "3"]
    assert main([*common, "--model", str(tiny_dir), *data, "--transcripts", str(base)]) == 0
    records = [json.loads(line) for line in trained.read_text().splitlines()]
    assert len(records) == 3  # the run's eval_tasks: 3 held-out level-1 problems
    assert [r["task"] for r in records] == [
        json.loads(line)["task"] for line in base.read_text().splitlines()
    ]

    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    weights = load_file(run / "checkpoints" / "step_000002" / "weights" / "policy.safetensors")
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}  # tied to the embeddings
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    ids = tokenizer.apply_chat_template(
        records[0]["turns"][0]["messages"], add_generation_prompt=True, return_tensors="pt",
        return_dict=True,
    )["input_ids"]  # fmt: skip
    out = model.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=0)
    want = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert records[0]["turns"][0]["response"] == want
    assert [r["turns"][0]["response"] for r in records] != [
        json.loads(line)["turns"][0]["response"] for line in base.read_text().splitlines()
    ]  # the base model answers otherwise: the trained weights were used


@pytest.mark.parametrize(("flags", "dtype"), [([], "float32"), (["amx_bf16"], "bfloat16")])
def test_eval_cli_without_a_dtype_loads_the_devices_native_one(
    tiny_dir, capsys, monkeypatch, flags, dtype
):
    """A plain `marti eval --backend hf` picks bf16 only where the CPU has it natively
    (emulated bf16 is many times slower); an explicit --dtype is kept."""
    from marti_trainer import precision
    from marti_trainer.cli import main

    monkeypatch.setattr(precision, "cpu_bf16_flags", lambda: flags)  # either kind of CPU

    common = ["eval", "--env", "single-v0", "--model", str(tiny_dir), "--data", "arithmetic",
              "--levels", "1", "--limit", "1", "-k", "1", "--max-tokens", "2",
              "--no-progress"]  # fmt: skip
    assert main(common) == 0
    assert f"dtype {dtype}," in capsys.readouterr().err
    assert main([*common, "--dtype", "float32"]) == 0
    assert "dtype float32," in capsys.readouterr().err


def test_load_trained_unit_names_the_units_and_loads_adapters(tiny_dir, tmp_path):
    from marti_trainer.checkpoint import load_trained_unit

    run = train(tiny_config(tiny_dir, tmp_path, total_steps=1, model__sharing="per_agent")).run_dir
    with pytest.raises(ValueError, match=r"holds units \['debater_0', 'debater_1'\]"):
        load_trained_unit(run)
    with pytest.raises(ValueError, match="no unit 'policy'"):
        load_trained_unit(run, "policy")
    unit = load_trained_unit(run, "debater_1")
    assert unit.unit == "debater_1" and unit.config.model.name == str(tiny_dir) and unit.tensors
    lora = tiny_config(tiny_dir, tmp_path / "lora", total_steps=1, model__sharing="lora")
    adapter = load_trained_unit(train(lora).run_dir, "debater_1")
    assert adapter.is_adapter and all(".debater_1." in n for n in adapter.tensors)


def test_training_on_sibling_samples_in_node_groups(tiny_dir, tmp_path):
    """``env.credit: sibling`` with ``train: true`` and ``algorithm.group_by: node``: the
    update trains on each turn and its siblings (3 samples per turn); without the siblings
    a node group would hold one sample, and without node groups the siblings would be
    pooled: the config refuses both."""
    cfg = tiny_config(
        tiny_dir, tmp_path, env__id="chain-v0", env__kwargs={"reward": length_reward},
        env__credit="sibling", env__credit_kwargs={"samples": 2, "train": True},
        algorithm__group_by="node", rollout__n_samples=1, total_steps=1, run_name="s",
    )  # fmt: skip
    result = train(cfg)
    (step,) = [h for h in read_metrics(tmp_path / "s") if "rollout/replay_generations" in h]
    # 2 tasks x 1 episode x 3 turns, 2 siblings each; every sibling regenerates its turn
    # and the later ones: (3 + 2 + 1) x 2 per episode
    assert step["rollout/replay_generations"] == 2 * 12
    assert step["rollout/samples"] == 2 * 3 * (1 + 2)
    assert result.run_dir.exists()
    with pytest.raises(ValueError, match=r"algorithm.group_by=node .*env.credit is 'score'"):
        tiny_config(tiny_dir, tmp_path, algorithm__group_by="node")
    with pytest.raises(ValueError, match=r"train: true .* needs algorithm.group_by=node"):
        tiny_config(
            tiny_dir, tmp_path, env__credit="sibling", env__credit_kwargs={"train": True},
            algorithm__group_by="agent",
        )  # fmt: skip


def test_training_with_a_replay_credit_method(tiny_dir, tmp_path):
    """``env.credit: leave_one_out_replay``: the trainer runs the replays with its own
    policy, trains on their rewards and logs their cost; transcripts record the method."""
    cfg = tiny_config(
        tiny_dir, tmp_path, env__id="chain-v0", env__kwargs={"reward": length_reward},
        env__credit="leave_one_out_replay", total_steps=2, run_name="r",
    )  # fmt: skip
    train(cfg)
    history = read_metrics(tmp_path / "r")
    steps = [h for h in history if "rollout/replay_generations" in h]
    # 2 tasks x 2 episodes; per episode: generator removed -> 2 regenerated, verifier -> 1
    assert [h["rollout/replay_generations"] for h in steps] == [4 * 3, 4 * 3]
    assert all(h["rollout/replay_tokens"] > 0 for h in steps), steps
    # (the random model boxes no answer, so every outcome and every replay credit is 0:
    # tests/test_replay.py checks that samples carry the method's rewards)
    records = (tmp_path / "r" / "transcripts.jsonl").read_text().splitlines()
    assert all(json.loads(line)["credit"] == "leave_one_out_replay" for line in records)
