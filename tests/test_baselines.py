"""Every file under baselines/ passes ``marti train --dry-run``; the suite's budget claims hold;
the dry run's formulas match hand computations."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

import marti_env
from marti_env.tasks.catalog import DATASETS
from marti_trainer.cli import main
from marti_trainer.config import apply_override, load_config
from marti_trainer.dry_run import (
    ArchitectureError,
    activation_bytes_per_token,
    decoder_param_count,
    format_plan,
    plan_run,
    turns_per_episode,
    unit_memory,
)
from tests.conftest import missing_data

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "baselines").rglob("*.yaml"))
SUITE = sorted((REPO / "baselines" / "smollm2").glob("135m_*_*.yaml"))
SUITE = [p for p in SUITE if p.stem != "135m_single_grpo"]  # the quick start's companion
SUITE = [p for p in SUITE if not p.stem.startswith(("135m_code_", "135m_credit_"))]  # other tasks
GPU = sorted((REPO / "baselines" / "qwen2.5-3b").glob("*.yaml"))

# Qwen2.5-3B-Instruct's config.json (the fields the count reads), for a plan with memory.
QWEN25_3B = {
    "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 2048,
    "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16,
    "num_key_value_heads": 2, "tie_word_embeddings": True,
}  # fmt: skip


def _data_sets(path: Path) -> list[str]:
    env = yaml.safe_load(path.read_text()).get("env", {})
    specs = (env.get("train_tasks"), env.get("eval_tasks"))
    return [s for s in specs if isinstance(s, str) and s in DATASETS]


def _header(path: Path) -> str:
    return "".join(line for line in path.read_text().splitlines(True) if line.startswith("#"))


def test_the_suite_is_all_there():
    rows = {p.stem.split("_")[1] for p in SUITE}
    assert rows == {"single", "maj4", "mad2x2", "mad3x2", "moa2p1", "chain"}
    assert {p.stem.rsplit("_", 1)[1] for p in SUITE} == {"none", "quality"}
    assert len(SUITE) == 12
    assert {p.stem for p in GPU} == {f"3b_{r}" for r in rows - {"moa2p1"}} | {"3b_moa3p1"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_baseline_dry_runs(path, capsys):
    """The config validates and plans; the model is either there or named in a clear error."""
    reason = missing_data(*_data_sets(path))
    if reason:
        pytest.skip(reason)
    rel = str(path.relative_to(REPO))
    header = _header(path)
    assert f"marti train {rel}" in header, "the header gives the exact command"
    code = main(["train", rel, "--dry-run"])
    out = capsys.readouterr().out
    assert "# resolved config" in out and "generations per step:" in out
    cfg = load_config(path)
    if path in GPU:
        assert code == 1
        assert f"error: model '{cfg.model.name}' not available offline" in out
        assert "huggingface-cli download Qwen/Qwen2.5-3B-Instruct" in out
        assert "TrainerActor 0 (1 GPU)" in out and "RolloutWorker 1 (1 GPU)" in out
    else:
        assert code in (0, 1)  # 1: the default model is not installed or not converted here
        if code == 0:
            assert "parameters: 134,515,008" in out and "memory estimate, busiest device" in out
        else:
            assert f"error: model '{cfg.model.name}'" in out
    plan = plan_run(cfg)
    stated = re.search(r"[Gg]enerations per step: (\d+)", header)
    if stated:  # a file that states its budget states the plan's
        assert int(stated.group(1)) == plan.generations_per_step


def test_the_suite_has_equal_budgets_and_differs_only_in_the_workflow():
    varying = {"exp_name", "env.id", "env.kwargs", "env.credit", "env.credit_kwargs",
               "rollout.n_samples"}  # fmt: skip

    def flat(d, prefix=""):
        out = {}
        for k, v in d.items():
            if isinstance(v, dict) and k not in ("kwargs", "credit_kwargs"):
                out.update(flat(v, f"{prefix}{k}."))
            else:
                out[f"{prefix}{k}"] = v
        return out

    configs = {p.stem: flat(yaml.safe_load(p.read_text())) for p in SUITE}
    first = next(iter(configs.values()))
    for name, c in configs.items():
        assert set(c) - varying == set(first) - varying, name
        for key in set(c) - varying:
            assert c[key] == first[key], (name, key)
    for path in SUITE:
        plan = plan_run(load_config(path))
        assert plan.generations_per_step == 192, path.name
        credit = configs[path.stem]["env.credit"]
        assert credit == ("none" if path.stem.endswith("_none") else "quality")
        assert len(plan.units) == 1  # one shared model


def test_a_config_error_is_exit_code_2(capsys):
    assert main(["train", "baselines/quickstart.yaml", "optim.lrr=1", "--dry-run"]) == 2
    assert "did you mean 'optim.lr'" in capsys.readouterr().err


def test_gpu_plan_memory_from_config_json(tmp_path):
    model = tmp_path / "qwen"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN25_3B))
    path = REPO / "baselines" / "qwen2.5-3b" / "3b_mad2x2.yaml"
    reason = missing_data(*_data_sets(path))
    if reason:
        pytest.skip(reason)
    cfg = load_config(path, [f"model.name={model}"])
    plan = plan_run(cfg)
    assert plan.model_error is None and plan.params == 3_085_938_688
    # two unshared debaters: a trainer actor each with 16 bytes per parameter (no reference:
    # ref_kl_samples 0, kl_coef 0), two rollout workers with both bf16 copies (2 x 2 bytes)
    assert [p.bytes for p in plan.placements] == [16 * 3_085_938_688] * 2 + [4 * 3_085_938_688] * 2
    # 16384 tokens x (36 layers x 2 x 2048 bytes (checkpointing) + 8 x 151936)
    assert plan.activation_bytes == 16384 * (36 * 2 * 2048 + 8 * 151936)
    text = format_plan(plan)
    assert "parameters: 3,085,938,688 (3.09 B" in text and "~46.0 GiB of model states" in text
    # 350 steps x 4096 generations + evaluations at 0, 5, ..., 350 (71) x 500 problems x 4
    assert plan.evaluations == 71 and plan.eval_generations == 2000
    assert plan.total_generations == 350 * 4096 + 71 * 2000


def test_decoder_param_count_by_hand(tmp_path):
    smollm2 = {
        "model_type": "llama", "vocab_size": 49152, "hidden_size": 576,
        "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
        "num_key_value_heads": 3, "tie_word_embeddings": True,
    }  # fmt: skip
    # embed 49152*576 = 28,311,552; a layer: q 576*576 + k,v 2*576*192 + o 576*576
    # + mlp 3*576*1536 + norms 2*576 = 3,540,096; 30 layers 106,202,880; final norm 576
    assert decoder_param_count(smollm2) == 28_311_552 + 106_202_880 + 576 == 134_515_008
    # Qwen2.5-3B: embed 151936*2048 = 311,164,928; a layer: q 2048*2048+2048 (bias),
    # k and v 2048*256+256 each, o 2048*2048, mlp 3*2048*11008, norms 4096 = 77,076,992
    assert decoder_param_count(QWEN25_3B) == 311_164_928 + 36 * 77_076_992 + 2048
    untied = {**smollm2, "tie_word_embeddings": False}
    assert decoder_param_count(untied) == 134_515_008 + 28_311_552
    qwen3 = {**smollm2, "model_type": "qwen3"}  # + q/k RMSNorm (2 x head_dim) per layer
    assert decoder_param_count(qwen3) == 134_515_008 + 30 * 2 * 64
    with pytest.raises(ArchitectureError, match="model_type 'gpt2'"):
        decoder_param_count({"model_type": "gpt2"})
    with pytest.raises(ArchitectureError, match="no 'hidden_size'"):
        decoder_param_count({"model_type": "llama", "vocab_size": 1})


def test_decoder_param_count_matches_a_real_model(tmp_path):
    from transformers import AutoModelForCausalLM

    from marti_trainer.models import tiny_random_model

    path = tiny_random_model(tmp_path / "m", num_layers=3, intermediate_size=200)
    model = AutoModelForCausalLM.from_pretrained(path)
    real = sum(p.numel() for p in model.parameters())  # tied embeddings counted once
    assert decoder_param_count(json.loads((path / "config.json").read_text())) == real


def test_memory_formulas_by_hand():
    # 2 layers, hidden 128, vocab 10: 2 * 34 * 128 + 8 * 10 = 8784; checkpointing 2*2*128+80
    assert activation_bytes_per_token(2, 128, 10, False) == 8784
    assert activation_bytes_per_token(2, 128, 10, True) == 592
    assert unit_memory(10, trained=True, reference=True, rollout_bytes=2) == 10 * 22
    assert unit_memory(10, trained=False, reference=False, rollout_bytes=2) == 20


@pytest.mark.parametrize(
    ("env_id", "kwargs", "turns"),
    [("single-v0", {}, 1), ("majority-v0", {"num_samples": 4}, 4),
     ("mad-v0", {"num_agents": 2, "rounds": 2}, 4), ("mad-v0", {"num_agents": 3, "rounds": 2}, 6),
     ("moa-v0", {"num_proposers": 2}, 3), ("chain-v0", {}, 3)],
)  # fmt: skip
def test_turns_per_episode(env_id, kwargs, turns):
    assert turns_per_episode(marti_env.make(env_id, **kwargs)) == turns


def test_dry_run_evaluations_count_every_and_end():
    data: dict = {}
    for item in ("total_steps=10", "eval.every=4", "eval.at_start=true", "eval.at_end=true"):
        apply_override(data, item)
    from marti_trainer.config import config_from_dict

    plan = plan_run(config_from_dict(data))
    assert plan.evaluations == 1 + 2 + 1  # step 0; steps 4 and 8; the end (10)
    data["eval"]["every"] = 5
    assert plan_run(config_from_dict(data)).evaluations == 1 + 2  # 0; 5 and 10 (= the end)


def test_dry_run_says_whether_evaluation_depends_on_the_batch_size():
    cfg = load_config(REPO / "baselines" / "quickstart.yaml")
    plan = plan_run(cfg)
    assert plan.eval_chunk_rows == 16 * 2  # 16 problems x 2 debaters in a round
    assert "results do not depend on the batch size" in format_plan(plan)
    overrides = ["env.kwargs.num_agents=3", "rollout.batch_size=32", "eval.samples=2"]
    plan = plan_run(load_config(REPO / "baselines" / "quickstart.yaml", overrides))
    assert plan.eval_chunk_rows == 16 * 3 * 2
    assert "over rollout.batch_size 32, so results depend on it (raise it to 96" in format_plan(
        plan
    )


def test_dry_run_states_a_token_budget():
    cfg = load_config(REPO / "baselines" / "quickstart.yaml", ["total_tokens=1000"])
    most = 15 * 128 * cfg.rollout.max_tokens  # steps x generations x tokens each, at most
    text = format_plan(plan_run(cfg))
    assert "total_tokens 1000: training stops at the first step whose generated" in text
    assert f"15 steps generate at most {most} (rollout.max_tokens per generation)\n" in text
    early = 14 * 128 * cfg.rollout.max_tokens  # what steps 1-14 generate at most
    for budget, stated in ((early, False), (early + 1, True), (most + 1, True)):
        text = format_plan(
            plan_run(
                load_config(REPO / "baselines" / "quickstart.yaml", [f"total_tokens={budget}"])
            )
        )
        assert f"at most {most} (rollout.max_tokens per generation)" in text
        assert ("so it cannot stop before step 15" in text) == stated, budget


def test_dry_run_counts_the_replays_of_a_re_execution_credit(capsys):
    """mad-v0 2x2 with leave_one_out_replay: removing a debater re-runs the other's round-1
    turn, 2 replay generations per episode, x 8 tasks x 4 episodes = 64 per step."""
    cfg = load_config(REPO / "baselines" / "quickstart.yaml", ["env.credit=leave_one_out_replay"])
    plan = plan_run(cfg)
    assert plan.replay_generations_per_step == 64 and plan.generations_per_step == 128
    assert plan.total_generations == 15 * (128 + 64) + 2 * plan.eval_generations
    main(["train", "baselines/quickstart.yaml", "env.credit=leave_one_out_replay", "--dry-run"])
    assert "re-executes episodes: 64 more generations per step" in capsys.readouterr().out
