#!/bin/bash
# The CPU comparison of issue 17 (docs/baselines.md): the twelve rows of baselines/smollm2/
# (single-agent GRPO, Maj@4, MAD 2x2 and 3x2, MoA 2+1, chain; shaping off and on) at equal
# training budget, over paired seeds. Hours on 2 cores: run it in the background; a rerun
# reuses finished cells and resumes the others from their checkpoints.
#
#   nohup bash benchmarks/run_cpu_suite.sh > runs/sweeps/suite.log 2>&1 &
#   SEEDS="0 1" CONFIGS="135m_maj4_none 135m_maj4_quality" bash benchmarks/run_cpu_suite.sh
#
# Every finished cell is digested at once into docs/results/digests/suite/ (a few kB: commit
# them); a cell whose digest is there is skipped, so a fresh clone continues where the
# committed digests end. The page: benchmarks/report_suite.sh (first written), then
# `marti report --update docs/results.md` as digests arrive.
#
# Seeds 0-5 of the first three rows ran before the configs set eval.seed: 0 (their held-out
# episodes took the run's seed, on which single-v0's and the 2x2 debate's do not depend:
# their step-0 evaluations agree across seeds on one machine). A cell folder started before
# then is refused as changed (eval.seed: None -> 0): delete it. Cells share step-0
# evaluations through one runs/sweeps/suite/eval_cache, whose key is what the evaluation
# reads: the seeds of a config and a workflow's shaping off and on share one entry
# (marti_trainer/eval_cache.py; the sweep ignores log.* when it compares a cell's config).
# A finished cell keeps no checkpoint (--keep-checkpoints none): the digest is what the page
# reads, and kept checkpoints (two of 1.5 GiB per cell) filled the disk here: 66 GB from
# 22 finished cells.
set -u
cd "$(dirname "$0")/.."
. benchmarks/require_native_bf16.sh
MARTI=${MARTI:-.venv/bin/marti}
SEEDS=${SEEDS:-"0 1 2 3 4 5 6 7 8 9"}
CONFIGS=${CONFIGS:-"135m_single_none 135m_single_quality 135m_maj4_none 135m_maj4_quality
  135m_mad2x2_none 135m_mad2x2_quality 135m_mad3x2_none 135m_mad3x2_quality
  135m_moa2p1_none 135m_moa2p1_quality 135m_chain_none 135m_chain_quality"}
DIGESTS=docs/results/digests/suite
for seed in $SEEDS; do  # seed by seed, so every finished seed is paired across configs
  for name in $CONFIGS; do
    if [ -f "$DIGESTS/${name}__seed=$seed.run.json" ]; then
      echo "cell $name seed $seed: digested earlier ($DIGESTS), skipped"
      continue
    fi
    if "$MARTI" sweep "baselines/smollm2/$name.yaml" --seeds "$seed" \
      --out "runs/sweeps/suite/$name" \
      --set log.save_every=5 --set log.eval_cache=runs/sweeps/suite/eval_cache \
      --keep-checkpoints none; then
      "$MARTI" report runs/sweeps/suite --save-digests "$DIGESTS"
    else
      echo "cell $name seed $seed failed (see its train.log)"
    fi
  done
done
