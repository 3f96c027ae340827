#!/bin/bash
# The credit benchmark's LLM tier (issue 18): `none` against `shapley` with SmolLM2-135M,
# 10 paired seeds, 1,000 held-out problems each (10-25 min a cell on 2 cores: hours in
# all), on one family, named by its config baselines/smollm2/135m_credit_<FAMILY>.yaml:
# split_sum_nopenalty (split-sum-v0, the default), split_sum_d4 (its 4-distractor instance),
# gate (gate-v0), signal (signal-v0, `none` against `leave_one_out_replay`: static shapley
# reads only the listener there, so it is none), or split_sum (split-sum-v0 with the quick
# start's overlong penalty, whose length term outweighed the credit: closed).
# Run in the background; a rerun reuses finished cells and resumes. A finished cell's
# checkpoints are deleted (--keep-checkpoints none: ~3 GiB a cell, and the page needs only
# its metrics, evaluations and transcripts); an unfinished cell's are what it resumes from.
#
#   nohup bash benchmarks/run_llm_credit.sh > runs/credit_llm_split_sum_nopenalty.log 2>&1 &
#   FAMILY=gate nohup bash benchmarks/run_llm_credit.sh > runs/credit_llm_gate.log 2>&1 &
#
# Every finished cell is digested at once into docs/results/digests/credit_llm_<family>/,
# and each finished seed's per-role counts are merged into
# docs/results/credit_llm_<family>_roles.json (benchmarks/credit_roles.py; commit both: the
# evaluation records they come from stay in runs/); a seed whose two digests are there is
# skipped, so a fresh clone continues where the committed digests end. The page:
# benchmarks/report_llm_credit.sh writes it once (from the digests; OUT/results.json covers
# only the seeds run in this clone); after that each finished seed refreshes it, its tables in
# docs/credit_llm.md and the role tables (marti report --update, benchmarks/regenerate_docs.py),
# so what is left to commit is the digests, the counts, those pages and their PNGs. One
# family at a time: two sweeps would both rewrite docs/credit_llm.md.
set -u
# in a function, so that editing this file cannot change a sweep already running it
main() {
  cd "$(dirname "$0")/.."
  MARTI=${MARTI:-.venv/bin/marti}
  PYTHON=${PYTHON:-.venv/bin/python}
  . benchmarks/llm_credit_family.sh  # FAMILY -> ENV_ID, METHOD (paired against none), CONFIG
  . benchmarks/require_native_bf16.sh
  OUT=runs/credit_llm_$FAMILY
  DIGESTS=docs/results/digests/credit_llm_$FAMILY
  for seed in ${SEEDS:-0 1 2 3 4 5 6 7 8 9}; do  # seed by seed: every finished seed is paired
    if [ -f "$DIGESTS/${ENV_ID}__none__$seed.run.json" ] \
      && [ -f "$DIGESTS/${ENV_ID}__${METHOD}__$seed.run.json" ]; then
      echo "seed $seed: digested earlier ($DIGESTS), skipped"
      continue
    fi
    if "$MARTI" bench credit --tier llm --config "$CONFIG" --envs "$ENV_ID" \
      --methods "none,$METHOD" --seeds "$seed" --out "$OUT" --no-plot --keep-checkpoints none; then
      "$MARTI" report "$OUT/runs" --save-digests "$DIGESTS"
      "$PYTHON" benchmarks/credit_roles.py collect \
        "$OUT/runs/${ENV_ID}__none__$seed" "$OUT/runs/${ENV_ID}__${METHOD}__$seed" \
        --out "docs/results/credit_llm_${FAMILY}_roles.json" --merge
      if [ -f "docs/credit_llm_$FAMILY.md" ]; then  # the page and its tables, with this seed
        "$MARTI" report --update "docs/credit_llm_$FAMILY.md" || echo "seed $seed: page not refreshed"
      fi
      "$PYTHON" benchmarks/regenerate_docs.py || echo "seed $seed: generated blocks not refreshed"
    else
      echo "seed $seed failed"
    fi
  done
}
main "$@"
exit
