#!/usr/bin/env bash
# fp32 against bf16 on this CPU (issue 29, docs/precision.md): GPT-2 124M's shape (L=12, NH=12,
# C=768, V=50257, T=128), 2 ranks, one thread each, 2 rows per rank, AdamW, the text's bytes as
# tokens. Each stage runs fp32, bf16 as "auto" chooses its compute path here, and bf16 with each
# path forced (bf16/fp32: matrix work in fp32 on widened copies; bf16/native: LibTorch's bf16
# kernels). Prints one table: median step time over STEPS steps after 2 warm-up steps, its
# forward / backward / optimizer parts, the ratio to fp32's step at the same stage, each rank's peak
# RSS, and the path the engine says it took; then the CPU's flags and one thread's GEMM peaks.
#   bench/bf16_compute.sh [STEPS]     (default 5)
# BF16_STAGES (default "0 2"); BF16_NATIVE=0 leaves out bf16/native (on a CPU without AVX512-BF16
# it takes ~20x fp32's time: 70 s a step at this shape).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-5} warmup=2 rows=2
source bench/peers/common.sh
perl -e 'local $/; my $b = <STDIN>; print pack("l<256", 20240520, 1, length $b, (0) x 253), pack("S<*", unpack("C*", $b));' \
  < README.md > "$tmp/tokens.bin"
zero_data=(--train-data "$tmp/tokens.bin")
shape=(--layers 12 --heads 12 --channels 768 --vocab 50257 --max-seq 128)
build/apps/zero-train --steps 0 --export "$tmp/init.bin" --no-progress "${shape[@]}" "${zero_data[@]}" > /dev/null
seq=128 zero_model=(--init "$tmp/init.bin")
dtypes="fp32 bf16 bf16/fp32"
[[ ${BF16_NATIVE:-1} == 1 ]] && dtypes+=" bf16/native"
for stage in ${BF16_STAGES:-0 2}; do
  for dtype in $dtypes; do zerocpp_run 2 "$stage" "$dtype"; done
done > "$tmp/results"
build/bench/bench_limits > "$tmp/limits"
echo "cpu flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o -w 'avx2\|fma\|avx512f\|avx512_bf16\|amx_bf16' | tr '\n' ' ')"
echo
"$python" - "$tmp/results" "$tmp/limits" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
fp32 = {r["mode"]: r["median_ms"] for r in rows if r["dtype"] == "fp32"}
print("| run | dtype (compute path asked) | matrix work ran in | step ms (median) | forward / backward / optimizer ms "
      "| ÷ fp32's step | peak RSS per rank (MiB) | loss first → last |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    p = r["phases_ms"]
    print(f"| {r['mode']} | {r['dtype']} | {r['compute']} | {r['median_ms']:.1f} | {p['fwd']:.0f} / {p['bwd']:.0f} / "
          f"{p['step']:.0f} | {r['median_ms'] / fp32[r['mode']]:.2f} | {' / '.join(str(k // 1024) for k in r['rss_kib'])} "
          f"| {r['first_loss']:.6f} → {r['last_loss']:.6f} |")
print()
print("One thread's GEMM (bench_limits):")
print()
for line in open(sys.argv[2]):
    if "GEMM" in line or line.startswith("| measure") or line.startswith("|---"):
        print(line, end="")
PY
