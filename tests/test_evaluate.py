"""Evaluation metrics against a hand computation, the result file and ``marti eval``."""

from __future__ import annotations

import json

import pytest

from marti_env import Task
from marti_trainer.cli import main
from marti_trainer.evaluate import (
    EvalResult,
    chunk_bounds,
    chunked_rollout,
    evaluate,
    format_table,
    greedy_heldout_rollout,
    heldout_rollout,
    summarize,
)
from marti_trainer.policies.base import Generation, Policy, SamplingParams
from marti_trainer.policies.simulated import SimulatedPolicy
from marti_trainer.rollout import request_seed, rollout
from marti_trainer.team import GreedyDedup
from tests.test_train import tiny_config, tiny_dir  # noqa: F401 (fixture)

TASKS = [
    Task("t0", "What is 2 + 3?", "5"),
    Task("t1", "What is 3 + 4?", "7"),
    Task("t2", "What is 1 + 1?", "2"),
    Task("t3", "What is 2 + 2?", "4"),
]
# What the single agent answers in episode i of task j (None: no \boxed{} at all).
SCRIPT = [
    ["5", "5", "3", None],  # outcomes 1 1 0 0; majority 5 (right)
    ["3", "3", "7", "8"],  # outcomes 0 0 1 0; majority 3 (wrong)
    [None, None, None, None],  # nobody answers: maj@k counts it wrong
    ["6", "4", "4.0", "6"],  # 4 and 6 tie 2-2; "6" appears first: wrong
]
SEED = 3


class ScriptedPolicy(Policy):
    """Answers ``SCRIPT[j][i]`` in episode ``i`` of task ``j`` (found from the request seed)."""

    def __init__(self) -> None:
        self.by_seed = {
            request_seed(SEED, j, i, 0, 0): (j, i) for j in range(len(TASKS)) for i in range(4)
        }

    def generate(self, prompts, params, adapter=None):
        j, i = self.by_seed[params.seed]
        answer = SCRIPT[j][i]
        text = "I am not sure." if answer is None else f"So it is \\boxed{{{answer}}}."
        return [
            [Generation(text, [7, 8, 9], [-0.5, -0.25, -0.125], [1, 2], "stop")] for _ in prompts
        ]

    def load_weights(self, source):
        pass

    tokenizer = None
    max_context_tokens = 1 << 20

    def close(self):
        pass


def test_metrics_match_a_hand_computation():
    result = evaluate("single-v0", TASKS, ScriptedPolicy(), k=4, seed=SEED, progress=False)
    # avg@4 = mean over tasks of the mean outcome: (2/4 + 1/4 + 0 + 2/4) / 4 = 1.25 / 4
    assert result.avg_at_k == pytest.approx(1.25 / 4)
    # maj@4: t0 right (5), t1 wrong (3), t2 no answer, t3 tie -> "6" seen first -> wrong
    assert result.maj_at_k == pytest.approx(1 / 4)
    assert result.pass_at_k == pytest.approx(3 / 4)  # t0, t1, t3 have a right episode
    assert result.boxed_rate == pytest.approx(11 / 16)  # 5 of 16 turns lack a box
    assert result.final_answer_rate == pytest.approx(11 / 16)
    assert result.tokens_generated == 16 * 3 and result.tokens_per_task == 12
    assert result.requests == 16 and result.truncated_rate == 0
    assert (result.num_tasks, result.k, result.env_id) == (4, 4, "single-v0")
    t3 = result.per_task[3]
    assert t3.final_answers == ["6", "4", "4.0", "6"] and t3.outcomes == [0, 1, 1, 0]
    assert t3.majority == "6" and t3.majority_outcome == 0
    assert result.per_task[2].majority is None


def test_summarize_counts_truncation_and_every_env_works():
    policy = SimulatedPolicy(lengths=(10, 400), accuracy=1.0)
    for env_id in ("single-v0", "majority-v0", "mad-v0", "chain-v0", "moa-v0"):
        batch = rollout(env_id, TASKS[:2], 3, policy, SamplingParams(max_tokens=64), progress=False)
        result = summarize(batch, "sim")
        truncated = sum(s.truncated for s in batch) / len(batch)
        assert result.truncated_rate == pytest.approx(truncated)
        assert result.tokens_generated == batch.stats.tokens_generated
        assert 0 <= result.avg_at_k <= result.pass_at_k <= 1
        assert len(result.per_task) == 2 and result.k == 3


def test_json_and_table(tmp_path):
    path = tmp_path / "out" / "eval.json"
    result = evaluate(
        "single-v0", TASKS, ScriptedPolicy(), k=4, seed=SEED, progress=False, json_path=path,
        model="scripted",
    )  # fmt: skip
    data = json.loads(path.read_text())
    assert data["avg_at_k"] == result.avg_at_k and data["model"] == "scripted"
    assert data["per_task"][0]["outcomes"] == [1.0, 1.0, 0.0, 0.0]
    table = format_table([result, result])
    lines = table.splitlines()
    assert lines[0].split()[:6] == ["env", "model", "tasks", "k", "avg@k", "maj@k"]
    assert len(lines) == 4 and "0.312" in lines[2] and "0.250" in lines[2]
    assert isinstance(result, EvalResult) and result.table() == format_table([result])


def test_marti_eval_command(tmp_path, capsys):
    out = tmp_path / "r.json"
    transcripts = tmp_path / "t.jsonl"
    argv = ["eval", "--env", "mad-v0", "--backend", "simulated", "--limit", "3", "-k", "2",
            "--env-arg", "num_agents=2", "--no-progress", "--out", str(out),
            "--transcripts", str(transcripts)]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "mad-v0" in printed and "avg@k" in printed
    data = json.loads(out.read_text())
    assert data["num_tasks"] == 3 and data["k"] == 2
    assert data["per_task"][0]["task_id"].startswith("arithmetic/test/")
    assert len(transcripts.read_text().splitlines()) == 6
    assert main(["eval", "--env", "mad-v0", "--backend", "simulated", "--env-arg", "x"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    sim = ["eval", "--env", "mad-v0", "--backend", "simulated"]
    assert main([*sim, "--unit", "debater_0"]) == 2
    assert "--unit needs --checkpoint" in capsys.readouterr().err
    assert main([*sim, "--checkpoint", str(tmp_path)]) == 2
    assert "--checkpoint needs --backend hf" in capsys.readouterr().err
    assert main(["eval", "--env", "mad-v0", "--checkpoint", str(tmp_path)]) == 2
    assert f"no checkpoint under {tmp_path}" in capsys.readouterr().err


def test_marti_eval_reads_a_data_file(tmp_path, capsys):
    data = tmp_path / "tasks.jsonl"
    data.write_text('{"question": "What is 6 * 7?", "answer": "42"}\n' * 1)
    argv = ["eval", "--env", "single-v0", "--backend", "simulated", "--data", str(data),
            "--no-progress", "-k", "1"]  # fmt: skip
    assert main(argv) == 0
    assert "single-v0" in capsys.readouterr().out


# --- batch invariance: fixed chunks ------------------------------------------------------


def test_chunk_bounds_by_hand():
    assert chunk_bounds(40, 16) == [(0, 16), (16, 32), (32, 40)]
    assert chunk_bounds(16, 16) == [(0, 16)]
    assert chunk_bounds(5, 0) == [(0, 5)]  # 0: one chunk
    assert chunk_bounds(3, 16) == [(0, 3)]
    with pytest.raises(ValueError, match="chunk_tasks >= 0"):
        chunk_bounds(3, -1)


class BatchSizeEcho(Policy):
    """Answers every prompt of a ``generate`` call with the call's size: the most
    batch-dependent model there is (a bf16 forward pass is a milder one)."""

    def generate(self, prompts, params, adapter=None):
        text = f"\\boxed{{{len(prompts)}}}"
        return [[Generation(text, [1], [-0.1], [1], "stop")] for _ in prompts]

    def load_weights(self, source):
        pass

    tokenizer = None
    max_context_tokens = 1 << 20

    def close(self):
        pass


ECHO_TASKS = [Task(f"e{i}", f"What is {i} + 16 - {i}?", "16") for i in range(40)]


def _echo_outcomes(n: int, chunk_tasks: int) -> list[float]:
    batch = greedy_heldout_rollout(
        "single-v0", ECHO_TASKS[:n], GreedyDedup(BatchSizeEcho()), 8, seed=0,
        chunk_tasks=chunk_tasks,
    )  # fmt: skip
    return [t.outcomes[0] for t in summarize(batch).per_task]


def test_heldout_results_do_not_depend_on_which_other_problems_are_evaluated():
    # chunks of 16: problem i's batch is its chunk, whatever follows it
    first16 = _echo_outcomes(16, 16)
    assert first16 == [1.0] * 16
    assert _echo_outcomes(20, 16)[:16] == first16 == _echo_outcomes(40, 16)[:16]
    assert _echo_outcomes(40, 16) == [1.0] * 32 + [0.0] * 8  # the last chunk has 8
    # one rollout (chunk_tasks=0): the same 16 problems score 0 once 4 others join
    assert _echo_outcomes(16, 0) == [1.0] * 16 and _echo_outcomes(20, 0) == [0.0] * 20


def test_chunked_batch_reindexes_samples_and_adds_stats():
    policy = SimulatedPolicy(accuracy=0.5, seed=0)
    sampling = SamplingParams(temperature=0.7, max_tokens=32)
    one = chunked_rollout("mad-v0", ECHO_TASKS[:5], 2, policy, sampling, chunk_tasks=0,
                          env_kwargs={"num_agents": 2}, progress=False)  # fmt: skip
    parts = chunked_rollout("mad-v0", ECHO_TASKS[:5], 2, policy, sampling, chunk_tasks=2,
                            env_kwargs={"num_agents": 2}, progress=False)  # fmt: skip
    assert len(parts.episodes) == len(one.episodes) == 10
    assert [e.task.id for e in parts.episodes] == [e.task.id for e in one.episodes]
    assert [(s.episode, s.task_index, s.agent, s.round) for s in parts.samples] == [
        (s.episode, s.task_index, s.agent, s.round) for s in one.samples
    ]
    assert all(parts.episodes[s.episode].task.id == s.task_id for s in parts.samples)
    assert parts.stats.num_requests == len(parts.samples) == 5 * 2 * 4
    assert parts.stats.tokens_generated == sum(len(s.response_token_ids) for s in parts.samples)


def test_eval_samples_is_seeded_avg_at_k_and_chunk_invariant():
    policy = SimulatedPolicy(accuracy=0.5, seed=0)

    def run(n: int, seed: int):
        batch = heldout_rollout("single-v0", TASKS_ARITH[:n], policy, 32, seed, samples=3,
                                temperature=0.7, chunk_tasks=4)  # fmt: skip
        return summarize(batch)

    result = run(8, seed=0)
    assert result.k == 3 and result.num_tasks == 8
    outcomes = [t.outcomes for t in result.per_task]
    assert result.avg_at_k == pytest.approx(sum(map(sum, outcomes)) / 24)
    assert result.pass_at_k == pytest.approx(sum(max(o) for o in outcomes) / 8)
    assert 0 < result.avg_at_k < result.pass_at_k  # the three episodes of a task differ
    assert [t.outcomes for t in run(8, seed=0).per_task] == outcomes  # seeded
    assert [t.outcomes for t in run(12, seed=0).per_task][:8] == outcomes  # chunk-invariant
    assert [t.outcomes for t in run(8, seed=1).per_task] != outcomes  # another seed differs
    with pytest.raises(ValueError, match="samples must be >= 0"):
        heldout_rollout("single-v0", TASKS_ARITH[:2], policy, 32, 0, samples=-1)


TASKS_ARITH = [Task(f"a{i}", f"What is {i} + {2 * i + 1}?", str(3 * i + 1)) for i in range(12)]


@pytest.mark.slow
def test_bf16_model_greedy_eval_is_invariant_to_the_evaluated_set(tmp_path):
    """A real (tiny, random) bf16 model in a debate: the first 16 problems' transcripts are
    the same evaluated alone, among 24, and with another decode batch size."""
    from marti_trainer.models import tiny_random_model
    from marti_trainer.policies.hf import HFPolicy

    model = tiny_random_model(tmp_path / "m", seed=0)
    tasks = [Task(f"b{i}", f"What is {i} * {i + 3} + {7 * i}?", "0") for i in range(24)]

    def responses(n: int, batch_size: int) -> list[list[str]]:
        with HFPolicy(model, dtype="bfloat16", batch_size=batch_size) as policy:
            batch = greedy_heldout_rollout(
                "mad-v0", tasks[:n], GreedyDedup(policy), 12, seed=0,
                env_kwargs={"num_agents": 2, "rounds": 2}, chunk_tasks=16,
            )  # fmt: skip
        return [[t.response for t in e.turns] for e in batch.episodes]

    alone = responses(16, 64)
    assert responses(24, 64)[:16] == alone
    assert responses(16, 128) == alone  # a round of a chunk (<= 32 rows) fits either batch


def test_training_reports_avg_and_pass_at_k_with_eval_samples(tiny_dir, tmp_path):  # noqa: F811
    from marti_trainer.metrics import read_metrics
    from marti_trainer.train import train

    cfg = tiny_config(
        tiny_dir, tmp_path, total_steps=1, run_name="r", eval__at_end=True, eval__samples=2,
        eval__temperature=1.0, eval__chunk_tasks=2,
    )  # fmt: skip
    train(cfg)
    last = read_metrics(tmp_path / "r")[-1]
    assert 0 <= last["eval/accuracy"] <= last["eval/pass_at_k"] <= 1
    assert "eval/maj_at_k" in last
    records = (tmp_path / "r" / "eval" / "step_000001.jsonl").read_text().splitlines()
    assert len(records) == 3 * 2  # 3 held-out problems x 2 sampled episodes


def _load_benchmark(name: str):
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_noise_floor_collect_and_render(tmp_path):
    noise = _load_benchmark("noise_floor")
    files = []
    for seed in (0, 1):
        result = evaluate("single-v0", TASKS, ScriptedPolicy(), k=4, seed=SEED, progress=False)
        result.seed = seed
        if seed == 1:  # task t1's episode 0 right instead of wrong under the other seed
            result.per_task[1].outcomes[0] = 1.0
        files.append(result.write_json(tmp_path / f"s{seed}.json"))
    data = noise.collect(files)
    assert data["runs"][0]["outcomes"] == ["1100", "0010", "0000", "0110"]
    assert data["runs"][1]["outcomes"][1] == "1010"
    text = noise.render(data)
    # one episode: seed 0 gets 1 of 4 (t0), seed 1 gets 2 of 4 (t0, t1): -25 points
    assert "| 0 | 25.0 [" in text and "| 1 | 50.0 [" in text
    assert "| one episode | -25.00 [" in text
    # avg@4: (2 + 1 + 0 + 2) / 16 = 31.25% against (2 + 2 + 0 + 2) / 16 = 37.5%
    assert "| 31.25 |" in text and "| 37.50 |" in text
    # episode accuracies .25 .5 .5 0 (seed 0), .5 .5 .5 0 (seed 1): mean 2.75/8 = .34375,
    # sample SD sqrt(.367188 / 7) = .2290; binomial sqrt(.34375 * .65625 / 4) = .2375
    assert "range from 0.0% to 50.0% (standard deviation 22.90 points" in text
    assert "binomial expectation 23.75" in text
    with pytest.raises(ValueError, match="both files use seed 0"):
        noise.collect([files[0], files[0]])
    with pytest.raises(ValueError, match="give two"):
        noise.collect(files[:1])


def test_a_checkpoints_credit_setting_is_not_imported_by_marti_eval(tmp_path):
    """A shared run's config may name a credit method by file (an entry point that would run
    that file); evaluating its checkpoint must not take it, while --env-arg still can."""
    import argparse
    from types import SimpleNamespace

    from marti_trainer.cli.eval import _fill_defaults
    from marti_trainer.config import config_from_dict

    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('x')\n")
    cfg = config_from_dict(
        {"env": {"id": "mad-v0", "kwargs": {"num_agents": 2, "credit": f"{evil}:C"}}},
        check_env=False,
    )
    keys = ("k", "temperature", "max_tokens", "mode", "seed", "dtype", "batch_size")
    args = argparse.Namespace(env=None, env_arg=[], chunk_tasks=None, **dict.fromkeys(keys))
    kwargs = _fill_defaults(args, SimpleNamespace(config=cfg))
    assert kwargs == {"num_agents": 2} and args.env == "mad-v0"
    args = argparse.Namespace(env=None, env_arg=["credit=score"], chunk_tasks=None,
                              **dict.fromkeys(keys))  # fmt: skip
    assert _fill_defaults(args, SimpleNamespace(config=cfg))["credit"] == "score"
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("name", ["arithmetic", "expr", "code_gen"])
def test_marti_eval_takes_a_procedural_generators_test_split_and_levels(name):
    """``--data expr`` once evaluated the generator's *train* split at every level, whatever
    --levels said: a held-out score on training prompts."""
    from marti_trainer.cli.eval import _tasks

    tasks = _tasks(name, 6, "1")
    assert [t.id for t in tasks] == [f"{name}/test/L1/{i}" for i in range(6)]
    default = {t.id.split("/")[2] for t in _tasks(name, 12, None)}  # the generator's default
    assert default == {"arithmetic": {"L1", "L2"}, "expr": {"L1", "L2", "L3"},
                       "code_gen": {"L1", "L2"}}[name]  # fmt: skip
    with pytest.raises(ValueError, match=f"--data {name} --levels 9"):
        _tasks(name, 2, "9")


def test_marti_eval_refuses_levels_for_a_task_source_without_them():
    from marti_trainer.cli.eval import _tasks

    with pytest.raises(ValueError, match="--levels applies to a procedural --data"):
        _tasks([{"prompt": "1+1?", "answer": "2"}], None, "1")
    with pytest.raises(ValueError, match="comma-separated integers, got '1,a'"):
        _tasks("expr", 2, "1,a")
