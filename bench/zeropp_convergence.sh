#!/usr/bin/env bash
# ZeRO++'s effect on convergence: the demo GPT (zero-train's default model and data, its
# built-in config at stage 3, every parameter partitioned) trained for 300 steps by 2 hosts x 2 ranks on the cluster of
# scripts/cluster, without ZeRO++ and with qwZ, hpZ (each host's 2 ranks) and qgZ together.
# Prints both loss curves every 25 steps, the mean of the last 20 training losses and the
# validation loss at the end, and their relative differences. Needs root.
#   bench/zeropp_convergence.sh [--steps N] [--rate R] [--keys 'ZERO++ KEYS'] (default: all three)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=300 rate=10gbit
keys='"zero_quantized_weights": true, "zero_hpz_partition_size": 2, "zero_quantized_gradients": true'
while [[ $# -gt 0 ]]; do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
bin=$PWD/build/apps cluster=$PWD/scripts/cluster
tmp=$(mktemp -d /tmp/bench_zeropp.XXXXXX)
trap '"$cluster" down >/dev/null; rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
config() {  # config NAME [ZERO++ KEYS]: zero-train's built-in config at stage 3
  cat >"$tmp/$1.json" <<JSON
{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
 "zero_optimization": {"stage": 3, "overlap_comm": true, "reduce_bucket_size": "auto",
                       "stage3_param_persistence_threshold": 0 ${2:+, $2}},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.0}},
 "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 3e-4, "warmup_max_lr": 3e-3,
               "warmup_num_steps": 20, "total_num_steps": "auto", "warmup_type": "linear"}}}
JSON
  echo "$tmp/$1.json"
}
"$cluster" up 2 --rate "$rate" >/dev/null
"$cluster" hostfile 2 >"$tmp/hosts"
for name in exact zeropp; do
  timeout 1800 "$cluster" exec zc-node1 "$bin/zero-run" --hostfile "$tmp/hosts" "$bin/zero-train" \
    --config "$(config $name "$([[ $name == zeropp ]] && echo "$keys")")" --steps "$steps" --eval-every "$steps" --no-progress >"$tmp/$name" 2>&1 ||
    { cat "$tmp/$name"; exit 1; }
done
losses() { sed -nE 's/^step .*\| loss ([0-9.]+) .*/\1/p' "$1"; }
val() { sed -nE 's/^val .*\| loss ([0-9.]+).*/\1/p' "$1" | tail -1; }
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); flags: $(grep -m1 flags /proc/cpuinfo | grep -oE 'avx2|avx512f|avx512_bf16' | sort -u | xargs)"
echo "demo GPT, stage 3, 2 hosts x 2 ranks at $rate, $steps steps"
echo
echo "ZeRO++: $keys"
echo "| step | loss without ZeRO++ | loss with ZeRO++ |"
echo "| ---: | ---: | ---: |"
paste <(losses "$tmp/exact") <(losses "$tmp/zeropp") | awk 'NR == 1 || NR % 25 == 0 {printf "| %d | %s | %s |\n", NR, $1, $2}'
tail_mean() { losses "$1" | tail -20 | awk '{s += $1} END {printf "%.4f", s / NR}'; }
a=$(tail_mean "$tmp/exact") b=$(tail_mean "$tmp/zeropp")
echo
echo "mean of the last 20 training losses: $a without, $b with ($(awk -v a="$a" -v b="$b" 'BEGIN {printf "%+.2f %%", (b / a - 1) * 100}'))"
va=$(val "$tmp/exact") vb=$(val "$tmp/zeropp")
echo "validation loss at step $steps: $va without, $vb with ($(awk -v a="$va" -v b="$vb" 'BEGIN {printf "%+.2f %%", (b / a - 1) * 100}'))"
grep -h "across nodes" "$tmp/exact" "$tmp/zeropp"
