#!/usr/bin/env bash
# ZeRO-Infinity, bigger than memory: trains a GPT at stage 3 in fp32 with the optimizer and the
# parameters on NVMe for a few steps, and prints the fp32 model state (16 bytes per parameter:
# parameters, gradients, master, Adam's two moments) next to each rank's peak resident memory
# (VmHWM), the NVMe bytes read and written per step, and the step time.
#   bench/infinity.sh [--layers L] [--channels C] [--heads H] [--seq T] [--steps N] [--ranks R]
#                     [--dir DIR] [--sub-group ELEMENTS]
# Defaults: GPT-2 XL's shape (48 layers, 1600 channels, 25 heads; byte vocabulary: 1.47 B
# parameters, 23.6 GB of fp32 state) on 1 rank, 3 steps of 128 tokens, swap under /var/tmp.
set -euo pipefail
cd "$(dirname "$0")/.."
layers=48 channels=1600 heads=25 seq=128 steps=3 ranks=1 dir=/var/tmp sub_group=20000000
source bench/gpt_run_args.sh
config=$(mktemp /tmp/infinity.XXXXXX.json)
trap 'rm -f "$config"' EXIT
# The unit running and the next one prefetched (max_live two and a half blocks, no reuse across
# forward and backward),
# two optimizer buffers of sub_group elements, every parameter but the root on NVMe.
block=$((12 * channels * channels + 13 * channels))
cat > "$config" <<EOF
{
  "train_micro_batch_size_per_gpu": 1,
  "gradient_accumulation_steps": 1,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
  "zero_optimization": {
    "stage": 3,
    "sub_group_size": $sub_group,
    "stage3_param_persistence_threshold": 0,
    "stage3_max_live_parameters": $((2 * block + block / 2)),
    "stage3_max_reuse_distance": 0,
    "stage3_prefetch_bucket_size": $((block + block / 2)),
    "offload_optimizer": {"device": "nvme", "nvme_path": "$dir", "buffer_count": 2,
                          "pipeline_read": true, "pipeline_write": true},
    "offload_param": {"device": "nvme", "nvme_path": "$dir"}
  },
  "aio": {"block_size": 1048576, "queue_depth": 8}
}
EOF
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
echo "infinity: GPT L=$layers C=$channels NH=$heads T=$seq, $ranks rank(s), $steps steps, swap under $dir ($(date -u +%Y-%m-%d))"
start=$(date +%s)
log=/tmp/infinity.last.log  # the whole output, kept
build/apps/zero-run -n "$ranks" build/apps/zero-train --config "$config" --steps "$steps" --layers "$layers" \
  --channels "$channels" --heads "$heads" --max-seq "$seq" --no-progress > "$log" 2>&1 || { cat "$log"; exit 1; }
out=$(cat "$log")
end=$(date +%s)
echo "$out" | grep -E "^zero-train: [0-9]+ rank|^step|peak RSS|NVMe per step|^zerocpp: offload"
params=$(sed -nE 's/.*\(([0-9]+) parameters\).*/\1/p' <<<"$out")
peak_kib=$(sed -nE 's/.*peak RSS ([0-9]+) KiB.*/\1/p' <<<"$out")
python3 - "$params" "$peak_kib" "$ranks" "$((end - start))" <<'PY'
import sys
params, peak_kib, ranks, wall = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
state = 16 * params
peak = peak_kib * 1024
print(f"| parameters | fp32 model state | peak RSS (largest rank) | state / peak | ranks | wall |")
print(f"|---:|---:|---:|---:|---:|---:|")
print(f"| {params / 1e9:.3f} B | {state / 1e9:.2f} GB | {peak / 1e9:.2f} GB | {state / peak:.2f}x | {ranks} | {wall} s |")
PY
