"""The LLM tier of the credit benchmark: every cell a real training run (tiny random model;
slow: the default model through ``marti bench credit --tier llm``)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

import pytest
import yaml

from marti_env.credit.bench import write_outputs
from marti_env.credit.bench.report import plot
from marti_trainer.credit_bench_llm import (
    cell_config,
    equal_generation_tasks,
    generation_cost,
    run_llm_benchmark,
    spent_tokens,
)
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
    checkpoints = runs / cfg.run_name / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_000001", "step_000002"]
    result = run_llm_benchmark(
        ["none"], ["mad-v0"], [0], base, tmp_path / "out", keep_checkpoints="last"
    )
    history = {h["step"]: h for h in read_metrics(runs / cfg.run_name)}
    assert sorted(history) == [0, 1, 2, 3]
    assert history[2]["time"] == first[2]["time"]  # steps 1-2 were not run again
    assert result.rows[0]["acc_start"] == first[0]["eval/accuracy"]
    assert [p.name for p in checkpoints.iterdir()] == ["step_000003"]  # finished: last kept

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


def test_controls_are_cells_like_any_method(tiny_dir, tmp_path):  # noqa: F811
    from marti_env.credit.bench.harness import RESEED

    base = tiny_config(tiny_dir, tmp_path)
    floor = cell_config(base, "mad-v0", "none@reseed", 2, tmp_path, False)
    assert (floor.env.credit, floor.env.credit_kwargs, floor.seed) == ("none", {}, 2 + RESEED)
    assert floor.run_name == "mad-v0__none_reseed__2"  # paired on seed 2
    assert (
        floor.heldout_seed == cell_config(base, "mad-v0", "none", 2, tmp_path, False).heldout_seed
    )
    noise = cell_config(base, "mad-v0", "random:seed=5", 2, tmp_path, False)
    assert (noise.env.credit, noise.env.credit_kwargs, noise.seed) == ("random", {"seed": 5}, 2)
    with pytest.raises(ValueError, match="unknown credit method 'none@reseeed'"):
        run_llm_benchmark(["none", "none@reseeed"], ["mad-v0"], [0], base, tmp_path)


def test_equal_generation_tasks_by_hand():
    assert equal_generation_tasks(8, 2, 2) == 4  # 16 generations afford 4 tasks at 4 each
    assert equal_generation_tasks(8, 2, 30) == 1  # at least one task
    assert equal_generation_tasks(8, 3, 0) == 8  # no replays: the base's
    with pytest.raises(ValueError, match="turns 0 must be >= 1"):
        equal_generation_tasks(8, 0, 1)


def test_a_replay_method_trains_on_fewer_tasks_at_equal_generations(tiny_dir, tmp_path):  # noqa: F811
    from marti_env.credit.bench.harness import RESEED

    base = tiny_config(tiny_dir, tmp_path / "unused", total_steps=1, rollout__tasks_per_step=8)
    # mad-v0 with 2 agents x 2 rounds: 4 turns; leaving one agent out regenerates the
    # other's round-1 turn: 2 replays an episode, so 8 * 4 // (4 + 2) = 5 tasks a step
    loo = cell_config(base, "mad-v0", "leave_one_out_replay", 0, tmp_path, True)
    assert generation_cost(loo) == (4, 2) and loo.rollout.tasks_per_step == 5
    on_top = cell_config(base, "mad-v0", "leave_one_out_replay", 0, tmp_path, True, "episodes")
    assert on_top.rollout.tasks_per_step == 8
    assert cell_config(base, "mad-v0", "quality", 0, tmp_path, True).rollout.tasks_per_step == 8
    with pytest.raises(ValueError, match="budget must be 'generations', 'episodes' or 'tokens'"):
        cell_config(base, "mad-v0", "none", 0, tmp_path, True, "turns")  # type: ignore[arg-type]

    small = tiny_config(tiny_dir, tmp_path / "unused", total_steps=1)  # 2 tasks x 2 samples
    methods = [
        "none",
        "leave_one_out_replay",
        "none@reseed",
        "random",
        "sibling:train=true:samples=1",
    ]
    result = run_llm_benchmark(methods, ["mad-v0"], [0], small, tmp_path / "out")
    none, loo, floor, noise, tree = result.rows
    # sibling resamples each turn and re-runs what follows: 2 x (1 + 2) + 2 x 1 = 8 replays
    # an episode, so max(1, 2 * 4 // 12) = 1 task (group_by: node, its own grouping)
    assert (tree["episodes"], tree["generations"]) == (2, 2 * 4 + 2 * 8)
    assert (none["episodes"], none["generations"]) == (4, 16)
    # 2 * 4 // 6 = 1 task: 2 episodes of 4 turns, plus their 2 x 2 replays
    assert (loo["episodes"], loo["generations"]) == (2, 2 * 4 + 2 * 2)
    # the controls trained like any cell: the floor on another seed, random on noise
    assert (floor["method"], floor["seed"], floor["generations"]) == ("none@reseed", 0, 16)
    runs = tmp_path / "out" / "runs"
    saved = yaml.safe_load((runs / "mad-v0__none_reseed__0" / "config.yaml").read_text())
    assert saved["seed"] == RESEED and saved["eval"]["seed"] == 0
    path = runs / "mad-v0__random__0" / "transcripts.jsonl"
    rewards = [t["reward"] for line in path.open() for t in json.loads(line)["turns"]]
    assert len(set(rewards)) == len(rewards) == 16  # i.i.d. draws, not the outcome
    # tokens: the rollout's response tokens (the transcripts'), plus the replays' for loo
    for row, cell in ((none, "mad-v0__none__0"), (loo, "mad-v0__leave_one_out_replay__0")):
        path = runs / cell / "transcripts.jsonl"
        own = sum(t["meta"]["response_tokens"] for line in path.open()
                  for t in json.loads(line)["turns"])  # fmt: skip
        assert row["tokens"] == own if row is none else row["tokens"] > own
    assert "tokens" in result.table().splitlines()[0]


def test_a_token_budget_stops_every_cell_at_the_base_configs_total_tokens(tiny_dir, tmp_path):  # noqa: F811
    base = tiny_config(tiny_dir, tmp_path / "unused", total_steps=3)  # 2 tasks x 2 samples
    with pytest.raises(ValueError, match=r"total_tokens, which is not set.*--set total_tokens"):
        cell_config(base, "mad-v0", "none", 0, tmp_path, True, "tokens")
    # a budget of 1 token: the first step reaches it, so every cell trains 1 step of 3
    budgeted = replace(base, total_tokens=1)
    loo = cell_config(budgeted, "mad-v0", "leave_one_out_replay", 0, tmp_path, True, "tokens")
    assert (loo.rollout.tasks_per_step, loo.total_tokens) == (2, 1)  # replays on top
    with pytest.raises(ValueError, match=r"total_tokens 1 is set .* would mix the two budgets"):
        cell_config(budgeted, "mad-v0", "none", 0, tmp_path, True, "generations")
    methods = ["none", "leave_one_out_replay"]
    result = run_llm_benchmark(methods, ["mad-v0"], [0], budgeted, tmp_path / "out",
                               budget="tokens")  # fmt: skip
    none, replay = result.rows
    assert (none["episodes"], none["generations"]) == (4, 16)  # 1 step, not 3
    assert (replay["episodes"], replay["generations"]) == (4, 16 + 4 * 2)
    assert replay["tokens"] > none["tokens"] >= 1
    assert result.to_json()["budget"] == "tokens"
    header, _, first, second = result.table().splitlines()[:4]
    assert re.search(r"\btokens +episodes +acc_final - none", header)
    assert "4 ± 0" in first and "4 ± 0" in second  # 1 step of 2 tasks x 2 samples each
    # seeds stop at different steps under a token budget: the curves' mean still plots
    result.curves[("mad-v0", "none", 1)] = [0.5, 0.5, 0.5]  # a seed that trained 3 steps
    assert plot(result, tmp_path / "curves.png").is_file()


def test_spent_tokens_by_hand():
    history = [{"step": 1, "rollout/tokens": 100.0, "rollout/replay_tokens": 30.0},
               {"step": 1, "eval/accuracy": 0.5},
               {"step": 2, "rollout/tokens": 120.0}]  # fmt: skip
    assert spent_tokens(history, 2) == 250.0
    assert math.isnan(spent_tokens(history, 3))  # a step without the count: an older cell


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
    # at the default equal generation budget its 8 replays an episode leave it 1 task of the
    # 2 (max(1, 2 * 4 // 12)): 2 episodes x 4 turns (2 agents, 2 rounds), each with 1
    # resampled sibling
    assert sibling["rollout/sibling_samples"] == 8 and sibling["rollout/samples"] == 16
    assert math.isfinite(sibling["losses/policy/policy_loss"])  # and it trained on them


def _transcripts(run_dir, steps):
    """``steps``: per training step, its episodes ``(task id, outcome, [(agent, round,
    reward, response tokens)])``, written as the trainer writes transcripts.jsonl."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = []
    for task, outcome, turns in (episode for step in steps for episode in step):
        turns = [
            {"index": i, "round": k, "agent": a, "role": a.rpartition("_")[0], "messages": [],
             "response": "", "answer": None, "score": 0.0, "reward": r,
             "meta": {"response_tokens": n}}
            for i, (a, k, r, n) in enumerate(turns)
        ]  # fmt: skip
        record = {"env_id": "x-v0", "task": {"id": task, "prompt": "p", "answer": "1"},
                  "turns": turns, "final_answer": None, "outcome": outcome}  # fmt: skip
        lines.append(json.dumps(record))
    (run_dir / "transcripts.jsonl").write_text("\n".join(lines) + "\n")
    (run_dir / "metrics.jsonl").write_text(
        "".join(f'{{"step": {s}}}\n' for s in range(1, len(steps) + 1))
    )
    return run_dir


def _flag_config(**algorithm):
    from marti_trainer.config import TrainConfig

    cfg = TrainConfig()
    rollout = replace(cfg.rollout, tasks_per_step=1, n_samples=3, max_tokens=10)
    return replace(cfg, rollout=rollout, algorithm=replace(cfg.algorithm, **algorithm))


def test_flag_marks_turn_discounting_on_every_batch(tmp_path):
    from marti_trainer.credit_bench_llm import trained_like_none

    # one task, 3 episodes (outcomes 1, 0, 1), two rounds; rewards gamma^(K - k) R with
    # gamma = 0.5: one positive scale per (agent, round) group
    step = [("t", R, [("a_0", 0, 0.5 * R, 2), ("a_0", 1, R, 2)]) for R in (1.0, 0.0, 1.0)]
    run = _transcripts(tmp_path / "discount", [step, step])
    assert trained_like_none(run, _flag_config(advantage="grpo")) is True
    assert trained_like_none(run, _flag_config(advantage="grpo", group_by="role")) is True
    assert trained_like_none(run, _flag_config(advantage="dr_grpo")) is False
    assert trained_like_none(run, _flag_config(advantage="rloo")) is False
    # agent_scale: one scale per agent over the batch keeps the per-round slopes apart
    assert trained_like_none(run, _flag_config(advantage="agent_scale")) is False
    assert trained_like_none(run, _flag_config(advantage="reinforce_pp")) is None
    cfg = _flag_config()
    siblings = replace(cfg.env, credit="sibling", credit_kwargs={"train": True})
    node = replace(cfg, env=siblings, algorithm=replace(cfg.algorithm, group_by="node"))
    assert trained_like_none(run, node) is None  # sibling groups: not in the transcripts
    # a later batch whose rewards are not the outcome's makes the whole run differ
    later = [("t", 0.0, [("a_0", 0, 9.0, 2), ("a_0", 1, -9.0, 2)]), *step[1:]]
    run = _transcripts(tmp_path / "later", [step, later])
    assert trained_like_none(run, _flag_config(advantage="grpo")) is False


def test_flag_adds_the_weighted_overlong_penalty_to_both_rewards(tmp_path):
    from marti_trainer.credit_bench_llm import trained_like_none

    # cut 10, buffer 4: 2 tokens -> ramp 0, 10 tokens -> -1. R = [1, 0, 0], r = [2, -0.5, 0].
    # Weight 0.5: R + p = [1, -0.5, 0], r + p = [2, -1, 0] = 2 (R + p): `none`'s gradient.
    # Weight 1: [1, -1, 0] against [2, -1.5, 0] (slopes 1.5 and 2); weight 0: r varies
    # where R does not. Neither is `none`'s.
    step = [("t", R, [("a_0", 0, r, n)]) for R, r, n in ((1.0, 2.0, 2), (0.0, -0.5, 10),
                                                         (0.0, 0.0, 2))]  # fmt: skip
    run = _transcripts(tmp_path / "penalty", [step])
    weighted = {w: _flag_config(overlong_penalty=w, overlong_buffer=4) for w in (0.0, 0.5, 1.0)}
    assert [trained_like_none(run, weighted[w]) for w in (0.0, 0.5, 1.0)] == [False, True, False]


def test_flag_errors_name_the_transcripts(tmp_path):
    from marti_trainer.credit_bench_llm import trained_like_none

    cfg = _flag_config()
    with pytest.raises(ValueError, match=r"transcripts.jsonl: missing, although log.transcripts"):
        trained_like_none(tmp_path, cfg)
    off = replace(cfg, log=replace(cfg.log, transcripts=False))
    assert trained_like_none(tmp_path, off) is None
    step = [("t", 1.0, [("a_0", 0, 1.0, 2)])] * 3
    run = _transcripts(tmp_path / "short", [step[:2]])
    with pytest.raises(ValueError, match=r"2 episodes, not a whole number of training steps of 3"):
        trained_like_none(run, cfg)
    (run / "transcripts.jsonl").write_text('{"turns": [{}]}\n' * 3)
    with pytest.raises(ValueError, match=r"transcripts.jsonl:1: not an episode record"):
        trained_like_none(run, cfg)
    with pytest.raises(ValueError, match=r"no form for algorithm.advantage='mystery'"):
        trained_like_none(run, replace(cfg, algorithm=replace(cfg.algorithm, advantage="mystery")))


@pytest.mark.parametrize("group_by", ["agent", "role"])
def test_flag_reads_the_rows_the_trainer_trained_on(tiny_dir, tmp_path, monkeypatch, group_by):  # noqa: F811
    """The transcripts' rows, keys and lengths are the learner's samples (captured at
    ``sample_advantages``), step by step."""
    import marti_trainer.learner.update as update
    from marti_trainer.credit_bench_llm import training_batches
    from marti_trainer.rollout import group_key_of

    seen = []
    real = update.sample_advantages

    def capture(samples, *args, **kwargs):
        seen.append(sorted((group_key_of(s, group_by), s.reward, len(s.response_token_ids))
                           for s in samples))  # fmt: skip
        return real(samples, *args, **kwargs)

    monkeypatch.setattr(update, "sample_advantages", capture)
    cfg = tiny_config(tiny_dir, tmp_path, total_steps=2, algorithm__group_by=group_by,
                      model__sharing="shared", algorithm__overlong_penalty=0.5,
                      algorithm__overlong_buffer=4)  # fmt: skip
    train(cfg)
    (run_dir,) = [p for p in tmp_path.iterdir() if (p / "transcripts.jsonl").is_file()]
    batches = training_batches(run_dir, 2 * 2)
    rows = [
        sorted((group_key_of(row, group_by), row.reward, int(turn.meta["response_tokens"]))
               for ep in batch for row, turn in zip(ep.samples(), ep.turns, strict=True))
        for batch in batches
    ]  # fmt: skip
    assert len(rows) == 2 and rows == seen


FAMILIES = sorted(
    p.stem.removeprefix("135m_credit_")
    for p in (REPO / "baselines" / "smollm2").glob("135m_credit_*.yaml")
)


def _family(family: str):
    import subprocess

    return subprocess.run(
        ["bash", "-c", '. benchmarks/llm_credit_family.sh && echo "$ENV_ID $METHOD $CONFIG"'],
        cwd=REPO, env={"FAMILY": family, "PATH": "/usr/bin:/bin"}, capture_output=True,
        text=True,
    )  # fmt: skip


@pytest.mark.parametrize("family", FAMILIES)
def test_each_llm_credit_family_names_its_config_env_and_method(family):
    """benchmarks/llm_credit_family.sh, which both LLM-tier scripts source, knows every
    baselines/smollm2/135m_credit_<family>.yaml: the config runs its env, and its method is
    a registered credit method."""
    from marti_env.credit.base import credit_methods

    out = _family(family)
    assert out.returncode == 0, out.stderr
    env_id, method, config = out.stdout.split()
    assert config == f"baselines/smollm2/135m_credit_{family}.yaml"
    assert yaml.safe_load((REPO / config).read_text())["env"]["id"] == env_id
    assert method in credit_methods() and method != "none"


def test_an_unknown_llm_credit_family_is_named_with_the_known_ones():
    bad = _family("gates")
    assert bad.returncode == 2 and "got 'gates'" in bad.stderr
    assert all(f in bad.stderr for f in FAMILIES)
