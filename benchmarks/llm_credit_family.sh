# The credit benchmark's LLM-tier families, one place for benchmarks/run_llm_credit.sh and
# benchmarks/report_llm_credit.sh (sourced, from the repository root). From FAMILY (default
# split_sum_nopenalty) it sets:
#   ENV_ID  the env of the family's cells
#   METHOD  the credit method paired against none
#   CONFIG  the base config, baselines/smollm2/135m_credit_<FAMILY>.yaml
# An unknown FAMILY exits 2, naming it and the known ones.
FAMILY=${FAMILY:-split_sum_nopenalty}
METHOD=shapley
case "$FAMILY" in
  split_sum|split_sum_nopenalty|split_sum_d4) ENV_ID=split-sum-v0 ;;
  gate) ENV_ID=gate-v0 ;;
  # static shapley reads only the listener's turn there, so it trains as none does
  signal) ENV_ID=signal-v0; METHOD=leave_one_out_replay ;;
  *)
    echo "FAMILY must be split_sum_nopenalty, split_sum_d4, gate, signal or split_sum, got '$FAMILY'" >&2
    exit 2 ;;
esac
CONFIG=baselines/smollm2/135m_credit_$FAMILY.yaml
