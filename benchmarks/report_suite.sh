#!/bin/bash
# The CPU comparison's page (issue 17), from the committed digests of
# benchmarks/run_cpu_suite.sh: docs/results.md and its summary in the README. Each shaped config
# is paired with its own workflow unshaped (--baseline env.credit=none), and every config with
# single-agent GRPO and with the 2x2 debate (--versus).
set -eu
cd "$(dirname "$0")/.."
MARTI=${MARTI:-.venv/bin/marti}
"$MARTI" report docs/results/digests/suite --baseline env.credit=none \
  --versus exp_name=135m_single_none --versus exp_name=135m_mad2x2_none \
  --title "The CPU comparison: single-agent GRPO against multi-agent workflows, shaping off and on" \
  --note "${NOTE:?set NOTE to what the figures do not show}" \
  --summary-into README.md --out docs/results.md
