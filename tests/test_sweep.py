"""marti sweep: cells from seeds x grid, reuse of finished cells, resume of killed ones,
refusal of changed configs, bad grids named; one real sweep of a tiny random model."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from marti_trainer.cli import main
from marti_trainer.config import ConfigError, load_config
from marti_trainer.metrics import read_metrics
from marti_trainer.report import ReportOptions, build_report
from marti_trainer.sweep import (
    Cell,
    CellChanged,
    cell_name,
    cell_status,
    config_changes,
    config_fingerprint,
    parse_grid,
    parse_seeds,
    plan_sweep,
    prune_checkpoints,
    run_sweep,
)
from marti_trainer.train import train
from tests.test_train import length_reward, tiny_config, tiny_dir  # noqa: F401 (fixture)

BASE = {  # a config of the default model: planning loads no model
    "exp_name": "plan",
    "total_steps": 2,
    "env": {"id": "mad-v0", "kwargs": {"num_agents": 2, "rounds": 2}},
}


@pytest.fixture
def base_yaml(tmp_path) -> Path:
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(BASE))
    return path


# ----------------------------------------------------------------------------- parsing


def test_parse_seeds():
    assert parse_seeds("0-4") == [0, 1, 2, 3, 4]
    assert parse_seeds("0-2,7") == [0, 1, 2, 7]
    assert parse_seeds("5") == [5]
    for bad, match in [("a", "'a' is not a seed"), ("3-1", "runs backwards"), ("0,0-1", r"\[0\]")]:
        with pytest.raises(ValueError, match=match):
            parse_seeds(bad)


def test_parse_grid_values_and_errors():
    grid = parse_grid(["algorithm.group_by=agent,role", "env.train_tasks.levels=[1],[1,2]"])
    assert grid == [
        ("algorithm.group_by", ["agent", "role"]),
        ("env.train_tasks.levels", ["[1]", "[1,2]"]),
    ]
    cases = [
        ("optim.lr=", r"--grid optim.lr: empty value"),
        ("optim.lr=1e-5,,2e-5", r"--grid optim.lr: empty value"),
        ("optim.lr", r"expected key=v1,v2"),
        ("seed=0,1", r"--grid seed: give seeds with --seeds"),
        ("optim.lr=1,1", r"--grid optim.lr: a value is repeated"),
    ]
    for item, match in cases:
        with pytest.raises(ValueError, match=match):
            parse_grid([item])
    with pytest.raises(ValueError, match=r"--grid optim\.lr: given twice"):
        parse_grid(["optim.lr=1", "optim.lr=2"])


def test_cell_names():
    assert cell_name(["algorithm.group_by=role"], 3) == "algorithm.group_by=role__seed=3"
    assert cell_name(["env.train_tasks.levels=[1,2]"], 0) == "env.train_tasks.levels=_1_2__seed=0"
    assert cell_name([], 1) == "seed=1"


# ----------------------------------------------------------------------------- planning


def test_plan_is_grid_major_and_resolves_each_cell(base_yaml, tmp_path):
    grid = parse_grid(["algorithm.group_by=agent,role", "optim.lr=1e-5,2e-5"])
    cells = plan_sweep(base_yaml, [0, 1], grid, tmp_path / "out", ["model.sharing=shared"])
    assert len(cells) == 2 * 2 * 2
    first, last = cells[0], cells[-1]
    assert first.name == "algorithm.group_by=agent__optim.lr=1e-5__seed=0"
    assert last.name == "algorithm.group_by=role__optim.lr=2e-5__seed=1"
    assert (last.config.algorithm.group_by, last.config.optim.lr, last.seed) == ("role", 2e-5, 1)
    assert last.config.run_name == last.name
    assert last.run_dir == tmp_path / "out" / last.name
    assert last.config.model.sharing == "shared"  # --set applies to every cell
    assert {c.config.log.eval_cache for c in cells} == {str(tmp_path / "out" / "eval_cache")}
    mine = plan_sweep(base_yaml, [0], [], tmp_path / "out", ["log.eval_cache=/elsewhere"])
    assert mine[0].config.log.eval_cache == "/elsewhere"  # a given cache folder is kept
    off = plan_sweep(base_yaml, [0], [], tmp_path / "out", ["log.eval_cache=off"])
    assert off[0].config.log.eval_cache == "off"
    # where a cell lives does not enter its fingerprint; its seed and grid values do
    moved = replace(
        first.config, run_name="elsewhere", log=replace(first.config.log, output_dir="/x")
    )
    assert config_fingerprint(moved) == config_fingerprint(first.config)
    assert len({config_fingerprint(c.config) for c in cells}) == len(cells)


def test_plan_refuses_unknown_keys_and_reserved_sets(base_yaml, tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key 'optim.lrr' \(did you mean 'optim.lr'"):
        plan_sweep(base_yaml, [0], parse_grid(["optim.lrr=1e-5,2e-5"]), tmp_path)
    with pytest.raises(ConfigError, match=r"sweep cell optim.lr=-1:.*optim.lr"):
        plan_sweep(base_yaml, [0], parse_grid(["optim.lr=1e-5,-1"]), tmp_path)
    with pytest.raises(ValueError, match="--set run_name: the sweep names each cell"):
        plan_sweep(base_yaml, [0], [], tmp_path, ["run_name=x"])
    with pytest.raises(ValueError, match=r"--set optim\.lr: also a --grid key"):
        plan_sweep(base_yaml, [0], parse_grid(["optim.lr=1,2"]), tmp_path, ["optim.lr=3"])
    with pytest.raises(ValueError, match="same folder name"):
        plan_sweep(base_yaml, [0], parse_grid(["exp_name=a/b,a_b"]), tmp_path)


def test_cli_grid_errors_name_the_key(base_yaml, tmp_path, capsys):
    out = str(tmp_path / "out")
    assert main(["sweep", str(base_yaml), "--grid", "optim.lr=", "--out", out]) == 2
    assert "--grid optim.lr: empty value" in capsys.readouterr().err
    assert main(["sweep", str(base_yaml), "--grid", "algorithm.group_byy=a", "--out", out]) == 2
    assert "unknown key 'algorithm.group_byy'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing ran, nothing written


# ----------------------------------------------------------------------------- states


def test_cell_status_done_resume_new_and_changed(base_yaml, tmp_path):
    (cell,) = plan_sweep(base_yaml, [0], parse_grid(["optim.lr=1e-5"]), tmp_path)
    assert cell_status(cell) == "new"
    cell.run_dir.mkdir(parents=True)
    (cell.run_dir / "config.yaml").write_text(yaml.safe_dump(cell.config.to_dict()))
    (cell.run_dir / "checkpoints" / "step_000001").mkdir(parents=True)
    assert cell_status(cell) == "resume"
    (cell.run_dir / "summary.json").write_text("{}")
    assert cell_status(cell) == "done"
    # the same folder seen by a sweep whose base config now says total_steps: 3
    base_yaml.write_text(yaml.safe_dump({**BASE, "total_steps": 3}))
    (changed,) = plan_sweep(base_yaml, [0], parse_grid(["optim.lr=1e-5"]), tmp_path)
    with pytest.raises(
        CellChanged, match=r"cell optim.lr=1e-5__seed=0: .* \(total_steps: 2 -> 3\)"
    ):
        cell_status(changed)


def test_prune_checkpoints_keeps_what_it_is_told(tmp_path):
    def run_with(*steps: str) -> Path:
        run = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        for step in steps:
            (run / "checkpoints" / step).mkdir(parents=True)
            (run / "checkpoints" / step / "state.json").write_text("{}")
        return run

    unfinished = run_with("step_9")
    where = re.escape(str(unfinished))
    with pytest.raises(ValueError, match=rf"{where}: no summary.json, .*; not pruned"):
        prune_checkpoints(unfinished, "none")
    assert (unfinished / "checkpoints" / "step_9").is_dir()
    for keep, left in (("all", ["step_10", "step_9"]), ("last", ["step_10"]), ("none", None)):
        run = run_with("step_9", "step_10")  # by step number, not by name: 10 is the last
        (run / "summary.json").write_text("{}")
        prune_checkpoints(run, keep)
        kept = sorted(p.name for p in (run / "checkpoints").iterdir()) if left else None
        assert kept == left and (run / "checkpoints").exists() == (left is not None)
    with pytest.raises(ValueError, match=r"keep_checkpoints must be one of .* got 'first'"):
        prune_checkpoints(run, "first")  # type: ignore[arg-type]


def test_config_changes_ignore_location_and_logging(base_yaml, tmp_path):
    a = load_config(base_yaml, ["run_name=x", "log.output_dir=/a", "log.save_every=1"])
    b = load_config(base_yaml, ["run_name=y", "log.output_dir=/b", "optim.lr=2e-5"])
    assert config_changes(a, b) == ["optim.lr: 1e-05 -> 2e-05"]


def test_a_setting_missing_from_a_saved_config(base_yaml):
    """A config saved before eval.seed existed is not "changed" by it while the new config
    keeps the old behaviour (null: the run's seed); another value is a change, and so is any
    other missing key (a task spec without its size is not the default spec's size)."""
    new = load_config(base_yaml)
    saved = new.to_dict()
    del saved["eval"]["seed"], saved["log"]["eval_cache"], saved["total_tokens"]
    assert config_changes(saved, new) == []
    assert config_fingerprint(saved) == config_fingerprint(new)  # as the sweep records it
    assert config_fingerprint(saved) != config_fingerprint(load_config(base_yaml, ["seed=9"]))
    assert config_changes(saved, load_config(base_yaml, ["total_tokens=5"])) == [
        "total_tokens: None -> 5"
    ]
    assert config_changes(saved, load_config(base_yaml, ["eval.seed=0"])) == [
        "eval.seed: None -> 0"
    ]
    del saved["eval"]["chunk_tasks"]
    assert config_changes(saved, new) == ["eval.chunk_tasks: (absent) -> 16"]


def test_process_backends_refuse_python_objects(tiny_dir, tmp_path):  # noqa: F811
    cfg = tiny_config(tiny_dir, tmp_path)  # its reward is a Python function
    cell = Cell("seed=0", 0, (), cfg)
    with pytest.raises(ValueError, match=r"holds Python objects .* use the inline backend"):
        run_sweep([cell], backend="local")


# ----------------------------------------------------------------------------- running


def _tiny_yaml(tiny_dir, path: Path) -> Path:  # noqa: F811
    data = {
        "exp_name": "tiny",
        "total_steps": 2,
        "env": {
            "id": "mad-v0",
            "kwargs": {"num_agents": 2, "rounds": 2},
            "credit": "score",
            "train_tasks": {"type": "arithmetic", "levels": [1], "size": 50},
            "eval_tasks": {"type": "arithmetic", "levels": [1], "split": "test", "size": 3},
        },
        "model": {"name": str(tiny_dir)},
        "rollout": {"tasks_per_step": 2, "n_samples": 2, "max_tokens": 6, "dtype": "float32"},
        "optim": {"lr": 1e-3, "precision": "fp32", "micro_batch_tokens": 256},
        "eval": {"at_start": True, "at_end": True},
        "log": {"progress": False, "tensorboard": False, "plots": False, "save_every": 1},
    }
    path.write_text(yaml.safe_dump(data))
    return path


def test_local_sweep_resumes_a_killed_cell_and_reuses_finished_ones(tiny_dir, tmp_path, capsys):  # noqa: F811
    config = _tiny_yaml(tiny_dir, tmp_path / "tiny.yaml")
    out = tmp_path / "sweep"
    args = ["sweep", str(config), "--seeds", "0", "--grid", "env.credit=none,score"]
    args += ["--out", str(out)]
    cells = plan_sweep(config, [0], parse_grid(["env.credit=none,score"]), out)
    killed = cells[1]
    train(killed.config, stop_at_step=1)  # a cell killed after step 1 (checkpoint saved)
    step1 = {h["step"]: h for h in read_metrics(killed.run_dir)}[1]

    assert main(args) == 0
    printed = capsys.readouterr()
    assert "1 trained, 1 resumed, 0 reused" in printed.out
    history = {h["step"]: h for h in read_metrics(killed.run_dir)}
    assert sorted(history) == [0, 1, 2] and history[1]["time"] == step1["time"]  # not redone
    record = json.loads((out / "sweep.json").read_text())
    assert [c["status"] for c in record["cells"]] == ["trained", "resumed"]
    manifest = json.loads((killed.run_dir / "cell.json").read_text())
    assert manifest["overrides"] == ["env.credit=score"]
    assert manifest["config_sha256"] == config_fingerprint(killed.config)
    assert "--resume" in (killed.run_dir / "train.log").read_text()

    finished = {c.name: (c.run_dir / "summary.json").stat().st_mtime for c in cells}
    assert main([*args, "--keep-checkpoints", "last"]) == 0  # again: nothing runs
    assert "0 trained, 0 resumed, 2 reused" in capsys.readouterr().out
    assert finished == {c.name: (c.run_dir / "summary.json").stat().st_mtime for c in cells}
    for c in cells:  # the reused cells kept only their final checkpoint
        assert [p.name for p in (c.run_dir / "checkpoints").iterdir()] == ["step_000002"]

    # a changed config is refused before any cell runs, naming the cell and the key
    assert main([*args, "--set", "optim.lr=0.002"]) == 2
    err = capsys.readouterr().err
    assert "cell env.credit=none__seed=0" in err and "optim.lr: 0.001 -> 0.002" in err

    # the report reads what the trainer wrote: its accuracy is the run's summary
    report = build_report(ReportOptions((str(out),), baseline="env.credit=none"))
    assert len(report.groups) == 2 and not report.unfinished
    for group in report.groups:
        (run,) = group.runs
        summary = json.loads((run.path / "summary.json").read_text())
        assert run.final_accuracy == summary["accuracy_after"]
        assert len(run.problems) == 3
    assert "| env.credit=score | env.credit=none | 1 |" in report.markdown


@pytest.mark.slow
def test_ray_backend_runs_cells_as_tasks(tiny_dir, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.chdir(tmp_path)  # relative paths: the tasks run in the sweep's folder
    config = _tiny_yaml(tiny_dir, Path("tiny.yaml"))
    cells = plan_sweep(config, [0, 1], [], "sweep", ["total_steps=1"])
    outcomes = run_sweep(cells, backend="ray", cpus_per_cell=0.5)
    assert [o.status for o in outcomes] == ["trained", "trained"]
    assert all(o.summary["eval_step_after"] == 1 for o in outcomes)
    assert (tmp_path / "sweep" / "seed=1" / "summary.json").is_file()
    assert [o.status for o in run_sweep(cells, backend="ray")] == ["reused", "reused"]


def test_ctrl_c_stops_the_sweep_after_a_checkpoint(tiny_dir, tmp_path):  # noqa: F811
    config, out = _tiny_yaml(tiny_dir, tmp_path / "tiny.yaml"), tmp_path / "sweep"
    cmd = [sys.executable, "-m", "marti_trainer.cli", "sweep", str(config), "--seeds", "0-1"]
    cmd += ["--set", "total_steps=40", "--set", "eval.at_start=false", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = out / "seed=0" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= 2):
        assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read()
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)  # as Ctrl-C: the sweep passes it on to `marti train` once
    printed = proc.communicate(timeout=120)[0]
    assert proc.returncode == 1, printed
    assert "seed=0: stopped" in printed and "1 not started" in printed
    (cell, untouched) = plan_sweep(
        config, [0, 1], [], out, ["total_steps=40", "eval.at_start=false"]
    )
    assert cell_status(cell) == "resume"  # the step under way finished and was saved
    assert "stopped by SIGINT after step" in (cell.run_dir / "train.log").read_text()
    assert not (untouched.run_dir / "metrics.jsonl").exists()
