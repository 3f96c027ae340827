"""A user's own credit method, named by an entry point, end to end: ``make``, ``marti train``
(run.json records the file's path and sha256) and ``marti bench credit`` (results.json)."""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path

import pytest

import marti_env
from marti_env.credit import credit_source, load_credit_file, make_credit
from marti_env.credit.base import _CREDIT, _FILES
from marti_trainer.cli import main
from marti_trainer.models import tiny_random_model

# Rewards a random model's turns get different values from: len(answer) % 3, times w.
METHOD = textwrap.dedent(
    """
    from dataclasses import dataclass

    from marti_env.credit import CreditMethod


    @dataclass
    class AnswerLength(CreditMethod):
        w: float = 1.0

        def assign(self, episode, rule):
            return [self.w * (len(t.answer or "") % 3) for t in episode.turns]
    """
)


@pytest.fixture
def method_file(tmp_path):
    path = tmp_path / "my_method.py"
    path.write_text(METHOD)
    yield path
    _FILES.pop(path.resolve(), None)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_make_takes_a_file_and_a_module_entry_point(method_file, monkeypatch):
    spec = f"{method_file}:AnswerLength"
    env = marti_env.make("mad-v0", credit=spec, w=2.0)
    assert type(env.credit).__name__ == "AnswerLength" and env.credit.w == 2.0
    assert env.credit.name == spec  # unregistered: known by its entry point
    # the file runs once: a second spec gives the very same class
    assert type(make_credit(spec)) is type(env.credit)
    assert load_credit_file(method_file) is load_credit_file(str(method_file))
    source = credit_source(spec)
    assert source["path"] == str(method_file.resolve())
    assert source["sha256"] == sha256(method_file)
    assert credit_source("quality") is None  # built-ins: nothing to record
    # an importable module, named package.module:Class
    pkg = method_file.parent / "userpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "credit.py").write_text(METHOD)
    monkeypatch.syspath_prepend(str(method_file.parent))
    method = make_credit("userpkg.credit:AnswerLength", w=0.5)
    assert method.w == 0.5
    assert credit_source(method)["path"] == str((pkg / "credit.py").resolve())
    with pytest.raises(ValueError, match="has no option 'alpha'"):
        make_credit(spec, alpha=1.0)


def test_bad_entry_points_name_the_spec_and_what_failed(tmp_path, method_file):
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    plain = tmp_path / "plain.py"
    plain.write_text(
        "from marti_env.credit import CreditMethod\n"
        "class NotData(CreditMethod):\n    def assign(self, episode, rule):\n        return []\n"
    )
    cases = {
        f"{tmp_path}/missing.py:X": r"'.*missing\.py:X': loading .* FileNotFoundError: .*no such",
        f"{method_file}:Nope": r"'.*my_method\.py:Nope': .* has no attribute 'Nope'",
        f"{broken}:X": r"'.*broken\.py:X': loading .*RuntimeError: boom",
        f"{plain}:NotData": r"'.*plain\.py:NotData': NotData must be a dataclass",
        "json:dumps": r"'json:dumps' is <function dumps.*not a subclass of .*CreditMethod",
        "no_such_pkg_xyz.mod:X": r"'no_such_pkg_xyz\.mod:X': loading .*ModuleNotFoundError",
        "quality:alpha": r"'quality' is a registered method and 'alpha' is not an option",
        ":X": r"not of the form 'package\.module:Class'",
    }
    for spec, message in cases.items():
        with pytest.raises(ValueError, match=message):
            make_credit(spec)
    with pytest.raises(ValueError, match=r"unknown credit method 'nope'.*or an entry point"):
        make_credit("nope")
    _FILES.pop(broken.resolve(), None)


def _tiny_config(tmp_path: Path, credit: str, credit_kwargs: str = "{w: 2.0}") -> Path:
    tiny = tiny_random_model(tmp_path / "model", seed=0)
    config = tmp_path / "tiny.yaml"
    config.write_text(
        f"exp_name: outside\ntotal_steps: 2\nrun_name: r\nmodel: {{name: {tiny}}}\n"
        f"env: {{kwargs: {{num_agents: 2, rounds: 1}}, credit: '{credit}', "
        f"credit_kwargs: {credit_kwargs}, "
        "train_tasks: {type: arithmetic, levels: [1], size: 20}, "
        "eval_tasks: {type: arithmetic, levels: [1], split: test, size: 2}}\n"
        "rollout: {tasks_per_step: 1, n_samples: 2, max_tokens: 6, dtype: float32}\n"
        "algorithm: {advantage: agent_scale}\n"
        "optim: {precision: fp32, lr: 1.0e-3}\n"
        "eval: {at_start: false, at_end: false}\n"
        f"log: {{output_dir: {tmp_path / 'runs'}, progress: false, tensorboard: false, "
        "plots: false, transcripts: true}\n"
    )
    return config


def test_marti_train_trains_with_a_method_from_a_file(tmp_path, method_file, capsys):
    spec = f"{method_file}:AnswerLength"
    config = _tiny_config(tmp_path, spec)
    assert main(["train", str(config)]) == 0, capsys.readouterr().err
    run = tmp_path / "runs" / "r"
    meta = json.loads((run / "run.json").read_text())
    source = meta["sessions"][-1]["credit_source"]
    assert source["method"] == spec
    assert source["path"] == str(method_file.resolve())
    assert source["sha256"] == sha256(method_file)
    assert f"credit: {spec}" in (run / "config.yaml").read_text()
    # the rewards are the method's: 2 * (len(answer) % 3) on every turn
    episodes = [json.loads(line) for line in (run / "transcripts.jsonl").read_text().splitlines()]
    turns = [t for ep in episodes for t in ep["turns"]]
    assert turns and all(ep["credit"] == spec for ep in episodes)
    assert all(t["reward"] == 2.0 * (len(t["answer"] or "") % 3) for t in turns)
    # a bad entry point is refused before any model, naming the config key and the spec
    bad = f"{tmp_path}/nope.py:X"
    assert main(["train", str(config), f"env.credit={bad}"]) == 2
    err = capsys.readouterr().err
    assert "env.credit" in err and "nope.py:X" in err and "no such file" in err


def test_marti_sweep_grids_over_a_method_from_a_file(tmp_path, method_file, capsys):
    spec = f"{method_file}:AnswerLength"
    config = _tiny_config(tmp_path, "none", "{}")
    out = tmp_path / "sweep"
    args = ["sweep", str(config), "--seeds", "0", "--grid", f"env.credit=none,{spec}"]
    assert main([*args, "--out", str(out)]) == 0, capsys.readouterr().err
    record = json.loads((out / "sweep.json").read_text())
    assert [c["status"] for c in record["cells"]] == ["trained", "trained"]
    sources = {}
    for run in sorted(p.parent for p in out.rglob("run.json")):
        meta = json.loads((run / "run.json").read_text())
        sources[(run / "cell.json").read_text().count(spec) > 0] = meta["sessions"][-1].get(
            "credit_source"
        )
    assert sources[False] is None  # the built-in: nothing to record
    assert sources[True]["method"] == spec and sources[True]["sha256"] == sha256(method_file)
    assert sources[True]["path"] == str(method_file.resolve())


def test_bench_credit_records_the_method_file(tmp_path, method_file, capsys):
    out = tmp_path / "out"
    spec = f"{method_file}:AnswerLength:w=2"
    argv = ["bench", "credit", "--import", str(method_file), "--methods", f"none,{spec}"]
    argv += ["--envs", "mad-v0", "--seeds", "0", "--out", str(out), "--updates", "1"]
    argv += ["--batch", "2", "--eval-episodes", "2", "--attr-configs", "1"]
    argv += ["--attr-episodes", "2", "--no-plot", "--quiet"]
    assert main(argv) == 0
    assert spec in capsys.readouterr().out
    data = json.loads((out / "results.json").read_text())
    sources = data["credit_sources"]
    assert list(sources["methods"]) == [spec]  # none is built in
    assert sources["methods"][spec]["sha256"] == sha256(method_file)
    assert sources["methods"][spec]["path"] == str(method_file.resolve())
    assert sources["imports"][0]["sha256"] == sha256(method_file)


def test_registered_method_in_a_file_keeps_its_name(tmp_path):
    path = tmp_path / "registered.py"
    path.write_text(
        METHOD.replace(
            "@dataclass\n", '@register_credit("answer_length_test")\n@dataclass\n'
        ).replace("import CreditMethod", "import CreditMethod, register_credit")
    )
    try:
        method = make_credit(f"{path}:AnswerLength")
        assert method.name == "answer_length_test"
        assert make_credit("answer_length_test").name == "answer_length_test"  # registered too
        assert credit_source("answer_length_test")["sha256"] == sha256(path)
    finally:
        _CREDIT.pop("answer_length_test", None)
        _FILES.pop(path.resolve(), None)
