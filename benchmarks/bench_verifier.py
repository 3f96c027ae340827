"""Throughput of MathVerifier's three tiers, side by side.

Run from the repository root:

    python benchmarks/bench_verifier.py [--slow-pairs 200] [--fast-pairs 20000]

Prints verifications per second for:
  * the integer fast path (GSM8K-style answers, thousands separators, no math-verify);
  * cached repeats of LaTeX pairs (LRU cache hits);
  * mixed LaTeX answers through math-verify in the verifier's helper process (no cache);
  * the same pairs through math-verify called in this process on the main thread, for
    reference (what the helper's pipe round trip costs).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from marti_env.rewards import MathVerifier


def integer_pairs(n: int, rng: random.Random) -> list[tuple[str, str]]:
    pairs = []
    for _ in range(n):
        value = rng.randrange(0, 10_000_000)
        gold = f"{value:,}" if rng.random() < 0.5 else str(value)  # GSM8K writes "1,234"
        pred = str(value if rng.random() < 0.5 else value + rng.randrange(1, 100))
        pairs.append((pred, gold))
    return pairs


def latex_pairs(n: int, rng: random.Random) -> list[tuple[str, str]]:
    """Pairs that the canonical fast path cannot settle: math-verify must decide."""
    templates = [
        (r"\frac{{\sqrt{{{k}}}}}{{2}}", r"\sqrt{{{k}}}/2"),
        (r"{k}\sqrt{{2}}", r"\sqrt{{{k2}}}"),
        (r"x^2 + {k}", r"{k} + x^2"),
        (r"\frac{{{k}}}{{{k1}}}", r"1 - \frac{{1}}{{{k1}}}"),
        (r"({k}, -{k1})", r"({k1}, -{k})"),
        (r"{k}\pi", r"\pi \cdot {k}"),
        (r"[{k}, {k1}]", r"[{k},{k1})"),
        (r"\{{{k}, {k1}\}}", r"\{{{k1}, {k}\}}"),
    ]
    pairs = []
    for i in range(n):
        k = rng.randrange(2, 10_000)
        gold_t, pred_t = templates[i % len(templates)]
        fields = {"k": k, "k1": k + 1, "k2": 2 * k * k}
        pairs.append((pred_t.format(**fields), gold_t.format(**fields)))
    return pairs


def rate(label: str, n: int, seconds: float, note: str = "") -> None:
    print(f"{label:<44} {n / seconds:>12,.0f} /s   ({n} in {seconds:.2f} s){note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast-pairs", type=int, default=20_000)
    parser.add_argument("--slow-pairs", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args()
    rng = random.Random(0)

    verifier = MathVerifier()
    t0 = time.perf_counter()
    verifier.equivalent(r"\sqrt{2}", r"2^{1/2}")  # start the helper
    print(f"helper start-up + first check: {time.perf_counter() - t0:.2f} s")

    pairs = integer_pairs(args.fast_pairs, rng)
    t0 = time.perf_counter()
    for pred, gold in pairs:
        verifier.equivalent(pred, gold)
    rate("integer fast path", len(pairs), time.perf_counter() - t0)

    slow = latex_pairs(args.slow_pairs, rng)
    verifier.cache_clear()
    t0 = time.perf_counter()
    results = [verifier.equivalent(p, g) for p, g in slow]
    info = verifier.cache_info()
    rate(
        "mixed LaTeX via math-verify (helper process)",
        len(slow),
        time.perf_counter() - t0,
        f" [{sum(results)} equivalent, {info.misses} misses, {info.timeouts} timeouts]",
    )

    hot = slow[:50]
    t0 = time.perf_counter()
    for _ in range(args.repeats):
        for pred, gold in hot:
            verifier.equivalent(pred, gold)
    rate("cached repeats (LaTeX pairs)", len(hot) * args.repeats, time.perf_counter() - t0)

    logging.getLogger("math_verify").setLevel(logging.CRITICAL + 1)
    from math_verify import parse, verify

    def in_process(pred: str, gold: str) -> bool:
        gold_parsed = parse("\\boxed{" + gold + "}")
        pred_parsed = parse("\\boxed{" + pred + "}")
        return bool(verify(gold_parsed, pred_parsed))

    in_process("1", "1")
    t0 = time.perf_counter()
    same = [in_process(p, g) for p, g in slow]
    agree = sum(a == b for a, b in zip(results, same, strict=True))
    rate(
        "same pairs, math-verify in this process",
        len(slow),
        time.perf_counter() - t0,
        f" [agrees with helper on {agree}/{len(slow)}]",
    )
    verifier.close()


if __name__ == "__main__":
    main()
