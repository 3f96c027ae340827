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
    task = {"id": TASK.id, "prompt": TASK.prompt, "answer": TASK.answer, "source": TASK.source}
    turns = [{"agent": a, "answer": v} for a, v in answers.items()]
    return {"task": task, "turns": turns, "outcome": outcome}


def _run(tmp_path, records, kwargs=None, env_id="split-sum-v0"):
    run = tmp_path / "split-sum-v0__none__3"
    (run / "eval").mkdir(parents=True)
    kwargs = {"num_solvers": 2, "num_distractors": 2, "difficulty": 1} if kwargs is None else kwargs
    config = {"exp_name": "none", "seed": 3, "env": {"id": env_id, "kwargs": kwargs}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    lines = [json.dumps(r) for r in records]
    (run / "eval" / "step_000015.jsonl").write_text("\n".join(lines) + "\n")
    return run


def test_collect_scores_each_agent_against_its_own_job(tmp_path):
    parts = split_instance(TASK, 2, 2, 1).parts  # the run's size and difficulty
    right = {"solver_0": str(parts[0]), "solver_1": str(parts[1]),
             "distractor_0": "0", "distractor_1": None}  # fmt: skip
    wrong = {"solver_0": str(parts[0]), "solver_1": "x",
             "distractor_0": "7", "distractor_1": "0"}  # fmt: skip
    (run,) = agents.collect([_run(tmp_path, [_record(right, 1.0), _record(wrong, 0.0)])])["runs"]
    assert (run["method"], run["seed"], list(run["steps"])) == ("none", 3, ["15"])
    assert run["split_sum"] == {"num_solvers": 2, "num_distractors": 2, "difficulty": 1}
    counts = run["steps"]["15"]
    assert (counts["problems"], counts["team"]) == (2, 1)
    # solvers: 3 of 4 boxed their part; "x" is not a number
    assert counts["solver"] == {"pairs": 4, "local": 3, "boxed": 3}
    # distractors: "0", nothing and "0" add nothing; "7" does; "0" counts as boxed
    assert counts["distractor"] == {"pairs": 4, "local": 3, "boxed": 3}
    table = agents.render({"runs": [run]})
    assert table.splitlines()[-1] == "| none | 3 | 15 | 50.0 | 75.0 (75.0) | 75.0 (75.0) |"


def test_the_env_defaults_fill_missing_kwargs(tmp_path):
    parts = split_instance(TASK, 4, 2, 0).parts  # split-sum-v0's registered defaults
    answers = {**{f"solver_{i}": str(p) for i, p in enumerate(parts)},
               "distractor_0": None, "distractor_1": None}  # fmt: skip
    (run,) = agents.collect([_run(tmp_path, [_record(answers, 1.0)], kwargs={})])["runs"]
    assert run["steps"]["15"]["solver"] == {"pairs": 4, "local": 4, "boxed": 4}


def test_bad_runs_and_records_are_named(tmp_path):
    ok = {"solver_0": "1", "solver_1": "2", "distractor_0": None, "distractor_1": None}
    with pytest.raises(ValueError, match=r"split-sum-v0__none__3: env 'mad-v0'"):
        agents.collect([_run(tmp_path / "a", [_record(ok, 0.0)], env_id="mad-v0")])
    missing = {k: v for k, v in ok.items() if k != "distractor_1"}
    records = [_record(ok, 0.0), _record(missing, 0.0)]
    with pytest.raises(ValueError, match=r"step_000015.jsonl:2: turns by .*, expected one each"):
        agents.collect([_run(tmp_path / "b", records)])
    no_answer = _record(ok, 0.0)
    del no_answer["turns"][0]["answer"]
    with pytest.raises(ValueError, match=r"step_000015.jsonl:1: no 'answer' field"):
        agents.collect([_run(tmp_path / "c", [no_answer])])
