"""Update throughput of one training step: marti's engine vs TRL's GRPOTrainer, side by side.

Both sides train the same model (default: SmolLM2-135M-Instruct, fp32 master weights,
bf16 autocast) on the same batch: ``--prompts`` prompts x ``--generations`` completions of
fixed token ids (sampled once from the model beforehand), the same rewards (distinct within
each group, so every sample has a non-zero advantage and both sides do the same work),
GRPO advantages, beta 0 (no reference model), one optimizer step per batch, AdamW, the
same learning rate and max grad norm. Generation is *excluded*: TRL gets the completions
from a ``rollout_func`` that returns them instantly; marti's loop gets them as rollout
samples. Timed: everything from the completions to the updated weights (rewards,
advantages, padding, forward, backward, optimizer step), median over ``--steps`` steps
after one warm-up step, in one process, the sides one after the other.

marti runs twice: as configured by default (``optim.share_prompts``: each distinct prompt is
forwarded once per micro-batch and its key/value cache serves every completion of it) and
with ``share_prompts`` off (every row forwards its own prompt, as TRL does).

    pip install trl          # for this benchmark only; not a dependency of marti
    python benchmarks/bench_train_step.py --steps 3

Prints a table and writes ``--out`` (JSON). Throughput counts prompt + completion tokens
of the batch (without padding) per second of update time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def make_batch(model_dir: Path, prompts: int, generations: int, max_tokens: int, seed: int):
    """Prompts (chat-templated ids), sampled completions and distinct rewards per group."""
    from marti_env.tasks import ArithmeticTasks
    from marti_trainer.policies import SamplingParams
    from marti_trainer.policies.hf import HFPolicy

    tasks = ArithmeticTasks(seed=seed, levels=(1, 2), size=prompts)
    chats = [
        [{"role": "user", "content": f"{t.prompt} Give the final answer in \\boxed{{}}."}]
        for t in tasks
    ]
    policy = HFPolicy(model_dir, dtype="bfloat16", seed=seed)
    outs = policy.generate(chats, SamplingParams(n=generations, max_tokens=max_tokens, seed=seed))
    policy.close()
    texts = [policy_text for policy_text in chats]
    rows = []
    for i, gens in enumerate(outs):
        for j, g in enumerate(gens):
            rows.append(
                SimpleNamespace(
                    prompt_token_ids=g.prompt_token_ids,
                    response_token_ids=g.token_ids,
                    logprobs=g.logprobs,
                    reward=float(j) / generations,  # distinct: every advantage is non-zero
                    group_key=(f"task{i}", "agent", 0),
                    prompt_index=i,
                )
            )
    return texts, rows


def marti_step_times(model_dir, rows, args, share_prompts: bool) -> list[float]:
    from transformers import AutoModelForCausalLM

    from marti_trainer.config import AlgorithmConfig, OptimConfig
    from marti_trainer.engines import make_engine
    from marti_trainer.learner import collate, make_loss_fn, sample_advantages, set_norm

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    alg = AlgorithmConfig(
        advantage="grpo", clip_low=0.2, clip_high=0.2, aggregation=args.aggregation
    )
    opt = OptimConfig(
        lr=1e-6,
        precision="bf16",
        max_grad_norm=1.0,
        micro_batch_tokens=args.micro_batch_tokens,
        share_prompts=share_prompts,
    )
    engine = make_engine(model, opt, make_loss_fn(alg, args.max_tokens), total_steps=args.steps + 1)
    times = []
    for _ in range(args.steps + 1):
        t0 = time.perf_counter()
        batch = collate(rows, pad_id=2)
        batch.advantages = sample_advantages(rows, batch, alg, args.max_tokens)
        engine.step(set_norm(batch, alg.aggregation))
        times.append(time.perf_counter() - t0)
    return times[1:]


def trl_step_times(model_dir, texts, rows, args) -> list[float]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    by_prompt: dict[int, list] = {}
    for r in rows:
        by_prompt.setdefault(r.prompt_index, []).append(r)

    def rollout_func(prompts, trainer):
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "reward_value": []}
        for k in range(len(prompts)):
            r = by_prompt[k % len(by_prompt)][len(out["prompt_ids"]) % args.generations]
            out["prompt_ids"].append(list(r.prompt_token_ids))
            out["completion_ids"].append(list(r.response_token_ids))
            out["logprobs"].append(list(r.logprobs))
            out["reward_value"].append(r.reward)
        return out

    def reward(completions, reward_value, **kwargs):
        return list(reward_value)

    class Timer(TrainerCallback):
        def __init__(self):
            self.times, self.t0 = [], 0.0

        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.times.append(time.perf_counter() - self.t0)

    n = args.prompts * args.generations
    dataset = Dataset.from_list(
        [{"prompt": str(i)} for i in range(args.prompts)] * (args.steps + 2)
    )
    config = GRPOConfig(
        output_dir=str(Path(args.out).parent / "trl_tmp"), per_device_train_batch_size=n,
        num_generations=args.generations, max_completion_length=args.max_tokens,
        learning_rate=1e-6, max_grad_norm=1.0, beta=0.0, num_iterations=1, epsilon=0.2,
        loss_type="dapo" if args.aggregation == "token-mean" else "grpo", bf16=True,
        max_steps=args.steps + 1, logging_steps=1, save_strategy="no", report_to=[],
        use_cpu=not torch.cuda.is_available(), seed=args.seed, shuffle_dataset=False,
        gradient_accumulation_steps=1, steps_per_generation=1,
    )  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    rollout_func.__name__ = "fixed_completions"
    timer = Timer()
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=config, train_dataset=dataset,
        processing_class=AutoTokenizer.from_pretrained(model_dir), rollout_func=rollout_func,
        callbacks=[timer],
    )  # fmt: skip
    trainer.train()
    return timer.times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--aggregation", default="token-mean", choices=["token-mean", "seq-mean-token-mean"]
    )
    parser.add_argument(
        "--micro-batch-tokens",
        type=int,
        default=1 << 30,
        help="marti's budget (default: one micro-batch, like TRL)",
    )
    parser.add_argument("--out", default="runs/bench_train_step/results.json")
    args = parser.parse_args()

    from marti_trainer.models import resolve_model

    model_dir = resolve_model(args.model)
    texts, rows = make_batch(model_dir, args.prompts, args.generations, args.max_tokens, args.seed)
    tokens = sum(len(r.prompt_token_ids) + len(r.response_token_ids) for r in rows)
    results = {}
    results["marti"] = marti_step_times(model_dir, rows, args, share_prompts=True)
    results["marti-plain"] = marti_step_times(model_dir, rows, args, share_prompts=False)
    results["trl"] = trl_step_times(model_dir, texts, rows, args)
    report = {"config": vars(args), "tokens_per_step": tokens, "threads": torch.get_num_threads()}
    for name, times in results.items():
        median = statistics.median(times)
        report[name] = {"step_s": times, "median_s": median, "tokens_per_s": tokens / median}
    speed = {name: report[name]["tokens_per_s"] for name in results}
    report["ratio_marti_over_trl"] = speed["marti"] / speed["trl"]
    report["ratio_marti_plain_over_trl"] = speed["marti-plain"] / speed["trl"]
    report["ratio_shared_over_plain"] = speed["marti"] / speed["marti-plain"]
    import trl

    report["trl_version"] = trl.__version__
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"batch: {len(rows)} sequences, {tokens} tokens (prompt + completion)")
    print(f"{'':>11} {'median s/step':>14} {'tokens/s':>10}")
    for name in results:
        print(f"{name:>11} {report[name]['median_s']:>14.2f} {report[name]['tokens_per_s']:>10.0f}")
    print(
        f"ratio marti/trl: {report['ratio_marti_over_trl']:.2f}x, marti-plain/trl: "
        f"{report['ratio_marti_plain_over_trl']:.2f}x, shared/plain prompts: "
        f"{report['ratio_shared_over_plain']:.2f}x (TRL {trl.__version__})"
    )


if __name__ == "__main__":
    main()
