"""The registry: ids, overrides, YAML specs and their errors."""

from __future__ import annotations

from typing import ClassVar

import pytest

import marti_env
from marti_env.registry import load_spec_file
from marti_env.workflows import Debate, Prompt, Workflow


def test_make_returns_parallel_env_with_defaults():
    env = marti_env.make("mad-v0")
    assert env.possible_agents == ["debater_0", "debater_1", "debater_2"]
    assert env.workflow.num_rounds == 2
    assert env.metadata["name"] == "mad-v0"


def test_overrides_reach_the_workflow():
    env = marti_env.make("mad-v0", num_agents=2, rounds=3, include_self=False)
    assert env.workflow.num_agents == 2 and env.workflow.num_rounds == 3
    assert env.workflow.include_self is False


def test_unknown_id_suggests_closest():
    with pytest.raises(ValueError, match=r"did you mean [^)]*'mad-v0'"):
        marti_env.make("mda-v0")


def test_versionless_and_wrong_version():
    with pytest.raises(ValueError, match="mad-v0"):
        marti_env.make("mad")
    with pytest.raises(ValueError, match=r"no such version.*mad-v0"):
        marti_env.make("mad-v7")


def test_unknown_override_names_key_and_allowed():
    with pytest.raises(ValueError, match=r"'num_agent'.*did you mean 'num_agents'.*allowed:"):
        marti_env.make("mad-v0", num_agent=2)
    with pytest.raises(ValueError, match="num_proposers"):
        marti_env.make("moa-v0", num_agents=2)  # a debate argument on moa


def test_bad_override_value():
    with pytest.raises(ValueError, match="rounds"):
        marti_env.make("mad-v0", rounds=-1)
    with pytest.raises(ValueError, match="api"):
        marti_env.make("mad-v0", api="gym")
    with pytest.raises(ValueError, match="credit"):
        marti_env.make("mad-v0", credit="nonee")


def test_prompt_override_is_validated():
    env = marti_env.make("single-v0", prompts={"solve": "Solve: {{problem}}"})
    obs, _ = env.reset(seed=0)
    assert obs["solver_0"]["messages"][-1]["content"].startswith("Solve: ")
    with pytest.raises(ValueError, match=r"\{\{problm\}\}"):
        marti_env.make("single-v0", prompts={"solve": "Solve: {{problm}}"})
    with pytest.raises(ValueError, match="unknown prompt template"):
        marti_env.make("single-v0", prompts={"debate": "x"})


def test_observation_is_chat_messages_with_worked_example():
    env = marti_env.make("single-v0")
    obs, _ = env.reset(seed=0)
    messages = obs["solver_0"]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert "\\boxed{5}" in messages[1]["content"]
    assert env.record.task.prompt in messages[-1]["content"]
    assert "\\boxed{}" in messages[-1]["content"]


def test_register_custom_env_and_spec():
    spec = marti_env.register(
        "tiny-debate-v3",
        Debate,
        kwargs={"num_agents": 2, "rounds": 1},
        prompts={"solve": "{{problem}}", "debate": "{{problem}} {{responses}}"},
        summary="test",
    )
    try:
        assert marti_env.spec("tiny-debate-v3") is spec
        assert spec.name == "tiny-debate" and spec.version == 3
        env = marti_env.make("tiny-debate-v3")
        assert len(env.possible_agents) == 2
        with pytest.raises(ValueError, match="already registered"):
            marti_env.register("tiny-debate-v3", Debate, prompts=spec.prompts)
    finally:
        del marti_env.registry["tiny-debate-v3"]


def test_register_rejects_bad_ids_and_args():
    with pytest.raises(ValueError, match="name-vN"):
        marti_env.register("nodash", "mad", prompts={})
    with pytest.raises(ValueError, match="unknown workflow 'madd'"):
        marti_env.register("x-v0", "madd", prompts={})
    with pytest.raises(ValueError, match="'num_agnts'"):
        marti_env.register("x-v0", "mad", kwargs={"num_agnts": 3}, prompts={})
    assert "x-v0" not in marti_env.registry


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("id: a-v0\nworkflow: single\nprompts: {solve: '{{problem}}'}\ncolour: red\n", "colour"),
        ("id: a-v0\nworkflow: single\n", "missing key 'prompts'"),
        ("id: a-v0\nworkflow: single\nprompts: {}\n", "missing prompt template 'solve'"),
        ("id: a-v0\nworkflow: single\nprompts: {solve: {user: x, exampels: []}}\n", "exampels"),
        ("id: [unclosed\n", "invalid YAML"),
    ],
)
def test_yaml_spec_errors_name_the_file(tmp_path, text, message):
    path = tmp_path / "bad-v0.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as info:
        load_spec_file(path)
    assert "bad-v0.yaml" in str(info.value)
    assert "a-v0" not in marti_env.registry


def test_pprint_registry_lists_every_env():
    text = marti_env.pprint_registry(print_output=False)
    for env_id in ("mad-v0", "moa-v0", "chain-v0", "single-v0", "majority-v0"):
        assert env_id in text


def test_shared_benchmark_files_as_task_sources(data_file):
    data_file("math_train")  # gsm8k/test ships with the package; MATH train does not
    env = marti_env.make("single-v0", tasks="gsm8k/test")
    env.reset(seed=0)
    assert env.record.task.id.startswith("gsm8k/test/")
    # MATH train has two rows with an empty answer: dropped with a warning naming them.
    with pytest.warns(UserWarning, match="dropping 2 of 8890"):
        env = marti_env.make("mad-v0", tasks="math_train")
    assert len(env.tasks) == 8888


def test_reward_options_pass_through_make():
    """max_answer_chars reaches the verifier of 'math', 'math+format' and 'ttrl', like a
    credit method's options; a reward without it refuses it, naming the allowed keys."""
    env = marti_env.make("single-v0", max_answer_chars=3)
    assert env.reward.resolved_verifier().max_answer_chars == 3
    env.reset(seed=0, options={"task": marti_env.Task("t", "p", "1000")})
    *_, infos = env.step({"solver_0": r"\boxed{1000}"})  # 4 characters: rejected
    assert infos["solver_0"]["episode"].outcome == 0.0
    env = marti_env.make(
        "mad-v0", reward="math+format", max_answer_chars=7, credit="margin", alpha=0.5
    )
    assert "max_answer_chars=7" in repr(env.reward) and env.credit.alpha == 0.5
    env = marti_env.make("mad-v0", reward="ttrl", max_answer_chars=9)
    assert env.reward is None and env.label_free_reward.max_answer_chars == 9
    with pytest.raises(ValueError, match=r"'max_answer_chars'.*allowed: (?!.*max_answer_chars)"):
        marti_env.make("mad-v0", reward="format", max_answer_chars=5)
    with pytest.raises(ValueError, match=r"'max_answer_char'.*did you mean 'max_answer_chars'"):
        marti_env.make("mad-v0", max_answer_char=5)
    assert "max_answer_chars" in marti_env.spec("mad-v0").allowed_args(reward="math")


def test_reward_options_in_a_registered_spec():
    marti_env.register(
        "capped-v0",
        "single",
        kwargs={"max_answer_chars": 4},
        prompts={"solve": "{{problem}}"},
    )
    try:
        assert marti_env.make("capped-v0").reward.max_answer_chars == 4
        assert marti_env.make("capped-v0", max_answer_chars=6).reward.max_answer_chars == 6
    finally:
        del marti_env.registry["capped-v0"]
    with pytest.raises(ValueError, match="'max_answer_chars'"):
        marti_env.register(
            "capped-v0",
            "single",
            kwargs={"reward": "format", "max_answer_chars": 4},
            prompts={"solve": "{{problem}}"},
        )
    assert "capped-v0" not in marti_env.registry


# --- workflows by entry point ("package.module:Class"), as Gymnasium's entry_point --------


class Echo(Workflow):
    """A workflow outside the library: one speaker answers; its answer is the team's."""

    name = "echo"
    templates: ClassVar = {"say": frozenset({"problem"})}
    agents = ("speaker_0",)
    num_rounds = 1

    def role(self, agent):
        return "speaker"

    def actors(self, round):
        return self.agents

    def request(self, agent, round, task, transcript, rng):
        return Prompt("say", {"problem": task.prompt})

    def rule_inputs(self, transcript):
        return {t.agent: t.answer for t in transcript}

    def final_rule(self, answers, tie_order):
        return answers.get("speaker_0")


NOT_A_WORKFLOW = 3
ECHO_SPEC = "id: echo-v0\nworkflow: {}\nprompts: {{say: '{{{{problem}}}}'}}\n"


def play_echo(env_id: str) -> float:
    env = marti_env.make(env_id)
    env.reset(seed=0, options={"task": marti_env.Task("t", "What is 1 + 1?", "2")})
    *_, infos = env.step({"speaker_0": r"\boxed{2}"})
    return infos["speaker_0"]["episode"].outcome


def test_a_yaml_spec_names_its_workflow_by_entry_point(tmp_path):
    path = tmp_path / "echo-v0.yaml"
    path.write_text(ECHO_SPEC.format("tests.test_registry:Echo"))
    spec = load_spec_file(path)
    try:
        assert spec.workflow is Echo and marti_env.spec("echo-v0") is spec
        assert play_echo("echo-v0") == 1.0
    finally:
        del marti_env.registry["echo-v0"]
    spec = marti_env.register("echo-v1", "tests.test_registry:Echo", prompts={"say": "{{problem}}"})
    try:
        assert spec.workflow is Echo and play_echo("echo-v1") == 1.0
    finally:
        del marti_env.registry["echo-v1"]


@pytest.mark.parametrize(
    ("entry_point", "message"),
    [
        ("tests.no_such_module:Echo", r"loading 'tests\.no_such_module' failed: ModuleNotFound"),
        ("broken_module:Echo", r"loading 'broken_module' failed: RuntimeError: boom"),
        ("tests.test_registry:Ecko", r"'tests\.test_registry' has no attribute 'Ecko'"),
        ("tests.test_registry:NOT_A_WORKFLOW", r"is 3, not a subclass of .*\.Workflow"),
        (":Echo", r"not of the form 'package\.module:Class'"),
        ("tests.test_registry", r"unknown workflow .*or an entry point 'package\.module:Class'"),
    ],
)  # fmt: skip
def test_entry_point_errors_name_the_file_the_entry_point_and_the_failure(
    tmp_path, monkeypatch, entry_point, message
):
    (tmp_path / "broken_module.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "echo-v0.yaml"
    path.write_text(ECHO_SPEC.format(entry_point))
    with pytest.raises(ValueError, match=message) as info:
        load_spec_file(path)
    assert str(path) in str(info.value) and repr(entry_point) in str(info.value)
    assert "echo-v0" not in marti_env.registry
