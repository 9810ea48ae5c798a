#!/usr/bin/env bash
# The seed's claim, on shaped links (issue 40): "Multi-node Megatron-DS hybrid beats ZeRO-3 alone
# ... because of the cross-node AllGather cost". 2 hosts x 4 ranks of scripts/cluster (network
# namespaces on this machine, TCP between hosts through tc-shaped veth pairs), a random model of
# Qwen2.5-0.5B's layers (8 of them, a vocabulary of 32 000, tied: 150 M parameters; as
# bench/tensor_parallel_cluster.sh) in bf16 with AdamW, the same 8 rows of SEQ tokens per step:
#   - 3D + ZeRO-1: PP 2 (a stage per host) x DP 2 x TP 2, 4 micro-batches of 1 row per step;
#   - ZeRO-3 across all 8 ranks, 1 row each.
# Prints a markdown table: median step time, tokens/s, the bytes each rank sent across nodes per
# step (zero-train's count), what the kernel counted on zc-node1's link per step, the largest
# rank's peak RSS. Needs root.
#   bench/three_d_cluster.sh [--rate 1gbit] [--steps 4] [--seq 128] [--layers 8] [--vocab 32000]
set -euo pipefail
cd "$(dirname "$0")/.."
rate=1gbit steps=4 seq=128 layers=8 vocab=32000
while [[ $# -gt 0 ]]; do
  case $1 in
    --rate) rate=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --vocab) vocab=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
source bench/cluster_common.sh
bench/tensor_parallel_model.sh "$work" "$layers" "$vocab"
echo "model: Qwen2.5-0.5B's layers x $layers, vocabulary $vocab, bf16, AdamW; 2 hosts x 4 ranks at $rate; 8 rows x $seq tokens per step"
cpu_line
"$cluster" up 2 --rate "$rate" >/dev/null
"$cluster" hostfile 4 >"$work/hosts"
host_bytes() { "$cluster" bytes | awk '$1 == "zc-node1" {print $2}'; }
echo
echo "| run | median step (s) | tokens/s | sent across nodes per rank per step | zc-node1's link per step | peak RSS per rank (largest, MiB) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
three_d='"zero_optimization": {"stage": 1, "overlap_comm": true}, "train_micro_batch_size_per_gpu": 1,
 "gradient_accumulation_steps": 4, "tensor_parallel": {"tp_size": 2}, "pipeline_parallel": {"pp_size": 2}'
zero3='"zero_optimization": {"stage": 3, "overlap_comm": true, "stage3_param_persistence_threshold": 0},
 "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1'
for run in "3D + ZeRO-1: PP 2 (a stage per host) x DP 2 x TP 2|$three_d" "ZeRO-3 across 8|$zero3"; do
  name=${run%%|*} keys=${run#*|}
  cat >"$work/ds.json" <<JSON
{"bf16": {"enabled": true}, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}}, $keys}
JSON
  before=$(host_bytes)
  timeout 1800 "$cluster" exec zc-node1 "$bin/zero-run" --hostfile "$work/hosts" "$bin/zero-train" --model "$work/model" \
    --config "$work/ds.json" --train-data "$work/tokens.bin" --seq-len "$seq" --steps "$steps" --print-every 1 \
    --no-progress >"$work/run.log" 2>&1 || { cat "$work/run.log"; exit 1; }
  link=$(( ($(host_bytes) - before) / steps ))
  /usr/bin/python3 - "$work/run.log" "$name" "$link" <<'PY'
import re, statistics, sys
text = open(sys.argv[1]).read()
ms = [float(m) for m in re.findall(r"^step .*\| ([0-9.]+) ms", text, re.M)][1:]
tok = [float(m) for m in re.findall(r"^step .*\| ([0-9.]+) tok/s", text, re.M)][1:]
sent = [int(x) for x in re.search(r"^zero-train: sent across nodes per step: ([0-9 ]+) bytes", text, re.M).group(1).split()]
rss = max(int(k) for k in re.search(r"peak RSS ([0-9 ]+) KiB", text).group(1).split())
print(f"| {sys.argv[2]} | {statistics.median(ms) / 1000:.2f} | {statistics.median(tok):.0f} | "
      f"{min(sent):,}-{max(sent):,} | {int(sys.argv[3]):,} (all steps and setup) | {rss // 1024} |".replace(",", " "))
PY
  grep -E "^zero-train: pipeline" "$work/run.log" || true
done
