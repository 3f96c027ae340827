#!/bin/bash
# The two long CPU jobs, seed by seed in turn, so both gain paired seeds as hours pass:
# the credit benchmark's LLM tier (benchmarks/run_llm_credit.sh) and the comparison suite
# (benchmarks/run_cpu_suite.sh). Resumable: rerun it after an interruption.
#
#   nohup bash benchmarks/run_long.sh > runs/long.log 2>&1 &
set -u
cd "$(dirname "$0")/.."
for seed in 0 1 2 3 4 5 6 7 8 9; do
  SEEDS="$seed" bash benchmarks/run_llm_credit.sh
  if [ "$seed" -le 5 ]; then SEEDS="$seed" bash benchmarks/run_cpu_suite.sh; fi
done
