#!/usr/bin/env bash
# Issue 42's profile: one training step of SmolLM2-135M's and SmolLM2-360M's shapes (random
# weights, 512 tokens, one rank, one thread, stage 0, AdamW) in fp32 and bf16, op by op against
# each op's bound (bench/profile_bench.cpp says how). Prints the CPU's flags, then each run's
# summary and phases, and its ops (--top, default 12 per phase).
#   bench/profile_run.sh [--top N] [--seq T]
set -euo pipefail
cd "$(dirname "$0")/.."
top=12 seq=512
while [[ $# -gt 0 ]]; do
  case $1 in
    --top) top=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); flags:" \
  "$(grep -m1 '^flags' /proc/cpuinfo | grep -o -w 'avx2\|fma\|avx512f\|avx512_bf16\|amx_bf16' | tr '\n' ' ')"
for model in 135M 360M; do
  for dtype in fp32 bf16; do
    echo
    OMP_NUM_THREADS=1 build/bench/bench_profile --config "tests/models/hf_configs/HuggingFaceTB__SmolLM2-$model.config.json" \
      --seq "$seq" --dtype "$dtype" --warmup 2 --top "$top" 2>/dev/null
  done
done
