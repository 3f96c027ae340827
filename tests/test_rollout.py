"""The rollout engine: determinism across modes, samples, errors, transcripts, HF drivers.

Fast tests use :class:`SimulatedPolicy` (instant, or with small sleeps) and small scripted
policies; the HF tests use a tiny random model (a few seconds); one ``slow`` test runs the
real default model.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence

import pytest

import marti_env
from marti_env import Task, read_jsonl
from marti_env.tasks import ArithmeticTasks
from marti_trainer.policies.base import Generation, Message, Policy, PolicyError, SamplingParams
from marti_trainer.policies.simulated import SimulatedPolicy, arithmetic_answer
from marti_trainer.rollout import (
    RolloutError,
    env_seed,
    generate_each,
    request_seed,
    rollout,
)

# Every env whose answers are math (the tasks below); envs whose answers are programs
# (reward "code") need code tasks and are run through the rollout in tests/test_code_team.py;
# envs whose answers are expressions (reward "expr") need expression tasks.
ENV_IDS = sorted(
    i for i, s in marti_env.registry.items() if s.kwargs.get("reward") not in ("code", "expr")
)
TASKS = list(ArithmeticTasks(size=4, seed=3))


def episodes_of(batch) -> list[dict]:
    return [e.to_dict() for e in batch.episodes]


def samples_of(batch) -> list[tuple]:
    return [
        (s.episode, s.agent, s.round, s.turn_index, s.prompt_token_ids, s.response_token_ids,
         s.logprobs, s.truncated, s.score, s.reward)
        for s in batch.samples
    ]  # fmt: skip


class RecordingPolicy(Policy):
    """Wraps a policy; remembers every (messages, params, adapter, generation) it served."""

    def __init__(self, inner: Policy, concurrent: bool = True) -> None:
        self.inner = inner
        self.concurrent_requests = concurrent
        self.calls: list[tuple[tuple, SamplingParams, str | None, Generation]] = []
        self.batch_sizes: list[int] = []
        self._lock = threading.Lock()

    def generate(self, prompts, params, adapter=None):
        out = self.inner.generate(prompts, params, adapter)
        with self._lock:
            self.batch_sizes.append(len(prompts))
            for p, gens in zip(prompts, out, strict=True):
                self.calls.append((tuple(p), params, adapter, gens[0]))
        return out

    def load_weights(self, source):
        pass

    def add_adapter(self, name, path):
        self.inner.add_adapter(name, path)

    @property
    def tokenizer(self):
        return self.inner.tokenizer

    @property
    def max_context_tokens(self):
        return self.inner.max_context_tokens

    def close(self):
        self.inner.close()


class FailingPolicy(SimulatedPolicy):
    """Fails every request whose prompt contains ``marker`` (as a PolicyError or other)."""

    def __init__(self, marker: str, exc: type[BaseException] = PolicyError, **kw) -> None:
        super().__init__(**kw)
        self.marker = marker
        self.exc = exc

    def submit(self, prompts, params, adapter=None):  # generate() calls submit() too
        for i, p in enumerate(prompts):
            if any(self.marker in m["content"] for m in p):
                if self.exc is PolicyError:
                    raise PolicyError(f"backend down for request {i}", [i])
                raise self.exc("connection reset")
        return super().submit(prompts, params, adapter)


# -- determinism ------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_sync_and_async_give_the_same_episodes(env_id):
    policy = SimulatedPolicy(accuracy=0.6, seed=1)
    sync = rollout(env_id, TASKS, 3, policy, mode="sync", seed=5, progress=False)
    outs = [
        rollout(env_id, TASKS, 3, policy, mode="async", seed=5, max_concurrency=c, progress=False)
        for c in (1, 4, 64)
    ]
    for out in outs:
        assert episodes_of(out) == episodes_of(sync)
        assert samples_of(out) == samples_of(sync)
    other = rollout(env_id, TASKS, 3, policy, mode="sync", seed=6, progress=False)
    assert samples_of(other) != samples_of(sync)


def test_same_results_with_latency_and_any_completion_order():
    # Requests finish in an order unrelated to submission (random service times).
    slow = SimulatedPolicy(tokens_per_s=20_000.0, max_concurrency=8, seed=2)
    fast = SimulatedPolicy(seed=2)
    a = rollout("mad-v0", TASKS[:2], 2, slow, mode="async", max_concurrency=5, progress=False)
    b = rollout("mad-v0", TASKS[:2], 2, fast, mode="sync", progress=False)
    assert episodes_of(a) == episodes_of(b)


def test_env_and_request_seeds_are_the_documented_ones():
    policy = RecordingPolicy(SimulatedPolicy())
    batch = rollout("chain-v0", TASKS[:2], 2, policy, mode="async", seed=9, progress=False)
    for e, record in enumerate(batch.episodes):
        j, i = divmod(e, 2)
        assert record.seed == env_seed(9, j, i)
        assert record.task == TASKS[j]
    agents = ["generator_0", "verifier_0", "refiner_0"]
    seeds = {p.seed for _, p, _, _ in policy.calls}
    expected = {request_seed(9, j, i, r, r) for j in range(2) for i in range(2) for r in range(3)}
    assert seeds == expected and len(agents) == 3


# -- samples --------------------------------------------------------------------------------


def test_samples_carry_tokens_logprobs_and_rewards():
    policy = RecordingPolicy(SimulatedPolicy(accuracy=0.5))
    batch = rollout("mad-v0", TASKS, 2, policy, mode="async", progress=False)
    served = {p.seed: (m, g) for m, p, _, g in policy.calls}
    assert len(batch) == len(served) == len(TASKS) * 2 * 6  # 3 debaters x 2 rounds
    for s in batch:
        record = batch.episodes[s.episode]
        turn = record.turns[s.turn_index]
        assert (turn.agent, turn.round, turn.role) == (s.agent, s.round, s.role)
        j, i = divmod(s.episode, 2)
        agent_index = ["debater_0", "debater_1", "debater_2"].index(s.agent)
        messages, gen = served[request_seed(0, j, i, s.round, agent_index)]
        assert messages == turn.messages
        assert s.prompt_token_ids == gen.prompt_token_ids
        assert s.response_token_ids == gen.token_ids
        assert s.logprobs == gen.logprobs
        assert len(s.logprobs) == len(s.response_token_ids) == turn.meta["response_tokens"]
        assert turn.response == gen.text
        assert (s.score, s.reward) == (turn.score, turn.reward)
        assert (s.task_id, s.task_index, s.sample_index) == (TASKS[j].id, j, i)
    assert [(s.episode, s.turn_index) for s in batch] == sorted(
        (s.episode, s.turn_index) for s in batch
    )
    stats = batch.stats
    assert stats.num_requests == len(batch)
    assert stats.tokens_generated == sum(s.num_response_tokens for s in batch)
    assert stats.prompt_tokens == sum(len(s.prompt_token_ids) for s in batch)
    assert 0 <= stats.host_s <= stats.wall_s and 0 <= stats.backend_s <= stats.wall_s


def test_group_keys_gather_the_n_samples_of_a_task_agent_turn():
    n = 4
    batch = rollout("mad-v0", TASKS, n, SimulatedPolicy(), progress=False, mode="async")
    groups = batch.groups()
    assert len(groups) == len(TASKS) * 6
    for (task_id, agent, turn_index), members in groups.items():
        assert len(members) == n
        assert sorted(s.sample_index for s in members) == list(range(n))
        assert {(s.task_id, s.agent, s.turn_index) for s in members} == {
            (task_id, agent, turn_index)
        }
    assert {k[0] for k in groups} == {t.id for t in TASKS}


def test_truncation_is_flagged_in_samples_and_records():
    policy = SimulatedPolicy(lengths=(5, 50))
    sampling = SamplingParams(max_tokens=20)
    batch = rollout("single-v0", TASKS, 8, policy, sampling, progress=False)
    flags = [s.truncated for s in batch]
    assert any(flags) and not all(flags)
    for s in batch:
        turn = batch.episodes[s.episode].turns[s.turn_index]
        assert turn.meta["truncated"] is s.truncated
        assert turn.meta["finish_reason"] == ("length" if s.truncated else "stop")
        assert s.num_response_tokens == (20 if s.truncated else 5)
    assert batch.stats.truncated == sum(flags)


def test_transcripts_are_appended_as_jsonl(tmp_path):
    path = tmp_path / "runs" / "transcripts.jsonl"
    policy = SimulatedPolicy()
    first = rollout("chain-v0", TASKS[:2], 2, policy, progress=False, transcript_path=path)
    rollout("chain-v0", TASKS[:1], 1, policy, progress=False, transcript_path=path)
    records = list(read_jsonl(path))
    assert len(records) == 5
    assert [r.to_dict() for r in records[:4]] == episodes_of(first)
    assert all("truncated" in t.meta for r in records for t in r.turns)


def test_progress_bar_runs(capsys):
    rollout("single-v0", TASKS[:2], 1, SimulatedPolicy(), progress=True)
    assert "single-v0" in capsys.readouterr().err


# -- policies per agent ---------------------------------------------------------------------


def test_one_policy_per_agent_and_lora_per_agent():
    gen, ver, ref = (RecordingPolicy(SimulatedPolicy(seed=k)) for k in range(3))
    batch = rollout(
        "chain-v0", TASKS[:2], 2, {"generator": gen, "verifier_0": ver, "refiner": ref},
        progress=False,
    )  # fmt: skip
    assert {s.policy for s in batch if s.agent == "verifier_0"} == {"verifier_0"}
    assert {s.policy for s in batch if s.agent == "generator_0"} == {"generator"}
    assert len(gen.calls) == len(ver.calls) == len(ref.calls) == 4

    base = RecordingPolicy(SimulatedPolicy())
    for name in ("gen", "ver", "ref"):
        base.add_adapter(name, f"/adapters/{name}")
    lora = {"generator_0": (base, "gen"), "verifier_0": (base, "ver"), "refiner_0": (base, "ref")}
    batch = rollout("chain-v0", TASKS[:2], 2, lora, progress=False, mode="sync")
    assert {(s.agent, s.adapter) for s in batch} == {
        ("generator_0", "gen"), ("verifier_0", "ver"), ("refiner_0", "ref")
    }  # fmt: skip
    assert sorted(a for _, _, a, _ in base.calls) == ["gen"] * 4 + ["ref"] * 4 + ["ver"] * 4


def test_sampling_per_role():
    policy = RecordingPolicy(SimulatedPolicy())
    sampling = {"generator": SamplingParams(max_tokens=7), "verifier": SamplingParams(max_tokens=8),
                "refiner_0": SamplingParams(max_tokens=9)}  # fmt: skip
    rollout("chain-v0", TASKS[:1], 1, policy, sampling, progress=False)
    assert sorted(p.max_tokens for _, p, _, _ in policy.calls) == [7, 8, 9]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"policies": {"debater_0": SimulatedPolicy()}}, r"no entry for agent\(s\) \['debater_1'"),
        ({"policies": {"debatr": SimulatedPolicy()}}, "unknown agent/role name"),
        ({"policies": "gpt"}, "not a Policy"),
        ({"sampling": SamplingParams(n=2)}, "n=2"),
        ({"n_samples": 0}, "n_samples"),
        ({"mode": "lockstep"}, "mode"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"tasks": [TASKS[0], TASKS[0]]}, "duplicate task id"),
        ({"tasks": []}, "empty"),
        ({"env_kwargs": {"num_agent": 2}}, "num_agent"),
        ({"driver": "turbo"}, "driver"),
    ],
)
def test_bad_arguments_fail_before_generating(kwargs, match):
    args = {"tasks": TASKS[:1], "n_samples": 1, "policies": SimulatedPolicy(), "progress": False}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        rollout("mad-v0", **args)


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("concurrent", [True, False])
@pytest.mark.parametrize("exc", [PolicyError, ConnectionError])
def test_backend_failure_names_env_episode_agent_and_round(mode, concurrent, exc):
    # The verifier's prompt contains "Proposed solution": it fails in round 1.
    policy = FailingPolicy("Proposed solution:", exc=exc)
    policy.concurrent_requests = concurrent  # batch driver when False
    with pytest.raises(RolloutError) as info:
        policies = {
            "verifier": policy,
            "generator": SimulatedPolicy(),
            "refiner": SimulatedPolicy(),
        }
        rollout("chain-v0", TASKS[:2], 2, policies, mode=mode, progress=False)
    err = info.value
    assert (err.env_id, err.agent, err.round) == ("chain-v0", "verifier_0", 1)
    assert 0 <= err.episode < 4 and err.task_id == TASKS[err.episode // 2].id
    message = str(err)
    for part in ("chain-v0", f"episode {err.episode}", "'verifier_0'", "round 1", err.task_id):
        assert part in message
    assert isinstance(err.__cause__, exc)
    assert err.request == f"episode {err.episode} round 1 agent verifier_0"


def test_batched_failure_names_the_request_the_backend_blamed():
    # One batched call (batch driver, sync): the backend names request index of debater_2.
    class Picky(SimulatedPolicy):
        concurrent_requests = False

        def submit(self, prompts, params, adapter=None):
            if params.seed == request_seed(0, 1, 0, 0, 2):
                raise PolicyError("bad request", [0])
            return super().submit(prompts, params, adapter)

    with pytest.raises(RolloutError) as info:
        rollout("mad-v0", TASKS[:2], 1, Picky(), mode="sync", progress=False)
    assert (info.value.episode, info.value.agent, info.value.round) == (1, "debater_2", 0)


def test_request_timeout_names_the_stuck_agent():
    class Stuck(RecordingPolicy):  # no submit(): served on the driver's thread pool
        def generate(self, prompts, params, adapter=None):
            if any("Proposed solution" in m["content"] for p in prompts for m in p):
                time.sleep(1.5)
            return super().generate(prompts, params, adapter)

    start = time.perf_counter()
    with pytest.raises(RolloutError, match=r"verifier_0.*timed out after 0.2 s") as info:
        rollout(
            "chain-v0", TASKS[:1], 1, Stuck(SimulatedPolicy()), request_timeout_s=0.2,
            progress=False,
        )  # fmt: skip
    assert info.value.agent == "verifier_0" and info.value.round == 1
    assert time.perf_counter() - start < 1.4  # returned before the stuck call did


# -- generate_each ------------------------------------------------------------------------------


def test_generate_each_matches_one_call_per_request():
    policy = RecordingPolicy(SimulatedPolicy(), concurrent=False)
    prompts: list[Sequence[Message]] = [
        [{"role": "user", "content": f"What is {k} + 1?"}] for k in range(5)
    ]
    params = [SamplingParams(seed=100 + k % 2) for k in range(5)]
    out = generate_each(policy, prompts, params)
    for p, sp, g in zip(prompts, params, out, strict=True):
        assert g == SimulatedPolicy().generate([p], sp)[0][0]
    assert policy.batch_sizes == [3, 2]  # one call per distinct seed (no native support)
    with pytest.raises(ValueError, match="n=1"):
        generate_each(policy, prompts[:1], [SamplingParams(n=2)])


def test_arithmetic_answer_reads_the_problem():
    msgs = [{"role": "user", "content": "What is 2 + 3? Give..."},
            {"role": "assistant", "content": "\\boxed{5}"},
            {"role": "user", "content": "What is (12 + 7) * 3? Give the final answer"}]  # fmt: skip
    assert arithmetic_answer(msgs) == "57"
    assert arithmetic_answer([{"role": "user", "content": "What is 7 / 2?"}]) is None
    assert arithmetic_answer([{"role": "user", "content": "Ava has 3 apples."}]) is None


# -- the hf backend: static and continuous batching ------------------------------------------


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory):
    pytest.importorskip("torch")
    from marti_trainer.models import tiny_random_model
    from marti_trainer.policies.hf import HFPolicy

    path = tiny_random_model(tmp_path_factory.mktemp("tiny"), seed=0)
    policy = HFPolicy(path, dtype="float32", batch_size=4, seed=0)
    yield policy
    policy.close()


@pytest.fixture(scope="module")
def arithmetic_tasks() -> list[Task]:
    return list(ArithmeticTasks(size=2, seed=1))


def test_hf_sync_static_and_async_continuous_give_the_same_episodes(tiny_policy, arithmetic_tasks):
    # Greedy: the tiny random model's sampling distributions are nearly uniform, so sampled
    # tokens would flip on float noise; greedy argmax is robust to it.
    sampling = SamplingParams(temperature=0.0, max_tokens=12)
    kw = {"env_kwargs": {"num_agents": 2}, "progress": False}
    ref = rollout("mad-v0", arithmetic_tasks, 2, tiny_policy, sampling, mode="sync",
                  driver="batch", max_concurrency=8, **kw)  # fmt: skip
    cont = rollout("mad-v0", arithmetic_tasks, 2, tiny_policy, sampling, mode="async",
                   driver="continuous", max_concurrency=3, **kw)  # fmt: skip
    assert ref.stats.drivers["policy"]["kind"] == "batch"
    assert cont.stats.drivers["policy"]["kind"] == "continuous"
    assert cont.stats.drivers["policy"]["steps"] > 0
    for a, b in zip(ref.samples, cont.samples, strict=True):
        assert (a.episode, a.agent, a.round) == (b.episode, b.agent, b.round)
        assert a.prompt_token_ids == b.prompt_token_ids
        assert a.response_token_ids == b.response_token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert [e.final_answer for e in ref.episodes] == [e.final_answer for e in cont.episodes]


def test_sync_rounds_larger_than_the_slots_go_to_a_continuous_driver_whole(
    tiny_policy, arithmetic_tasks, monkeypatch
):
    """In sync mode a continuous driver gets each round in one submission and admits the
    requests that wait for a row itself, as rows finish: the decode batches depend on token
    counts alone, so two runs decode identical batches (what makes bf16 runs repeat)."""
    from marti_trainer.policies.hf_continuous import ContinuousDriver

    submissions: list[int] = []
    submit = ContinuousDriver.submit
    monkeypatch.setattr(
        ContinuousDriver, "submit", lambda self, rs: (submissions.append(len(rs)), submit(self, rs))
    )
    sampling = SamplingParams(temperature=1.0, max_tokens=12)
    kw = {"env_kwargs": {"num_agents": 2}, "progress": False, "driver": "continuous"}
    runs = [
        rollout("mad-v0", arithmetic_tasks, 3, tiny_policy, sampling, mode="sync",
                max_concurrency=4, **kw)
        for _ in range(2)
    ]  # fmt: skip
    assert submissions == [12, 12] * 2  # 2 tasks x 3 episodes x 2 debaters, per round
    stats = [r.stats.drivers["policy"] for r in runs]
    assert stats[0]["prefills"] > 2  # waiting requests were admitted in several waves
    keys = ("steps", "row_steps", "prefills", "prefill_rows", "prefill_distinct")
    assert [stats[0][k] for k in keys] == [stats[1][k] for k in keys]
    assert [s.response_token_ids for s in runs[0].samples] == [
        s.response_token_ids for s in runs[1].samples
    ]
    rollout("mad-v0", arithmetic_tasks, 3, tiny_policy, sampling, mode="async",
            max_concurrency=4, **kw)  # fmt: skip
    assert len(submissions) > 4 + 2  # async hands requests over as slots free


def run_continuous(policy, prompts, params, max_rows: int, one_by_one: bool):
    """Run requests through an hf ``ContinuousDriver``: ``({index: generation}, stats)``.

    ``one_by_one`` submits each request on its own (they join a running batch), else all in
    one submission.
    """
    from marti_trainer.policies.hf_continuous import ContinuousDriver
    from marti_trainer.rollout.drivers import GenerationRequest

    done: dict[int, Generation] = {}
    finished = threading.Event()

    def on_done(request, gen, exc):
        assert exc is None, exc
        done[request.tag] = gen
        if len(done) == len(prompts):
            finished.set()

    requests = [GenerationRequest(tuple(p), sp, None, tag=k) for k, (p, sp) in
                enumerate(zip(prompts, params, strict=True))]  # fmt: skip
    driver = ContinuousDriver(policy, on_done, max_rows=max_rows)
    try:
        for group in [[r] for r in requests] if one_by_one else [requests]:
            driver.submit(group)
        assert finished.wait(120)
    finally:
        driver.close()
    return done, driver.stats


def test_hf_continuous_matches_generate_request_by_request(tiny_policy):
    from marti_trainer.policies.hf import hf_generate_each

    prompts = [
        [{"role": "user", "content": "hi " * k + "What is 2 + 2?"}] for k in (1, 9, 3, 20, 5)
    ]
    params = [
        SamplingParams(temperature=0.0, max_tokens=m, stop=("zzz",)) for m in (3, 9, 1, 6, 12)
    ]
    params = [dataclasses.replace(p, seed=k) for k, p in enumerate(params)]
    expected = [tiny_policy.generate([p], sp)[0][0] for p, sp in zip(prompts, params, strict=True)]

    done, stats = run_continuous(tiny_policy, prompts, params, max_rows=2, one_by_one=True)
    assert stats["prefills"] >= 3  # rows join and leave: admitted in several waves
    static = hf_generate_each(tiny_policy, prompts, params)
    for k, want in enumerate(expected):
        for got in (done[k], static[k]):
            assert got.token_ids == want.token_ids
            assert got.prompt_token_ids == want.prompt_token_ids
            assert got.finish_reason == want.finish_reason
            assert got.text == want.text
            assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)
    assert [len(done[k].token_ids) for k in range(5)] == [3, 9, 1, 6, 12]


def test_hf_repeated_prompts_are_prefilled_once_and_sample_as_if_alone(tiny_policy):
    """A group's episodes send the same prompt: one prefill serves them all, and every row
    still samples from its own seeded stream, as it would alone."""
    from marti_trainer.policies.hf import hf_generate_each

    a = [{"role": "user", "content": "What is 2 + 2?"}]
    b = [{"role": "user", "content": "hi hi What is 3 + 5?"}]
    prompts = [a, b, a, a, b]
    params = [SamplingParams(temperature=1.0, max_tokens=6, seed=k) for k in range(5)]
    alone = [tiny_policy.generate([p], sp)[0][0] for p, sp in zip(prompts, params, strict=True)]
    assert len({tuple(g.token_ids) for g in alone}) > 2  # the seeds give different samples
    static = hf_generate_each(tiny_policy, prompts, params)
    done, stats = run_continuous(tiny_policy, prompts, params, max_rows=8, one_by_one=False)
    assert (stats["prefill_rows"], stats["prefill_distinct"]) == (5, 2)
    for k, want in enumerate(alone):
        for got in (static[k], done[k]):
            assert got.token_ids == want.token_ids
            assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)


def test_hf_continuous_reports_prompt_too_long(tiny_policy):
    from marti_trainer.policies.hf import HFPolicy

    short = HFPolicy(tiny_policy.model, tokenizer=tiny_policy.tokenizer, max_context_tokens=40)
    long_task = Task("long", "What is 1 + 1? " * 40, "2")
    pattern = r"'solver_0', round 0 .*PromptTooLongError.*404 tokens"
    with pytest.raises(RolloutError, match=pattern) as info:
        rollout("single-v0", [long_task], 1, short, SamplingParams(max_tokens=4),
                driver="continuous", progress=False)  # fmt: skip
    assert info.value.agent == "solver_0" and info.value.episode == 0


def test_hf_continuous_failure_is_reported_not_hung(tiny_policy, arithmetic_tasks, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("boom: sampling kernel failed")

    from marti_trainer.policies import hf_continuous

    monkeypatch.setattr(hf_continuous, "sample_tokens", boom)  # the driver's sampling step
    with pytest.raises(RolloutError, match=r"round 0 .*boom") as info:
        rollout(
            "chain-v0", arithmetic_tasks, 1, tiny_policy, SamplingParams(max_tokens=4),
            driver="continuous", request_timeout_s=120, progress=False,
        )  # fmt: skip
    assert info.value.agent == "generator_0"
    assert not tiny_policy.model.training  # the driver restored the model's mode


# -- the real default model -------------------------------------------------------------------


@pytest.mark.slow
def test_real_model_mad_episodes():
    from marti_trainer.policies.hf import HFPolicy

    policy = HFPolicy("smollm2-135m-instruct", seed=0)  # the native dtype: bf16 or fp32
    tasks = list(ArithmeticTasks(size=1, seed=0))
    env_kwargs = {"num_agents": 2, "rounds": 2}
    sampling = SamplingParams(max_tokens=24)
    batch = rollout("mad-v0", tasks, 2, policy, sampling, env_kwargs=env_kwargs, progress=False)
    assert len(batch.episodes) == 2 and len(batch) == 8
    for s in batch:
        assert 1 <= s.num_response_tokens <= 24
        assert len(s.logprobs) == s.num_response_tokens
        assert all(lp <= 0 for lp in s.logprobs)
        assert s.truncated == (s.num_response_tokens == 24 and s.response_token_ids[-1] != 2)
        assert batch.episodes[s.episode].turns[s.turn_index].meta["truncated"] is s.truncated
    assert batch.stats.tokens_generated == sum(s.num_response_tokens for s in batch)
