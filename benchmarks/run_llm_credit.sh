#!/bin/bash
# The credit benchmark's LLM tier (issue 18): `none` against `shapley` on split-sum-v0 with
# SmolLM2-135M, 10 paired seeds, 1,000 held-out problems each (about 25 min a cell on 2
# cores: hours in all). Run in the background; a rerun reuses finished cells and resumes.
#
#   nohup bash benchmarks/run_llm_credit.sh > runs/credit_llm_split_sum.log 2>&1 &
set -u
cd "$(dirname "$0")/.."
MARTI=${MARTI:-.venv/bin/marti}
for seed in ${SEEDS:-0 1 2 3 4 5 6 7 8 9}; do  # seed by seed: every finished seed is paired
  "$MARTI" bench credit --tier llm --config baselines/smollm2/135m_credit_split_sum.yaml \
    --envs split-sum-v0 --methods none,shapley --seeds "$seed" \
    --out runs/credit_llm_split_sum --no-plot || echo "seed $seed failed"
done
# every cell is done now: one more call reuses them all and writes the whole results.json
"$MARTI" bench credit --tier llm --config baselines/smollm2/135m_credit_split_sum.yaml \
  --envs split-sum-v0 --methods none,shapley --seeds "$(echo ${SEEDS:-0 1 2 3 4 5 6 7 8 9} | tr ' ' ',')" \
  --out runs/credit_llm_split_sum --no-plot
