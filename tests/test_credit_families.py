"""The credit-probe envs' rules (split-sum-v0, gate-v0, signal-v0), by hand-written tables."""

from __future__ import annotations

import pytest

import marti_env
from marti_env.credit import difference_rewards, shapley_values
from marti_env.credit.base import FinalAnswerRule
from marti_env.tasks import Task
from marti_env.workflows.gate import (
    balanced_accuracy,
    decision,
    fallback_answer,
    flip,
    flip_contribution,
    gate_answer,
    panel_rejects,
)
from marti_env.workflows.signal import (
    NULL_MESSAGE,
    candidates,
    join_messages,
    message_of,
    speaker_contribution,
)
from marti_env.workflows.split_sum import (
    combine,
    evaluate,
    local_correct,
    parse_int,
    split_instance,
)

TASK = Task("t/1", "What is 40 + 6?", "46", "test")


# -- split-sum ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("17", 17),
        ("3 * 7 - 4", 17),
        ("12 + 5", 17),
        ("2 * 3 * 4 - 1 + 2", 25),
        ("9 - 12", -3),
        ("-122", -122),
    ],
)
def test_evaluate(expr, value):
    assert evaluate(expr) == value


@pytest.mark.parametrize("bad", ["", "3 +", "* 3", "3 / 4", "__import__('os')", "3 4"])
def test_evaluate_rejects_other_text(bad):
    with pytest.raises(ValueError, match="not an expression"):
        evaluate(bad)


def test_combine_table():
    # the scripted combiner: integers add, anything else adds nothing
    assert combine({"s0": "20", "s1": "26", "d0": "0"}) == "46"
    assert combine({"s0": "20", "s1": "26", "d0": "3"}) == "49"  # a loud distractor
    assert combine({"s0": "20", "s1": None, "d0": None}) == "20"  # a missing part
    assert combine({"s0": "20", "s1": "x", "d0": "-4"}) == "16"
    assert parse_int(" -12 ") == -12 and parse_int("1.5") is None and parse_int("4\x00") == 4
    assert parse_int("1,000") == 1000 and parse_int("7" * 100) is None


@pytest.mark.parametrize(("n", "d", "difficulty"), [(1, 0, 0), (2, 1, 1), (4, 2, 2), (8, 8, 0)])
def test_split_instance_sums_to_the_answer(n, d, difficulty):
    inst = split_instance(TASK, n, d, difficulty)
    assert sum(inst.parts) == 46 and len(inst.parts) == n and len(inst.noise) == d
    assert [evaluate(s) for s in inst.shown] == list(inst.parts)
    assert split_instance(TASK, n, d, difficulty) == inst  # depends on the task only
    if n == 1:
        assert inst.parts == (46,)  # the credit-irrelevant variant: one agent sees it all


def test_split_instance_names_a_non_integer_task():
    with pytest.raises(ValueError, match="task 'x' has answer '1/2'"):
        split_instance(Task("x", "?", "1/2"), 2, 0, 0)


def _rule(answers, score_target="46"):
    return FinalAnswerRule(
        inputs=answers,
        choose=lambda a: combine(a),
        score=lambda ans: float(ans == score_target),
    )


def test_split_sum_exact_contributions():
    # all right, distractors silent: a unanimity game of the two solvers
    rule = _rule({"solver_0": "20", "solver_1": "26", "distractor_0": "0"})
    assert difference_rewards(rule) == {"solver_0": 1.0, "solver_1": 1.0, "distractor_0": 0.0}
    assert shapley_values(rule) == pytest.approx(
        {"solver_0": 0.5, "solver_1": 0.5, "distractor_0": 0.0}
    )
    # a loud distractor spoils it: D = 0 - 1 for the distractor; Shapley:
    # v(S) = 1 iff both solvers in S and the distractor not; solver i's marginal is 1 in
    # the orders (other solver, i, d): 1/6 each -> 1/6; the distractor: -1 in orders
    # (s, s, d): 2/6 -> -1/3. Sum = R = 0.
    rule = _rule({"solver_0": "20", "solver_1": "26", "distractor_0": "3"})
    assert difference_rewards(rule)["distractor_0"] == -1.0
    phi = shapley_values(rule)
    assert phi == pytest.approx({"solver_0": 1 / 6, "solver_1": 1 / 6, "distractor_0": -1 / 3})


def test_local_correct():
    inst = split_instance(TASK, 2, 2, 0)
    answers = {"solver_0": str(inst.parts[0]), "solver_1": "999", "distractor_0": "0",
               "distractor_1": "5"}  # fmt: skip
    assert local_correct(inst, answers) == {
        "solver_0": True, "solver_1": False, "distractor_0": True, "distractor_1": False,
    }  # fmt: skip


def test_split_sum_env_plays_a_right_team():
    env = marti_env.make("split-sum-v0", num_solvers=3, num_distractors=1, difficulty=2)
    obs, infos = env.reset(seed=5)
    inst = env.workflow.instance(env.record.task)
    actions = {f"solver_{i}": f"\\boxed{{{a}}}" for i, a in enumerate(inst.parts)}
    actions["distractor_0"] = "nothing to add \\boxed{0}"
    for i, shown in enumerate(inst.shown):
        assert (
            f"Your share of the total is {shown}." in obs[f"solver_{i}"]["messages"][-1]["content"]
        )
    _, rewards, *_ = env.step(actions)
    assert env.record.outcome == 1.0 and env.record.final_answer == str(inst.total)


def test_split_sum_bad_arguments_are_named():
    with pytest.raises(ValueError, match="num_solvers must be in"):
        marti_env.make("split-sum-v0", num_solvers=9)
    with pytest.raises(ValueError, match="difficulty"):
        marti_env.make("split-sum-v0", difficulty=3)


# -- gate --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("generator", "verdict", "fallback", "final"),
    [
        ("5", "ACCEPT", "7", "5"),
        ("5", "REJECT", "7", "7"),
        ("5", " reject ", "7", "7"),
        ("5", None, "7", "5"),  # no decision: no veto
        ("5", "maybe", "7", "5"),
        (None, "REJECT", None, None),
    ],
)
def test_gate_answer_table(generator, verdict, fallback, final):
    answers = {"generator_0": generator, "verifier_0": verdict, "fallback": fallback}
    assert gate_answer(answers) == final


def test_a_non_binding_gate_always_takes_the_proposal():
    # the credit-irrelevant variant: the decision is recorded, never applied
    for verdict in ("ACCEPT", "REJECT", None):
        answers = {"generator_0": "5", "verifier_0": verdict, "fallback": "7"}
        assert gate_answer(answers, binding=False) == "5"
    rule = FinalAnswerRule(
        inputs={"generator_0": "46", "verifier_0": "REJECT", "fallback": "47"},
        choose=lambda a: gate_answer(a, binding=False),
        score=lambda ans: float(ans == "46"),
    )
    # the verifier can change nothing: its difference reward and Shapley value are 0, and
    # the generator's are the whole outcome (the fallback only answers on a binding REJECT)
    assert difference_rewards(rule) == {"generator_0": 1.0, "verifier_0": 0.0, "fallback": 0.0}
    env = marti_env.make("gate-v0", binding=False)
    env.reset(seed=0)
    answer = env.record.task.answer
    env.step({"generator_0": f"\\boxed{{{answer}}}", "verifier_0": ""})
    env.step({"generator_0": "", "verifier_0": "\\boxed{REJECT}"})
    assert env.record.outcome == 1.0 and env.record.final_answer == answer
    with pytest.raises(ValueError, match="binding must be a bool, got 'no'"):
        marti_env.make("gate-v0", binding="no")


def test_gate_flip_and_contribution():
    assert flip("ACCEPT") == "REJECT" and flip("reject") == "ACCEPT" and flip(None) == "REJECT"
    assert decision("Accept") == "ACCEPT" and decision("yes") is None
    # right proposal accepted, fallback wrong: the verifier made the outcome
    assert flip_contribution(1.0, 0.0) == 1.0
    assert flip_contribution(1.0, 1.0) == 0.0 and flip_contribution(0.0, 1.0) == -1.0


def test_balanced_accuracy_hand_values():
    # TPR = 1/2 (accepted one of two right), TNR = 2/2 -> 0.75
    assert balanced_accuracy([True, True, False, False], [True, False, False, False]) == 0.75
    # always-ACCEPT: TPR 1, TNR 0 -> 0.5 whatever the mix
    assert balanced_accuracy([True] * 9 + [False], [True] * 10) == 0.5
    assert balanced_accuracy([True, True], [True, False]) == 0.5  # one class only
    with pytest.raises(ValueError, match="3 labels but 2 decisions"):
        balanced_accuracy([True, True, False], [True, False])


def test_fallback_answer():
    assert fallback_answer(TASK, 0.3, u=0.29, v=0.0) == "46"
    assert fallback_answer(TASK, 0.3, u=0.31, v=0.0) == "47"
    assert fallback_answer(TASK, 0.3, u=0.31, v=0.99) == "36"


def test_gate_env_accuracy_of_fallback_is_q():
    env = marti_env.make("gate-v0", fallback_accuracy=0.25)
    outcomes = []
    for seed in range(400):
        env.reset(seed=seed)
        env.step({"generator_0": "\\boxed{-1}", "verifier_0": ""})
        env.step({"generator_0": "", "verifier_0": "\\boxed{REJECT}"})
        outcomes.append(env.record.outcome)
    assert 0.18 < sum(outcomes) / len(outcomes) < 0.32  # 0.25 +- 3 sd


def test_gate_rule_inputs_refuse_a_foreign_transcript():
    env = marti_env.make("gate-v0")
    with pytest.raises(ValueError, match="gate: rule_inputs needs the transcript"):
        env.workflow.rule_inputs([])
    with pytest.raises(ValueError, match="fallback_accuracy must be a number in"):
        marti_env.make("gate-v0", fallback_accuracy=1.5)


@pytest.mark.parametrize(
    ("verdicts", "rejects"),
    [
        (["REJECT"], True),
        (["ACCEPT"], False),
        ([None], False),
        (["REJECT", "ACCEPT"], False),  # an even panel's tie lets the proposal through
        (["REJECT", "REJECT"], True),
        (["REJECT", "REJECT", "ACCEPT"], True),  # 2 > 3/2
        (["REJECT", None, "maybe"], False),  # no decision counts as not rejecting
        (["REJECT", "REJECT", "ACCEPT", "ACCEPT", "REJECT"], True),
        (["REJECT", "REJECT", None, None, "ACCEPT"], False),  # 2 of 5
    ],
)
def test_panel_rejects_by_strict_majority(verdicts, rejects):
    assert panel_rejects(verdicts) is rejects
    answers = {"generator_0": "5", "fallback": "7"}
    answers.update({f"verifier_{i}": v for i, v in enumerate(verdicts)})
    assert gate_answer(answers) == ("7" if rejects else "5")


def test_a_verifier_panel_counterfactuals_by_hand():
    """Three verifiers: a verifier is pivotal only when the other two split."""
    rule = FinalAnswerRule(
        inputs={
            "generator_0": "46",
            "verifier_0": "REJECT",
            "verifier_1": "ACCEPT",
            "verifier_2": "REJECT",
            "fallback": "47",
        },
        choose=gate_answer,
        score=lambda ans: float(ans == "46"),
    )
    assert rule.outcome(rule.inputs) == 0.0  # 2 of 3 reject a right proposal
    flipped = {v: flip_contribution(0.0, rule.outcome({**rule.inputs, v: flip(rule.inputs[v])}))
               for v in ("verifier_0", "verifier_1", "verifier_2")}  # fmt: skip
    # flipping either REJECT gives 1 REJECT of 3: the proposal goes through, R' = 1
    assert flipped == {"verifier_0": -1.0, "verifier_1": 0.0, "verifier_2": -1.0}


def test_a_verifier_panel_env():
    env = marti_env.make("gate-v0", num_verifiers=3, fallback_accuracy=0.0)
    assert env.possible_agents == ["generator_0", "verifier_0", "verifier_1", "verifier_2"]
    assert {env.workflow.role(a) for a in env.possible_agents[1:]} == {"verifier"}
    outcomes = []
    for verdicts in (("REJECT", "ACCEPT", "ACCEPT"), ("REJECT", "REJECT", "ACCEPT")):
        obs, _ = env.reset(seed=0)
        answer = env.record.task.answer
        assert env.agents == env.possible_agents  # all four live until the episode ends
        obs, *_ = env.step({a: f"\\boxed{{{answer}}}" for a in env.agents})
        shown = [obs[f"verifier_{i}"]["messages"][-1]["content"] for i in range(3)]
        assert len(set(shown)) == 1 and f"\\boxed{{{answer}}}" in shown[0]  # one proposal
        env.step({"generator_0": "", **{f"verifier_{i}": f"\\boxed{{{v}}}"
                                         for i, v in enumerate(verdicts)}})  # fmt: skip
        outcomes.append(env.record.outcome)
    assert outcomes == [1.0, 0.0]  # the fallback is never right (q = 0)
    with pytest.raises(ValueError, match=r"num_verifiers must be in \[1, 9\], got 0"):
        marti_env.make("gate-v0", num_verifiers=0)


@pytest.mark.filterwarnings("ignore:Observation is not a NumPy array")  # explained in
@pytest.mark.filterwarnings("ignore:Observation space for each agent")  # test_env_conformance
@pytest.mark.filterwarnings("ignore:Action space for each agent")
def test_a_verifier_panel_passes_the_pettingzoo_tests():
    from pettingzoo.test import api_test, parallel_api_test

    parallel_api_test(marti_env.make("gate-v0", num_verifiers=3, max_response_chars=500), 10)
    api_test(marti_env.make("gate-v0", num_verifiers=2, api="aec", max_response_chars=500), 10)


# -- signal ------------------------------------------------------------------------------


def test_message_of():
    assert message_of("46") == "46" and message_of("  46 is it ") == "46"
    assert message_of(None) == NULL_MESSAGE and message_of("   ") == NULL_MESSAGE
    assert message_of("x" * 100) == "x" * 24


def test_candidates_hold_the_target_once():
    for k in (2, 4, 16):
        c = candidates(TASK, k)
        assert len(set(c)) == k and c.count("46") == 1
        assert all(abs(int(x) - 46) <= 20 for x in c)
    assert candidates(TASK, 4) == candidates(TASK, 4)
    assert speaker_contribution(1.0, 0.0) == 1.0 and speaker_contribution(0.0, 0.0) == 0.0


def test_signal_listener_sees_only_the_first_token():
    env = marti_env.make("signal-v0")
    obs, infos = env.reset(seed=0)
    target = env.record.task.answer
    assert f"The target is {target}." in obs["speaker_0"]["messages"][-1]["content"]
    obs, *_ = env.step(
        {"speaker_0": f"Pick it: \\boxed{{{target} secret words}}", "listener_0": ""}
    )
    seen = obs["listener_0"]["messages"][-1]["content"]
    assert f"sent you this message: {target}." in seen and "secret" not in seen
    env.step({"speaker_0": "", "listener_0": f"\\boxed{{{target}}}"})
    assert env.record.outcome == 1.0
    assert "The target is" not in seen  # told only in the credit-irrelevant variant


def test_several_speakers_are_shown_in_speaker_order():
    assert join_messages(["46"]) == "46"
    assert join_messages(["46", NULL_MESSAGE, "ok"]) == "46 / (no message) / ok"
    env = marti_env.make("signal-v0", num_speakers=3)
    assert env.possible_agents == ["speaker_0", "speaker_1", "speaker_2", "listener_0"]
    obs, _ = env.reset(seed=0)
    target = env.record.task.answer
    spoken = {"speaker_0": "\\boxed{ok}", "speaker_1": "nothing boxed",
              "speaker_2": f"\\boxed{{{target} it is}}", "listener_0": ""}  # fmt: skip
    obs, *_ = env.step(spoken)
    seen = obs["listener_0"]["messages"][-1]["content"]
    assert f"message: ok / (no message) / {target}. Give" in seen
    env.step({**dict.fromkeys(spoken, ""), "listener_0": f"\\boxed{{{target}}}"})
    assert env.record.outcome == 1.0
    with pytest.raises(ValueError, match=r"num_speakers must be in \[1, 4\], got 5"):
        marti_env.make("signal-v0", num_speakers=5)


@pytest.mark.filterwarnings("ignore:Observation is not a NumPy array")
@pytest.mark.filterwarnings("ignore:Observation space for each agent")
@pytest.mark.filterwarnings("ignore:Action space for each agent")
def test_several_speakers_pass_the_pettingzoo_tests():
    from pettingzoo.test import api_test, parallel_api_test

    parallel_api_test(marti_env.make("signal-v0", num_speakers=2, max_response_chars=500), 10)
    api_test(marti_env.make("signal-v0", num_speakers=3, api="aec", max_response_chars=500), 10)


def test_signal_listener_told_the_target_in_the_credit_irrelevant_variant():
    env = marti_env.make("signal-v0", listener_sees_target=True)
    obs, _ = env.reset(seed=0)
    target = env.record.task.answer
    obs, *_ = env.step({"speaker_0": "\\boxed{ok}", "listener_0": ""})
    seen = obs["listener_0"]["messages"][-1]["content"]
    assert f". The target is {target}. Your partner" in seen and "message: ok." in seen
    with pytest.raises(ValueError, match="listener_sees_target must be a bool, got 1"):
        marti_env.make("signal-v0", listener_sees_target=1)
    # a user's listen prompt without {{hint}} would drop the target silently: refused
    own = {"listen": {"user": "Candidates: {{candidates}}. Message: {{message}}. Box it."}}
    marti_env.make("signal-v0", prompts=own)  # fine where no hint is needed
    with pytest.raises(ValueError, match=r"signal-v0: prompt template 'listen' does not use "
                       r"\{\{hint\}\}, which this env needs: listener_sees_target"):  # fmt: skip
        marti_env.make("signal-v0", prompts=own, listener_sees_target=True)


def test_a_signal_speaker_can_be_shown_the_problem_instead_of_the_target():
    """The LLM tier's variant (baselines/smollm2/135m_credit_signal.yaml): the speak
    template's problem field; the speaker must solve it to name the target."""
    own = {"speak": {"user": "Problem: {{problem}}\nCandidates: {{candidates}}. Box it."}}
    env = marti_env.make("signal-v0", prompts=own)
    obs, _ = env.reset(seed=0)
    task = env.record.task
    seen = obs["speaker_0"]["messages"][-1]["content"]
    assert seen.startswith(f"Problem: {task.prompt}\nCandidates: ") and seen.endswith("Box it.")
    obs, *_ = env.step({"speaker_0": f"\\boxed{{{task.answer}}}", "listener_0": ""})
    env.step({"speaker_0": "", "listener_0": f"\\boxed{{{task.answer}}}"})
    assert env.record.outcome == 1.0
    with pytest.raises(
        ValueError,
        match=r"prompts.speak uses unknown field\(s\) \['\{\{answer\}\}'\]; allowed: "
        r"\['\{\{candidates\}\}', '\{\{problem\}\}', '\{\{target\}\}'\]",
    ):
        marti_env.make("signal-v0", prompts={"speak": {"user": "Say {{answer}}."}})
