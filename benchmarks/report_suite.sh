#!/bin/bash
# The CPU comparison's page (issue 17), from the committed digests of
# benchmarks/run_cpu_suite.sh: docs/results.md and its summary in the README.
set -eu
cd "$(dirname "$0")/.."
MARTI=${MARTI:-.venv/bin/marti}
"$MARTI" report docs/results/digests/suite \
  --versus exp_name=135m_single_none --versus exp_name=135m_mad2x2_none \
  --title "The CPU comparison: single-agent GRPO against multi-agent workflows, shaping off and on" \
  --note "${NOTE:?set NOTE to what the figures do not show}" \
  --summary-into README.md --out docs/results.md
