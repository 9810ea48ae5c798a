#!/usr/bin/env bash
# The fine-tuning cases, made independently of zerocpp: a random Llama with Llama 3's real
# tokenizer (from the tokenizer fixture's npm files), the first 8 records of the alpaca demo data
# (tests/data/finetune), the rows the tokenizers library makes of them by Stanford Alpaca's recipe
# (sft_rows.cjs, cut at 96 tokens), and the Python reference's masked losses over 3 steps of SGD
# on the whole set as one batch (hf_llama.py sft), which tests/dist/finetune_test.cpp holds
# zero-finetune's trainer to; and the same for a Mixtral-shaped model (model_moe, expected_moe.json).
#   tests/reference/finetune/make_cases.sh TOKENIZER_CASES OUT
set -euo pipefail
tokenizers=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
mkdir -p "$out"
cat > "$out/config.in.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 32,
 "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": true,
 "hidden_act": "silu", "torch_dtype": "float32", "bos_token_id": 128000, "eos_token_id": 128009}
JSON
# The same with Mixtral's experts (4, top 2) in each layer, without the load-balancing loss (which
# transformers adds beside a mean over tokens, not a sum): zero-finetune with expert parallelism.
cat > "$out/config_moe.in.json" <<'JSON'
{"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": 128256, "hidden_size": 32,
 "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "num_local_experts": 4, "num_experts_per_tok": 2, "output_router_logits": false,
 "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": true,
 "hidden_act": "silu", "torch_dtype": "float32", "bos_token_id": 128000, "eos_token_id": 128009}
JSON
$py - "$here/../../data/finetune/alpaca_en_demo.json" "$out/data.json" <<'PY'
import json, sys
json.dump(json.load(open(sys.argv[1]))[:8], open(sys.argv[2], "w"), indent=2)
PY
# The rows from the tokenizer fixture's files (the model directory gets copies of them below).
node "$here/sft_rows.cjs" "$tokenizers/llama3_1" "$out/data.json" 96 "$out/rows.json"
# The model, then its losses, in one Python process (hf_llama.py batch: importing torch costs 1.4 s).
cat > "$out/jobs.txt" <<JOBS
$out/make.json make $out/model --config $out/config.in.json --seed 5 --dtype F32
$out/expected.json sft $out/model --rows $out/rows.json --steps 3 --lr 0.5
$out/make_moe.json make $out/model_moe --config $out/config_moe.in.json --seed 6 --dtype F32
$out/expected_moe.json sft $out/model_moe --rows $out/rows.json --steps 3 --lr 0.5
JOBS
$py "$here/../hf_llama.py" batch "$out/jobs.txt"
for model in model model_moe; do
  cp "$tokenizers/llama3_1/tokenizer.json" "$tokenizers/llama3_1/tokenizer_config.json" "$out/$model/"
done
echo "finetune cases: $(cat "$out/expected.json"); with experts: $(cat "$out/expected_moe.json")"
