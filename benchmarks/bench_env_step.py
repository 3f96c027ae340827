"""Environment overhead per agent-step, every registered env, 4 KB responses.

    python benchmarks/bench_env_step.py [--episodes 320] [--cores 1] [--vec-envs 16]

An agent-step is one active agent's turn: the env renders its prompt (with the other
agents' 4 KB responses where the workflow shows them), takes its 4 KB response, extracts
and verifies the answer, and at the end of the episode votes and assigns credit. The
target is 20,000 agent-steps/s on one core, so the env is invisible beside generation
(SmolLM2-135M generates a few hundred tokens/s here). Pinned to one core by default.

The ``vec`` columns run the same number of episodes through ``marti_env.make_vec``
(``--vec-envs`` envs in groups of 4, reset per batch, rows collected with
``pop_samples``, as a custom loop does); ``vec overhead`` is the extra time per
agent-step over the plain env loop: requests, response checks, group resets and rows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import marti_env
from marti_env import Task

TARGET = 20_000


def responses(rng: np.random.Generator, n: int, size: int = 4096) -> list[str]:
    words = ["Let", "x", "be", "the", "sum;", "then", "3", "+", "4", "=", "7.", "So", "we", "get"]
    out = []
    for _ in range(n):
        body = " ".join(rng.choice(words, size=size // 3))[: size - 20]
        out.append(body + f" \\boxed{{{int(rng.integers(0, 20))}}}")
    return out


def bench(env_id: str, episodes: int, pool: list[str], tasks: list[Task]) -> tuple[float, int]:
    env = marti_env.make(env_id, tasks=tasks)
    agent_steps = 0
    i = 0
    start = time.perf_counter()
    for episode in range(episodes):
        obs, infos = env.reset(seed=0 if episode == 0 else None)  # seed once, as RL loops do
        while env.agents:
            actions = {}
            for a in env.agents:
                actions[a] = pool[i % len(pool)]
                i += 1
            agent_steps += len(env.active_agents)
            obs, rewards, terms, truncs, infos = env.step(actions)
    return agent_steps / (time.perf_counter() - start), agent_steps


def bench_vec(
    env_id: str, episodes: int, pool: list[str], tasks: list[Task], num_envs: int
) -> tuple[float, int]:
    vec = marti_env.make_vec(env_id, num_envs=num_envs, group_size=4, tasks=tasks)
    agent_steps = 0
    i = 0
    start = time.perf_counter()
    for batch in range(max(1, episodes // num_envs)):
        requests, _ = vec.reset(seed=batch)
        while requests:
            responses = [pool[(i + k) % len(pool)] for k in range(len(requests))]
            i += len(requests)
            agent_steps += len(requests)
            requests, *_ = vec.step(responses)
        vec.pop_samples()
    return agent_steps / (time.perf_counter() - start), agent_steps


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=320)
    parser.add_argument("--repeats", type=int, default=5, help="report the median of this many")
    parser.add_argument(
        "--cores", type=int, default=1, help="pin to this many cores (0: no pinning)"
    )
    parser.add_argument("--vec-envs", type=int, default=16, help="envs of the vec columns")
    args = parser.parse_args()
    if args.cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: args.cores]))
    rng = np.random.default_rng(0)
    pool = responses(rng, 64)
    tasks = [Task(f"b/{k}", f"What is {k} + {k}?", str(2 * k), "bench") for k in range(10)]
    bench("single-v0", 20, pool, tasks)  # warm-up: imports, verifier caches
    print(
        f"{'env':<13} {'agent-steps/s':>14} {'x target':>9} {'us/agent-step':>14} "
        f"{'vec steps/s':>12} {'vec us/step':>12} {'vec overhead':>13}"
    )
    for env_id in sorted(marti_env.registry):
        runs = [bench(env_id, args.episodes, pool, tasks)[0] for _ in range(args.repeats)]
        rate = statistics.median(runs)
        vec_runs = [
            bench_vec(env_id, args.episodes, pool, tasks, args.vec_envs)[0]
            for _ in range(args.repeats)
        ]
        vec_rate = statistics.median(vec_runs)
        print(
            f"{env_id:<13} {rate:>14,.0f} {rate / TARGET:>8.2f}x {1e6 / rate:>14.1f} "
            f"{vec_rate:>12,.0f} {1e6 / vec_rate:>12.1f} {1e6 / vec_rate - 1e6 / rate:>+11.1f}us"
        )
    print(f"(4 KB responses; median of {args.repeats} runs of {args.episodes} episodes each)")


if __name__ == "__main__":
    main()
