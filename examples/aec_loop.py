"""A chain of agents (chain-v0) through PettingZoo's AEC API: evaluate a model, collect rows.

    python examples/aec_loop.py [--model smollm2-135m-instruct] [--tasks 20]

The AEC form hands the turn to one agent at a time (generator, then verifier, then
refiner), the loop of turn-based game code. Agents that sit out a round get the turn too,
with no messages and info["active"] False; their action is ignored. Each held-out task is
posed with reset(options={"task": ...}); the per-turn rows of an episode are
record.samples(), the same rows make_vec gives.
"""

import argparse

import marti_env
from marti_env.tasks import ArithmeticTasks
from marti_trainer.models import resolve_model
from marti_trainer.policies import SamplingParams, make_policy

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="smollm2-135m-instruct", help="alias or directory")
parser.add_argument("--tasks", type=int, default=20)
args = parser.parse_args()

policy = make_policy("hf", resolve_model(args.model), dtype="float32", seed=0)
greedy = SamplingParams(temperature=0, max_tokens=64)
tasks = ArithmeticTasks(levels=(1, 2), split="test", seed=1, size=args.tasks)  # held out
env = marti_env.make("chain-v0", api="aec")
rows, outcomes = [], []
for k, task in enumerate(tasks):
    env.reset(seed=k, options={"task": task})
    for _agent in env.agent_iter():  # the agent whose turn it is
        observation, reward, termination, truncation, info = env.last()
        if termination or truncation:
            action = None  # AEC: a finished agent steps with None
        elif info["active"]:
            action = policy.generate([observation["messages"]], greedy)[0][0].text
        else:
            action = ""  # not this agent's round
        env.step(action)
    record = env.unwrapped.record
    rows += record.samples(env=k, group=k)
    outcomes.append(record.outcome)
    print(f"{task.id}: {task.prompt} -> {record.final_answer!r} (reference {task.answer})")
print(f"accuracy {sum(outcomes) / len(outcomes):.2f} over {len(outcomes)} tasks, {len(rows)} rows")
