#!/usr/bin/env bash
# Expert parallelism within hosts against across them, on shaped links (issue 41): the
# Mixtral-shaped model of bench/moe_model.sh (8 experts, top 2, fp32, AdamW, ZeRO stage 2) trained
# by 2 hosts x 2 ranks of scripts/cluster (network namespaces on this machine, TCP between hosts
# through tc-shaped veth pairs) at EP 2 — each expert-parallel group one host's two ranks (the
# exchange stays in the host; each expert's gradients are reduced with its twin on the other
# host) — and at EP 4 — one group over both hosts (half of the exchange crosses; no expert
# gradient does). Each layout runs twice, STEPS and 2 x STEPS steps, so that what the kernel
# counted on zc-node1's link per step — the difference of the two runs over STEPS, start-up and
# MPI's wiring cancelled — stands beside what zerocpp counted crossing per step (zero-train's
# "sent across nodes", the hierarchical collectives' exact counts, every group's); the two must
# agree within 5 % (TCP/IP framing at MTU 9000 and acknowledgements are the difference). Prints a
# markdown table. Needs root.
#   bench/moe_cluster.sh [--rate 1gbit] [--steps 3] [--seq 256]
set -euo pipefail
cd "$(dirname "$0")/.."
rate=1gbit steps=3 seq=256
while [[ $# -gt 0 ]]; do
  case $1 in
    --rate) rate=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
source bench/cluster_common.sh
bench/moe_model.sh "$work"
echo "model: Mixtral-shaped (bench/moe_model.sh), fp32, AdamW, ZeRO stage 2; 2 hosts x 2 ranks at $rate; 2 rows x $seq tokens per rank per step"
cpu_line
"$cluster" up 2 --rate "$rate" >/dev/null
"$cluster" hostfile 2 >"$work/hosts"
link() { "$cluster" bytes | awk '$1 == "zc-node1" {print $2, $4}'; }  # zc-node1's sent and received bytes
echo
echo "| layout | median step (s) | tokens/s | exchange per rank per step: all-to-all bytes to other ranks | counted crossing per step, zc-node1 out / in | kernel, zc-node1's link per step, out / in | kernel ÷ counted |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for ep in 2 4; do
  cat >"$work/ds.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0, "zero_optimization": {"stage": 2, "overlap_comm": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}},
 "expert_parallel": {"enabled": true, "autoep_size": $ep}}
JSON
  for n in "$steps" $((2 * steps)); do
    read -r out_before in_before <<<"$(link)"
    timeout 1800 "$cluster" exec zc-node1 "$bin/zero-run" --hostfile "$work/hosts" "$bin/zero-train" --model "$work/moe" \
      --config "$work/ds.json" --train-data "$work/tokens.bin" --seq-len "$seq" --steps "$n" --print-every 1 \
      --eval-every 0 --sample-every 0 --no-progress >"$work/run$n.log" 2>&1 || { cat "$work/run$n.log"; exit 1; }
    read -r out_after in_after <<<"$(link)"
    echo "$((out_after - out_before)) $((in_after - in_before))" >"$work/link$n"
  done
  /usr/bin/python3 - "$work" "$steps" "$ep" $((2 * 2 * 2 * seq)) <<'PY'
import re, statistics, sys
work, s, ep, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def counted(n):  # bytes every rank sent across nodes in steps 2..n (zero-train counts from the second step)
    text = open(f"{work}/run{n}.log").read()
    by_rank = [int(b) for b in re.search(r"^zero-train: sent across nodes per step: ([0-9 ]+) bytes", text, re.M).group(1).split()]
    return [b * (n - 1) for b in by_rank], text
short, _ = counted(s)
long, text = counted(2 * s)
per_step = [(b - a) / s for a, b in zip(short, long)]  # steps s+1..2s, each rank
out, into = sum(per_step[:2]), sum(per_step[2:])  # zc-node1 holds ranks 0 and 1
k_short = [int(x) for x in open(f"{work}/link{s}").read().split()]
k_long = [int(x) for x in open(f"{work}/link{2 * s}").read().split()]
k_out, k_in = ((b - a) / s for a, b in zip(k_short, k_long))
ms = statistics.median(float(m) for m in re.findall(r"^step .*\| ([0-9.]+) ms", text, re.M)[1:])
exchange = re.search(r"exchange per step and rank: all-to-all [0-9]+ bytes \(([0-9]+) to other ranks\)", text).group(1)
where = "one per host" if ep == 2 else "across both hosts"
print(f"| EP {ep} ({where}) | {ms / 1000:.2f} | {tokens / ms * 1000:.0f} | {int(exchange):,} | {out:,.0f} / {into:,.0f} | "
      f"{k_out:,.0f} / {k_in:,.0f} | {k_out / out:.3f} / {k_in / into:.3f} |".replace(",", " "))
PY
done
