#!/usr/bin/env bash
# One step's speed, this build against another, side by side in one run (issue 38: a refactor
# keeps the speed): zero-train on 2 ranks at ZeRO stages 0-3, fp32, AdamW, overlap_comm, 1e7-element
# reduce buckets (a dozen per step; stage 3: a bucket per unit), for two models:
#   - the GPT-2 124M shape (12 layers, 12 heads, 768 channels, vocabulary 50257), 2 x 128 tokens
#     per rank and step, on random token ids;
#   - a random model of SmolLM2-135M's shape (Llama: hidden 576, 30 layers, 9 heads, 3 KV heads,
#     intermediate 1536, vocabulary 49152, tied), 2 x 128 tokens per rank and step.
# Each configuration runs ROUNDS times per build, the builds alternating (A B A B ...), so that a
# slow spell of the machine falls on both. A run's time is the median of its steps after the
# first; a build's is the median of its runs. Prints one row per configuration: both medians and
# their ratio, each build's spread (slowest run / fastest run - 1: the noise to read the ratio
# against), and the ratio of the fastest steps (the same work with the least interference).
#   bench/compare_builds.sh OTHER_BIN_DIR [ROUNDS] [STEPS]   (defaults 3 and 5)
# e.g. git worktree add /tmp/base <commit> && cmake -S /tmp/base -B /tmp/base/build -G Ninja &&
#      ninja -C /tmp/base/build zero-train zero-run && bench/compare_builds.sh /tmp/base/build/apps
set -euo pipefail
cd "$(dirname "$0")/.."
other=$(cd "${1:?usage: bench/compare_builds.sh OTHER_BIN_DIR [ROUNDS] [STEPS]}" && pwd)
this=$PWD/build/apps
rounds=${2:-3} steps=${3:-5}
export OMP_NUM_THREADS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3
cat > "$tmp/smollm2.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 49152, "hidden_size": 576,
 "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
 "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "tie_word_embeddings": true,
 "hidden_act": "silu", "torch_dtype": "float32"}
JSON
$py tests/reference/hf_llama.py make "$tmp/smollm2" --config "$tmp/smollm2.json" --seed 1 --dtype F32 > /dev/null
$py - "$tmp/tokens.bin" <<'PY'
import random, struct, sys
rng = random.Random(7)
ids = [rng.randrange(49152) for _ in range(200000)]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)) + struct.pack(f"<{len(ids)}H", *ids))
PY
gpt=(--layers 12 --heads 12 --channels 768 --vocab 50257 --max-seq 128 --train-data "$tmp/tokens.bin")
llama=(--model "$tmp/smollm2" --train-data "$tmp/tokens.bin" --seq-len 128)

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o 'avx2\|avx512f\|avx512_bf16\|amx_bf16' | sort -u | xargs)"
echo "this: $this; other: $other; $rounds rounds of $steps steps per build, alternating"
echo
echo "| model | stage | this: step ms | other: step ms | this / other | spread this | spread other | fastest: this / other |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"

run_ms() {  # BIN_DIR CONFIG STEPS_FILE MODEL_FLAGS...: the median step time of one run, steps after
  # the first; every such step's time appended to STEPS_FILE
  local bin=$1 config=$2 all=$3
  shift 3
  "$bin/zero-run" -n 2 "$bin/zero-train" --config "$config" --steps "$steps" --print-every 1 --no-progress "$@" \
    > "$tmp/log" 2>&1 || { echo "failed: $bin $config" >&2; tail -5 "$tmp/log" >&2; exit 1; }
  awk '/^step/ { n++; if (n > 1) print $(NF - 1) }' "$tmp/log" | tee -a "$all" | sort -g |
    awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}
median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
spread() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.1f%%", (hi / lo - 1) * 100 }'; }

for model in gpt llama; do
  for stage in 0 1 2 3; do
    cat > "$tmp/stage$stage.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
 "zero_optimization": {"stage": $stage, "overlap_comm": true, "reduce_bucket_size": 10000000,
                       "stage3_param_persistence_threshold": 0}}
JSON
    : > "$tmp/this.ms"
    : > "$tmp/other.ms"
    : > "$tmp/this.steps"
    : > "$tmp/other.steps"
    flags=("${gpt[@]}")
    [[ $model == llama ]] && flags=("${llama[@]}")
    for ((r = 0; r < rounds; ++r)); do
      run_ms "$this" "$tmp/stage$stage.json" "$tmp/this.steps" "${flags[@]}" >> "$tmp/this.ms"
      run_ms "$other" "$tmp/stage$stage.json" "$tmp/other.steps" "${flags[@]}" >> "$tmp/other.ms"
    done
    a=$(median < "$tmp/this.ms") b=$(median < "$tmp/other.ms")
    fa=$(sort -g "$tmp/this.steps" | head -1) fb=$(sort -g "$tmp/other.steps" | head -1)
    printf '| %s | %s | %s | %s | %.3f | %s | %s | %.3f |\n' "$model" "$stage" "$a" "$b" \
      "$(awk -v a="$a" -v b="$b" 'BEGIN { print a / b }')" "$(spread < "$tmp/this.ms")" "$(spread < "$tmp/other.ms")" \
      "$(awk -v a="$fa" -v b="$fb" 'BEGIN { print a / b }')"
  done
done
