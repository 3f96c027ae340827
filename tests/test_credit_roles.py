"""benchmarks/credit_roles.py: per-role scores of split-sum, gate and signal runs, by hand."""

from __future__ import annotations

import json

import pytest
import yaml

import marti_env
from marti_env.tasks.task import Task
from marti_env.workflows.split_sum import split_instance
from tests.test_evaluate import _load_benchmark

roles = _load_benchmark("credit_roles")
KWARGS = {"num_solvers": 2, "num_distractors": 2, "difficulty": 1}  # _run's default
TASK = Task("arithmetic/test/L1/0", "What is 95 - 42?", "53", "arithmetic/level1")


def _record(answers: dict[str, str | None], outcome: float, scores=None) -> dict:
    task = {"id": TASK.id, "prompt": TASK.prompt, "answer": TASK.answer, "source": TASK.source}
    scores = scores or {}
    turns = [{"agent": a, "answer": v, "score": scores.get(a, 0.0)} for a, v in answers.items()]
    return {"task": task, "turns": turns, "outcome": outcome}


def _run(tmp_path, records, kwargs=None, env_id="split-sum-v0"):
    run = tmp_path / "split-sum-v0__none__3"
    (run / "eval").mkdir(parents=True)
    kwargs = KWARGS if kwargs is None else kwargs
    config = {"exp_name": "none", "seed": 3, "env": {"id": env_id, "kwargs": kwargs}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    lines = [json.dumps(r) for r in records]
    (run / "eval" / "step_000015.jsonl").write_text("\n".join(lines) + "\n")
    session = {"data": {"eval_tasks": {"tasks": len(records), "skipped_rows": 0}}}
    (run / "run.json").write_text(json.dumps({"sessions": [session]}))
    return run


def test_collect_scores_each_agent_against_its_own_job(tmp_path):
    parts = split_instance(TASK, 2, 2, 1).parts  # the run's size and difficulty
    right = {"solver_0": str(parts[0]), "solver_1": str(parts[1]),
             "distractor_0": "0", "distractor_1": None}  # fmt: skip
    wrong = {"solver_0": str(parts[0]), "solver_1": "x",
             "distractor_0": "7", "distractor_1": "0"}  # fmt: skip
    data = roles.collect([_run(tmp_path, [_record(right, 1.0), _record(wrong, 0.0)])])
    (run,) = data["runs"]
    assert (run["method"], run["seed"], list(run["steps"])) == ("none", 3, ["15"])
    assert run["env_kwargs"] == {"num_solvers": 2, "num_distractors": 2, "difficulty": 1}
    counts = run["steps"]["15"]
    assert (counts["problems"], counts["team"]) == (2, 1)
    # solvers: 3 of 4 boxed their part; "x" is not a number
    assert counts["solver"] == {"pairs": 4, "local": 3, "boxed": 3}
    # distractors: "0", nothing and "0" add nothing; "7" does; "0" counts as boxed
    assert counts["distractor"] == {"pairs": 4, "local": 3, "boxed": 3}
    table = roles.render(data)
    assert table.splitlines()[-1] == "| none | 3 | 15 | 50.0 | 75.0 (75.0) | 75.0 (75.0) |"


def test_the_env_defaults_fill_missing_kwargs(tmp_path):
    parts = split_instance(TASK, 4, 2, 0).parts  # split-sum-v0's registered defaults
    answers = {**{f"solver_{i}": str(p) for i, p in enumerate(parts)},
               "distractor_0": None, "distractor_1": None}  # fmt: skip
    (run,) = roles.collect([_run(tmp_path, [_record(answers, 1.0)], kwargs={})])["runs"]
    assert run["steps"]["15"]["solver"] == {"pairs": 4, "local": 4, "boxed": 4}


def test_bad_runs_and_records_are_named(tmp_path):
    ok = {"solver_0": "1", "solver_1": "2", "distractor_0": None, "distractor_1": None}
    with pytest.raises(ValueError, match=r"split-sum-v0__none__3: env 'mad-v0', not one of"):
        roles.collect([_run(tmp_path / "a", [_record(ok, 0.0)], env_id="mad-v0")])
    missing = {k: v for k, v in ok.items() if k != "distractor_1"}
    records = [_record(ok, 0.0), _record(missing, 0.0)]
    with pytest.raises(ValueError, match=r"step_000015.jsonl:2: turns by .*, expected one each"):
        roles.collect([_run(tmp_path / "b", records)])
    partial = _run(tmp_path / "d", [_record(ok, 0.0)] * 3)
    (partial / "eval" / "step_000015.jsonl").write_text(json.dumps(_record(ok, 0.0)) + "\n")
    with pytest.raises(ValueError, match=r"1 episode records, but the run's held-out set has 3"):
        roles.collect([partial])
    no_answer = _record(ok, 0.0)
    del no_answer["turns"][0]["answer"]
    with pytest.raises(ValueError, match=r"step_000015.jsonl:1: no 'answer' field"):
        roles.collect([_run(tmp_path / "c", [no_answer])])
    no_score = _record(ok, 0.0)
    del no_score["turns"][1]["score"]
    with pytest.raises(ValueError, match=r"step_000015.jsonl:1: no 'score' field"):
        roles.collect([_run(tmp_path / "e", [no_score])])


def test_gate_scores_the_verifier_against_the_proposals(tmp_path):
    def episode(right: bool, said: str | None, outcome: float) -> dict:
        answers = {"generator_0": "53" if right else "52", "verifier_0": said}
        return _record(answers, outcome, scores={"generator_0": float(right)})

    # right proposals: ACCEPT, REJECT, no decision; wrong ones: ACCEPT, REJECT, REJECT
    records = [episode(True, "ACCEPT", 1.0), episode(True, "reject", 0.0),
               episode(True, "maybe", 1.0), episode(False, "ACCEPT", 0.0),
               episode(False, "REJECT", 1.0), episode(False, "REJECT", 0.0)]  # fmt: skip
    run = _run(tmp_path, records, kwargs={"fallback_accuracy": 0.25}, env_id="gate-v0")
    data = roles.collect([run])
    counts = data["runs"][0]["steps"]["15"]
    assert data["env_id"] == "gate-v0" and (counts["problems"], counts["team"]) == (6, 3)
    assert [counts[f"right_{d}"] for d in ("accept", "reject", "none")] == [1, 1, 1]
    assert [counts[f"wrong_{d}"] for d in ("accept", "reject", "none")] == [1, 2, 0]
    # TPR = 2/3 (no decision lets a proposal through), TNR = 2/3: balanced accuracy 66.7
    last = roles.render(data).splitlines()[-1]
    assert last == "| none | 3 | 15 | 50.0 | 50.0 | 33.3 | 50.0 | 16.7 | 66.7 |"


def test_gate_panel_counts_every_verifiers_decision(tmp_path):
    def episode(right: bool, said: tuple[str, str], outcome: float) -> dict:
        answers = {"generator_0": "53" if right else "52", "verifier_0": said[0],
                   "verifier_1": said[1]}  # fmt: skip
        return _record(answers, outcome, scores={"generator_0": float(right)})

    # a right proposal: ACCEPT + REJECT; a wrong one: REJECT + nothing -> 4 decisions
    records = [episode(True, ("ACCEPT", "REJECT"), 1.0), episode(False, ("REJECT", None), 0.0)]
    kwargs = {"num_verifiers": 2}
    data = roles.collect([_run(tmp_path, records, kwargs=kwargs, env_id="gate-v0")])
    counts = data["runs"][0]["steps"]["15"]
    assert (counts["problems"], counts["decisions"]) == (2, 4)
    assert [counts[f"right_{d}"] for d in ("accept", "reject", "none")] == [1, 1, 0]
    assert [counts[f"wrong_{d}"] for d in ("accept", "reject", "none")] == [0, 1, 1]
    # generator right on 2 of 4 decisions (1 of 2 problems); TPR 1/2, TNR 1/2: 50.0
    last = roles.render(data).splitlines()[-1]
    assert last == "| none | 3 | 15 | 50.0 | 50.0 | 25.0 | 50.0 | 25.0 | 50.0 |"


def test_runs_of_two_envs_are_refused(tmp_path):
    ok = {"solver_0": "1", "solver_1": "2", "distractor_0": None, "distractor_1": None}
    a = _run(tmp_path / "a", [_record(ok, 0.0)])
    gate = {"generator_0": "1", "verifier_0": "ACCEPT"}
    b = _run(tmp_path / "b", [_record(gate, 0.0)], kwargs={}, env_id="gate-v0")
    with pytest.raises(ValueError, match=r"env 'gate-v0', but earlier runs are"):
        roles.collect([a, b])


def test_collect_merge_adds_seeds_to_the_committed_file(tmp_path):
    """Each seed's counts are merged into the file as it finishes: earlier runs stay, a rerun
    of the same run replaces its row, and a file of another env is refused."""
    ok = {"solver_0": "1", "solver_1": "2", "distractor_0": None, "distractor_1": None}
    out = tmp_path / "roles.json"
    first = _run(tmp_path / "a", [_record(ok, 0.0)])
    assert roles.main(["collect", str(first), "--out", str(out)]) == 0
    second = first.rename(tmp_path / "a" / "split-sum-v0__shapley__4")
    (second / "config.yaml").write_text(
        yaml.safe_dump(
            {"exp_name": "shapley", "seed": 4, "env": {"id": "split-sum-v0", "kwargs": KWARGS}}
        )
    )
    assert roles.main(["collect", str(second), "--out", str(out), "--merge"]) == 0
    again = _run(tmp_path / "b", [_record(ok, 1.0)])  # split-sum-v0__none__3 rerun
    assert roles.main(["collect", str(again), "--out", str(out), "--merge"]) == 0
    data = json.loads(out.read_text())
    assert [(r["run"], r["steps"]["15"]["team"]) for r in data["runs"]] == [
        ("split-sum-v0__none__3", 1),
        ("split-sum-v0__shapley__4", 0),
    ]
    gate = _run(
        tmp_path / "c",
        [_record({"generator_0": "1", "verifier_0": None}, 0.0)],
        kwargs={},
        env_id="gate-v0",
    )
    with pytest.raises(ValueError, match=r"roles.json: holds runs of 'split-sum-v0', the new"):
        roles.main(["collect", str(gate), "--out", str(out), "--merge"])
    assert roles.main(["collect", str(gate), "--out", str(out)]) == 0  # without: overwritten
    assert json.loads(out.read_text())["env_id"] == "gate-v0"


def test_signal_counts_speakers_that_named_the_target_and_a_listener_that_read_them(tmp_path):
    s, li = "speaker_0", "listener_0"
    records = [
        _record({s: "53", li: "53"}, 1.0, {s: 1.0}),  # named, read: right, copied
        _record({s: "50", li: "50"}, 0.0),  # a wrong message, copied
        _record({s: None, li: "47"}, 1.0),  # no message, a lucky guess
        _record({s: "+53 it is", li: "40"}, 0.0, {s: 1.0}),  # named (as an integer), ignored
        _record({s: None, li: None}, 0.0),
        # boxed the target, but the message the listener sees is its first token, "it"
        _record({s: "it is 53", li: "40"}, 0.0, {s: 1.0}),
    ]
    data = roles.collect([_run(tmp_path, records, kwargs={}, env_id="signal-v0")])
    counts = data["runs"][0]["steps"]["15"]
    assert counts == {"named": 2, "named_problems": 2, "right_named": 1, "right_other": 1,
                      "copied": 2, "team": 2, "problems": 6, "pairs": 6}  # fmt: skip
    # team 2/6; named 2/6; right where named 1/2; elsewhere 1/4; copied 2/6
    assert roles.render(data).splitlines()[-1] == (
        "| none | 3 | 15 | 33.3 | 33.3 | 50.0 | 25.0 | 33.3 |"
    )


def test_paired_compares_each_role_at_the_last_step_seed_by_seed():
    from marti_env.stats import paired_difference

    def run(method, seed, solver, distractor, team):
        final = {"solver": {"pairs": 10, "local": solver, "boxed": 10},
                 "distractor": {"pairs": 10, "local": distractor, "boxed": 0},
                 "problems": 5, "team": team}  # fmt: skip
        start = {**final, "team": 0}  # step 0 is not the one compared
        return {"run": f"{method}{seed}", "method": method, "seed": seed,
                "steps": {"0": start, "15": final}}  # fmt: skip

    data = {"env_id": "split-sum-v0", "runs": [
        run("none", 0, 5, 5, 1), run("none", 1, 5, 4, 2), run("none", 2, 9, 9, 5),
        run("shapley", 0, 8, 5, 2), run("shapley", 1, 6, 4, 2),
    ]}  # fmt: skip
    rows = {line.split(" | ")[0][2:]: line for line in roles.paired(data).splitlines()[2:]}
    # solvers: 0.8 - 0.5 and 0.6 - 0.5 on seeds 0 and 1 (seed 2 has no shapley run): +20.0
    expected = paired_difference({0: 0.8, 1: 0.6}, {0: 0.5, 1: 0.5}, labels=("shapley", "none"))
    assert rows["solvers: own part boxed"] == (
        f"| solvers: own part boxed | shapley | none | 2 | "
        f"{expected.difference.format(1, 100, signed=True)} | 2/0/0 | {expected.verdict} |"
    )
    assert expected.difference.format(1, 100, signed=True).startswith("+20.0 [")
    assert (
        "| distractors: 0 or nothing | shapley | none | 2 | +0.0 ["
        in rows["distractors: 0 or nothing"]
        and "| 0/2/0 |" in rows["distractors: 0 or nothing"]
    )
    # team: 2/5 - 1/5 and 2/5 - 2/5: +10.0 points, 1 win and 1 tie
    assert "| 2 | +10.0 [" in rows["team outcome 1"] and "| 1/1/0 |" in rows["team outcome 1"]
    with pytest.raises(ValueError, match=r"no run of the baseline 'random'"):
        roles.paired(data, baseline="random")
    data["runs"].append(run("oracle", 7, 1, 1, 1))
    with pytest.raises(ValueError, match=r"'oracle' and 'none' share no seed"):
        roles.paired(data)


def test_credit_counts_by_hand():
    won = {"turns": [{"reward": 1.0}, {"reward": 1.0}], "outcome": 1.0}
    lost = {"turns": [{"reward": 0.25}, {"reward": -0.25}], "outcome": 0.0}
    silent = {"turns": [{"reward": 0.0}, {"reward": 0.0}], "outcome": 0.0}
    assert roles.credit_counts([won, lost, silent], "x") == {
        "episodes": 3, "lost": 2, "lost_credited": 1, "abs_credit": 2.5, "abs_credit_lost": 0.5
    }  # fmt: skip
    with pytest.raises(ValueError, match=r"x:1: no 'reward' field"):
        roles.credit_counts([{"turns": [{}], "outcome": 0.0}], "x")


def test_collect_reduces_the_training_rollouts_step_by_step(tmp_path):
    parts = split_instance(TASK, 2, 2, 1).parts
    right = {"solver_0": str(parts[0]), "solver_1": str(parts[1]),
             "distractor_0": "0", "distractor_1": None}  # fmt: skip
    noisy = {**right, "distractor_0": str(parts[1])}  # wrong sum; {solver_0, distractor_0} right

    def episode(answers, outcome, rewards):
        rec = _record(answers, outcome)
        for turn, r in zip(rec["turns"], rewards, strict=True):
            turn["reward"] = r
        return rec

    run = _run(tmp_path, [_record(right, 1.0)])
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(
        yaml.safe_dump({**cfg, "rollout": {"tasks_per_step": 1, "n_samples": 2}})
    )
    steps = [
        [episode(right, 1.0, [0.5, 0.5, 0, 0]), episode(noisy, 0.0, [0.5, -0.5, 0.5, -0.5])],
        [episode(right, 1.0, [0.5, 0.5, 0, 0]), episode(right, 1.0, [0.5, 0.5, 0, 0])],
    ]
    lines = [json.dumps(r) for batch in steps for r in batch]
    (run / "transcripts.jsonl").write_text("\n".join(lines) + "\n")
    (run / "metrics.jsonl").write_text("".join(f'{{"step": {k}}}\n' for k in range(3)))
    data = roles.collect([run])
    step1, step2 = (data["runs"][0]["rollouts"][k] for k in ("1", "2"))
    assert (step1["team"], step1["distractor"]["local"], step1["credit"]["lost_credited"]) == (
        1, 3, 1)  # fmt: skip
    assert step2["credit"] == {"episodes": 2, "lost": 0, "lost_credited": 0, "abs_credit": 2.0,
                               "abs_credit_lost": 0.0, "abs_credit_chance": 0.0}  # fmt: skip
    table = roles.rollouts(data, seed=3).splitlines()
    # step 1: the lost episode's solvers both did their jobs, so none of its credit is chance
    assert table[2] == "| none | 3 | 1 | 50.0 | 100.0 (100.0) | 75.0 (50.0) | 100.0 | 66.7 | 0.0 |"
    assert table[3] == "| none | 3 | 2 | 100.0 | 100.0 (100.0) | 100.0 (50.0) | n/a | 0.0 | 0.0 |"
    missed = {**noisy, "solver_1": None}  # {solver_0, distractor_0} still sums to the total
    batch = [episode(right, 1.0, [0.5, 0.5, 0, 0]), episode(missed, 0.0, [0.5, 0, 0.5, -0.5])]
    wf = marti_env.make("split-sum-v0", **KWARGS).workflow
    assert roles.split_sum_chance_credit(batch, wf, "x") == 1.5
    # a win by coincidence (solver_1 silent, distractor_0 boxes its part): none pays it too
    lucky = episode(missed, 1.0, [1.0, 1.0, 1.0, 1.0])
    assert roles.split_sum_chance_credit([lucky], wf, "x") == 4.0
    with pytest.raises(ValueError, match="no rollout counts for split-sum-v0__none__3"):
        roles.rollouts({**data, "runs": [{**data["runs"][0], "rollouts": {}}]}, seed=3)
    (run / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1}\n')
    with pytest.raises(ValueError, match=r"2 steps of 2 episodes, but .*ends at step 1"):
        roles.collect([run])
    with pytest.raises(ValueError, match="no rollout counts for any run of seed 4"):
        roles.rollouts(data, seed=4)
    (run / "transcripts.jsonl").write_text(lines[0] + "\n")
    with pytest.raises(ValueError, match="1 episodes, not a whole number of training steps of 2"):
        roles.collect([run])


def test_the_role_tables_in_the_docs_are_generated_from_the_committed_counts():
    """Every ``<!-- generated: python benchmarks/credit_roles.py CMD FILE -->`` block of
    docs/credit_llm.md is what CMD prints for FILE now (no per-role figure typed by hand)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    text = (root / "docs" / "credit_llm.md").read_text(encoding="utf-8")
    blocks = re.findall(
        r"<!-- generated: python benchmarks/credit_roles.py (render|paired|rollouts) (\S+)"
        r"(?: --seed (\d+))? -->\n(.*?)\n<!-- end generated -->",
        text,
        re.S,
    )
    assert len(blocks) >= 4
    for cmd, path, seed, body in blocks:
        data = json.loads((root / path).read_text(encoding="utf-8"))
        args = (int(seed),) if seed else ()
        assert body == getattr(roles, cmd)(data, *args), f"docs/credit_llm.md: {cmd} {path}"
