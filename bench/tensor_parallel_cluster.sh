#!/usr/bin/env bash
# Tensor parallelism within hosts against ZeRO across them, on shaped links (issue 39): a random
# model of Qwen2.5-0.5B's layers (as bench/tensor_parallel.sh), 8 of them and a vocabulary of
# 32 000 by default (150 M parameters: four ranks of the whole model do not fit 24 GiB), in bf16
# with AdamW, trained by 2
# hosts x 2 ranks of scripts/cluster (network namespaces on this machine, TCP between hosts through
# tc-shaped veth pairs) as TP 2 within each host + ZeRO-1 across (data-parallel 2), and as ZeRO-3
# and ZeRO-1 across all four ranks; the same 4 rows of SEQ tokens per step in each. Prints a
# markdown table: median step time, tokens/s, the bytes each rank sent across nodes per step
# (zero-train's count), what the kernel counted on zc-node1's link per step, and the largest
# rank's peak RSS. Needs root.
#   bench/tensor_parallel_cluster.sh [--rate 1gbit] [--steps 4] [--seq 128] [--layers 8] [--vocab 32000]
set -euo pipefail
cd "$(dirname "$0")/.."
rate=1gbit steps=4 seq=128 layers=8 vocab=32000
while [[ $# -gt 0 ]]; do
  case $1 in
    --layers) layers=$2; shift 2 ;;
    --vocab) vocab=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
source bench/cluster_common.sh
bench/tensor_parallel_model.sh "$work" "$layers" "$vocab"
echo "model: Qwen2.5-0.5B's layers x $layers, vocabulary $vocab, bf16, AdamW; 2 hosts x 2 ranks at $rate; 4 rows x $seq tokens per step"
cpu_line
"$cluster" up 2 --rate "$rate" >/dev/null
"$cluster" hostfile 2 >"$work/hosts"
host_bytes() { "$cluster" bytes | awk '$1 == "zc-node1" {print $2}'; }
echo
echo "| run | median step (s) | tokens/s | sent across nodes per rank per step | zc-node1's link per step | peak RSS per rank (largest, MiB) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for run in "TP 2 within hosts + ZeRO-1 across|1|2|2" "ZeRO-3 across 4|3|1|1" "ZeRO-1 across 4|1|1|1"; do
  IFS='|' read -r name stage tp micro <<<"$run"
  cat >"$work/ds.json" <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": $micro, "bf16": {"enabled": true},
 "gradient_clipping": 1.0, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
 "zero_optimization": {"stage": $stage, "overlap_comm": true, "stage3_param_persistence_threshold": 0},
 "tensor_parallel": {"autotp_size": $tp}}
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
sent = re.search(r"^zero-train: sent across nodes per step: ([0-9]+)", text, re.M).group(1)
rss = max(int(k) for k in re.search(r"peak RSS ([0-9 ]+) KiB", text).group(1).split())
print(f"| {sys.argv[2]} | {statistics.median(ms) / 1000:.2f} | {statistics.median(tok):.0f} | {int(sent):,} | "
      f"{int(sys.argv[3]):,} (all steps and setup) | {rss // 1024} |".replace(",", " "))
PY
done
