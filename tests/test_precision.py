"""``precision: auto``: the rule, the flags it reads, and that an explicit setting wins."""

from __future__ import annotations

import pytest
import torch

from marti_trainer.config import OptimConfig, TrainConfig
from marti_trainer.engines.torch_engine import TorchEngine
from marti_trainer.machine import cpu_bf16_flags, cpu_flags
from marti_trainer.precision import (
    choose_precision,
    emulation_warning,
    native_dtype,
    resolve_config,
    resolve_precision,
)

CPUINFO = """processor : 0
flags : fpu vme avx512f avx512_bf16 avx512_vnni
processor : 1
flags : fpu vme avx512f avx512_bf16 avx512_vnni
"""


def test_the_rule_by_device_and_cpu_flags():
    assert choose_precision("cuda", True, [])[0] == "bf16"
    assert choose_precision("cuda", False, ["avx512_bf16"])[0] == "fp32"  # flags: CPU only
    assert choose_precision("cpu", False, ["avx512_bf16"]) == (
        "bf16",
        "auto: a CPU with native bf16 (avx512_bf16)",
    )
    assert choose_precision("cpu", False, ["amx_bf16"])[0] == "bf16"
    assert choose_precision("cpu", True, [])[0] == "fp32"


def test_flags_are_read_from_cpuinfo():
    assert cpu_bf16_flags(CPUINFO) == ["avx512_bf16"]
    assert cpu_bf16_flags("flags : fpu sse2 avx2\n") == []
    assert cpu_bf16_flags("flags : amx_bf16 avx512_bf16\n") == ["amx_bf16", "avx512_bf16"]
    assert cpu_flags("flags : sse2 avx2\nflags : avx2 fpu\n") == ["avx2", "fpu", "sse2"]
    assert cpu_flags("Features : fp asimd bf16\n") == ["asimd", "bf16", "fp"]  # ARM
    assert cpu_flags("") == []


def test_explicit_settings_win_and_the_rollout_dtype_follows_auto():
    cpu = torch.device("cpu")
    explicit = resolve_precision("fp32", "bfloat16", cpu).as_dict()
    assert explicit == {
        "precision": "fp32",
        "rollout_dtype": "bfloat16",
        "reason": "set explicitly"
        + (
            ""
            if cpu_bf16_flags()
            else f"; warning: {emulation_warning('cpu', [], 'fp32', 'bfloat16')}"
        ),
    }
    assert resolve_precision("fp32", "auto", cpu).rollout_dtype == "float32"
    assert resolve_precision("bf16", "auto", cpu).rollout_dtype == "bfloat16"
    auto = resolve_precision("auto", "auto", cpu)
    expected = "bf16" if cpu_bf16_flags() else "fp32"
    assert auto.precision == expected and auto.reason.startswith("auto: a CPU")


def test_explicit_bf16_on_a_cpu_that_emulates_it_is_kept_with_a_warning():
    assert emulation_warning("cpu", ["avx512_bf16"], "bf16", "bfloat16") is None
    assert emulation_warning("cuda", [], "bf16", "bfloat16") is None
    assert emulation_warning("cpu", [], "fp32", "float32") is None
    both = emulation_warning("cpu", [], "bf16", "bfloat16")
    assert both.startswith("optim.precision and rollout.dtype set to bf16") and "emulated" in both
    assert emulation_warning("cpu", [], "fp32", "bfloat16").startswith("rollout.dtype set to")
    assert emulation_warning("cpu", [], "bf16", "float32").startswith("optim.precision set to")
    assert emulation_warning("cpu", [], "auto", "auto") is None  # auto never picks it there
    # a rollout dtype that follows an explicit bf16 is not named as set
    assert emulation_warning("cpu", [], "bf16", "auto").startswith("optim.precision set to")
    followed = resolve_precision("bf16", "auto", torch.device("cpu")).reason
    assert "rollout.dtype" not in followed
    assert ("warning" in followed) == (not cpu_bf16_flags())


@pytest.mark.parametrize(("flags", "dtype"), [([], "float32"), (["avx512_bf16"], "bfloat16")])
def test_a_policy_without_a_dtype_loads_the_native_one(tmp_path, monkeypatch, flags, dtype):
    from marti_trainer import precision
    from marti_trainer.models import tiny_random_model
    from marti_trainer.policies.hf import HFPolicy

    tiny_dir = tiny_random_model(tmp_path / "m", seed=0)
    monkeypatch.setattr(precision, "cpu_bf16_flags", lambda: flags)  # either kind of CPU
    assert native_dtype(torch.device("cpu")) == dtype
    with HFPolicy(tiny_dir) as policy:
        assert policy.model.dtype == getattr(torch, dtype)


def test_the_defaults_are_auto_and_resolve_to_concrete_values():
    cfg = TrainConfig()
    assert (cfg.optim.precision, cfg.rollout.dtype) == ("auto", "auto")
    resolved, choice = resolve_config(cfg, torch.device("cpu"))
    assert resolved.optim.precision == choice.precision in ("bf16", "fp32")
    assert resolved.rollout.dtype == choice.rollout_dtype in ("bfloat16", "float32")
    assert resolved.seed == cfg.seed and resolved.env == cfg.env


def test_an_engine_built_with_auto_uses_the_resolved_precision(tmp_path):
    from transformers import AutoModelForCausalLM

    from marti_trainer.models import tiny_random_model

    model = AutoModelForCausalLM.from_pretrained(tiny_random_model(tmp_path / "m", seed=0))
    engine = TorchEngine(model, OptimConfig(), lambda m, b: None, total_steps=1)
    assert engine.cfg.precision == resolve_precision("auto", "auto", torch.device("cpu")).precision


def test_a_ray_driver_resolves_for_its_actors_not_for_itself():
    from marti_trainer.config import config_from_dict
    from marti_trainer.team import precision_device

    gpus = config_from_dict(
        {"model": {"device": "cuda"}, "distributed": {"backend": "ray", "trainer_gpus": 1}},
        check_env=False,
    )
    assert precision_device(gpus) == torch.device("cuda")  # no error on a GPU-less driver
    cpus = config_from_dict({"distributed": {"backend": "ray"}}, check_env=False)
    assert precision_device(cpus) == torch.device("cpu")
    if not torch.cuda.is_available():
        choice = resolve_precision("auto", "auto", torch.device("cuda"))
        assert (choice.precision, choice.rollout_dtype) == ("bf16", "bfloat16")
        assert "sees no GPU" in choice.reason


def test_a_resumed_run_keeps_the_precision_it_started_with():
    from marti_trainer.precision import keep_resumed

    saved = {"optim": {"precision": "fp32"}, "rollout": {"dtype": "float32"}}
    cfg = keep_resumed(TrainConfig(), saved)
    assert (cfg.optim.precision, cfg.rollout.dtype) == ("fp32", "float32")
    explicit = TrainConfig(optim=OptimConfig(precision="bf16"))
    assert keep_resumed(explicit, saved).optim.precision == "bf16"  # an explicit setting wins
    assert keep_resumed(TrainConfig(), None).optim.precision == "auto"


def test_a_resumed_runs_precision_says_it_was_kept(tmp_path, capsys):
    from marti_trainer.models import tiny_random_model
    from marti_trainer.train import train
    from tests.test_train import tiny_config

    tiny = tiny_random_model(tmp_path / "m", seed=0)
    cfg = tiny_config(tiny, tmp_path / "runs", total_steps=2, run_name="r", log__save_every=1,
                      optim__precision="auto", rollout__dtype="auto")  # fmt: skip
    run = train(cfg, stop_at_step=1).run_dir
    assert "(auto: a CPU" in capsys.readouterr().err  # chosen for this machine
    train(cfg, resume=str(run))
    err = capsys.readouterr().err
    assert "(kept from the resumed run" in err and "set explicitly" not in err
