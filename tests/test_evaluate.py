"""Evaluation metrics against a hand computation, the result file and ``marti eval``."""

from __future__ import annotations

import json

import pytest

from marti_env import Task
from marti_trainer.cli import main
from marti_trainer.evaluate import EvalResult, evaluate, format_table, summarize
from marti_trainer.policies.base import Generation, Policy, SamplingParams
from marti_trainer.policies.simulated import SimulatedPolicy
from marti_trainer.rollout import request_seed, rollout

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
