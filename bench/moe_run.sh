#!/usr/bin/env bash
# Mixtures of experts against a dense Llama with the same active parameters per token (issue 41):
# a Mixtral-shaped model (8 experts, top 2, expert intermediate I) and a Llama whose MLP has 2·I,
# otherwise the same (hidden 256, 4 layers, 4 heads, vocab 4096), random weights written by the
# independent reference (tests/reference/hf_llama.py), zero-train --model on 2 ranks at ZeRO
# stage 2, fp32, AdamW, sequences of 256, 2 rows per rank; the MoE model at EP 1 (every expert on
# every rank) and EP 2 (4 experts per rank, tokens exchanged with MPI_Alltoallv). Prints the median
# step, tokens/s and the exchange's bytes per step and rank; then where each step's time goes
# (wall_clock_breakdown: forward, backward, optimizer step, and inside the MoE layers' forwards
# the router, dispatch, experts and combine, and the exchange's all-to-all time), the median over
# the timed steps of the mean over the ranks.
#   bench/moe_run.sh [STEPS]     (default 8 timed steps after 2 warm-up steps)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-8} warmup=2 seq=256 rows=2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
python=/usr/bin/python3  # Debian's, with python3-torch
bench/moe_model.sh "$tmp"
run() {  # run NAME MODEL EP
  local log=$tmp/$1.log
  cat > "$tmp/ds.json" <<JSON
{"train_micro_batch_size_per_gpu": $rows, "gradient_clipping": 1.0, "zero_optimization": {"stage": 2},
 "wall_clock_breakdown": true, "steps_per_print": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}}$([[ $3 -gt 1 ]] && echo ", \"expert_parallel\": {\"enabled\": true, \"autoep_size\": $3}")}
JSON
  build/apps/zero-run -n 2 build/apps/zero-train --model "$tmp/$2" --train-data "$tmp/tokens.bin" --seq-len $seq \
    --config "$tmp/ds.json" --steps $((steps + warmup)) --print-every 1 --eval-every 0 --sample-every 0 --no-progress > "$log" 2>&1
  "$python" - "$log" "$warmup" "$1" $((rows * 2 * seq)) <<'PY'
import re, statistics, sys
log, warmup, name, tokens = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
lines = open(log).read().splitlines()
steps = [float(l.split("|")[-1].split()[0]) for l in lines if l.startswith("step")][warmup:]
ms = statistics.median_low(steps)
rss = next(l for l in lines if l.startswith("zero-train: peak RSS"))
state = int(re.search(r"model state ([0-9]+) bytes", rss).group(1))
exchange = next((l for l in lines if "expert-parallel exchange" in l), "")
sent = re.search(r"\(([0-9]+) to other ranks\)", exchange)
print(f"| {name} | {ms:.0f} | {tokens / ms * 1e3:.0f} | {state / 1e6:.1f} | {int(sent.group(1)) / 1e6 if sent else 0:.2f} |")
# wall_clock_breakdown's lines: "| name: mean/min/max" in ms, one per step; the timed steps' median.
fields = ["fwd", "bwd", "step", "moe_router", "moe_dispatch", "moe_experts", "moe_combine", "expert_all_to_all"]
rows = [dict((k, float(v)) for k, v in re.findall(r"\| (\w+): ([0-9.]+)/", l)) for l in lines if "time (ms) per step" in l]
rows = rows[warmup:]
with open(log + ".breakdown", "w") as f:
    f.write(f"| {name} | " + " | ".join(f"{statistics.median(r.get(k, 0) for r in rows):.1f}" for k in fields) + " |\n")
PY
}
echo "cpu flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o -w 'avx2\|fma\|avx512f\|avx512_bf16\|amx_bf16' | tr '\n' ' ')"
echo "| run (2 ranks, stage 2, fp32) | step ms (median) | tokens/s | model state MB, rank 0 | exchange MB per step, sent to the other rank |"
echo "| --- | ---: | ---: | ---: | ---: |"
run "dense Llama (MLP 1024)" dense 1
run "Mixtral-shaped, EP 1" moe 1
run "Mixtral-shaped, EP 2" moe 2
echo
echo "Where the step goes (ms, median over the timed steps of the mean over the 2 ranks; moe_*: inside the MoE layers' forwards)"
echo "| run | fwd | bwd | step | moe_router | moe_dispatch | moe_experts | moe_combine | expert_all_to_all (fwd + bwd) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
cat "$tmp"/*.log.breakdown
