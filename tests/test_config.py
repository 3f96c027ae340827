"""The typed training config: YAML loading, unknown keys, overrides, validation."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from marti_trainer.config import (
    ConfigError,
    TrainConfig,
    config_from_dict,
    config_help,
    load_config,
)

REPO = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_defaults_are_valid_and_every_field_has_help():
    cfg = load_config()
    assert cfg == TrainConfig()
    text = config_help()
    assert "optim.lr" in text and "rollout.n_samples" in text
    assert "Literal" not in text  # choices are listed instead


def test_precedence_defaults_then_yaml_then_cli(tmp_path):
    path = write(tmp_path, "total_steps: 5\noptim:\n  lr: 3.0e-6\n  precision: fp32\n")
    cfg = load_config(path, ["optim.lr=1e-4", "rollout.n_samples=3"])
    assert cfg.total_steps == 5  # YAML over default
    assert cfg.optim.precision == "fp32"
    assert cfg.optim.lr == pytest.approx(1e-4)  # CLI over YAML (YAML reads 1e-4 as a string)
    assert cfg.rollout.n_samples == 3
    assert cfg.optim.weight_decay == 0.0  # default kept


def test_overrides_parse_yaml_values(tmp_path):
    cfg = load_config(
        None,
        [
            "env.kwargs={num_agents: 2, rounds: 3}",
            "env.train_tasks={type: arithmetic, levels: [1]}",
            "model.lora_targets=[q_proj, v_proj]",
            "eval.at_start=false",
        ],
    )
    assert cfg.env.kwargs == {"num_agents": 2, "rounds": 3}
    assert cfg.env.train_tasks["levels"] == [1]
    assert cfg.model.lora_targets == ["q_proj", "v_proj"]
    assert cfg.eval.at_start is False


def test_unknown_key_names_yaml_path_and_suggests(tmp_path):
    path = write(tmp_path, "optim:\n  lrr: 1.0e-5\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert "optim.lrr" in message and "did you mean 'optim.lr'" in message
    assert str(path) in message
    with pytest.raises(ConfigError, match="did you mean 'total_steps'"):
        load_config(None, ["total_step=3"])
    with pytest.raises(ConfigError, match="unknown key 'nosuchsection'"):
        load_config(None, ["nosuchsection.x=1"])


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("optim.lr=fast", "'optim.lr' must be a number"),
        ("total_steps=2.5", "'total_steps' must be an integer"),
        ("eval.at_end=yes please", "must be true or false"),
        ("algorithm.advantage=grp", "did you mean 'grpo'"),
        ("rollout=3", "'rollout' must be a mapping"),
        ("novalue", "key=value"),
    ],
)
def test_bad_values_are_rejected(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, [override])


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["optim.zero_stage=2"], "needs optim.engine=deepspeed"),
        (["model.sharing=lora", "optim.engine=deepspeed"], "use optim.engine=torch"),
        (["rollout.n_samples=1"], "n_samples must be >= 2"),
        (["algorithm.kl_in_reward=true"], "REINFORCE"),
        (["rollout.temperature=0"], r"'rollout.temperature' must be a number in \(0, 100\], got 0"),
        (["algorithm.clip_low=1.5"], "clip_low"),
        (
            ["algorithm.overlong_penalty=1", "rollout.max_tokens=6"],
            r"overlong_buffer \(8\) cannot exceed rollout.max_tokens \(6\)",
        ),
        (["model.gradient_checkpointing=true"], "set optim.share_prompts=false"),
        (["model.device=gpu"], "'model.device' must be auto, cpu, cuda or cuda:N, got 'gpu'"),
        (["algorithm.group_by=role", "model.sharing=lora"], "set model.sharing=shared"),
        (["algorithm.group_by=role", "model.sharing=per_agent"], "it is 'per_agent'"),
    ],
)
def test_incompatible_combinations_are_rejected(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, overrides)


def test_gradient_checkpointing_runs_with_shared_prompts_off():
    cfg = load_config(None, ["model.gradient_checkpointing=true", "optim.share_prompts=false"])
    assert cfg.model.gradient_checkpointing and not cfg.optim.share_prompts


def test_an_unused_overlong_buffer_is_not_checked_against_max_tokens():
    assert load_config(None, ["rollout.max_tokens=6"]).algorithm.overlong_buffer == 8


def test_baseline_configs_load():
    """Every baseline's typed config loads; its env and task sources are built too where the
    benchmark sets it names are present (tests/test_baselines.py dry-runs each file)."""
    from tests.test_baselines import _data_sets, missing_data

    for path in sorted((REPO / "baselines").rglob("*.yaml")):
        cfg = load_config(path, check_env=missing_data(*_data_sets(path)) is None)
        assert cfg.total_steps >= 1, path


def test_quickstart_header_has_the_command():
    text = (REPO / "baselines" / "quickstart.yaml").read_text()
    assert "marti train baselines/quickstart.yaml" in text.split("\n\n")[0] or text.startswith("#")
    assert "marti train baselines/quickstart.yaml" in text


def _leaves(cls, prefix=""):
    """(dotted key, annotation, field) of every leaf field of a config dataclass."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            yield from _leaves(hints[f.name], f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", hints[f.name], f


def _bad_values(tp, f):
    """Values no field of type ``tp`` (with ``f``'s range) accepts."""
    import typing

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    rng = f.metadata.get("range")
    if origin is typing.Literal:
        return ["bogus", 3]
    if tp is bool:
        return ["maybe", 2]
    if origin is list:
        bad = ["not-a-list", 5]
        if args and args[0] is float:
            bad += [[float("nan"), 0.5], [-1.0, 0.5]]
        return bad
    if origin is dict:
        return ["not-a-mapping", [1]]
    if tp is str:
        return [5, ["a"]]
    number = [a for a in (args or (tp,)) if a in (int, float)]
    if number:
        bad = ["x", True]
        if number[0] is float:
            bad += [float("nan"), float("inf"), float("-inf")]
        if rng is not None:
            if rng.lo is not None:
                bad.append(rng.lo - 1)
            if rng.hi is not None:
                bad.append(rng.hi * 10 + 1)
        return bad
    return []


def test_every_field_refuses_bad_values_naming_the_key_and_value():
    """Each leaf key of TrainConfig with values of the wrong type, non-finite numbers and
    numbers outside its range: refused, and the message names the key and the value."""
    checked = 0
    for key, tp, f in _leaves(TrainConfig):
        if tp is Any:  # task-source specs: checked by building them (next test)
            continue
        for value in _bad_values(tp, f):
            with pytest.raises(ConfigError) as info:
                config_from_dict(_nested(key, value))
            message = str(info.value)
            assert key.split(".")[-1] in message, (key, value, message)
            assert repr(value) in message or str(value) in message, (key, value, message)
            checked += 1
    assert checked > 150  # every numeric, enum, bool, list and str field was walked


def test_numeric_ranges_admit_the_defaults():
    for key, _tp, f in _leaves(TrainConfig):
        rng = f.metadata.get("range")
        default = _default_of(key)
        if rng is not None and isinstance(default, (int, float)):
            assert default in rng, key


def _nested(key, value):
    out: dict = {}
    node = out
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def _default_of(key):
    node = TrainConfig()
    for part in key.split("."):
        node = getattr(node, part)
    return node


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("env.eval_tasks", {"type": "arithmetic", "size": -5}, r"'env.eval_tasks': size must be"),
        ("env.train_tasks", {"type": "file", "path": "/no/such.jsonl"}, r"'env.train_tasks'"),
        ("env.id", "madd-v0", r"'env.id/env.kwargs': no env 'madd-v0' \(did you mean 'mad-v0'"),
        ("env.kwargs", {"num_agentz": 2}, r"unknown argument 'num_agentz'"),
        ("env.credit", "qualityy", r"'env.credit/env.credit_kwargs': unknown credit method"),
        ("env.credit_kwargs", {"alphaa": 1}, r"has no option 'alphaa'"),
        ("model.name", "./no/such/model", r"'model.name' is the path './no/such/model'"),
    ],
)
def test_env_and_model_settings_are_checked_before_any_model_loads(key, value, match):
    with pytest.raises(ConfigError, match=match):
        config_from_dict(_nested(key, value))


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (["-k", "0"], r"-k must be an integer in \[1, 10000\], got 0"),
        (["--temperature", "nan"], r"--temperature must be a number in \[0, 100\], got nan"),
        (["--top-p", "1.5"], r"--top-p must be a number in \(0, 1\], got 1.5"),
        (["--max-tokens", "-1"], r"--max-tokens must be an integer in \[1, 1000000\], got -1"),
        (["--concurrency", "0"], r"--concurrency must be"),
        (["--limit", "-5"], r"--limit must be an integer >= 1, got -5"),
        (["--seed", "-1"], r"--seed must be"),
    ],
)
def test_eval_flags_are_checked_before_any_model_loads(flags, match, capsys):
    from marti_trainer.cli import main

    assert main(["eval", "--env", "single-v0", "--model", "/no/such/model", *flags]) == 2
    err = capsys.readouterr().err
    assert re.search(match, err), err


def test_flatten_gives_dotted_keys_and_keeps_empty_mappings():
    from marti_trainer.config_schema import flatten

    nested = {"env": {"id": "mad-v0", "kwargs": {}, "credit": {"alpha": 0.5}}, "seed": 3}
    assert flatten(nested) == {
        "env.id": "mad-v0", "env.kwargs": {}, "env.credit.alpha": 0.5, "seed": 3,
    }  # fmt: skip
    assert flatten({}) == {"": {}} and flatten(7, "x.") == {"x": 7}
