#!/usr/bin/env bash
# Tensor parallelism against ZeRO on 2 ranks, side by side in one run (issue 39): a random model of
# Qwen2.5-0.5B's shape (tests/models/hf_configs; written by the independent reference,
# tests/reference/hf_llama.py) in bf16 with AdamW, trained by zero-train --model as TP 2 (ZeRO-0
# over a data-parallel group of 1), ZeRO-1 and ZeRO-3 over 2 ranks. Prints each run's median step
# time, tokens/s, the largest rank's peak RSS, rank 0's model-state bytes and the tensor-parallel
# collectives per step. (SmolLM2-360M's 15 heads do not split over 2 ranks; Qwen2.5-0.5B's 14 do.)
#   bench/tensor_parallel.sh [STEPS] [SEQ]      defaults: 5 steps (the first not timed), 256 tokens
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-5} seq=${2:-256}
work=$(mktemp -d "${TMPDIR:-/tmp}/tensor_parallel.XXXXXX")
trap 'rm -rf "$work"' EXIT
bench/tensor_parallel_model.sh "$work"
config=tests/models/hf_configs/Qwen__Qwen2.5-0.5B.config.json
echo "model: $(basename "$config") shape, bf16, AdamW; 2 ranks, 1 row x $seq tokens per data-parallel rank"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o -w 'avx2\|fma\|avx512f\|avx512_bf16\|amx_bf16' | tr '\n' ' ')"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
printf '%-24s %12s %10s %18s %18s\n' run "step (ms)" "tokens/s" "peak RSS (KiB)" "model state (B)"
for run in "TP 2 (ZeRO-0)|0|2" "ZeRO-1 over 2|1|1" "ZeRO-3 over 2|3|1"; do
  IFS='|' read -r name stage tp <<< "$run"
  cat > "$work/ds.json" <<JSON
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": true},
 "gradient_clipping": 1.0, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
 "zero_optimization": {"stage": $stage, "stage3_param_persistence_threshold": 0},
 "tensor_parallel": {"autotp_size": $tp}}
JSON
  log=$work/$stage-$tp.log
  build/apps/zero-run -n 2 build/apps/zero-train --model "$work/model" --config "$work/ds.json" \
    --train-data "$work/tokens.bin" --seq-len "$seq" --steps "$steps" --print-every 1 --no-progress > "$log" 2>&1
  /usr/bin/python3 - "$log" "$name" <<'PY'
import re, statistics, sys
text = open(sys.argv[1]).read()
ms = [float(m) for m in re.findall(r"^step .*\| ([0-9.]+) ms", text, re.M)][1:]
tok = [float(m) for m in re.findall(r"^step .*\| ([0-9.]+) tok/s", text, re.M)][1:]
rss = re.search(r"peak RSS (\d+) KiB", text).group(1)
state = re.search(r"model state (\d+) bytes", text).group(1)
print(f"{sys.argv[2]:<24} {statistics.median(ms):12.0f} {statistics.median(tok):10.0f} {rss:>18} {state:>18}")
for line in re.findall(r"^zero-train: tensor-parallel collectives.*$", text, re.M):
    print("   ", line)
PY
done
