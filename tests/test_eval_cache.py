"""Step-0 evaluations shared between runs (``log.eval_cache``): a hit returns what evaluating
would have returned; anything the evaluation reads changes the key."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from marti_env.tasks import ArithmeticTasks
from marti_trainer import eval_cache
from marti_trainer.config import config_from_dict
from marti_trainer.metrics import read_metrics
from marti_trainer.models import tiny_random_model
from marti_trainer.train import train


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_random_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def config(
    tiny_dir, out: Path, cache: Path | None, seed=0, credit="none", lr=1e-3, size=6, eval_seed=0
):
    return config_from_dict({
        "exp_name": "cache", "seed": seed, "total_steps": 1, "run_name": f"{credit}_{seed}_{lr}",
        "env": {
            "id": "mad-v0", "kwargs": {"num_agents": 2, "rounds": 1}, "credit": credit,
            "train_tasks": {"type": "arithmetic", "levels": [1], "size": 20},
            "eval_tasks": {"type": "arithmetic", "levels": [1], "split": "test", "size": size},
        },
        "model": {"name": str(tiny_dir)},
        "rollout": {"tasks_per_step": 2, "n_samples": 2, "max_tokens": 6, "dtype": "float32"},
        "optim": {"lr": lr, "precision": "fp32", "micro_batch_tokens": 256},
        "eval": {"at_start": True, "at_end": False, "seed": eval_seed},
        "log": {
            "output_dir": str(out), "progress": False, "tensorboard": False, "plots": False,
            "eval_cache": str(cache) if cache else "",
        },
    })  # fmt: skip


def start_eval(run_dir: Path) -> tuple[dict[str, float], list[dict]]:
    row = next(h for h in read_metrics(run_dir) if h["step"] == 0)
    metrics = {k: v for k, v in row.items() if k.startswith("eval/") and k != "eval/cached"}
    records = [json.loads(line) for line in (run_dir / "eval/step_000000.jsonl").open()]
    return metrics, records


def entries(cache: Path) -> int:
    return len([p for p in cache.iterdir() if not p.name.startswith(".")])


def test_a_hit_returns_what_evaluating_returns(tiny_dir, tmp_path):
    cache = tmp_path / "cache"
    first = train(config(tiny_dir, tmp_path / "runs", cache))
    # another seed, credit method and learning rate: the same step-0 evaluation
    hit = train(config(tiny_dir, tmp_path / "runs", cache, seed=1, credit="quality", lr=2e-3))
    fresh = train(config(tiny_dir, tmp_path / "runs", None, seed=1, credit="quality", lr=3e-3))
    assert read_metrics(first.run_dir)[0]["eval/cached"] == 0.0
    assert read_metrics(hit.run_dir)[0]["eval/cached"] == 1.0
    assert "eval/cached" not in read_metrics(fresh.run_dir)[0]
    assert entries(cache) == 1
    assert start_eval(hit.run_dir) == start_eval(first.run_dir) == start_eval(fresh.run_dir)
    # another held-out set misses and stores a second entry
    other = train(config(tiny_dir, tmp_path / "runs", cache, seed=2, size=5))
    assert read_metrics(other.run_dir)[0]["eval/cached"] == 0.0
    assert entries(cache) == 2
    assert start_eval(other.run_dir)[1] != start_eval(first.run_dir)[1]


def test_without_eval_seed_runs_of_other_seeds_do_not_share(tiny_dir, tmp_path):
    """The held-out episodes then take the run's seed (shuffles, agent order): the records
    differ between seeds, and so must the entries."""
    cache = tmp_path / "cache"
    a = train(config(tiny_dir, tmp_path / "runs", cache, seed=0, eval_seed=None))
    b = train(config(tiny_dir, tmp_path / "runs", cache, seed=1, eval_seed=None))
    assert [read_metrics(r.run_dir)[0]["eval/cached"] for r in (a, b)] == [0.0, 0.0]
    assert entries(cache) == 2
    seeds = [{e["seed"] for e in start_eval(r.run_dir)[1]} for r in (a, b)]
    assert seeds[0].isdisjoint(seeds[1])


def key_of(config_dict, tasks, model_dir, weights):
    return eval_cache.cache_key(config_dict, tasks, model_dir, weights)[0]


@pytest.fixture
def parts(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    cfg = {
        "seed": 0, "run_name": "a", "env": {"id": "mad-v0", "credit": "none"},
        "eval": {"samples": 0, "seed": 0}, "optim": {"lr": 1e-5, "precision": "bf16"},
    }  # fmt: skip
    tasks = list(ArithmeticTasks(size=3))
    weights = {"policy": lambda: {"w": torch.zeros(2, 2)}}
    return cfg, tasks, model, weights


def test_the_key_ignores_what_acts_after_step_0(parts):
    cfg, tasks, model, weights = parts
    base = key_of(cfg, tasks, model, weights)
    later = {
        **cfg, "seed": 7, "run_name": "b", "env": {"id": "mad-v0", "credit": "shapley"},
        "optim": {"lr": 3e-4, "precision": "bf16"}, "algorithm": {"group_by": "node"},
    }  # fmt: skip
    assert key_of(later, tasks, model, weights) == base


@pytest.mark.parametrize(
    "change",
    [
        "env_id",
        "precision",
        "eval_seed",
        "run_seed",
        "tasks",
        "weights",
        "model_file",
        "env_var",
        "vllm_var",
    ],
)
def test_the_key_changes_with_what_the_evaluation_reads(parts, change, monkeypatch):
    cfg, tasks, model, weights = parts
    base = key_of(cfg, tasks, model, weights)
    if change == "env_id":
        cfg = {**cfg, "env": {"id": "moa-v0", "credit": "none"}}
    elif change == "precision":
        cfg = {**cfg, "optim": {"lr": 1e-5, "precision": "fp32"}}
    elif change == "eval_seed":
        cfg = {**cfg, "eval": {"samples": 0, "seed": 1}}
    elif change == "run_seed":  # without eval.seed the held-out episodes take the run's
        unset = {**cfg, "eval": {"samples": 0, "seed": None}}
        base = key_of(unset, tasks, model, weights)
        cfg = {**unset, "seed": 1}
    elif change == "tasks":
        tasks = list(ArithmeticTasks(size=4))
    elif change == "weights":
        weights = {"policy": lambda: {"w": torch.tensor([[0.0, 0.0], [0.0, 1e-30]])}}
    elif change == "model_file":
        (model / "tokenizer.json").write_text("{}")
    elif change == "vllm_var":
        monkeypatch.setenv("VLLM_ATTENTION_BACKEND", "TORCH_SDPA")
    else:
        monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    assert key_of(cfg, tasks, model, weights) != base


def test_the_env_spec_and_its_workflow_source_are_in_the_key(parts, monkeypatch):
    """A registered env's prompts (or its workflow's file) may change under the same id."""
    from marti_env.registry import registry, spec

    cfg, tasks, model, weights = parts
    base = key_of(cfg, tasks, model, weights)
    mad = spec("mad-v0")
    monkeypatch.setitem(registry, "mad-v0", replace(mad, prompts={**mad.prompts, "x": "y"}))
    assert key_of(cfg, tasks, model, weights) != base


def test_every_key_dropped_from_the_key_is_a_config_path():
    """A misspelt entry of AFTER_STEP_0 would silently drop nothing."""
    from marti_trainer.config import TrainConfig

    config = TrainConfig().to_dict()
    for key in eval_cache.AFTER_STEP_0:
        node = config
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, key
            node = node[part]


def test_a_python_object_in_the_config_is_not_fingerprinted(tiny_dir, tmp_path, capsys):
    """A reward function given in code has no stable description: the run evaluates step 0
    itself and says why, and stores nothing."""
    from tests.test_train import length_reward

    cfg = config(tiny_dir, tmp_path / "runs", tmp_path / "cache")
    cfg = replace(cfg, env=replace(cfg.env, kwargs={**cfg.env.kwargs, "reward": length_reward}))
    run = train(cfg)
    assert "eval/cached" not in read_metrics(run.run_dir)[0]
    assert "log.eval_cache: not used (the config holds function" in capsys.readouterr().out
    assert not (tmp_path / "cache").exists()


def test_a_corrupt_entry_is_named(tmp_path):
    entry = tmp_path / "k"
    entry.mkdir()
    (entry / "step_000000.jsonl").write_text("{}\n")
    for bad in ('{"eval/accuracy": "high"}', "{}", "{not json"):
        (entry / "metrics.json").write_text(bad)
        with pytest.raises(ValueError, match=r"k/metrics\.json.*delete"):
            eval_cache.load_entry(tmp_path, "k", None)
    (entry / "metrics.json").write_text('{"eval/accuracy": 0.5}')
    assert eval_cache.load_entry(tmp_path, "k", None) == {"eval/accuracy": 0.5}
    (entry / "step_000000.jsonl").unlink()
    with pytest.raises(ValueError, match=r"has no step_000000\.jsonl; delete"):
        eval_cache.load_entry(tmp_path, "k", None)


def test_a_second_store_of_a_key_keeps_the_first(tmp_path):
    """Runs of one config started together all miss and all store: the first entry stays,
    the others are dropped without an error, and no temporary folder is left."""
    records = tmp_path / "r.jsonl"
    records.write_text('{"a": 1}\n')
    cache = tmp_path / "c"
    first = eval_cache.store_entry(cache, "k", {}, {"eval/accuracy": 0.5}, records)
    records.write_text('{"a": 2}\n')
    again = eval_cache.store_entry(cache, "k", {}, {"eval/accuracy": 0.7}, records)
    assert first == again
    assert eval_cache.load_entry(cache, "k", tmp_path / "out.jsonl") == {"eval/accuracy": 0.5}
    assert (tmp_path / "out.jsonl").read_text() == '{"a": 1}\n'
    assert [p.name for p in cache.iterdir()] == ["k"]


def test_without_episode_records_the_entry_still_holds_them(tiny_dir, tmp_path):
    """log.eval_transcripts off: the run writes no eval/ records, the entry still gets them,
    and a later run that wants them copies them."""
    cache = tmp_path / "cache"
    quiet = config(tiny_dir, tmp_path / "runs", cache)
    quiet = replace(quiet, log=replace(quiet.log, eval_transcripts=False))
    a = train(quiet)
    assert not (a.run_dir / "eval").exists() and not list(a.run_dir.glob(".step_*"))
    b = train(config(tiny_dir, tmp_path / "runs", cache, seed=4))
    assert read_metrics(b.run_dir)[0]["eval/cached"] == 1.0
    assert (b.run_dir / "eval" / "step_000000.jsonl").is_file()


def test_marti_eval_repeats_a_run_with_its_eval_seed(tiny_dir, tmp_path):
    """`marti eval --checkpoint` repeats the run's final evaluation with the run's eval.seed
    (not its training seed): the same episodes, the same records."""
    from marti_trainer.cli import main

    cfg = config(tiny_dir, tmp_path / "runs", None, seed=3, eval_seed=5)
    cfg = replace(cfg, eval=replace(cfg.eval, at_start=False, at_end=True))
    run = train(cfg).run_dir
    again = tmp_path / "again.jsonl"
    assert (
        main(["eval", "--checkpoint", str(run), "--transcripts", str(again), "--no-progress"]) == 0
    )
    want = [json.loads(line) for line in (run / "eval/step_000001.jsonl").open()]
    got = [json.loads(line) for line in again.open()]
    assert [(r["seed"], r["outcome"]) for r in got] == [(r["seed"], r["outcome"]) for r in want]
    assert [t["response"] for r in got for t in r["turns"]] == [
        t["response"] for r in want for t in r["turns"]
    ]


def test_the_modules_left_out_of_the_key_are_those_above_the_training_loop():
    """Only modules the training loop cannot import (layers above `train` in the layers
    contract) may stay out of the source digest: editing a report leaves entries valid."""
    import re

    root = Path(__file__).resolve().parents[1]
    text = (root / "pyproject.toml").read_text()  # tomllib needs Python 3.11
    contract = text[text.index('id = "trainer-layers"') :]
    start = contract.index("layers = [")
    block = contract[start : contract.index("]", start)]
    layers = re.findall(r'"([^"]+)"', block)
    above = [m for layer in layers[: layers.index("train")] for m in re.findall(r"\w+", layer)]
    found = [name.removesuffix(".py") for name in eval_cache.ABOVE_TRAINING]
    assert sorted(found) == sorted(above)
    for name in eval_cache.ABOVE_TRAINING:
        assert (root / "marti_trainer" / name).exists(), name
