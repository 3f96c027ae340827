# Sourced by the long-run scripts whose configs train in bf16 (their committed seeds ran on
# CPUs with native bf16). Where bf16 is emulated (no avx512_bf16 or amx_bf16 flag), an
# AVX2-only AMD EPYC took 6,591 s for a 1,000-problem evaluation (8,000 generations); CPUs
# with avx512_bf16 took 614-754 s for 6,000 (marti_trainer/precision.py). Refuse rather than
# crawl for a day; ALLOW_EMULATED_BF16=1 runs anyway. With a GPU visible the runs train there
# (model.device: auto), so the CPU does not matter.
if ! grep -q 'avx512_bf16\|amx_bf16' /proc/cpuinfo && [ "${ALLOW_EMULATED_BF16:-0}" != 1 ] \
  && ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
  echo "this CPU has no native bf16 (no avx512_bf16 or amx_bf16 in /proc/cpuinfo) and no GPU" \
    "is visible: the configs run in bf16, emulated here (an evaluation ran ~7x slower); run" \
    "them on another machine, or set ALLOW_EMULATED_BF16=1" >&2
  exit 2
fi
