"""Re-execution (marti_env.replay) and the credit methods built on it (credit/replay.py)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import marti_env
from marti_env import EpisodeRecord
from marti_env.credit import credit_by_replay, make_credit
from marti_env.credit.counterfactual import shapley_from_values
from marti_env.replay import Intervention, ReplayRequest, generations_needed, replay

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def shown_answers(messages) -> list[str]:
    """Boxed answers in the request (worked examples excluded: only the last message)."""
    return BOXED.findall(messages[-1]["content"]) if messages else []


def copier(solo: str):
    """A scripted policy: an agent that sees answers of others copies the first one; one
    that sees none answers ``solo`` (a generator answers right: the task's answer)."""

    def policy(requests: list[ReplayRequest]) -> list[str]:
        out = []
        for q in requests:
            answers = shown_answers(q.messages)
            if q.role in ("generator", "proposer"):
                out.append(f"\\boxed{{{q.task.answer}}}")
            elif q.role == "verifier":
                out.append("VERDICT: correct" if answers else "nothing to check")
            else:
                out.append(f"\\boxed{{{answers[0] if answers else solo}}}")
        return out

    return policy


def play(env, policy, seed: int) -> EpisodeRecord:
    """One episode with ``policy`` (ReplayRequests built from the live env)."""
    obs, infos = env.reset(seed=seed)
    record = env.record
    while env.agents:
        active = env.active_agents
        requests = [
            ReplayRequest(0, a, infos[a]["role"], env.round, obs[a]["messages"], record.task, seed)
            for a in active
        ]
        actions = dict(zip(active, policy(requests), strict=True))
        obs, _, _, _, infos = env.step(actions)
    return record


def test_restart_replays_the_shuffles_and_tie_order():
    """A resample that the policy answers as recorded gives back the recorded episode, turn
    for turn: the restart reproduces the task drawn, the shuffles and the tie order."""
    env = marti_env.make("mad-v0", num_agents=3, rounds=2)
    rng = np.random.default_rng(0)
    responses = {}

    def random_policy(requests):
        out = [f"\\boxed{{{rng.integers(3)}}}" for _ in requests]
        for q, text in zip(requests, out, strict=True):
            responses[(q.agent, q.round)] = text
        return out

    record = play(env, random_policy, seed=11)
    again = replay(
        env,
        [(record, Intervention.on_turn("debater_1", 0, "resample"))],
        lambda reqs: [responses[(q.agent, q.round)] for q in reqs],
    )
    copy = again.records[0]
    assert [t.messages for t in copy.turns] == [t.messages for t in record.turns]
    assert copy.final_answer == record.final_answer and copy.outcome == record.outcome
    assert again.generations == [4]  # the resampled turn and the 3 debaters of round 1


def test_removing_chains_generator_regenerates_downstream():
    env = marti_env.make("chain-v0")
    record = play(env, copier(solo="-1"), seed=3)
    assert record.outcome == 1.0
    result = replay(env, [(record, Intervention.without(record, ["generator_0"]))], copier("-1"))
    out = result.records[0]
    assert out.turns[0].response == "" and out.outcome == 0.0  # the refiner had nothing to copy
    assert result.generations == [2]  # verifier and refiner re-run
    # a change in the last round keeps every earlier turn and asks for nothing downstream
    last = replay(env, [(record, Intervention.on_turn("refiner_0", 2, "replace", "x"))], None)
    assert [t.response for t in last.records[0].turns[:2]] == [t.response for t in record.turns[:2]]
    assert last.generations == [0] and last.records[0].outcome == 0.0


def test_leave_one_out_replay_credits_upstream_agents_the_static_rule_cannot():
    """On chain-v0 the rule reads only the refiner: the static method gives the generator
    the outcome fallback; re-execution finds the generator pivotal (by hand: 1 - 0)."""
    env = marti_env.make("chain-v0")
    record = play(env, copier(solo="-1"), seed=3)
    spent = credit_by_replay(env, [record], make_credit("leave_one_out_replay"), copier("-1"))
    rewards = {t.agent: t.reward for t in record.turns}
    # without the generator: refiner answers -1 (0); without the verifier: the refiner still
    # sees the proposal and copies it (1); without the refiner: no final answer (0)
    assert rewards == {"generator_0": 1.0, "verifier_0": 0.0, "refiner_0": 1.0}
    assert spent == 2 + 1 + 0
    method = make_credit("leave_one_out_replay")
    assert sum(generations_needed(record, c) for c in method.interventions(record)) == spent
    # against null replays (first turn kept, the rest regenerated): the deterministic
    # copier reproduces R = 1 there, so the same rewards, for 2 + 1 + 0 more generations
    again = EpisodeRecord.from_dict(json.loads(record.to_json()))
    method = make_credit("leave_one_out_replay", reference="replayed")
    assert len(method.interventions(again)) == 6
    assert credit_by_replay(env, [again], method, copier("-1")) == 2 * spent
    assert {t.agent: t.reward for t in again.turns} == rewards
    assert record.credit == "leave_one_out_replay" and record.agent_rewards == rewards


def test_shapley_from_values_by_hand():
    v = {frozenset(): 0.0, frozenset("a"): 1.0, frozenset("b"): 0.0, frozenset("ab"): 1.0}
    assert shapley_from_values(["a", "b"], v) == {"a": 1.0, "b": 0.0}
    # glove game: a needs b; phi = 1/2 each
    v = {frozenset(): 0.0, frozenset("a"): 0.0, frozenset("b"): 0.0, frozenset("ab"): 1.0}
    assert shapley_from_values(["a", "b"], v) == {"a": 0.5, "b": 0.5}


def test_shapley_replay_on_chain_by_hand():
    """Coalitions of chain-v0 (g, v, r) under the copier: the outcome is 1 exactly when the
    refiner speaks and the generator speaks (the verifier changes nothing). So v(S) = 1 iff
    {g, r} within S: the glove game of g and r, phi = (1/2, 0, 1/2)."""
    env = marti_env.make("chain-v0")
    record = play(env, copier(solo="-1"), seed=3)
    spent = credit_by_replay(env, [record], make_credit("shapley_replay"), copier("-1"))
    rewards = {t.agent: t.reward for t in record.turns}
    assert rewards == pytest.approx({"generator_0": 0.5, "verifier_0": 0.0, "refiner_0": 0.5})
    assert spent > 0


def test_sibling_baseline_by_hand():
    """moa-v0, 3 proposers and an aggregator that copies the first answer it sees. The
    recorded proposers are all right; a resampled proposer answers wrong. A sibling of
    proposer_k changes the outcome only if the aggregator reads it first."""
    env = marti_env.make("moa-v0")
    record = play(env, copier(solo="-1"), seed=5)
    assert record.outcome == 1.0

    def wrong_when_resampled(requests):
        out = []
        for q in requests:
            if q.role == "proposer":
                out.append("\\boxed{-7}")
            else:
                answers = shown_answers(q.messages)
                out.append(f"\\boxed{{{answers[0] if answers else -1}}}")
        return out

    credit_by_replay(env, [record], make_credit("sibling", samples=2), wrong_when_resampled)
    agg = next(t for t in record.turns if t.role == "aggregator")
    first_shown = shown_answers(agg.messages)[0]
    assert first_shown == record.task.answer
    proposers = {t.agent: t.reward for t in record.turns if t.role == "proposer"}
    # exactly one proposer is shown first: its siblings lose the episode (1 - 0 = 1)
    assert sorted(proposers.values()) == [0.0, 0.0, 1.0]
    assert agg.reward == 0.0  # the resampled aggregator copies the same first answer


def test_records_keep_their_start_state_through_json():
    env = marti_env.make("mad-v0")
    record = play(env, copier(solo="3"), seed=8)
    back = EpisodeRecord.from_dict(json.loads(record.to_json()))
    assert back.start_state == record.start_state
    out = replay(env, [(back, Intervention.on_turn("debater_0", 1, "replace", ""))], None)
    assert [t.messages for t in out.records[0].turns] == [t.messages for t in record.turns]


def test_siblings_of_one_turn_are_independent_draws_in_the_trainer():
    """The trainer's replay policy seeds every request on its own: the two siblings of a
    turn (same prompt) are different samples."""
    from marti_trainer.policies import SamplingParams
    from marti_trainer.policies.simulated import SimulatedPolicy
    from marti_trainer.rollout.engine import _replay_policy, _Route
    from marti_trainer.rollout.samples import RolloutStats

    env = marti_env.make("chain-v0")
    record = play(env, copier(solo="-1"), seed=3)
    policy = SimulatedPolicy(accuracy=0.5, seed=0)
    routes = {a: _Route("policy", policy, None, SamplingParams(temperature=1.0))
              for a in env.possible_agents}  # fmt: skip
    seen = []

    def recording(requests):
        texts = _replay_policy(routes, 0, RolloutStats("sync", 1))(requests)
        seen.extend(zip([(q.agent, q.round, q.messages) for q in requests], texts, strict=True))
        return texts

    replay(env, [(record, Intervention.on_turn("generator_0", 0, "resample"))] * 8, recording)
    first = [text for (agent, r, _), text in seen if (agent, r) == ("generator_0", 0)]
    assert len(first) == 8 and len(set(first)) > 1


def test_bad_input_is_named():
    env = marti_env.make("chain-v0")
    record = play(env, copier(solo="-1"), seed=3)
    with pytest.raises(ValueError, match=r"no turn \(agent, round\) \('refiner_0', 0\)"):
        replay(env, [(record, Intervention.on_turn("refiner_0", 0))], copier("-1"))
    with pytest.raises(ValueError, match="took no turn"):
        Intervention.without(record, ["nobody"])
    with pytest.raises(ValueError, match="only for action 'replace'"):
        Intervention.on_turn("refiner_0", 2, "remove", "text")
    with pytest.raises(ValueError, match="returned 0 responses for 1 requests"):
        replay(env, [(record, Intervention.without(record, ["generator_0"]))], lambda r: [])
    with pytest.raises(TypeError, match="for agent 'verifier_0', not a str"):
        replay(env, [(record, Intervention.without(record, ["generator_0"]))], lambda r: [1])
    old = EpisodeRecord.from_dict({**record.to_dict(), "start_state": None})
    with pytest.raises(ValueError, match="has no start_state"):
        replay(env, [(old, Intervention.on_turn("refiner_0", 2))], copier("-1"))
    with pytest.raises(ValueError, match="cannot restart an episode of 'chain-v0'"):
        marti_env.make("mad-v0").restart(record)
    with pytest.raises(ValueError, match="credit method 'sibling' re-executes episodes"):
        marti_env.make("mad-v0", credit="sibling")
    with pytest.raises(TypeError, match="'none' does not re-execute"):
        credit_by_replay(env, [record], make_credit("none"), copier("-1"))
    with pytest.raises(ValueError, match="reference must be 'recorded' or 'replayed'"):
        make_credit("leave_one_out_replay", reference="both")
    with pytest.raises(ValueError, match="samples must be"):
        make_credit("leave_one_out_replay", samples=0)


def test_rollout_with_a_replay_credit_rewards_samples_and_counts_the_cost():
    """The trainer's rollout runs the replays with the same policies and copies the
    method's rewards into the training samples."""
    from marti_env.tasks import ArithmeticTasks
    from marti_trainer.policies.simulated import SimulatedPolicy
    from marti_trainer.rollout import rollout

    tasks = [ArithmeticTasks(split="test", seed=0)[k] for k in range(3)]
    batch = rollout(
        "chain-v0", tasks, 2, SimulatedPolicy(accuracy=0.6, seed=3), progress=False,
        mode="sync", replay_credit=make_credit("leave_one_out_replay"),
    )  # fmt: skip
    needed = sum(
        generations_needed(r, c)
        for r in batch.episodes
        for c in make_credit("leave_one_out_replay").interventions(r)
    )
    assert batch.stats.replay_generations == needed == 6 * (2 + 1 + 0)
    assert batch.stats.replay_tokens > 0
    for s in batch.samples:
        record = batch.episodes[s.episode]
        turn = next(t for t in record.turns if (t.agent, t.round) == (s.agent, s.round))
        assert s.reward == turn.reward and record.credit == "leave_one_out_replay"
    # the refiner's credit is R - 0 (without it there is no final answer): its outcome
    assert all(
        s.reward == batch.episodes[s.episode].outcome for s in batch.samples if s.role == "refiner"
    )
    # upstream agents are paid their replayed difference, not the outcome (as `none` would)
    upstream = [s for s in batch.samples if s.role != "refiner"]
    assert any(s.reward != batch.episodes[s.episode].outcome for s in upstream)
    with pytest.raises(ValueError, match="credits the episodes itself"):
        rollout("chain-v0", tasks, 1, SimulatedPolicy(), progress=False,
                env_kwargs={"credit": "quality"}, replay_credit=make_credit("sibling"))  # fmt: skip


def test_training_on_siblings_groups_each_turn_with_its_alternatives():
    """``sibling`` with ``train=True`` (AT-GRPO's tree groups): every turn gets K sibling
    samples from the same prompt, rewarded with their replays' outcomes, and the node
    group's mean-centred advantage of the recorded turn is K/(K+1) times the sibling
    credit of ``train=False`` on the same draws."""
    from marti_env.tasks import ArithmeticTasks
    from marti_trainer.policies.simulated import SimulatedPolicy
    from marti_trainer.rollout import group_key_of, rollout

    tasks = [ArithmeticTasks(split="test", seed=0)[k] for k in range(4)]
    k = 2

    def run(train: bool):
        return rollout(
            "chain-v0", tasks, 2, SimulatedPolicy(accuracy=0.6, seed=3), progress=False,
            mode="sync", seed=7, replay_credit=make_credit("sibling", samples=k, train=train),
        )  # fmt: skip

    plain, tree = run(False), run(True)
    own = [s for s in tree.samples if s.branch == 0]
    assert len(own) == len(plain.samples) and len(tree.samples) == (1 + k) * len(own)
    assert tree.stats.replay_generations == plain.stats.replay_generations
    groups = tree.groups("node")
    assert len(groups) == len(own) and all(len(g) == 1 + k for g in groups.values())
    by_turn = {(s.episode, s.agent, s.round): s for s in plain.samples}
    for g in groups.values():
        first, *siblings = g
        assert first.branch == 0 and [s.branch for s in siblings] == list(range(1, k + 1))
        assert first.reward == tree.episodes[first.episode].outcome
        assert all(s.prompt_token_ids == first.prompt_token_ids for s in siblings)
        assert {group_key_of(s, "node") for s in g} == {(*first.group_key, first.episode)}
        centred = first.reward - np.mean([s.reward for s in g])
        sibling_credit = by_turn[(first.episode, first.agent, first.round)].reward
        assert centred == pytest.approx(k / (k + 1) * sibling_credit)
    # siblings differ from their turn somewhere (independent draws), and some win or lose
    assert any(s.response_token_ids != g[0].response_token_ids
               for g in groups.values() for s in g[1:])  # fmt: skip
    assert len({s.reward for s in tree.samples if s.branch}) == 2
    # transcripts say the records hold the outcome, not the sibling baseline
    assert {r.credit for r in tree.episodes} == {"sibling:train=true"}
    assert {r.credit for r in plain.episodes} == {"sibling"}
    # the learner groups by node: under RLOO the recorded turn's advantage is exactly
    # R - mean_k R_k, the sibling credit of train=False
    from marti_trainer.config import AlgorithmConfig
    from marti_trainer.learner.loss import sample_advantages

    cfg = AlgorithmConfig(advantage="rloo", group_by="node", overlong_penalty=0.0)
    adv = sample_advantages(tree.samples, None, cfg, max_tokens=32)
    for s, a in zip(tree.samples, adv.tolist(), strict=True):
        if s.branch == 0:
            assert a == pytest.approx(by_turn[(s.episode, s.agent, s.round)].reward)
    with pytest.raises(ValueError, match="train must be true or false"):
        make_credit("sibling", train="yes")


def test_code_kinds_of_task_survive_json_and_replay():
    """An expr-team-v0 episode read back from JSON keeps its ExprTask (with the hidden
    tests), so it can be replayed from a transcript file."""
    env = marti_env.make("expr-team-v0")
    env.reset(seed=4)
    task = env.record.task
    while env.agents:
        env.step({a: f"\\boxed{{{task.answer}}}" for a in env.agents})
    back = EpisodeRecord.from_dict(json.loads(env.record.to_json()))
    assert type(back.task) is type(task) and back.task == task
    out = replay(env, [(back, Intervention.on_turn("coder_0", 1, "replace", "\\boxed{x}"))], None)
    assert [t.response for t in out.records[0].turns[:2]] == [t.response for t in back.turns[:2]]
    with pytest.raises(ValueError, match="of kind 'nope'"):
        EpisodeRecord.from_dict({**back.to_dict(), "task": {**task.to_dict(), "kind": "nope"}})
