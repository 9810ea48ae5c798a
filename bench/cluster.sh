#!/usr/bin/env bash
# ZeRO stages across hosts on shaped links: a GPT trained by 2 hosts x 2 ranks on the cluster of
# scripts/cluster (network namespaces on this machine, TCP between hosts through tc-shaped veth
# pairs), stages 0-3, at each link rate, next to stage 0 with the 4 ranks on one host (shared
# memory). Prints a markdown table: mean step time, its ratio to stage 0 on one host, the bytes
# each rank sent across nodes per step (zero-train's count) and what the kernel counted on the
# hosts' links per step. Needs root.
#   bench/cluster.sh [--layers L] [--channels C] [--heads H] [--seq T] [--steps N] [--rates "1gbit 10gbit"]
# Defaults: 6 layers, 384 channels, 6 heads (10.7 M parameters, 43 MB in fp32), 12 rows of 128
# tokens per step, 6 steps (the first is not timed).
set -euo pipefail
cd "$(dirname "$0")/.."
layers=6 channels=384 heads=6 seq=128 steps=6 rates="1gbit 10gbit"
while [[ $# -gt 0 ]]; do
  case $1 in
    --layers) layers=$2; shift 2 ;;
    --channels) channels=$2; shift 2 ;;
    --heads) heads=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
bin=$PWD/build/apps cluster=$PWD/scripts/cluster
tmp=$(mktemp -d /tmp/bench_cluster.XXXXXX)
trap '"$cluster" down >/dev/null; rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
model=(--layers "$layers" --channels "$channels" --heads "$heads" --max-seq "$seq" --vocab 256 --steps "$steps"
       --no-progress)
# config NAME STAGE [ZERO KEYS]
config() {
  cat >"$tmp/$1.json" <<JSON
{"train_batch_size": 12, "gradient_clipping": 1.0,
 "zero_optimization": {"stage": $2, "overlap_comm": true, "stage3_param_persistence_threshold": 0 ${3:+, $3}},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}}}
JSON
  echo "$tmp/$1.json"
}
zeropp='"zero_quantized_weights": true, "zero_hpz_partition_size": 2, "zero_quantized_gradients": true'
no_reuse='"stage3_max_reuse_distance": 0'
# The rows: name, stage, extra keys.
runs=("0|0|" "1|1|" "2|2|" "3|3|" "3 + ZeRO++|3|$zeropp" "3, reuse 0|3|$no_reuse" "3 + ZeRO++, reuse 0|3|$zeropp, $no_reuse")
mean_step() {  # the mean of the step times after the first (ms → s)
  grep -E '^step' "$1" | tail -n +2 | awk '{gsub("ms","",$(NF-1)); s += $(NF-1); n++} END {printf "%.3f", s / n / 1000}'
}
sent() { sed -n 's/^zero-train: sent across nodes per step: \([0-9]*\) .*/\1/p' "$1"; }
host_bytes() { "$cluster" bytes | awk '$1 == "zc-node1" {print $2}'; }

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(getconf _NPROCESSORS_ONLN) cores;" \
  "flags: $(grep -m1 flags /proc/cpuinfo | grep -oE 'avx2|avx512f|avx512_bf16' | sort -u | xargs)"
echo "GPT: $layers layers, $channels channels, $heads heads, 12 x $seq tokens per step; 4 ranks, fp32"
timeout 900 "$bin/zero-run" -n 4 "$bin/zero-train" --config "$(config local0 0)" "${model[@]}" >"$tmp/local0" 2>&1
base=$(mean_step "$tmp/local0")
echo
echo "| links | stage | mean step (s) | vs stage 0 on one host | sent across nodes per rank per step | zc-node1's link per step |"
echo "| --- | --- | ---: | ---: | ---: | ---: |"
echo "| one host (shared memory) | 0 | $base | 1.00 | 0 | - |"
for rate in $rates; do
  "$cluster" up 2 --rate "$rate" >/dev/null
  "$cluster" hostfile 2 >"$tmp/hosts"
  for run in "${runs[@]}"; do
    IFS='|' read -r name stage keys <<<"$run"
    before=$(host_bytes)
    timeout 900 "$cluster" exec zc-node1 "$bin/zero-run" --hostfile "$tmp/hosts" "$bin/zero-train" \
      --config "$(config run "$stage" "$keys")" "${model[@]}" >"$tmp/run" 2>&1 || { cat "$tmp/run"; exit 1; }
    link=$(( ($(host_bytes) - before) / steps ))
    step=$(mean_step "$tmp/run")
    ratio=$(awk -v a="$step" -v b="$base" 'BEGIN {printf "%.2f", a / b}')
    echo "| 2 hosts x 2, $rate | $name | $step | $ratio | $(sent "$tmp/run") | $link (all steps and setup) |"
  done
  "$cluster" down >/dev/null
done
