#!/usr/bin/env bash
# The GPT's step time in every offload mode, side by side in one run: as a ratio to no offload,
# and for NVMe as a ratio to its I/O bound (bytes read / fio's read bandwidth + bytes written /
# fio's write bandwidth, both measured here first with bench/swap_vs_fio.sh), or to the step
# without offload when that is larger. Stage 3, fp32, AdamW; each mode trains the same steps
# from the same seed (the losses are printed: they agree).
#   bench/offload_modes.sh [--layers L] [--channels C] [--heads H] [--seq T] [--steps N]
#                          [--ranks R] [--dir DIR] [--sub-group ELEMENTS]
set -euo pipefail
cd "$(dirname "$0")/.."
layers=12 channels=768 heads=12 seq=128 steps=6 ranks=1 dir=/var/tmp sub_group=10000000
source bench/gpt_run_args.sh
fio_out=$(bench/swap_vs_fio.sh "$dir" 1)
fio_write=$(sed -nE 's/^\| fio \| ([0-9.]+) \| ([0-9.]+) \|$/\1/p' <<<"$fio_out")
fio_read=$(sed -nE 's/^\| fio \| ([0-9.]+) \| ([0-9.]+) \|$/\2/p' <<<"$fio_out")
work=$(mktemp -d /tmp/offload_modes.XXXXXX)
trap 'rm -rf "$work"' EXIT
block=$((12 * channels * channels + 13 * channels))
config() {  # optimizer-device param-device pipeline -> config file
  local file=$work/$1-$2-$3.json optimizer="" param=""
  case $1 in
    cpu) optimizer=', "offload_optimizer": {"device": "cpu"}' ;;
    nvme) optimizer=", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$dir\", \"buffer_count\": 2,
            \"pipeline_read\": $3, \"pipeline_write\": $3}" ;;
  esac
  case $2 in
    cpu) param=', "offload_param": {"device": "cpu"}' ;;
    nvme) param=", \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"$dir\"}" ;;
  esac
  cat > "$file" <<EOF
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
 "zero_optimization": {"stage": 3, "sub_group_size": $sub_group, "stage3_param_persistence_threshold": 0,
   "stage3_max_live_parameters": $((2 * block + block / 2)), "stage3_max_reuse_distance": 0,
   "stage3_prefetch_bucket_size": $((block + block / 2))$optimizer$param},
 "aio": {"block_size": 1048576, "queue_depth": 8}}
EOF
  echo "$file"
}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
echo "offload_modes: GPT L=$layers C=$channels NH=$heads T=$seq, stage 3 fp32, $ranks rank(s), $steps steps (mean of steps 2..$steps), swap under $dir; fio write $fio_write GB/s, read $fio_read GB/s ($(date -u +%Y-%m-%d))"
echo "| optimizer | parameters | pipelined | step s | / none | NVMe read MB/step | written MB/step | I/O bound s | / bound | last loss |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
none=""
for mode in "none none false" "cpu none false" "cpu cpu false" "nvme none true" "nvme nvme true" "nvme nvme false"; do
  read -r opt par pipe <<<"$mode"
  out=$(build/apps/zero-run -n "$ranks" build/apps/zero-train --config "$(config "$opt" "$par" "$pipe")" --steps "$steps" \
          --layers "$layers" --channels "$channels" --heads "$heads" --max-seq "$seq" --no-progress 2>&1) || { echo "$out"; exit 1; }
  echo "$out" > "$work/out"
  python3 - "$opt" "$par" "$pipe" "$fio_read" "$fio_write" "${none:-0}" "$ranks" "$work/out" > "$work/row" <<'PY'
import re, sys
opt, par, pipe, fio_read, fio_write, none, ranks, path = sys.argv[1:]
text = open(path).read()
ms = [float(m) for m in re.findall(r"^step .*\| ([0-9.]+) ms$", text, re.M)]
loss = re.findall(r"^step .*\| loss ([0-9.]+) \|", text, re.M)[-1]
step = sum(ms[1:]) / len(ms[1:]) / 1e3
io = re.search(r"NVMe per step on rank 0: read ([0-9]+) bytes, written ([0-9]+) bytes", text)
none = float(none) or step
read, written = (int(io.group(1)), int(io.group(2))) if io else (0, 0)
# Every rank moves as much as rank 0, through one disk.
bound = max(none, int(ranks) * (read / (float(fio_read) * 1e9) + written / (float(fio_write) * 1e9))) if io else 0
cells = [opt, par, "yes" if pipe == "true" else "no", f"{step:.3f}", f"{step / none:.2f}",
         f"{read / 1e6:.0f}" if io else "", f"{written / 1e6:.0f}" if io else "",
         f"{bound:.3f}" if io else "", f"{step / bound:.2f}" if io else "", loss]
print("| " + " | ".join(cells) + " |")
PY
  [[ -z $none ]] && none=$(python3 -c "import re,sys; t=open('$work/row').read(); print(t.split('|')[4].strip())")
  cat "$work/row"
done
