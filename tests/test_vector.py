"""``marti_env.make_vec``: lockstep vector envs in groups that share a task.

The central check replays every episode a vector env ran, one env at a time, and compares
them step by step (requests, rewards, flags, records). The rows (``TurnSample``) are
checked against the built-in trainer's rows on the same episodes.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import marti_env
from marti_env import Task, TurnSample
from marti_env.vector import AutoresetMode

TASKS = [Task(f"q/{k}", f"What is {k} + {k}?", str(2 * k), "test") for k in range(12)]
ENV_ARGS = {
    "mad-v0": {"num_agents": 2, "rounds": 2},
    "moa-v0": {"num_proposers": 2},
    "chain-v0": {},
    "single-v0": {},
    "majority-v0": {"num_samples": 3},
}


def scripted(messages, answer: str | None) -> str:
    """A deterministic answer that depends on the prompt only (right about half the time)."""
    h = zlib.crc32(repr(messages).encode())
    return f"step {h % 97} \\boxed{{{answer if h % 2 else h % 7}}}"


def answer_of(vec, request) -> str | None:
    return vec.envs[request.env].record.task.answer


def run_vec(vec, steps: int, seed: int):
    """Drive ``vec`` for ``steps`` steps; per env, the list of its env steps:
    (round, {agent: messages}, rewards row, terminated, truncated), and its records."""
    trace: dict[int, list] = {i: [] for i in range(vec.num_envs)}
    records: dict[int, list] = {i: [] for i in range(vec.num_envs)}
    requests, _ = vec.reset(seed=seed)
    for _ in range(steps):
        running = vec.running
        asked = {i: {} for i in range(vec.num_envs)}
        for r in requests:
            asked[r.env][r.agent] = r.messages
        rounds = {i: vec.envs[i].round for i in range(vec.num_envs)}
        responses = [scripted(r.messages, answer_of(vec, r)) for r in requests]
        requests, rewards, terms, truncs, infos = vec.step(responses)
        for i in np.flatnonzero(running):
            if infos["_reset"][i] and vec.autoreset_mode is AutoresetMode.NEXT_STEP:
                continue  # reset in this step, not stepped
            trace[i].append((rounds[i], asked[i], list(rewards[i]), terms[i], truncs[i]))
            if infos["_episode"][i]:
                records[i].append(infos["episode"][i])
    return trace, records


def replay(env_id: str, records, kwargs) -> list:
    """The same episodes, one env at a time, from each record's task and seed."""
    env = marti_env.make(env_id, tasks=TASKS, **kwargs)
    trace = []
    for record in records:
        obs, infos = env.reset(seed=record.seed, options={"task": record.task})
        while env.agents:
            asked = {a: obs[a]["messages"] for a in env.active_agents}
            actions = {a: scripted(m, record.task.answer) for a, m in asked.items()}
            r = env.round
            obs, rewards, terms, truncs, infos = env.step(actions)
            row = [rewards.get(a, 0.0) for a in env.possible_agents]
            trace.append((r, asked, row, all(terms.values()), any(truncs.values())))
        assert infos[env.possible_agents[0]]["episode"].to_dict() == record.to_dict()
    return trace


@pytest.mark.parametrize("env_id", sorted(ENV_ARGS))
@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_vec_equals_one_env_at_a_time(env_id, mode):
    kwargs = ENV_ARGS[env_id]
    vec = marti_env.make_vec(
        env_id, num_envs=6, group_size=3, autoreset_mode=mode, tasks=TASKS, **kwargs
    )
    rounds = vec.envs[0].workflow.num_rounds
    trace, records = run_vec(vec, steps=3 * rounds + 2, seed=5)
    for i in range(vec.num_envs):
        assert len(records[i]) >= 2  # autoreset ran a second episode at least
        done = len(records[i]) * rounds  # env steps of the finished episodes
        assert trace[i][:done] == replay(env_id, records[i], kwargs)
        # every record of a group's episode poses the group's task
        for k, record in enumerate(records[i]):
            partner = records[(i // 3) * 3][k]
            assert record.task == partner.task
    # the same seed gives the same episodes; another seed others
    vec2 = marti_env.make_vec(
        env_id, num_envs=6, group_size=3, autoreset_mode=mode, tasks=TASKS, **kwargs
    )
    assert run_vec(vec2, 3 * rounds + 2, seed=5)[0] == trace
    assert run_vec(vec2, 3 * rounds + 2, seed=6)[0] != trace


def test_groups_share_a_task_and_draws_are_distinct():
    vec = marti_env.make_vec("single-v0", num_envs=12, group_size=3, tasks=TASKS)
    requests, infos = vec.reset(seed=0)
    ids = [t.id for t in infos["task"]]
    assert [ids[g * 3 : g * 3 + 3] for g in range(4)] == [[ids[g * 3]] * 3 for g in range(4)]
    assert len(set(ids)) == 4  # 4 groups, 4 distinct tasks
    assert len(set(infos["seed"].tolist())) == 12  # one seed per episode
    assert [(r.env, r.group) for r in requests] == [(i, i // 3) for i in range(12)]
    # explicit tasks and seeds
    tasks = [TASKS[0], TASKS[1], TASKS[0], TASKS[5]]
    _, infos = vec.reset(options={"tasks": tasks, "seeds": list(range(12))})
    assert [t.id for t in infos["task"]] == [t.id for t in tasks for _ in range(3)]
    assert infos["seed"].tolist() == list(range(12))


def test_draws_repeat_tasks_only_when_the_source_is_too_small():
    vec = marti_env.make_vec("single-v0", num_envs=6, group_size=1, tasks=TASKS[:4])
    _, infos = vec.reset(seed=0)
    assert {t.id for t in infos["task"]} == {t.id for t in TASKS[:4]}


def test_next_step_autoreset():
    vec = marti_env.make_vec("mad-v0", num_envs=4, group_size=2, tasks=TASKS, **ENV_ARGS["mad-v0"])
    requests, _ = vec.reset(seed=0)
    requests, rewards, terms, truncs, infos = vec.step(["\\boxed{0}"] * len(requests))
    assert not terms.any() and len(requests) == 8
    requests, rewards, terms, truncs, infos = vec.step(["\\boxed{0}"] * len(requests))
    assert terms.all() and not truncs.any() and requests == [] and not vec.running.any()
    assert rewards.shape == (4, 2) and all(r is not None for r in infos["episode"])
    assert len(vec.pop_samples()) == 4 * 2 * 2 and vec.pop_samples() == []
    requests, rewards, terms, truncs, infos = vec.step([])  # the reset step
    assert infos["_reset"].all() and not terms.any() and not rewards.any()
    assert len(requests) == 8 and {r.round for r in requests} == {0}


def test_same_step_autoreset():
    vec = marti_env.make_vec(
        "single-v0", num_envs=2, group_size=2, autoreset_mode="same_step", tasks=TASKS
    )
    requests, _ = vec.reset(seed=0)
    first = vec.envs[0].record
    requests, rewards, terms, truncs, infos = vec.step(["\\boxed{0}"] * 2)
    assert terms.all() and infos["_reset"].all() and len(requests) == 2
    assert infos["episode"][0] is first and vec.envs[0].record is not first
    assert [r.round for r in requests] == [0, 0]


def test_disabled_autoreset_and_masked_reset():
    vec = marti_env.make_vec(
        "single-v0", num_envs=4, group_size=2, autoreset_mode=AutoresetMode.DISABLED, tasks=TASKS
    )
    requests, _ = vec.reset(seed=0)
    requests, *_ = vec.step(["\\boxed{0}"] * 4)
    assert requests == []
    with pytest.raises(RuntimeError, match="reset"):
        vec.step([])
    mask = np.array([False, False, True, True])
    requests, infos = vec.reset(options={"reset_mask": mask})
    assert [r.env for r in requests] == [2, 3] and infos["_reset"].tolist() == mask.tolist()
    assert len(vec.pop_samples()) == 4  # the rows of the first episodes were kept
    with pytest.raises(ValueError, match="splits group"):
        vec.reset(options={"reset_mask": np.array([True, False, False, False])})


def test_bad_input_gets_a_clear_error():
    with pytest.raises(ValueError, match="does not divide num_envs"):
        marti_env.make_vec("mad-v0", num_envs=6, group_size=4)
    with pytest.raises(ValueError, match="num_envs must be an integer"):
        marti_env.make_vec("mad-v0", num_envs=0)
    with pytest.raises(ValueError, match="autoreset_mode"):
        marti_env.make_vec("mad-v0", num_envs=2, autoreset_mode="sometimes")
    with pytest.raises(ValueError, match="api"):
        marti_env.make_vec("mad-v0", num_envs=2, api="aec")
    vec = marti_env.make_vec("moa-v0", num_envs=4, group_size=2, tasks=TASKS, num_proposers=2)
    with pytest.raises(RuntimeError, match="reset"):
        vec.step([])
    requests, _ = vec.reset(seed=0)
    with pytest.raises(ValueError, match="got 7 responses for 8 requests"):
        vec.step(["x"] * 7)
    with pytest.raises(TypeError, match="single string"):
        vec.step("x")
    with pytest.raises(TypeError, match=r"response 3 \(env 1, agent 'proposer_1'\)"):
        vec.step(["x", "x", "x", 3, "x", "x", "x", "x"])
    answers = {(r.env, r.agent): "x" for r in requests}
    with pytest.raises(ValueError, match="'aggregator_0' of env 0, which does not act in round 0"):
        vec.step({**answers, (0, "aggregator_0"): "x"})
    with pytest.raises(ValueError, match="env 9, which does not exist"):
        vec.step({**answers, (9, "proposer_0"): "x"})
    with pytest.raises(ValueError, match="no response for request"):
        vec.step({k: v for k, v in answers.items() if k != (2, "proposer_1")})
    with pytest.raises(ValueError, match="unknown reset option"):
        vec.reset(options={"task": TASKS[0]})
    with pytest.raises(ValueError, match="2 group"):
        vec.reset(options={"tasks": [TASKS[0]]})
    assert vec.requests() == requests  # nothing was stepped by the failed calls
    # a response for an env whose episode has ended
    disabled = marti_env.make_vec(
        "single-v0", num_envs=2, group_size=1, autoreset_mode="disabled", tasks=TASKS
    )
    disabled.reset(seed=0)
    disabled.step(["x", "y"])
    disabled.reset(options={"reset_mask": np.array([False, True])})
    with pytest.raises(ValueError, match="env 0, whose episode has ended"):
        disabled.step({(0, "solver_0"): "x", (1, "solver_0"): "y"})
    disabled.step({(1, "solver_0"): "y"})


def test_mapping_responses_equal_ordered_ones():
    def run(as_mapping: bool) -> list:
        vec = marti_env.make_vec("chain-v0", num_envs=2, group_size=1, tasks=TASKS)
        requests, _ = vec.reset(seed=3)
        while requests:
            texts = [scripted(r.messages, answer_of(vec, r)) for r in requests]
            if as_mapping:
                responses = {(r.env, r.agent): t for r, t in zip(requests, texts, strict=True)}
                responses = dict(reversed(list(responses.items())))
            else:
                responses = texts
            requests, *_ = vec.step(responses)
        return vec.pop_samples()

    assert run(True) == run(False)


def test_rows_are_the_records_turns():
    vec = marti_env.make_vec(
        "mad-v0", num_envs=4, group_size=2, tasks=TASKS, credit="quality", **ENV_ARGS["mad-v0"]
    )
    requests, _ = vec.reset(seed=1)
    asked = {}
    while requests:
        for r in requests:
            asked[r.key] = r.messages
        requests, _, _, _, infos = vec.step([scripted(r.messages, "2") for r in requests])
    rows = vec.pop_samples()
    assert all(isinstance(r, TurnSample) for r in rows)
    assert [(r.env, r.group) for r in rows] == [(i, i // 2) for i in range(4) for _ in range(4)]
    for i, record in enumerate(infos["episode"]):
        mine = [r for r in rows if r.env == i]
        assert mine == record.samples(env=i, group=i // 2)
        assert [r.reward for r in mine] == [t.reward for t in record.turns]
        assert [r.group_key for r in mine] == [
            (record.task.id, t.agent, t.index) for t in record.turns
        ]
    assert all(asked[r.key] == r.messages for r in rows)  # a row joins its request by key
    assert len({r.reward for r in rows}) > 1  # quality credit: rewards differ by turn


def test_rows_agree_with_the_trainers_samples():
    """The rows a custom loop gets from make_vec and the samples of marti's own rollout
    (``marti_trainer.rollout``) agree on the same episodes: same turns, rewards, and
    advantage group keys under both ``group_by`` settings."""
    from marti_trainer.policies import SamplingParams
    from marti_trainer.policies.simulated import SimulatedPolicy
    from marti_trainer.rollout import env_seed, group_key_of, request_seed, rollout

    tasks, n, seed = TASKS[:3], 4, 7
    kwargs = {"num_agents": 2, "rounds": 2, "credit": "quality"}
    params = SamplingParams(temperature=1.0, max_tokens=64)
    policy = SimulatedPolicy(accuracy=0.5, seed=0)
    batch = rollout(
        "mad-v0", tasks, n, policy, params, mode="sync", seed=seed, env_kwargs=kwargs,
        progress=False,
    )  # fmt: skip

    vec = marti_env.make_vec("mad-v0", num_envs=len(tasks) * n, group_size=n, **kwargs)
    seeds = [env_seed(seed, j, i) for j in range(len(tasks)) for i in range(n)]
    requests, _ = vec.reset(options={"tasks": tasks, "seeds": seeds})
    agents = vec.possible_agents
    while requests:
        texts = []
        for r in requests:  # the engine's per-request seeds, so the same samples
            j, i = divmod(r.env, n)
            p = SamplingParams(
                temperature=1.0, max_tokens=64,
                seed=request_seed(seed, j, i, r.round, agents.index(r.agent)),
            )  # fmt: skip
            texts.append(policy.generate([r.messages], p)[0][0].text)
        requests, *_ = vec.step(texts)
    rows = vec.pop_samples()

    assert len(rows) == len(batch.samples) == len(tasks) * n * 4
    for row, sample in zip(rows, batch.samples, strict=True):
        assert row.env == sample.episode and row.group == sample.task_index
        assert (row.task_id, row.agent, row.role, row.round, row.turn_index) == (
            sample.task_id, sample.agent, sample.role, sample.round, sample.turn_index,
        )  # fmt: skip
        assert (row.reward, row.score) == (sample.reward, sample.score)
        for group_by in ("agent", "role"):
            assert group_key_of(row, group_by) == group_key_of(sample, group_by)
        turn = batch.episodes[sample.episode].turns[sample.turn_index]
        assert row.response == turn.response and row.messages == turn.messages
    # EpisodeRecord.samples() of the trainer's own records gives the same rows
    from_records = [
        r for e, rec in enumerate(batch.episodes) for r in rec.samples(env=e, group=e // n)
    ]
    assert from_records == rows


def test_make_vec_stays_light():
    """make_vec and a whole batch of episodes import nothing heavy (torch, vllm, ...)."""
    import subprocess
    import sys

    code = (
        "import sys, marti_env\n"
        "vec = marti_env.make_vec('mad-v0', num_envs=4, group_size=2)\n"
        "requests, _ = vec.reset(seed=0)\n"
        "while requests: requests, *_ = vec.step(['\\\\boxed{1}'] * len(requests))\n"
        "assert len(vec.pop_samples()) == 4 * 3 * 2\n"
        "heavy = ['torch', 'transformers', 'vllm', 'deepspeed', 'ray']\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
