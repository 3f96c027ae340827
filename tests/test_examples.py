"""The examples run (as PettingZoo runs its docs' examples in CI), with a tiny random model.

Each example runs in its own process. A random model never writes a ``\\boxed{}`` answer,
so every reward would be 0 and no gradient would flow; the training examples are run with
a judge reward that gives the turns a spread (``credit="score"``: each turn its own
score), and the tests check that the weights changed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from tests.conftest import REPO

EXAMPLES = REPO / "examples"
# A judge with a reward spread for random text: 1 for an even-length response.
SPREAD = "credit='score', reward=lambda task, response: float(len(response) % 2 == 0)"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from marti_trainer.models import tiny_random_model

    return tiny_random_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


# A DeepSpeed test earlier in this pytest process leaves its single-process rendezvous
# (MASTER_PORT, whose store still listens, RANK, ...) in os.environ; an example that
# initialises torch.distributed (TRL through accelerate) would inherit it and fail on
# "address already in use". A user runs the examples from a plain shell.
_RENDEZVOUS = {"MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"}


def run(*parts: str, timeout: int = 600) -> str:
    """Run the code ``parts`` (each dedented) in a fresh Python; return its stdout."""
    code = "".join(textwrap.dedent(part) for part in parts)
    env = {k: v for k, v in os.environ.items() if k not in _RENDEZVOUS}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return out.stdout


CHANGED = """
    import torch
    from safetensors.torch import load_file
    before = load_file(str(TINY / "model.safetensors"))
    after = MODEL.state_dict()
    moved = [k for k in before if k in after and not torch.equal(before[k], after[k])]
    print("moved", len(moved), "of", len(before))
"""


def test_custom_loop_is_at_most_60_lines():
    assert len((EXAMPLES / "custom_loop.py").read_text().splitlines()) <= 60


def test_custom_loop_example_trains(tiny):
    stdout = run(
        f"""
        import runpy, sys
        from pathlib import Path
        import marti_env
        real = marti_env.make_vec
        marti_env.make_vec = lambda *a, **k: real(*a, **k, {SPREAD})
        sys.argv = ["custom_loop.py", "--model", "{tiny}", "--steps", "2"]
        g = runpy.run_path("examples/custom_loop.py", run_name="__main__")
        TINY, MODEL = Path("{tiny}"), g["model"]
        """,
        CHANGED,
    )
    lines = stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:2]] == ["step 0", "step 1"]
    moved = lines[-1].split()
    assert moved[0] == "moved" and int(moved[1]) > 0, stdout


def test_aec_example_runs(tiny):
    stdout = run(
        f"""
        import runpy, sys
        sys.argv = ["aec_loop.py", "--model", "{tiny}", "--tasks", "2"]
        runpy.run_path("examples/aec_loop.py", run_name="__main__")
        """
    )
    lines = stdout.splitlines()
    assert len(lines) == 3 and "(reference " in lines[0]
    # chain-v0: generator, verifier, refiner = 3 rows per task
    assert lines[-1].startswith("accuracy ") and lines[-1].endswith("over 2 tasks, 6 rows")


def test_trl_example_trains(tiny, tmp_path):
    pytest.importorskip("trl", reason="the TRL integration needs trl (in the dev extra)")
    stdout = run(
        f"""
        import runpy, sys
        from pathlib import Path
        import marti_trainer.integrations.trl as integration

        class Spread(integration.MartiRollout):
            def __init__(self, *a, **k):
                k.pop("credit")
                super().__init__(*a, **k, {SPREAD})

        integration.MartiRollout = Spread
        sys.argv = ["trl_grpo.py", "--model", "{tiny}", "--steps", "2",
                    "--output-dir", "{tmp_path}"]
        g = runpy.run_path("examples/trl_grpo.py", run_name="__main__")
        print("steps", g["trainer"].state.global_step)
        print("zero-spread", g["trainer"].state.log_history[0]["frac_reward_zero_std"])
        TINY, MODEL = Path("{tiny}"), g["trainer"].model
        """,
        CHANGED,
    )
    lines = stdout.splitlines()
    assert "steps 2" in lines
    moved = lines[-1].split()
    assert moved[0] == "moved" and int(moved[1]) > 0, stdout


def test_trl_rollout_rows_are_the_episodes_turns(tiny):
    """MartiRollout as a rollout_func, driven as GRPOTrainer drives it: each prompt
    repeated G times; its rows are the turns of G real episodes per task."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from marti_env import Task
    from marti_trainer.integrations.trl import MartiRollout
    from marti_trainer.policies import SamplingParams

    tasks = [Task(f"q/{k}", f"What is {k} + 1?", str(k + 1), "test") for k in range(3)]
    rollout = MartiRollout(
        "mad-v0", tasks, episodes_per_task=2, sampling=SamplingParams(max_tokens=8),
        num_agents=2, rounds=2, credit="score",
        reward=lambda task, response: float(len(response) % 2 == 0),
    )  # fmt: skip
    assert rollout.slots == [("debater_0", 0), ("debater_1", 0), ("debater_0", 1), ("debater_1", 1)]
    data = rollout.dataset()
    assert len(data) == 3 * 4
    assert [data["task_id"][i * 4] for i in range(3)] == [
        data["task_id"][i * 4 + 3] for i in range(3)
    ]
    kwargs = rollout.config_kwargs(tasks_per_step=2)
    assert kwargs["num_generations"] == 2 and kwargs["per_device_train_batch_size"] == 16
    assert kwargs["shuffle_dataset"] is False and kwargs["max_completion_length"] == 8

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    trainer = SimpleNamespace(
        model=AutoModelForCausalLM.from_pretrained(tiny),
        processing_class=tokenizer,
        accelerator=SimpleNamespace(unwrap_model=lambda m: m),
    )
    prompts = [p for p in data["prompt"][:8] for _ in range(2)]  # 2 tasks x 4 slots x G=2
    out = rollout(prompts, trainer)
    assert {len(v) for v in out.values()} == {16}
    assert rollout.unused_turns == 0
    # rows k and k+1 (a TRL group) are the same turn of two episodes of one task
    agents = out["marti_agent"]
    assert agents == [a for a, _ in rollout.slots for _ in range(2)] * 2
    for i in range(16):  # the prompt TRL trains on is the turn's real chat prompt
        text = tokenizer.decode(out["prompt_ids"][i])
        assert text.rstrip().endswith("assistant") and "What is" in text
        assert len(out["logprobs"][i]) == len(out["completion_ids"][i]) <= 8
    assert out["prompt_ids"][0] == out["prompt_ids"][1]  # round 0: same prompt, two samples
    assert out["prompt_ids"][4] != out["prompt_ids"][5]  # round 1: each saw its own episode
    assert out["marti_reward"] == [
        float(len(tokenizer.decode(c, skip_special_tokens=True)) % 2 == 0)
        for c in out["completion_ids"]
    ]
    assert (
        rollout.reward(prompts, [""] * 16, marti_reward=out["marti_reward"]) == out["marti_reward"]
    )
    with pytest.raises(ValueError, match="not a row of this MartiRollout"):
        rollout(["What is 2 + 2?"] * 2, trainer)
    with pytest.raises(ValueError, match="episodes_per_task"):
        MartiRollout("mad-v0", tasks, episodes_per_task=1)
    with pytest.raises(ValueError, match="seed=None"):
        MartiRollout("mad-v0", tasks, episodes_per_task=2, sampling=SamplingParams(seed=1))
