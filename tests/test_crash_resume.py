"""A crash loses at most one step: `marti train` killed with SIGKILL at random moments (one of
them while a checkpoint is being written) and resumed each time ends with the uninterrupted
run's weights, bit for bit, and logs every step once; SIGINT and SIGTERM (sent to the whole
process group, as a terminal's Ctrl-C is) finish the step, save and exit with one line."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from marti_trainer.models import tiny_random_model

STEPS = 12


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("crash")
    model = tiny_random_model(root / "model", seed=0)
    config = {
        "exp_name": "crash",
        "total_steps": STEPS,
        "env": {
            "id": "mad-v0",
            "kwargs": {"num_agents": 2, "rounds": 2},
            "train_tasks": {"type": "arithmetic", "levels": [1], "size": 50},
            "eval_tasks": {"type": "arithmetic", "levels": [1], "split": "test", "size": 2},
        },
        "model": {"name": str(model)},
        "rollout": {"tasks_per_step": 2, "n_samples": 2, "max_tokens": 6, "dtype": "float32"},
        # A random model earns no reward: the entropy bonus makes every step change weights.
        "algorithm": {"entropy_coef": 0.05, "skip_zero_advantage": False},
        "optim": {"lr": 1e-3, "precision": "fp32", "micro_batch_tokens": 256},
        "eval": {"at_start": False, "at_end": False},
        "log": {"output_dir": str(root / "runs"), "progress": False, "tensorboard": False,
                "plots": False, "save_every": 1, "keep_last": 2},
    }  # fmt: skip
    path = root / "crash.yaml"
    path.write_text(yaml.safe_dump(config))
    reference = _run(path, "reference")
    assert reference.returncode == 0, reference.stderr[-2000:]
    return path, root / "runs"


def _command(config: Path, run_name: str, resume: bool) -> list[str]:
    cmd = [sys.executable, "-m", "marti_trainer.cli", "train", str(config), f"run_name={run_name}"]
    return [*cmd, "--resume"] if resume else cmd


def _run(config: Path, run_name: str, resume: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(
        _command(config, run_name, resume), capture_output=True, text=True, timeout=600
    )


def _start(config: Path, run_dir: Path) -> subprocess.Popen:
    has_checkpoint = any((run_dir / "checkpoints").glob("step_*"))
    return subprocess.Popen(
        _command(config, run_dir.name, has_checkpoint),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, like a job in a terminal
    )


def _steps_logged(run_dir: Path) -> int:
    path = run_dir / "metrics.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _wait_for(predicate, proc: subprocess.Popen, timeout: float = 300) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.005)
    raise TimeoutError("the training process made no progress")


def _final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(run_dir / "checkpoints" / f"step_{STEPS:06d}" / "weights/policy.safetensors")


def _assert_matches_reference(run_dir: Path, runs: Path) -> None:
    got, want = _final_weights(run_dir), _final_weights(runs / "reference")
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)  # bit for bit
    assert not all(
        torch.equal(want[k], v) for k, v in _initial_weights(runs).items() if k in want
    )  # the weights did move
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").open()]
    assert steps == list(range(1, STEPS + 1))
    lines = (run_dir / "transcripts.jsonl").read_text().splitlines()
    reference = (runs / "reference" / "transcripts.jsonl").read_text().splitlines()
    assert len(lines) == STEPS * 2 * 2 and len(set(lines)) == len(lines)
    assert [json.loads(x)["task"] for x in lines] == [json.loads(x)["task"] for x in reference]


def _initial_weights(runs: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    model = yaml.safe_load((runs / "reference" / "config.yaml").read_text())["model"]["name"]
    return load_file(Path(model) / "model.safetensors")


def test_sigkill_at_random_moments_and_during_a_save_loses_nothing(setup):
    config, runs = setup
    run_dir = runs / "killed"
    rng = random.Random(0)
    kills, during_save = 0, 0
    for attempt in range(11):
        proc = _start(config, run_dir)
        if attempt == 3:  # the moment a checkpoint starts being written
            saving = lambda: any((run_dir / "checkpoints").glob(".step_*"))  # noqa: E731
            caught = _wait_for(saving, proc)
        else:  # once training is under way, a uniformly random moment within about a step
            before = _steps_logged(run_dir)
            caught = _wait_for(lambda b=before: _steps_logged(run_dir) > b, proc)
            time.sleep(rng.uniform(0.0, 0.5))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            kills += 1
            during_save += attempt == 3 and caught
        proc.wait(timeout=60)
        proc.stdout.close()
        proc.stderr.close()
        if attempt == 3:
            assert any((run_dir / "checkpoints").glob(".step_*"))  # killed mid-save
    assert kills == 11 and during_save == 1
    assert _steps_logged(run_dir) < STEPS  # the run was still unfinished at the last kill
    final = _run(config, run_dir.name, resume=True)
    assert final.returncode == 0, final.stderr[-2000:]
    assert "resuming from step" in final.stderr
    _assert_matches_reference(run_dir, runs)


def test_sigint_and_sigterm_finish_the_step_save_and_say_how_to_resume(setup):
    config, runs = setup
    run_dir = runs / "stopped"
    for sig, code, after in ((signal.SIGINT, 130, 2), (signal.SIGTERM, 143, 4)):
        proc = _start(config, run_dir)
        _wait_for(lambda a=after: _steps_logged(run_dir) >= a, proc)
        os.killpg(proc.pid, sig)  # the whole group: the trainer and any helper processes
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == code, err[-2000:]
        assert "Traceback" not in err
        message = [line for line in err.splitlines() if line.startswith("stopped by")]
        assert len(message) == 1 and f"stopped by {sig.name} after step" in message[0]
        assert f"--resume {run_dir}" in message[0]
        step = int(message[0].split("after step ")[1].split()[0])
        assert (run_dir / "checkpoints" / f"step_{step:06d}" / "manifest.json").is_file()
        assert _steps_logged(run_dir) == step
    final = _run(config, run_dir.name, resume=True)
    assert final.returncode == 0, final.stderr[-2000:]
    _assert_matches_reference(run_dir, runs)
