"""Checkpoints hold no pickle, are verified against their manifest, fall back to the previous
valid one, refuse crafted files without running them, and convert from the first format."""

from __future__ import annotations

import json
import math
import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from marti_trainer.checkpoint import (
    CheckpointError,
    convert_checkpoint,
    decode_tree,
    encode_tree,
    find_checkpoint,
    load_checkpoint,
    load_trained_unit,
    rng_state,
    save_checkpoint,
    set_rng_state,
    verify_checkpoint,
)
from marti_trainer.config import ConfigError, load_config

from .test_train import losses, tiny_config


def test_state_tree_round_trips_through_json_and_tensors():
    step = torch.tensor(3.0)
    tree = {
        "optimizer": {
            "state": {0: {"step": step, "exp_avg": torch.arange(6.0).reshape(2, 3)}},
            "param_groups": [{"lr": 1e-5, "betas": (0.9, 0.999), "foreach": None, "params": [0]}],
        },
        "scale": float("inf"),
        "nan": float("nan"),
        "$odd": "a key that looks like a tag",
        "np": np.int64(7),
    }
    encoded, tensors = encode_tree(tree)
    text = json.dumps(encoded, allow_nan=False)  # strict JSON: no NaN/Infinity literals
    assert sorted(tensors) == ["/optimizer/state/0/exp_avg", "/optimizer/state/0/step"]
    assert encoded["$map"][0] == ["optimizer", encoded["$map"][0][1]]  # a "$" key -> $map
    back = decode_tree(json.loads(text), tensors)
    assert back["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.999)  # tuple restored
    assert list(back["optimizer"]["state"]) == [0]  # int key restored
    assert torch.equal(back["optimizer"]["state"][0]["exp_avg"], torch.arange(6.0).reshape(2, 3))
    assert back["scale"] == math.inf and math.isnan(back["nan"]) and back["np"] == 7
    assert back["$odd"] == "a key that looks like a tag"


def test_state_tree_refuses_other_types_and_unknown_tags():
    with pytest.raises(TypeError, match=r"cannot store a object at /engines/x"):
        encode_tree({"engines": {"x": object()}})
    with pytest.raises(CheckpointError, match=r"unknown tag '\$python'"):
        decode_tree({"$python": "os.system"}, {})
    with pytest.raises(CheckpointError, match=r"tensor 'w' is not in state\.safetensors"):
        decode_tree({"$tensor": "w"}, {})


def test_rng_state_is_plain_json_and_restores_every_generator():
    state = json.loads(json.dumps(rng_state()))
    draws = (random.random(), np.random.rand(), torch.rand(1).item())
    set_rng_state(state)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == draws
    with pytest.raises(CheckpointError, match="bad RNG state"):
        set_rng_state({**state, "torch": [1, 2]})


def _save(tmp_path: Path, step: int) -> Path:
    weights = {"policy": {"w": torch.full((4,), float(step))}}
    state = {"engines": {"policy": {"m": torch.ones(3) * step}}, "sampler": {"epoch": 0}}
    return save_checkpoint(tmp_path, step, weights, state, {"seed": 0}, keep_last=3)


def test_checkpoint_layout_and_manifest(tmp_path):
    ckpt = _save(tmp_path, 1)
    manifest = json.loads((ckpt / "manifest.json").read_text())
    assert sorted(manifest["files"]) == [
        "config.yaml", "state.json", "state.safetensors", "weights/policy.safetensors"
    ]  # fmt: skip
    weights, state = load_checkpoint(ckpt)
    assert torch.equal(weights["policy"]["w"], torch.ones(4))
    assert state["step"] == 1 and state["units"] == ["policy"] and "rng" in state
    assert torch.equal(state["engines"]["policy"]["m"], torch.ones(3))


def test_a_truncated_newest_checkpoint_falls_back_to_the_previous_one(tmp_path):
    _save(tmp_path, 1)
    newest = _save(tmp_path, 2)
    bad = newest / "weights" / "policy.safetensors"
    bad.write_bytes(bad.read_bytes()[:-10])
    with pytest.raises(CheckpointError, match=r"policy.safetensors: .* bytes, the manifest says"):
        verify_checkpoint(newest)
    skipped: list[str] = []
    assert find_checkpoint(tmp_path, skipped).name == "step_000001"
    assert len(skipped) == 1 and "weights/policy.safetensors" in skipped[0]
    # the same size, altered bytes: caught by the hash
    older = tmp_path / "checkpoints" / "step_000001" / "state.safetensors"
    data = bytearray(older.read_bytes())
    data[-1] ^= 1
    older.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"no usable checkpoint .*sha256 differs"):
        find_checkpoint(tmp_path)


def test_a_kill_while_saving_leaves_no_checkpoint_under_a_final_name(tmp_path):
    _save(tmp_path, 1)
    stale = tmp_path / "checkpoints" / ".step_000002.abc"
    stale.mkdir()
    (stale / "state.json").write_text("{")  # what a process killed mid-save leaves
    assert find_checkpoint(tmp_path).name == "step_000001"
    _save(tmp_path, 2)
    assert not stale.exists()  # the next save clears it


class Payload:
    """Unpickling this object creates ``MARKER`` (the classic ``__reduce__`` exploit)."""

    marker = ""

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


def _crafted_legacy_checkpoint(root: Path) -> tuple[Path, Path]:
    ckpt = root / "checkpoints" / "step_000001"
    ckpt.mkdir(parents=True)
    marker = root / "pwned"
    payload = Payload()
    payload.marker = str(marker)
    torch.save({"step": 1, "x": payload}, ckpt / "state.pt")
    (ckpt / "config.yaml").write_text("seed: 0\n")
    return ckpt, marker


def test_a_crafted_state_pt_runs_nothing_and_is_refused(tmp_path):
    ckpt, marker = _crafted_legacy_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match=r"first format.*marti checkpoint convert"):
        find_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="marti checkpoint convert"):
        load_trained_unit(tmp_path)
    with pytest.raises(CheckpointError, match="refused by the restricted unpickler"):
        convert_checkpoint(ckpt)
    assert not marker.exists()
    assert (ckpt / "state.pt").exists()  # nothing was changed


def test_a_crafted_manifest_or_config_runs_nothing(tmp_path):
    ckpt = _save(tmp_path, 1)
    manifest = json.loads((ckpt / "manifest.json").read_text())
    manifest["files"]["../../outside"] = {"bytes": 1, "sha256": "0" * 64}
    (ckpt / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="leaves the checkpoint"):
        verify_checkpoint(ckpt)
    (ckpt / "manifest.json").write_text("!!python/object/apply:os.system ['touch x']")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        verify_checkpoint(ckpt)
    marker = tmp_path / "pwned"
    config = tmp_path / "config.yaml"
    config.write_text(f"seed: !!python/object/apply:os.makedirs ['{marker}']\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(config)
    assert not marker.exists()


def test_a_linked_file_is_refused(tmp_path):
    ckpt = _save(tmp_path, 1)
    target = ckpt / "weights" / "policy.safetensors"
    moved = tmp_path / "elsewhere.safetensors"
    shutil.move(target, moved)
    target.symlink_to(moved)
    with pytest.raises(CheckpointError, match="not a regular file"):
        verify_checkpoint(ckpt)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from marti_trainer.models import tiny_random_model

    return tiny_random_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def test_a_first_format_checkpoint_converts_and_resumes_exactly(tiny_dir, tmp_path):
    from safetensors.torch import load_file

    from marti_trainer.train import train

    full = train(tiny_config(tiny_dir, tmp_path, total_steps=3, run_name="full"))
    cfg = tiny_config(tiny_dir, tmp_path, total_steps=3, run_name="old", log__save_every=1)
    train(cfg, stop_at_step=2)
    # Rewrite the step-2 checkpoint as the first format wrote it: <unit>.safetensors at the
    # top, state.pt a pickle with tuples, a numpy array and a ByteTensor for the RNGs.
    ckpt = tmp_path / "old" / "checkpoints" / "step_000002"
    weights, state = load_checkpoint(ckpt)
    rng = state.pop("rng")
    legacy = {
        **{k: v for k, v in state.items() if k not in ("units", "logs", "elapsed_s")},
        "rng": {
            "python": (rng["python"]["version"], tuple(rng["python"]["state"]), None),
            "numpy": ("MT19937", np.asarray(rng["numpy"]["key"], dtype=np.uint32),
                      rng["numpy"]["pos"], rng["numpy"]["has_gauss"],
                      rng["numpy"]["cached_gaussian"]),
            "torch": torch.tensor(rng["torch"], dtype=torch.uint8),
        },
    }  # fmt: skip
    config = (ckpt / "config.yaml").read_text()
    shutil.rmtree(ckpt)
    ckpt.mkdir()
    shutil.copy(tmp_path / "old" / "config.yaml", ckpt / "config.yaml")
    (ckpt / "config.yaml").write_text(config)
    from safetensors.torch import save_file

    save_file(weights["policy"], ckpt / "policy.safetensors")
    torch.save(legacy, ckpt / "state.pt")
    with pytest.raises(CheckpointError, match="first format"):
        train(cfg, resume=tmp_path / "old")

    convert_checkpoint(ckpt)  # the restricted unpickler accepts tensors, tuples, numpy's array
    assert not (ckpt / "state.pt").exists() and (ckpt / "manifest.json").is_file()
    resumed = train(cfg, resume=tmp_path / "old")
    assert losses(resumed.history) == losses(full.history)
    final = "checkpoints/step_000003/weights/policy.safetensors"
    a, b = load_file(tmp_path / "full" / final), load_file(tmp_path / "old" / final)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resume_cuts_the_logs_back_and_adds_up_wall_time(tiny_dir, tmp_path, capsys):
    from marti_trainer.train import format_summary, train

    cfg = tiny_config(tiny_dir, tmp_path, total_steps=4, run_name="r", log__save_every=1)
    train(cfg, stop_at_step=3)  # step 3 wrote its logs, then "was killed" before... saving
    run = tmp_path / "r"
    shutil.rmtree(run / "checkpoints" / "step_000003")  # ...its checkpoint
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "partial')  # a line cut by the kill
    state = json.loads((run / "checkpoints" / "step_000002" / "state.json").read_text())
    recorded = state["state"]["elapsed_s"]
    result = train(cfg, resume=run)
    assert "resuming from step 2" in capsys.readouterr().err
    assert [h["step"] for h in result.history] == [1, 2, 3, 4]
    lines = (run / "transcripts.jsonl").read_text().splitlines()
    assert len(lines) == 4 * 2 * 2 and len(set(lines)) == len(lines)  # steps x tasks x samples
    assert result.summary["wall_s"] >= round(recorded, 1)
    assert result.summary["resumed_from_step"] == 2
    assert "resumed at step 2" in format_summary(result.summary)


def test_summary_without_a_start_evaluation_shows_only_the_final_one(tiny_dir, tmp_path):
    from marti_trainer.train import format_summary, train

    cfg = tiny_config(tiny_dir, tmp_path, total_steps=1, run_name="s", eval__at_end=True)
    summary = train(cfg).summary
    assert "accuracy_before" not in summary and summary["eval_step_after"] == 1
    text = format_summary(summary)
    assert "after step 1 (no evaluation before training)" in text and "->" not in text
    assert (tmp_path / "s" / "eval" / "step_000001.jsonl").is_file()
    assert yaml.safe_load((tmp_path / "s" / "config.yaml").read_text())["seed"] == 0
