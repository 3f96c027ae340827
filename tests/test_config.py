"""The typed training config: YAML loading, unknown keys, overrides, validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from marti_trainer.config import ConfigError, TrainConfig, config_help, load_config

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
        (["rollout.temperature=0"], "temperature must be > 0"),
        (["algorithm.clip_low=1.5"], "clip_low"),
        (
            ["algorithm.overlong_penalty=1", "rollout.max_tokens=6"],
            "overlong_buffer cannot exceed rollout.max_tokens",
        ),
        (["model.gradient_checkpointing=true"], "set optim.share_prompts=false"),
        (["model.device=gpu"], "model.device must be auto, cpu, cuda or cuda:N"),
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
    for path in sorted((REPO / "baselines").rglob("*.yaml")):
        cfg = load_config(path)
        assert cfg.total_steps >= 1, path


def test_quickstart_header_has_the_command():
    text = (REPO / "baselines" / "quickstart.yaml").read_text()
    assert "marti train baselines/quickstart.yaml" in text.split("\n\n")[0] or text.startswith("#")
    assert "marti train baselines/quickstart.yaml" in text
