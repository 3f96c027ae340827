"""my_workflow.py: a new workflow (a solver, then a checker), registered as "solve-check-v0"."""

from typing import ClassVar

import marti_env
from marti_env.workflows import Prompt, Workflow


class SolveThenCheck(Workflow):
    """Round 0: the solver answers. Round 1: the checker sees that solution and answers;
    the checker's answer is the team's."""

    name = "solve_then_check"
    templates: ClassVar = {
        "solve": frozenset({"problem"}),
        "check": frozenset({"problem", "solution"}),
    }
    agents = ("solver_0", "checker_0")
    num_rounds = 2

    def role(self, agent):
        return agent.rsplit("_", 1)[0]

    def actors(self, round):
        return (self.agents[round],)

    def request(self, agent, round, task, transcript, rng):
        if round == 0:
            return Prompt("solve", {"problem": task.prompt})
        return Prompt("check", {"problem": task.prompt, "solution": self.shown(transcript[0])})

    def rule_inputs(self, transcript):
        return {t.agent: t.answer for t in transcript}

    def final_rule(self, answers, tie_order):
        return answers.get("checker_0")


marti_env.register(
    "solve-check-v0",
    SolveThenCheck,
    prompts={
        "solve": r"{{problem}} Give the final answer in \boxed{}.",
        "check": "{{problem}}\n\nProposed solution:\n{{solution}}\n\n"
        r"Check it, then give the final answer in \boxed{}.",
    },
    summary="A solver answers; a checker sees its solution and gives the final answer.",
)

if __name__ == "__main__":
    env = marti_env.make("solve-check-v0")
    obs, infos = env.reset(seed=0)
    while env.agents:
        print(obs[env.active_agents[0]]["messages"][-1]["content"], end="\n---\n")
        answer = env.record.task.answer  # a scripted team that knows the answer
        actions = {a: f"The answer is {answer}. \\boxed{{{answer}}}" for a in env.active_agents}
        obs, rewards, terminations, truncations, infos = env.step(actions)
    record = infos["checker_0"]["episode"]
    print(record.final_answer, record.outcome, rewards)
