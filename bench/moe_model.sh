#!/usr/bin/env bash
# Writes the mixture-of-experts benchmarks' models and data (issue 41) into WORK: WORK/moe, a
# Mixtral-shaped model (8 experts, top 2, expert intermediate 512), WORK/dense, a Llama whose MLP
# has 2 × 512 (the same active parameters per token), both hidden 256, 4 layers, 4 heads, vocab
# 4096, random fp32 weights written by the independent reference (tests/reference/hf_llama.py);
# and WORK/tokens.bin, the README's bytes as tokens (llm.c's format).
#   bench/moe_model.sh WORK
set -euo pipefail
cd "$(dirname "$0")/.."
work=$1
python=/usr/bin/python3  # Debian's, with python3-torch
perl -e 'local $/; my $b = <STDIN>; print pack("l<256", 20240520, 1, length $b, (0) x 253), pack("S<*", unpack("C*", $b));' \
  < README.md > "$work/tokens.bin"
common='"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
  "vocab_size": 4096, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false'
echo "{\"architectures\": [\"MixtralForCausalLM\"], \"model_type\": \"mixtral\", $common, \"intermediate_size\": 512,
  \"num_local_experts\": 8, \"num_experts_per_tok\": 2, \"output_router_logits\": false}" > "$work/moe.json"
echo "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", $common, \"intermediate_size\": 1024}" > "$work/dense.json"
for m in moe dense; do
  "$python" tests/reference/hf_llama.py make "$work/$m" --config "$work/$m.json" --seed 1 --dtype F32 > /dev/null
done
