"""Why a bf16 evaluation depended on its batch, and that fixed chunks remove it.

Two measurements with the default model in bf16 on the quick start's arithmetic prompts:

1. **Forward pass** (the last prompt token's logits): each prompt alone, against the same
   prompt (a) repeated 8 times (batch size changes, padding does not), (b) next to a short
   or a long partner (only the left padding changes), (c) in a left-padded batch of 64.
2. **Evaluation** (``marti_trainer.evaluate.greedy_heldout_rollout``, single-v0, greedy): N
   level 1-2 problems evaluated alone and followed by N longer level 3-4 problems (whose
   prompts widen the padding of a shared batch), with ``chunk_tasks=0`` (one rollout: one
   batch) and with fixed chunks of 16 and 32; and the answers that differ between the
   settings on the same N problems.

Run (a few minutes on 2 CPU cores), then render::

    python benchmarks/bench_batch_invariance.py measure --out docs/results/batch_invariance.json
    python benchmarks/bench_batch_invariance.py render docs/results/batch_invariance.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

FEW_SHOT = [
    {"role": "user", "content": "What is 2 + 3? Give the final answer in \\boxed{}."},
    {"role": "assistant", "content": "2 + 3 = 5. \\boxed{5}"},
]


def _messages(prompt: str) -> list[dict[str, str]]:
    ask = f"{prompt} Give the final answer in \\boxed{{}}."
    return [*FEW_SHOT, {"role": "user", "content": ask}]


def forward_pass(n: int = 64) -> dict[str, Any]:
    """Max |logit difference| and rows changed, per batching variant, against each alone."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from marti_env.tasks import ArithmeticTasks
    from marti_trainer.models import DEFAULT_MODEL, resolve_model

    path = resolve_model(DEFAULT_MODEL)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()

    def ids(prompt: str) -> list[int]:
        out = tok.apply_chat_template(
            _messages(prompt), add_generation_prompt=True, tokenize=True, return_dict=True
        )
        return list(out["input_ids"])

    prompts = [ids(t.prompt) for t in ArithmeticTasks(levels=[1, 2], size=n, split="test", seed=1)]
    long = ids(ArithmeticTasks(levels=[4], size=1, split="test", seed=3)[0].prompt)

    def last_logits(batch: list[list[int]]) -> torch.Tensor:
        width = max(map(len, batch))
        x = torch.full((len(batch), width), tok.pad_token_id or 0)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for b, seq in enumerate(batch):
            x[b, width - len(seq) :] = torch.tensor(seq)
            mask[b, width - len(seq) :] = 1
        with torch.inference_mode():
            out = model(input_ids=x, attention_mask=mask,
                        position_ids=(mask.cumsum(-1) - 1).clamp(min=0))  # fmt: skip
        return out.logits[:, -1].float()

    alone = torch.cat([last_logits([p]) for p in prompts])
    variants = {
        "same prompt x8 (no padding)": torch.cat([last_logits([p] * 8)[:1] for p in prompts]),
        "with a short partner": torch.cat([last_logits([p, prompts[0]])[:1] for p in prompts]),
        "with a long partner": torch.cat([last_logits([p, long])[:1] for p in prompts]),
        f"in a left-padded batch of {n}": last_logits(prompts),
    }
    out = {}
    for name, logits in variants.items():
        diff = (logits - alone).abs().max(-1).values
        out[name] = {
            "max_abs_logit_diff": float(diff.max()),
            "rows_changed": int((diff > 0).sum()),
            "argmax_flips": int((logits.argmax(-1) != alone.argmax(-1)).sum()),
            "rows": n,
        }
    out["long_partner_pad_tokens"] = len(long) - max(map(len, prompts))
    return out


def evaluation(n: int = 128) -> dict[str, Any]:
    """Answers of ``n`` problems that change when ``n`` longer ones join the evaluation."""
    from marti_env.tasks import ArithmeticTasks
    from marti_trainer.evaluate import greedy_heldout_rollout, summarize
    from marti_trainer.models import DEFAULT_MODEL
    from marti_trainer.policies.hf import HFPolicy
    from marti_trainer.team import GreedyDedup

    tasks = list(ArithmeticTasks(levels=[1, 2], size=n, split="test", seed=1))
    tasks += list(ArithmeticTasks(levels=[3, 4], size=n, split="test", seed=1))
    out: dict[str, Any] = {"problems": n}
    answers: dict[int, list[list[str]]] = {}
    with HFPolicy(DEFAULT_MODEL, dtype="bfloat16", batch_size=4 * n) as policy:
        for chunk in (0, 16, 32):
            runs = []
            for size in (n, 2 * n):
                t0 = time.perf_counter()
                batch = greedy_heldout_rollout(
                    "single-v0", tasks[:size], GreedyDedup(policy), 32, seed=1, chunk_tasks=chunk
                )
                runs.append((summarize(batch), batch, time.perf_counter() - t0))
            head = [[t.response for t in e.turns] for e in runs[1][1].episodes[:n]]
            alone = [[t.response for t in e.turns] for e in runs[0][1].episodes]
            answers[chunk] = alone
            out[f"chunk_tasks={chunk}"] = {
                "answers_changed": sum(a != b for a, b in zip(alone, head, strict=True)),
                "accuracy_alone": runs[0][0].avg_at_k,
                "accuracy_as_head": sum(t.outcomes[0] for t in runs[1][0].per_task[:n]) / n,
                "wall_s": [round(r[2], 1) for r in runs],
            }
    out["differ_chunk16_vs_one_rollout"] = sum(
        a != b for a, b in zip(answers[0], answers[16], strict=True)
    )
    out["differ_chunk32_vs_chunk16"] = sum(
        a != b for a, b in zip(answers[16], answers[32], strict=True)
    )
    return out


def render(data: dict[str, Any]) -> str:
    f = data["forward_pass"]
    rows = next(v["rows"] for v in f.values() if isinstance(v, dict))
    lines = [
        f"Forward pass, SmolLM2-135M-Instruct in bf16, {rows} prompts, the last prompt token's "
        f"logits against each prompt alone (the long partner adds "
        f"{f['long_partner_pad_tokens']} padding tokens):",
        "",
        "| batching | max abs logit difference | rows changed | argmax flips |",
        "| --- | --- | --- | --- |",
    ]
    for name, v in f.items():
        if isinstance(v, dict):
            lines.append(
                f"| {name} | {v['max_abs_logit_diff']:.3f} | {v['rows_changed']}/{v['rows']} "
                f"| {v['argmax_flips']} |"
            )
    e = data["evaluation"]
    n = e["problems"]
    lines += [
        "",
        f"Greedy single-v0 evaluation, 32 new tokens: {n} level 1-2 held-out problems alone, "
        f"then followed by {n} longer level 3-4 ones (seconds: alone, with the others):",
        "",
        "| evaluation | answers changed | accuracy alone | accuracy with the others | seconds |",
        "| --- | --- | --- | --- | --- |",
    ]
    for chunk in (0, 16, 32):
        v = e[f"chunk_tasks={chunk}"]
        label = f"chunks of {chunk}" if chunk else "one rollout (chunk_tasks=0)"
        lines.append(
            f"| {label} | {v['answers_changed']}/{n} | {100 * v['accuracy_alone']:.1f}% | "
            f"{100 * v['accuracy_as_head']:.1f}% | {v['wall_s'][0]:.0f}, {v['wall_s'][1]:.0f} |"
        )
    lines += [
        "",
        f"The same {n} problems alone, batched differently: chunks of 16 against one rollout "
        f"differ in {e['differ_chunk16_vs_one_rollout']} answers, chunks of 32 against "
        f"chunks of 16 in {e['differ_chunk32_vs_chunk16']}.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="run both measurements, write a result file")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    r = sub.add_parser("render", help="the markdown tables of a result file")
    r.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    if args.command == "measure":
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        data = {"forward_pass": forward_pass(), "evaluation": evaluation()}
        args.out.write_text(json.dumps(data, indent=1) + "\n")
        print(render(data))
    else:
        print(render(json.loads(args.file.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
