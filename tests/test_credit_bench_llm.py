"""The LLM tier of the credit benchmark: every cell a real training run (tiny random model;
slow: the default model through ``marti bench credit --tier llm``)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import yaml

from marti_env.credit.bench import write_outputs
from marti_trainer.credit_bench_llm import cell_config, run_llm_benchmark
from marti_trainer.metrics import read_metrics
from marti_trainer.train import train
from tests.test_credit_bench import cli
from tests.test_train import REPO, tiny_config, tiny_dir  # noqa: F401 (fixture)

METHODS = ["none", "quality:alpha=0.3"]


def test_every_cell_trains_with_its_method_then_is_reused(tiny_dir, tmp_path):  # noqa: F811
    base = tiny_config(tiny_dir, tmp_path / "unused", total_steps=2)
    out = tmp_path / "out"
    result = run_llm_benchmark(METHODS, ["mad-v0"], [0], base, out)
    assert [(r["env"], r["method"], r["seed"]) for r in result.rows] == [
        ("mad-v0", "none", 0), ("mad-v0", "quality:alpha=0.3", 0),
    ]  # fmt: skip
    none, quality = result.rows
    assert none["acc_start"] == quality["acc_start"]  # measured once, by the first method
    assert math.isnan(none["attr"]) and none["episodes"] == 2 * 2 * 2
    assert len(result.curves[("mad-v0", "none", 0)]) == 2
    assert all(0.0 <= r["zero_adv"] <= 1.0 for r in result.rows)  # averaged over 2 updates
    assert result.flags[("mad-v0", "none")] is True  # `none` is its own gradient
    saved = yaml.safe_load(
        (out / "runs" / "mad-v0__quality_alpha=0.3__0" / "config.yaml").read_text()
    )
    assert (saved["env"]["credit"], saved["env"]["credit_kwargs"]) == ("quality", {"alpha": 0.3})
    assert saved["env"]["kwargs"]["num_agents"] == 2  # the base's kwargs: same env id

    # each cell's turns were rewarded by its own method: `none` pays the outcome to every turn
    def turn_rewards(cell):
        path = out / "runs" / cell / "transcripts.jsonl"
        return [[t["reward"] for t in json.loads(line)["turns"]] for line in path.open()]

    plain, shaped = turn_rewards("mad-v0__none__0"), turn_rewards("mad-v0__quality_alpha=0.3__0")
    assert all(len(set(r)) == 1 for r in plain)
    assert any(len(set(r)) > 1 for r in shaped)

    lines: list[str] = []
    again = run_llm_benchmark(METHODS, ["mad-v0"], [0], base, out, log=lines.append)
    assert [r["acc_final"] for r in again.rows] == [r["acc_final"] for r in result.rows]
    assert len(lines) == 2 and all(line.endswith("reused)") for line in lines)

    paths = write_outputs(again, out)
    table = paths["table"].read_text()
    assert "n/a" in table and "quality:alpha=0.3" in table and "zero_adv" in table
    assert "=none YES: gradient-identical" in table  # the legend comes with the flags
    assert json.loads(paths["json"].read_text())["tier"] == "llm"
    assert paths["plot"].is_file()


def test_a_killed_cell_resumes_and_a_changed_config_is_refused(tiny_dir, tmp_path):  # noqa: F811
    base = tiny_config(tiny_dir, tmp_path / "unused", total_steps=3, log__save_every=1)
    runs = tmp_path / "out" / "runs"
    cfg = cell_config(base, "mad-v0", "none", 0, runs, at_start=True)
    train(cfg, stop_at_step=2)  # killed after step 2
    first = {h["step"]: h for h in read_metrics(runs / cfg.run_name)}
    result = run_llm_benchmark(["none"], ["mad-v0"], [0], base, tmp_path / "out")
    history = {h["step"]: h for h in read_metrics(runs / cfg.run_name)}
    assert sorted(history) == [0, 1, 2, 3]
    assert history[2]["time"] == first[2]["time"]  # steps 1-2 were not run again
    assert result.rows[0]["acc_start"] == first[0]["eval/accuracy"]

    changed = tiny_config(tiny_dir, tmp_path / "unused", total_steps=4, log__save_every=1)
    with pytest.raises(ValueError, match=r"mad-v0__none__0 holds a run with a different config"):
        run_llm_benchmark(["none"], ["mad-v0"], [0], changed, tmp_path / "out")


def test_base_kwargs_apply_to_their_own_env_only(tiny_dir, tmp_path):  # noqa: F811
    base = tiny_config(tiny_dir, tmp_path)
    cfg = cell_config(base, "chain-v0", "score", 1, tmp_path, at_start=False)
    assert (cfg.env.id, cfg.env.kwargs, cfg.env.credit, cfg.seed) == ("chain-v0", {}, "score", 1)
    assert cfg.eval.at_end and not cfg.eval.at_start
    assert cfg.log.eval_cache == str(tmp_path.parent / "eval_cache")  # beside the runs folder
    mine = cell_config(replace(base, log=replace(base.log, eval_cache="/c")), "chain-v0",
                       "score", 1, tmp_path, at_start=False)  # fmt: skip
    assert mine.log.eval_cache == "/c"
    off = cell_config(replace(base, log=replace(base.log, eval_cache="off")), "chain-v0",
                      "score", 1, tmp_path, at_start=False)  # fmt: skip
    assert off.log.eval_cache == "off"
    mad = cell_config(base, "mad-v0:num_agents=3", "none", 0, tmp_path, at_start=True)
    assert (mad.env.kwargs["num_agents"], mad.env.kwargs["rounds"]) == (3, 2)
    assert mad.run_name == "mad-v0_num_agents=3__none__0"
    with pytest.raises(ValueError, match="unknown credit method 'qualty'"):
        run_llm_benchmark(["qualty"], ["mad-v0"], [0], base, tmp_path)


@pytest.mark.slow
def test_cli_llm_tier_with_the_default_model(tmp_path, capsys, monkeypatch):
    """``marti bench credit --tier llm`` on the quick-start config, one step per cell; the
    sibling-training cell (AT-GRPO tree groups) runs with the real model too."""
    monkeypatch.chdir(REPO)
    out = tmp_path / "bench"
    methods = "none,quality,sibling:train=true:samples=1"
    argv = ["bench", "credit", "--tier", "llm", "--methods", methods, "--quiet"]
    argv += ["--out", str(out), "--no-plot"]
    for item in (
        "total_steps=1", "rollout.tasks_per_step=2", "rollout.n_samples=2",
        "env.eval_tasks={type: arithmetic, levels: [1], split: test, size: 4}",
        "log.tensorboard=false",
    ):  # fmt: skip
        argv += ["--set", item]
    assert cli(argv) == 0
    printed = capsys.readouterr().out
    assert "quality" in printed and "n/a" in printed
    rows = (out / "results.csv").read_text().splitlines()
    assert len(rows) == 4 and rows[0].startswith("env,method,seed")
    history = read_metrics(out / "runs" / "mad-v0__quality__0")
    assert history[-1]["step"] == 1 and "losses/policy/policy_loss" in history[-1]
    assert history[-1]["eval/boxed_rate"] > 0  # the real model boxes answers; a random one never
    sibling = [h for h in read_metrics(out / "runs" / "mad-v0__sibling_train=true_samples=1__0")
               if "rollout/samples" in h][-1]  # fmt: skip
    # 2 tasks x 2 episodes x 4 turns (2 agents, 2 rounds), each with 1 resampled sibling
    assert sibling["rollout/sibling_samples"] == 16 and sibling["rollout/samples"] == 32
    assert math.isfinite(sibling["losses/policy/policy_loss"])  # and it trained on them


def _transcripts(run_dir, episodes):
    """``episodes``: (task id, outcome, [(agent, round, reward, response tokens)])."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = []
    for task, outcome, turns in episodes:
        turns = [
            {"agent": a, "role": a.rpartition("_")[0], "round": k, "index": i, "reward": r,
             "meta": {"response_tokens": n}}
            for i, (a, k, r, n) in enumerate(turns)
        ]  # fmt: skip
        lines.append(json.dumps({"task": {"id": task}, "outcome": outcome, "turns": turns}))
    (run_dir / "transcripts.jsonl").write_text("\n".join(lines) + "\n")
    return run_dir


def _flag_config(**algorithm):
    from marti_trainer.config import TrainConfig

    cfg = TrainConfig()
    rollout = replace(cfg.rollout, tasks_per_step=1, n_samples=3, max_tokens=10)
    return replace(cfg, rollout=rollout, algorithm=replace(cfg.algorithm, **algorithm))


def test_first_batch_flag_marks_turn_discounting_like_the_fast_tier(tmp_path):
    from marti_trainer.credit_bench_llm import first_batch_degenerate

    # one task, 3 episodes (outcomes 1, 0, 1), two rounds; rewards gamma^(K - k) R with
    # gamma = 0.5: one positive scale per (agent, round) group
    episodes = [("t", R, [("a_0", 0, 0.5 * R, 2), ("a_0", 1, R, 2)]) for R in (1.0, 0.0, 1.0)]
    run = _transcripts(tmp_path / "discount", episodes)
    assert first_batch_degenerate(run, _flag_config(advantage="grpo")) is True
    assert first_batch_degenerate(run, _flag_config(advantage="dr_grpo")) is False
    assert first_batch_degenerate(run, _flag_config(advantage="reinforce_pp")) is None
    # a fourth episode past the first batch (tasks_per_step x n_samples = 3) is not read
    later = [*episodes, ("t", 0.0, [("a_0", 0, 9.0, 2), ("a_0", 1, -9.0, 2)])]
    run = _transcripts(tmp_path / "later", later)
    assert first_batch_degenerate(run, _flag_config(advantage="grpo")) is True


def test_first_batch_flag_adds_the_overlong_penalty_to_both_rewards(tmp_path):
    from marti_trainer.credit_bench_llm import first_batch_degenerate

    # r = 0.5 R in one group is affine in R = [1, 0, 0]. With the penalty (cut 10, buffer 4,
    # weight 1: 8 tokens -> (10 - 4 - 8) / 4 = -0.5, 2 tokens -> 0), r + p = [0.5, -0.5, 0]
    # against R + p = [1, -0.5, 0]: slopes 1 and 0.5, not affine, so not `none`'s gradient
    episodes = [("t", 1.0, [("a_0", 0, 0.5, 2)]), ("t", 0.0, [("a_0", 0, 0.0, 8)]),
                ("t", 0.0, [("a_0", 0, 0.0, 2)])]  # fmt: skip
    run = _transcripts(tmp_path / "penalty", episodes)
    assert first_batch_degenerate(run, _flag_config(advantage="grpo")) is True
    penalised = _flag_config(advantage="grpo", overlong_penalty=1.0, overlong_buffer=4)
    assert first_batch_degenerate(run, penalised) is False
    none = [("t", R, [("a_0", 0, R, n)]) for R, n in ((1.0, 2), (0.0, 8), (0.0, 2))]
    assert first_batch_degenerate(_transcripts(tmp_path / "none", none), penalised) is True
    with pytest.raises(ValueError, match=r"transcripts.jsonl:1: not an episode record"):
        (run / "transcripts.jsonl").write_text('{"turns": [{}]}\n')
        first_batch_degenerate(run, penalised)
