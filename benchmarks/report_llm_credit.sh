#!/bin/bash
# The credit benchmark's LLM-tier page for one family (FAMILY=split_sum_nopenalty, the
# default, gate or split_sum), from the committed digests of benchmarks/run_llm_credit.sh:
# docs/credit_llm_<family>.md, `shapley` against `none` paired by seed on the same 1,000
# held-out problems.
set -eu
cd "$(dirname "$0")/.."
MARTI=${MARTI:-.venv/bin/marti}
FAMILY=${FAMILY:-split_sum_nopenalty}
"$MARTI" report "docs/results/digests/credit_llm_$FAMILY" --versus exp_name=none \
  --title "Credit benchmark, LLM tier: $FAMILY, shapley against none (SmolLM2-135M)" \
  --note "${NOTE:?set NOTE to what the figures do not show}" \
  --out "docs/credit_llm_$FAMILY.md"
