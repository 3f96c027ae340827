"""benchmarks/split_sum_agents.py: per-role scores of split-sum evaluations, by hand."""

from __future__ import annotations

import json

import pytest
import yaml

from marti_env.tasks.task import Task
from marti_env.workflows.split_sum import split_instance
from tests.test_evaluate import _load_benchmark

agents = _load_benchmark("split_sum_agents")
TASK = Task("arithmetic/test/L1/0", "What is 95 - 42?", "53", "arithmetic/level1")


def _record(answers: dict[str, str | None], outcome: float) -> dict:
    return {
        "task": {
            "id": TASK.id,
            "prompt": TASK.prompt,
            "answer": TASK.answer,
            "source": TASK.source,
        },
        "turns": [{"agent": a, "answer": v} for a, v in answers.items()],
        "outcome": outcome,
    }


def _run(tmp_path, env_id="split-sum-v0"):
    parts = split_instance(TASK, 2, 2, 0).parts
    run = tmp_path / "split-sum-v0__none__3"
    (run / "eval").mkdir(parents=True)
    config = {"seed": 3, "env": {"id": env_id, "credit": "none",
                                 "kwargs": {"num_solvers": 2, "num_distractors": 2}}}  # fmt: skip
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    right = {"solver_0": str(parts[0]), "solver_1": str(parts[1]),
             "distractor_0": "0", "distractor_1": None}  # fmt: skip
    wrong = {"solver_0": str(parts[0]), "solver_1": "x",
             "distractor_0": "7", "distractor_1": "0"}  # fmt: skip
    lines = [json.dumps(_record(right, 1.0)), json.dumps(_record(wrong, 0.0))]
    (run / "eval" / "step_000015.jsonl").write_text("\n".join(lines) + "\n")
    return run


def test_collect_scores_each_agent_against_its_own_job(tmp_path):
    (run,) = agents.collect([_run(tmp_path)])["runs"]
    assert (run["method"], run["seed"], list(run["steps"])) == ("none", 3, ["15"])
    counts = run["steps"]["15"]
    assert (counts["problems"], counts["team"]) == (2, 1)
    # solvers: 3 of 4 boxed their part; "x" is not a number
    assert counts["solver"] == {"pairs": 4, "local": 3, "boxed": 3}
    # distractors: "0", nothing and "0" add nothing; "7" does; "0" counts as boxed
    assert counts["distractor"] == {"pairs": 4, "local": 3, "boxed": 3}
    table = agents.render({"runs": [run]})
    assert table.splitlines()[-1] == "| none | 3 | 15 | 50.0 | 75.0 (75.0) | 75.0 (75.0) |"


def test_collect_refuses_another_env_naming_the_run(tmp_path):
    with pytest.raises(ValueError, match=r"split-sum-v0__none__3: env 'mad-v0'"):
        agents.collect([_run(tmp_path, env_id="mad-v0")])
