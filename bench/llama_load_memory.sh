#!/usr/bin/env bash
# Loading a Hugging Face model partitioned: a random Llama of about 1 GB of bf16 weights in 3
# safetensors shards (written by the independent reference, tests/reference/hf_llama.py) trained
# for one step by zero-train --model on 2 ranks, at stage 3 (each rank reads every layer from the
# mapped files and keeps its shard: zero::Init) and at stage 0 (every rank holds the model), bf16
# with SGD. Prints each rank's peak RSS once the model is built and after the first step, next to
# the engine's model-state bytes on rank 0, the largest layer, and the weights on disk.
#   bench/llama_load_memory.sh [--layers L] [--hidden H] [--dir DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
layers=16 hidden=1536 intermediate=4096 heads=12 kv=4 vocab=32000 dir=${TMPDIR:-/tmp}
while [[ $# -gt 0 ]]; do
  case $1 in
    --layers) layers=$2; shift 2 ;;
    --hidden) hidden=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    *) echo "llama_load_memory: unknown option $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d "$dir/llama_load_memory.XXXXXX")
trap 'rm -rf "$work"' EXIT
cat > "$work/config.json" <<JSON
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": $vocab, "hidden_size": $hidden,
 "intermediate_size": $intermediate, "num_hidden_layers": $layers, "num_attention_heads": $heads,
 "num_key_value_heads": $kv, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
 "tie_word_embeddings": false, "hidden_act": "silu", "torch_dtype": "bfloat16"}
JSON
/usr/bin/python3 tests/reference/hf_llama.py make "$work/model" --config "$work/config.json" --seed 1 --dtype BF16 --shards 3
/usr/bin/python3 - "$work/tokens.bin" "$vocab" <<'PY'
import random, struct, sys
rng = random.Random(1)
ids = [rng.randrange(int(sys.argv[2])) for _ in range(20000)]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)) + struct.pack(f"<{len(ids)}H", *ids))
PY
echo "weights on disk: $(du -cb "$work"/model/*.safetensors | tail -1 | cut -f1) bytes in $(ls "$work"/model/*.safetensors | wc -l) files"
layer=$((2 * hidden * hidden + 2 * hidden * (hidden / heads * kv) + 3 * hidden * intermediate + 2 * hidden))
echo "largest layer: $layer parameters ($((2 * layer)) bytes in bf16); embedding and lm_head: $((vocab * hidden)) each"
echo "cpu flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o -w 'avx2\|fma\|avx512f\|avx512_bf16' | tr '\n' ' ')"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
for stage in 3 0; do
  cat > "$work/ds.json" <<JSON
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": true},
 "zero_allow_untested_optimizer": true,
 "optimizer": {"type": "SGD", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": $stage, "stage3_param_persistence_threshold": 0}}
JSON
  echo "== stage $stage"
  build/apps/zero-run -n 2 build/apps/zero-train --model "$work/model" --config "$work/ds.json" \
    --train-data "$work/tokens.bin" --seq-len 128 --steps 1 --no-progress |
    grep -E "zero-train: (2 ranks|model built|peak RSS)|step +1/"
done
