#!/usr/bin/env bash
# Issue 42: one Llama training step with the fused kernels and without them (ZERO_FUSED_KERNELS=0:
# LibTorch's ops), side by side in one invocation: SmolLM2-135M's and -360M's shapes (random
# weights), one rank, one thread, stage 0, AdamW, --seq tokens (default 512), fp32 and bf16, and
# fp32 again on the paths an AVX2-only CPU takes (ZERO_SIMD=avx2 for Highway's kernels,
# ATEN_CPU_CAPABILITY=avx2 for LibTorch's, OPENBLAS_CORETYPE=Haswell for its GEMMs). Each line is
# bench_profile's median of --timed steps (default 3) after one warm-up step; the two settings
# alternate --repeats times (default 2) so that a drift in the machine's speed shows as
# disagreement between repeats. About 4.5 minutes for 135M, 10 for 360M (--repeats 1: 5).
#   bench/fused_step.sh [--seq T] [--timed N] [--repeats R] [--models "135M 360M"]
set -euo pipefail
cd "$(dirname "$0")/.."
seq=512 timed=3 repeats=2 models="135M 360M"
while [[ $# -gt 0 ]]; do
  case $1 in
    --seq) seq=$2; shift 2 ;;
    --timed) timed=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); flags:" \
  "$(grep -m1 '^flags' /proc/cpuinfo | grep -o -w 'avx2\|fma\|avx512f\|avx512_bf16\|amx_bf16' | tr '\n' ' ')"
avx2=(ZERO_SIMD=avx2 ATEN_CPU_CAPABILITY=avx2 OPENBLAS_CORETYPE=Haswell)
for model in $models; do
  for path in fp32 bf16 fp32-avx2; do
    dtype=${path%-avx2} caps=()
    [[ $path == *avx2 ]] && caps=("${avx2[@]}")
    for fused in $(for _ in $(seq "$repeats"); do echo 0 1; done); do
      printf '%s %s fused=%s: ' "$model" "$path" "$fused"
      env ${caps[@]+"${caps[@]}"} ZERO_FUSED_KERNELS=$fused OMP_NUM_THREADS=1 build/bench/bench_profile \
        --config "tests/models/hf_configs/HuggingFaceTB__SmolLM2-$model.config.json" --seq "$seq" --dtype "$dtype" \
        --warmup 1 --timed "$timed" --no-profile 2>/dev/null | sed 's/^.*tokens, //'
    done
  done
done
