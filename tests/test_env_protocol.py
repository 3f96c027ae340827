"""The env protocol: active agents, rewards, records, errors, label-free mode, AEC form."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import marti_env
from marti_env import EpisodeRecord, Task, read_jsonl, write_jsonl
from marti_env.scripted import NoisyOracle

TASKS = [Task("q/0", "What is 2 + 2?", "4", "test"), Task("q/1", "What is 3 * 3?", "9", "test")]


def run_episode(env, answer_of, seed=0, task=None):
    """Drive one episode; ``answer_of(agent, round)`` gives each active agent's boxed answer."""
    obs, infos = env.reset(seed=seed, options={"task": task} if task else None)
    steps = []
    while env.agents:
        active = [a for a in env.agents if infos[a]["active"]]
        assert active == env.active_agents
        for a in env.agents:  # inactive agents see no messages
            assert bool(obs[a]["messages"]) == infos[a]["active"]
        actions = {
            a: f"work \\boxed{{{answer_of(a, infos[a]['round'])}}}" if infos[a]["active"] else ""
            for a in env.agents
        }
        obs, rewards, terms, truncs, infos = env.step(actions)
        steps.append((active, rewards, terms, truncs))
    return steps, infos


def test_mad_2x2_outcome_rewards_and_record():
    env = marti_env.make("mad-v0", num_agents=2, rounds=2, tasks=TASKS)
    # Both debaters answer 4 in round 1 -> majority 4 -> correct.
    steps, infos = run_episode(env, lambda a, r: "5" if r == 0 else "4", task=TASKS[0])
    assert [s[0] for s in steps] == [["debater_0", "debater_1"]] * 2
    assert steps[0][1] == {"debater_0": 0.0, "debater_1": 0.0}  # nothing before the end
    assert steps[0][2] == {"debater_0": False, "debater_1": False}
    # credit none: each of a debater's 2 turns earns the outcome 1 -> return 2.
    assert steps[1][1] == {"debater_0": 2.0, "debater_1": 2.0}
    assert steps[1][2] == {"debater_0": True, "debater_1": True}
    assert steps[1][3] == {"debater_0": False, "debater_1": False}
    record = infos["debater_0"]["episode"]
    assert record is infos["debater_1"]["episode"]
    assert record.final_answer == "4" and record.outcome == 1.0
    assert [t.score for t in record.turns] == [0.0, 0.0, 1.0, 1.0]
    assert [t.reward for t in record.turns] == [1.0] * 4
    assert [(t.round, t.agent) for t in record.turns] == [
        (0, "debater_0"),
        (0, "debater_1"),
        (1, "debater_0"),
        (1, "debater_1"),
    ]
    # Round-1 prompts show the round-0 responses.
    assert "work \\boxed{5}" in record.turns[2].messages[-1]["content"]
    assert env.agents == []


def test_wrong_majority_gives_zero():
    env = marti_env.make("mad-v0", num_agents=3, rounds=1, tasks=TASKS)
    answers = {"debater_0": "4", "debater_1": "7", "debater_2": "7"}
    _, infos = run_episode(env, lambda a, r: answers[a], task=TASKS[0])
    record = infos["debater_0"]["episode"]
    assert record.final_answer == "7" and record.outcome == 0.0
    assert [t.score for t in record.turns] == [1.0, 0.0, 0.0]


def test_moa_aggregator_is_inactive_first():
    env = marti_env.make("moa-v0", num_proposers=2, tasks=TASKS)
    steps, infos = run_episode(env, lambda a, r: "9" if a == "aggregator_0" else "1", task=TASKS[1])
    assert [s[0] for s in steps] == [["proposer_0", "proposer_1"], ["aggregator_0"]]
    record = infos["aggregator_0"]["episode"]
    assert record.outcome == 1.0 and len(record.turns) == 3
    assert steps[1][1] == {"proposer_0": 1.0, "proposer_1": 1.0, "aggregator_0": 1.0}


def test_chain_runs_in_order():
    env = marti_env.make("chain-v0", tasks=TASKS)
    steps, infos = run_episode(env, lambda a, r: "4", task=TASKS[0])
    assert [s[0] for s in steps] == [["generator_0"], ["verifier_0"], ["refiner_0"]]
    assert infos["refiner_0"]["episode"].outcome == 1.0


def test_missing_action_and_unknown_agent_and_finished_episode():
    env = marti_env.make("mad-v0", num_agents=2, rounds=1, tasks=TASKS)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="debater_1"):
        env.step({"debater_0": "x"})
    with pytest.raises(ValueError, match="debater_9"):
        env.step({"debater_0": "x", "debater_1": "y", "debater_9": "z"})
    with pytest.raises(TypeError, match="debater_0"):
        env.step({"debater_0": 3, "debater_1": "y"})
    env.step({"debater_0": "x", "debater_1": b"\xff\xfe bytes"})
    with pytest.raises(RuntimeError, match="reset"):
        env.step({"debater_0": "x", "debater_1": "y"})


def test_inactive_agent_actions_are_ignored():
    env = marti_env.make("chain-v0", tasks=TASKS)
    env.reset(seed=0, options={"task": TASKS[0]})
    env.step({"generator_0": "\\boxed{4}", "verifier_0": "IGNORED", "refiner_0": "IGNORED"})
    record = env.record
    assert len(record.turns) == 1 and record.turns[0].agent == "generator_0"


def test_seeded_task_draws():
    env = marti_env.make("single-v0")  # default: procedural arithmetic tasks
    ids = []
    for seed in (0, 1, 0):
        env.reset(seed=seed)
        ids.append(env.record.task.id)
    assert ids[0] == ids[2]
    unseeded = set()
    for _ in range(10):
        env.reset()
        unseeded.add(env.record.task.id)
    assert len(unseeded) > 1


def test_record_jsonl_round_trip(tmp_path):
    env = marti_env.make("mad-v0", num_agents=2, rounds=2, tasks=TASKS)
    oracle = NoisyOracle(accuracy=0.5, seed=0)
    records = []
    for seed in range(5):
        obs, infos = env.reset(seed=seed)
        while env.agents:
            obs, _, _, _, infos = env.step(
                {a: oracle(obs[a]["messages"], env.record.task) for a in env.agents}
            )
        records.append(infos["debater_0"]["episode"])
    path = tmp_path / "episodes.jsonl"
    assert write_jsonl(records, path) == 5
    back = list(read_jsonl(path))
    assert [r.to_dict() for r in back] == [r.to_dict() for r in records]
    assert isinstance(back[0], EpisodeRecord)
    json.loads(path.read_text().splitlines()[0])  # plain JSON per line
    path.write_text(path.read_text() + "{not json\n")
    with pytest.raises(ValueError, match=r"episodes.jsonl:6"):
        list(read_jsonl(path))


def test_label_free_ttrl_mode():
    unlabeled = [Task("u/0", "What is 2 + 2?", None, "test")]
    env = marti_env.make("majority-v0", num_samples=4, tasks=unlabeled, reward="ttrl")
    answers = {"sampler_0": "4", "sampler_1": "4", "sampler_2": "5", "sampler_3": "4"}
    _, infos = run_episode(env, lambda a, r: answers[a])
    record = infos["sampler_0"]["episode"]
    # Pseudo-label = majority answer "4": agreeing turns score 1, the dissenter 0.
    assert [t.score for t in record.turns] == [1.0, 1.0, 0.0, 1.0]
    assert record.final_answer == "4" and record.outcome == 1.0


def test_labelled_reward_needs_an_answer():
    with pytest.raises(ValueError, match="ttrl"):
        marti_env.make("single-v0", tasks=[Task("u/0", "2+2?", None, "x")])
    with pytest.warns(UserWarning, match=r"dropping 1 of 2 tasks .*u/0"):
        env = marti_env.make("single-v0", tasks=[Task("u/0", "2+2?", None, "x"), TASKS[0]])
    env.reset(seed=0)
    assert env.record.task == TASKS[0]
    env = marti_env.make("single-v0", tasks=TASKS)
    with pytest.raises(ValueError, match="ttrl"):  # an unlabelled task passed at reset
        env.reset(seed=0, options={"task": Task("u/0", "2+2?", None, "x")})


def test_reset_options_validated():
    env = marti_env.make("single-v0")
    with pytest.warns(UserWarning, match="tsak"):
        env.reset(seed=0, options={"tsak": TASKS[0]})
    with pytest.warns(UserWarning, match="did you mean 'task'"):
        env.reset(seed=0, options={"tasks": TASKS[0]})
    with warnings.catch_warnings():  # an option the env does not know is ignored, silently
        warnings.simplefilter("error")
        env.reset(seed=0, options={"options": 1, "seed_offset": 3})


def test_aec_form_drives_to_the_end():
    env = marti_env.make("moa-v0", api="aec", num_proposers=2, tasks=TASKS)
    env.reset(seed=0)
    acted = []
    for agent in env.agent_iter():
        obs, reward, term, trunc, info = env.last()
        if term or trunc:
            env.step(None)
            continue
        acted.append((agent, info["active"]))
        env.step("\\boxed{4}" if info["active"] else "")
    assert ("aggregator_0", False) in acted and ("aggregator_0", True) in acted
    assert env.unwrapped.record.final_answer == "4"


def test_long_responses_are_clipped_for_others_but_recorded_in_full():
    env = marti_env.make("mad-v0", num_agents=2, rounds=2, tasks=TASKS, max_shared_chars=1000)
    env.reset(seed=0, options={"task": TASKS[0]})
    huge = "z" * 100_000 + " \\boxed{4}"
    obs, *_ = env.step({"debater_0": huge, "debater_1": "\\boxed{4}"})
    shown = obs["debater_1"]["messages"][-1]["content"]
    assert len(shown) < 3000 and "characters omitted" in shown and "\\boxed{4}" in shown
    assert env.record.turns[0].response == huge and env.record.turns[0].answer == "4"


def test_render_ansi():
    env = marti_env.make("single-v0", tasks=TASKS, render_mode="ansi")
    env.reset(seed=0, options={"task": TASKS[0]})
    env.step({"solver_0": "\\boxed{4}"})
    text = env.render()
    assert "q/0" in text and "outcome=1" in text


def test_hostile_actions_never_crash():
    """1,000 episodes across every env with empty, unicode, huge, LaTeX-bomb and random-byte
    actions: the env neither raises nor returns anything outside its spaces."""
    rng = np.random.default_rng(0)
    hostile = [
        "",
        "🙂" * 50 + "\\boxed{四}",
        "x" * 100_000,
        "\\boxed{" + "\\frac{1}{" * 3000 + "2" + "}" * 3000 + "}",
        "\\boxed{9^{9^{9^9}}}",
        "\\boxed{100000000!}",
        "\\boxed{\\boxed{\\boxed{}}}",
        "\\boxed{",
        "}}}}\\boxed{4}{{{{",
        "\x00\x01\x02\\boxed{4}",
        "$$\\frac{}{}$$ \\boxed{\\sqrt{}}",
        "\\begin{array}" * 100,
    ]
    # envs whose answers are programs or expressions (reward "code" or "expr"):
    # tests/test_code_team.py and tests/test_expr_team.py
    ids = sorted(
        i for i, s in marti_env.registry.items() if s.kwargs.get("reward") not in ("code", "expr")
    )
    envs = {i: marti_env.make(i, tasks=TASKS) for i in ids}
    for episode in range(1000):
        env = envs[ids[episode % len(ids)]]
        obs, infos = env.reset(seed=episode)
        while env.agents:
            actions = {}
            for a in env.agents:
                if rng.random() < 0.2:
                    actions[a] = rng.bytes(int(rng.integers(0, 300))).decode(
                        "utf-8", errors="replace"
                    )
                else:
                    actions[a] = hostile[int(rng.integers(len(hostile)))]
            obs, rewards, terms, truncs, infos = env.step(actions)
            for a, o in obs.items():
                assert env.observation_space(a).contains(o)
            assert all(np.isfinite(r) for r in rewards.values())
        record = infos[env.possible_agents[0]]["episode"]
        assert record.outcome in (0.0, 1.0)
