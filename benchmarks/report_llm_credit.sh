#!/bin/bash
# The credit benchmark's LLM-tier page for one family (FAMILY=split_sum_nopenalty, the
# default, split_sum_d4, gate, signal or split_sum), from the committed digests of
# benchmarks/run_llm_credit.sh: docs/credit_llm_<family>.md, `shapley` (signal:
# `leave_one_out_replay`) against `none` paired by seed on the same 1,000 held-out problems,
# with the table of where the seeds ended (runs grouped by their final answers, --modes), and
# its per-method and paired tables in the page's summary block at the end of docs/credit_llm.md.
# A page written once is refreshed with its own arguments: marti report --update PAGE.
set -eu
cd "$(dirname "$0")/.."
MARTI=${MARTI:-.venv/bin/marti}
. benchmarks/llm_credit_family.sh  # FAMILY -> METHOD (paired against none)
"$MARTI" report "docs/results/digests/credit_llm_$FAMILY" --versus exp_name=none --modes 0.9 \
  --title "Credit benchmark, LLM tier: $FAMILY, $METHOD against none (SmolLM2-135M)" \
  --note "${NOTE:?set NOTE to what the figures do not show}" \
  --summary-into docs/credit_llm.md --out "docs/credit_llm_$FAMILY.md"
