"""Trained weights leave the library in standard form: `marti export` writes a model folder
or a PEFT adapter folder that transformers, PEFT and vLLM load on their own, and whose greedy
generations are the run's own held-out evaluation; `marti eval --checkpoint` evaluates a LoRA
run with the run's settings and repeats that evaluation exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from marti_trainer.cli import main
from marti_trainer.config import config_from_dict
from marti_trainer.train import train

MAX_TOKENS = 6


def _config(model: Path, out: Path, name: str, **model_settings):
    return config_from_dict(
        {
            "exp_name": name,
            "run_name": name,
            "total_steps": 2,
            "env": {
                "id": "single-v0",
                "train_tasks": {"type": "arithmetic", "levels": [1], "size": 20},
                "eval_tasks": {"type": "arithmetic", "levels": [1], "split": "test", "size": 4},
            },
            "model": {"name": str(model), **model_settings},
            "rollout": {
                "tasks_per_step": 2,
                "n_samples": 2,
                "max_tokens": MAX_TOKENS,
                "dtype": "float32",
            },
            # A random model earns no reward: the entropy bonus moves the weights.
            "algorithm": {"entropy_coef": 0.1, "skip_zero_advantage": False},
            "optim": {"lr": 3e-2, "precision": "fp32", "micro_batch_tokens": 512},
            "eval": {"at_start": False, "at_end": True},
            "log": {
                "output_dir": str(out),
                "progress": False,
                "tensorboard": False,
                "plots": False,
            },
        }
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from marti_trainer.models import tiny_random_model

    root = tmp_path_factory.mktemp("export")
    model = tiny_random_model(root / "model", seed=0)
    from marti_trainer.export import export_unit

    shared = train(_config(model, root / "runs", "shared")).run_dir
    lora = train(_config(model, root / "runs", "lora", sharing="lora", lora_rank=4)).run_dir
    return {
        "model": model, "shared": shared, "lora": lora, "root": root,
        "adapter": export_unit(lora, root / "adapter"),
        "merged": export_unit(lora, root / "merged", merge=True),
        "full": export_unit(shared, root / "full"),
    }  # fmt: skip


def _eval_records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "eval" / "step_000002.jsonl").open()]


def _hf_greedy(model, tokenizer_dir: Path, records: list[dict]) -> list[str]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    out = []
    for record in records:
        ids = tokenizer.apply_chat_template(
            record["turns"][0]["messages"], add_generation_prompt=True, return_tensors="pt",
            return_dict=True,
        )["input_ids"]  # fmt: skip
        with torch.no_grad():
            gen = model.generate(
                ids, max_new_tokens=MAX_TOKENS, do_sample=False, pad_token_id=0, eos_token_id=0
            )
        out.append(tokenizer.decode(gen[0, ids.shape[1] :], skip_special_tokens=True))
    return out


def _responses(records: list[dict]) -> list[str]:
    return [r["turns"][0]["response"] for r in records]


def test_export_of_a_full_model_loads_in_transformers_and_repeats_the_runs_eval(runs, capsys):
    from transformers import AutoModelForCausalLM

    out = runs["root"] / "exported-shared"
    assert main(["export", str(runs["shared"]), str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "marti_export.json"} <= names
    meta = json.loads((out / "marti_export.json").read_text())
    assert meta["step"] == 2 and meta["unit"] == "policy" and meta["kind"] == "model"
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    records = _eval_records(runs["shared"])
    assert _hf_greedy(model, out, records) == _responses(records)
    base = AutoModelForCausalLM.from_pretrained(runs["model"], dtype=torch.float32)
    assert _hf_greedy(base, out, records) != _responses(records)  # training changed them
    assert main(["export", str(runs["shared"]), str(out)]) == 2  # never overwrites
    assert "exists and is not empty" in capsys.readouterr().err


def test_export_of_a_lora_unit_as_adapter_and_merged(runs):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    records = _eval_records(runs["lora"])
    adapter, merged = runs["adapter"], runs["merged"]
    assert (adapter / "adapter_config.json").is_file()
    assert (adapter / "adapter_model.safetensors").is_file()
    base = AutoModelForCausalLM.from_pretrained(runs["model"], dtype=torch.float32)
    with_adapter = PeftModel.from_pretrained(base, adapter).eval()
    assert _hf_greedy(with_adapter, adapter, records) == _responses(records)
    model = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32)
    assert _hf_greedy(model, merged, records) == _responses(records)
    fresh = AutoModelForCausalLM.from_pretrained(runs["model"], dtype=torch.float32)
    moved = model.state_dict()["model.layers.0.self_attn.q_proj.weight"]
    assert not torch.equal(moved, fresh.state_dict()["model.layers.0.self_attn.q_proj.weight"])


def test_eval_of_a_lora_checkpoint_repeats_the_runs_own_evaluation(runs, tmp_path, capsys):
    transcripts = tmp_path / "eval.jsonl"
    out = tmp_path / "eval.json"
    args = ["eval", "--checkpoint", str(runs["lora"]), "--no-progress",
            "--transcripts", str(transcripts), "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    err = capsys.readouterr().err
    # the run's env and greedy held-out settings, said out loud
    assert "with env single-v0" in err and "k=1, temperature 0.0" in err
    assert f"max_tokens {MAX_TOKENS}" in err and "dtype float32" in err
    got = [json.loads(line) for line in transcripts.open()]
    assert _responses(got) == _responses(_eval_records(runs["lora"]))
    history = [json.loads(line) for line in (runs["lora"] / "metrics.jsonl").open()]
    assert json.loads(out.read_text())["avg_at_k"] == history[-1]["eval/accuracy"]


def test_exports_load_in_vllm_with_the_same_greedy_outputs(runs):
    from marti_trainer.policies import SamplingParams
    from marti_trainer.policies.vllm import VLLMPolicy

    shared, adapter = runs["full"], runs["adapter"]
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)
    policy = VLLMPolicy(
        shared, dtype="float32", max_model_len=1024, kv_cache_gb=0.25, seed=0,
        enable_lora=True, max_loras=1, max_lora_rank=8,
    )  # fmt: skip
    try:
        records = _eval_records(runs["shared"])
        prompts = [r["turns"][0]["messages"] for r in records]
        assert [g[0].text for g in policy.generate(prompts, params)] == _responses(records)
        policy.load_weights(runs["model"])  # the base model, then the run's adapter on it
        policy.add_adapter("trained", adapter)
        records = _eval_records(runs["lora"])
        prompts = [r["turns"][0]["messages"] for r in records]
        outs = policy.generate(prompts, params, adapter="trained")
        assert [g[0].text for g in outs] == _responses(records)
    finally:
        policy.close()
