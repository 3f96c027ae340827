"""Every registered env passes PettingZoo's own conformance tests, unmodified.

Registry-driven (as Gymnasium's tests/envs/test_envs.py): an env is tested the moment it
is registered.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

import marti_env

ENV_IDS = sorted(marti_env.registry)
# Short action bounds keep the conformance tests' random actions small.
SMALL = {"max_response_chars": 2000}

# pettingzoo.test.api_test (1.27.0) warns about these for every env that is not one of
# PettingZoo's own, named in lists hardcoded in that file (env_obs_dicts, env_obs_space);
# the action-space check has no exemption at all. A text env cannot have Box or Discrete
# spaces or array observations. docs/custom_loops.md ("PettingZoo's warnings") explains.
EXPLAINED_AEC_WARNINGS = {
    "Observation is not a NumPy array",
    "Observation space for each agent probably should be gymnasium.spaces.box or "
    "gymnasium.spaces.discrete",
    "Action space for each agent probably should be gymnasium.spaces.box or "
    "gymnasium.spaces.discrete",
}


def warnings_of(check) -> list[str]:
    """The messages of every warning ``check()`` emits (none filtered)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check()
    return [str(w.message) for w in caught]


def test_standard_envs_are_registered():
    assert {"mad-v0", "moa-v0", "chain-v0", "single-v0", "majority-v0"} <= set(ENV_IDS)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_parallel_api(env_id):
    """Passes with no warning at all (its made-up reset option is ignored silently)."""
    assert warnings_of(lambda: parallel_api_test(marti_env.make(env_id, **SMALL), 20)) == []


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_aec_api(env_id):
    """Passes; the only warnings are the three explained ones."""
    messages = warnings_of(lambda: api_test(marti_env.make(env_id, api="aec", **SMALL), 20))
    assert set(messages) <= EXPLAINED_AEC_WARNINGS, messages


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_aec_seed(env_id):
    assert (
        warnings_of(lambda: seed_test(lambda: marti_env.make(env_id, api="aec", **SMALL), 20)) == []
    )


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_parallel_seed(env_id):
    assert (
        warnings_of(lambda: parallel_seed_test(lambda: marti_env.make(env_id, **SMALL), 20)) == []
    )


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_multi_step_determinism(env_id):
    """Same seed and actions -> same observations, infos and records over many episodes
    (PettingZoo 1.27's parallel_seed_test only checks one step)."""

    def rollout(seed: int) -> list:
        env = marti_env.make(env_id, **SMALL)
        trace = []
        for episode in range(6):
            obs, infos = env.reset(seed=seed if episode == 0 else None)
            for space in (env.action_space(a) for a in env.possible_agents):
                space.seed(seed + episode)
            trace.append(repr(obs))
            while env.agents:
                actions = {
                    a: env.action_space(a).sample() + f" \\boxed{{{i}}}"
                    for i, a in enumerate(env.agents)
                }
                obs, rewards, terms, truncs, infos = env.step(actions)
                trace.append(repr((obs, rewards, terms, truncs)))
            trace.append(infos[env.possible_agents[0]]["episode"].to_json())
        return trace

    first, second, other = rollout(3), rollout(3), rollout(4)
    assert first == second
    assert first != other


def test_import_stays_light():
    """`import marti_env` (and making and running an env) never imports the heavy stack."""
    code = (
        "import sys, marti_env\n"
        "env = marti_env.make('mad-v0'); env.reset(seed=0)\n"
        "while env.agents: env.step({a: '\\\\boxed{1}' for a in env.agents})\n"
        "heavy = ['torch', 'transformers', 'vllm', 'deepspeed', 'ray']\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
