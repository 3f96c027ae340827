"""Where a quick-start training step's time goes: a per-phase profile, variants side by side.

Each variant runs ``marti train baselines/quickstart.yaml total_steps=N`` (default 3) in a
fresh process, one after the other on this machine (run nothing else meanwhile), with the
held-out evaluation at the end and the final checkpoint as the quick start does, and reads
the run's ``metrics.jsonl`` / ``summary.json``. Phases (seconds per training step, mean over
the steps, and share of the step):

- rollout: ``generation`` (rollout wall time minus ``env.step``), ``verification`` (the
  math verifier's busy time), ``env_and_credit`` (the rest of ``env.step``);
- update: ``ref_logprobs`` (the frozen reference model: the KL metric or loss),
  ``old_logprobs`` (only with several updates per batch), ``forward_backward``,
  ``optimizer`` (clipping, AdamW, scheduler), ``weight_sync`` (new weights into the rollout
  copy), ``other`` (the step's remaining time: collation, advantages, metrics);
- per run, not per step: ``eval`` (the held-out evaluation) and ``checkpoint`` (the save).

It also prints generation tokens/s, the update's token rate and its achieved GFLOP/s
(``marti_trainer.flops.train_flops`` over the forward+backward time) next to a matmul probe
of this CPU in fp32 and bf16 (``--probe-shape``, the shape of SmolLM2-135M's MLP matmuls at
a micro-batch of 2048 tokens).

    python benchmarks/bench_quickstart.py                       # default, fp32, vllm, async
    python benchmarks/bench_quickstart.py --variant default --variant lr=optim.lr=2e-5
    python benchmarks/bench_quickstart.py --variant fp32 --variant bf16   # emulated bf16?
    python benchmarks/bench_quickstart.py --out docs/results/bench_quickstart_profile.json
    python benchmarks/bench_quickstart.py --render docs/results/bench_quickstart_profile.json

``--render`` prints the table of a results file without running anything; the README's
table is that output (a ``<!-- generated: ... -->`` block, checked by
tests/test_generated_docs.py and rewritten by ``python benchmarks/regenerate_docs.py``).

A variant is a built-in name (``VARIANTS``) or ``NAME=key=value,key=value`` overrides.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from marti_trainer.machine import describe_machine

REPO = Path(__file__).resolve().parents[1]

VARIANTS = {
    "default": [],
    "fp32": ["optim.precision=fp32", "rollout.dtype=float32"],
    "bf16": ["optim.precision=bf16", "rollout.dtype=bfloat16"],
    "vllm": ["rollout.backend=vllm"],
    "async": ["rollout.mode=async"],
}

STEP_PHASES = (
    "generation", "verification", "env_and_credit", "ref_logprobs", "old_logprobs",
    "forward_backward", "optimizer", "weight_sync",
)  # fmt: skip


def matmul_probe(shape: tuple[int, int, int], seconds: float = 2.0) -> dict[str, float]:
    """GFLOP/s of ``[m, k] @ [k, n]`` in fp32 and bf16 (``2 m k n`` FLOPs a product)."""
    import torch

    m, k, n = shape
    out = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        a @ b  # warm-up
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            a @ b
            count += 1
        out[name] = 2 * m * k * n * count / (time.perf_counter() - start) / 1e9
    return out


def run_variant(name: str, overrides: list[str], steps: int, out_dir: Path, config: Path) -> dict:
    """Train one variant in a fresh process; its per-phase profile."""
    cmd = [
        sys.executable, "-m", "marti_trainer.cli", "train", str(config), f"total_steps={steps}",
        f"run_name=bench-{name}", f"log.output_dir={out_dir}", "eval.at_start=false",
        "log.progress=false", "log.plots=false", "log.tensorboard=false", *overrides,
    ]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"variant {name} failed:\n{proc.stderr[-3000:]}")
    run = out_dir / f"bench-{name}"
    history = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    summary = json.loads((run / "summary.json").read_text())
    rows = [h for h in history if "charts/step_s" in h]
    mean = lambda key: statistics.fmean(h.get(key, 0.0) for h in rows)  # noqa: E731
    step_s = mean("charts/step_s")
    phases = {p: mean(f"time/{p}_s") for p in STEP_PHASES}
    phases["other"] = max(0.0, step_s - sum(phases.values()))
    flops = sum(h.get("charts/update_flops", 0.0) for h in rows)
    fwd_bwd = sum(h.get("time/forward_backward_s", 0.0) for h in rows)
    return {
        "name": name,
        "overrides": overrides,
        "steps": steps,
        "step_s": step_s,
        "steps_s": [h["charts/step_s"] for h in rows],
        "phases": phases,
        "eval_s": sum(h.get("time/eval_s", 0.0) for h in history),
        "checkpoint_s": summary.get("checkpoint_s", 0.0),
        "process_s": wall,
        "generation_tokens_per_s": mean("rollout/tokens_per_s"),
        "update_tokens_per_s": mean("charts/update_tokens_per_s"),
        "update_gflops_per_s": flops / 1e9 / max(fwd_bwd, 1e-9),
        "accuracy_after": summary.get("accuracy_after"),
    }


def commit() -> str:
    """The repository's commit, with ``+dirty`` when the tree has uncommitted changes."""
    git = ["git", "-C", str(REPO)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    return (head.stdout.strip() or "unknown") + ("+dirty" if dirty else "")


def render(doc: dict) -> str:
    """The markdown a results file stands for: where and at which commit, then the table."""
    where = f"Measured on {doc['cpu']}"
    if doc.get("commit"):
        where += f" at commit {doc['commit']}"
    steps = doc["results"][0]["steps"] if doc["results"] else 0
    head = f"{where}, {steps} training steps per variant, one after another in fresh processes."
    return head + "\n\n" + table(doc["results"], doc["probe_gflops_per_s"])


def table(results: list[dict], probe: dict[str, float]) -> str:
    """A markdown table: one column per variant, seconds per step and share per phase."""
    head = "| phase | " + " | ".join(r["name"] for r in results) + " |"
    lines = [head, "|" + " --- |" * (len(results) + 1)]
    for phase in (*STEP_PHASES, "other"):
        cells = [
            f"{r['phases'][phase]:.1f} s ({r['phases'][phase] / r['step_s']:.0%})" for r in results
        ]
        lines.append(f"| {phase} | " + " | ".join(cells) + " |")
    rows = [
        ("**step**", lambda r: f"**{r['step_s']:.1f} s**"),
        ("eval (100 problems, once)", lambda r: f"{r['eval_s']:.1f} s"),
        ("checkpoint (once)", lambda r: f"{r['checkpoint_s']:.1f} s"),
        ("whole process", lambda r: f"{r['process_s']:.0f} s"),
        ("generation tok/s", lambda r: f"{r['generation_tokens_per_s']:.0f}"),
        ("update tok/s", lambda r: f"{r['update_tokens_per_s']:.0f}"),
        ("update GFLOP/s", lambda r: f"{r['update_gflops_per_s']:.0f}"),
    ]
    for label, cell in rows:
        lines.append(f"| {label} | " + " | ".join(cell(r) for r in results) + " |")
    lines.append(
        f"\nmatmul probe: fp32 {probe['fp32']:.0f} GFLOP/s, bf16 {probe['bf16']:.0f} GFLOP/s"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(REPO / "baselines" / "quickstart.yaml"))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--variant",
        action="append",
        help="NAME (built-in: default, fp32, bf16, vllm, async) or NAME=key=value,key=value; "
        "repeatable (default: default, fp32, vllm, async)",
    )
    parser.add_argument("--probe-shape", default="2048,576,1536", help="m,k,n of the probe")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--render", metavar="JSON", help="print the table of a results file")
    args = parser.parse_args()
    if args.render:
        print(render(json.loads(Path(args.render).read_text())))
        return
    variants = []
    for item in args.variant or ["default", "fp32", "vllm", "async"]:
        name, _, spec = item.partition("=")
        overrides = [o for o in spec.split(",") if o] if spec else VARIANTS.get(name)
        if overrides is None:
            raise SystemExit(f"unknown variant {name!r}: one of {sorted(VARIANTS)}, or NAME=k=v")
        variants.append((name, overrides))
    at_commit = commit()
    shape = tuple(int(x) for x in args.probe_shape.split(","))
    probe = matmul_probe(shape)  # type: ignore[arg-type]
    print(f"CPU: {describe_machine()}; matmul {shape}: fp32 {probe['fp32']:.0f}, bf16 "
          f"{probe['bf16']:.0f} GFLOP/s", flush=True)  # fmt: skip
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-quickstart-") as tmp:
        for name, overrides in variants:
            result = run_variant(name, overrides, args.steps, Path(tmp), Path(args.config))
            print(f"{name}: {result['step_s']:.1f} s/step", flush=True)
            results.append(result)
    print(table(results, probe))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        doc = {"cpu": describe_machine(), "commit": at_commit, "probe_gflops_per_s": probe}
        doc["results"] = results
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
