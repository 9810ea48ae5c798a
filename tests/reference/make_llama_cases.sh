#!/usr/bin/env bash
# Writes the Llama family's test cases with the independent Python reference (hf_llama.py, on
# Debian's python3-torch): per case a random Hugging Face model directory (config.json + weights
# in 1 or 3 safetensors shards, F32 / BF16 / F16) and the reference's losses on the shared token
# shard — batch 0's loss, 10 steps of SGD and of AdamW in fp32, 10 steps of SGD in bf16 mixed
# precision — which tests/dist/llama_trainer_test.cpp holds zerocpp to. llama_wide (8.4 M
# parameters, 6 layers) is the one where many buckets and several stage-3 units are in flight.
# llama_mha (4 key/value heads, a vocabulary of 98 and 110 MLP features) splits over 4
# tensor-parallel ranks, unevenly along the vocabulary and the MLP. llama_deep (5 layers, tied
# embeddings) cuts into uneven pipeline stages, its embedding on the first and its lm_head on the
# last; it also has 16-row trajectories (expected16.json).
#   tests/reference/make_llama_cases.sh OUT
set -euo pipefail
out=$1
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
ref="$py $here/hf_llama.py"
rows=12 seq=16
mkdir -p "$out"
# A learnable stream over 96 tokens (mostly t -> 5t+3 mod 96, some noise), llm.c's shard format;
# tail.bin is the same stream from batch 3 on.
$py - "$out" "$rows" "$seq" <<'PY'
import random, struct, sys
out, rows, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(7)
ids = [0]
for _ in range(30 * rows * seq):
    ids.append((ids[-1] * 5 + 3) % 96 if rng.random() < 0.8 else rng.randrange(96))
def shard(path, tokens):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))
shard(f"{out}/tokens.bin", ids)
shard(f"{out}/tail.bin", ids[3 * rows * seq:])
# For moe_routed (whose routers send tokens below 48 to experts 0 and 1, the others to 2 and 3):
# low.bin only tokens below 48 (experts 2 and 3 idle on every rank); halves.bin blocks of
# rows // 4 rows alternately below and above 48, so each quarter of a step, a data-parallel rank's
# share at 2 or 4 ranks, leaves two experts idle on half of the ranks.
block = rows // 4 * seq
shard(f"{out}/low.bin", [rng.randrange(48) for _ in range(30 * rows * seq + 1)])
shard(f"{out}/halves.bin", [rng.randrange(48) + 48 * (i // block % 2) for i in range(30 * rows * seq + 1)])
PY

# name, dtype in the files, shards, config.json, make's and train's extra arguments. The MoE
# cases train with the load-balancing loss, which is not a mean over rows: their trajectories are
# of 4 equal parts a step (data-parallel ranks x micro-batches), each a forward of its own.
# moe_routed's routers send the lower half of the vocabulary to experts 0 and 1, the upper half to
# 2 and 3 (with low.bin and halves.bin below: experts idle on every rank, or on some).
cases=(
  "llama_gqa|F32|3|{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"vocab_size\":96,\"hidden_size\":64,\"intermediate_size\":112,\"num_hidden_layers\":3,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,\"rope_theta\":10000.0,\"tie_word_embeddings\":false,\"hidden_act\":\"silu\",\"torch_dtype\":\"float32\"}"
  "llama3_tied|BF16|1|{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"vocab_size\":96,\"hidden_size\":48,\"intermediate_size\":80,\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":1,\"head_dim\":16,\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,\"rope_theta\":500000.0,\"rope_scaling\":{\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,\"original_max_position_embeddings\":16,\"rope_type\":\"llama3\"},\"attention_bias\":true,\"mlp_bias\":true,\"tie_word_embeddings\":true,\"hidden_act\":\"silu\",\"torch_dtype\":\"bfloat16\"}"
  "mistral_window|F16|3|{\"architectures\":[\"MistralForCausalLM\"],\"model_type\":\"mistral\",\"vocab_size\":96,\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":16,\"max_position_embeddings\":64,\"rms_norm_eps\":1e-6,\"rope_theta\":10000.0,\"sliding_window\":5,\"tie_word_embeddings\":false,\"hidden_act\":\"silu\",\"torch_dtype\":\"float16\"}"
  "llama_wide|F32|3|{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"vocab_size\":8192,\"hidden_size\":256,\"intermediate_size\":704,\"num_hidden_layers\":6,\"num_attention_heads\":8,\"num_key_value_heads\":2,\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,\"rope_theta\":10000.0,\"tie_word_embeddings\":false,\"hidden_act\":\"silu\",\"torch_dtype\":\"float32\"}"
  "llama_mha|F32|1|{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"vocab_size\":98,\"hidden_size\":64,\"intermediate_size\":110,\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":4,\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,\"rope_theta\":10000.0,\"tie_word_embeddings\":false,\"hidden_act\":\"silu\",\"torch_dtype\":\"float32\"}"
  "llama_deep|F32|1|{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"vocab_size\":96,\"hidden_size\":32,\"intermediate_size\":64,\"num_hidden_layers\":5,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,\"rope_theta\":10000.0,\"tie_word_embeddings\":true,\"hidden_act\":\"silu\",\"torch_dtype\":\"float32\"}"
  "mixtral_moe|F32|3|{\"architectures\":[\"MixtralForCausalLM\"],\"model_type\":\"mixtral\",\"vocab_size\":96,\"hidden_size\":32,\"intermediate_size\":48,\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,\"rope_theta\":1000000.0,\"sliding_window\":null,\"num_local_experts\":4,\"num_experts_per_tok\":2,\"output_router_logits\":true,\"router_aux_loss_coef\":0.02,\"router_jitter_noise\":0.0,\"tie_word_embeddings\":false,\"hidden_act\":\"silu\",\"torch_dtype\":\"float32\"}||--chunks 4"
  "qwen2_moe_dense|F32|1|{\"architectures\":[\"Qwen2MoeForCausalLM\"],\"model_type\":\"qwen2_moe\",\"vocab_size\":96,\"hidden_size\":32,\"intermediate_size\":64,\"moe_intermediate_size\":24,\"shared_expert_intermediate_size\":40,\"num_experts\":4,\"num_experts_per_tok\":2,\"norm_topk_prob\":false,\"decoder_sparse_step\":2,\"mlp_only_layers\":[],\"num_hidden_layers\":3,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"max_position_embeddings\":64,\"rms_norm_eps\":1e-6,\"rope_theta\":10000.0,\"use_sliding_window\":false,\"sliding_window\":4096,\"max_window_layers\":3,\"output_router_logits\":true,\"router_aux_loss_coef\":0.02,\"qkv_bias\":true,\"tie_word_embeddings\":false,\"hidden_act\":\"silu\",\"torch_dtype\":\"float32\"}||--chunks 4"
  "qwen2_moe_norm|F32|1|{\"architectures\":[\"Qwen2MoeForCausalLM\"],\"model_type\":\"qwen2_moe\",\"vocab_size\":96,\"hidden_size\":32,\"intermediate_size\":64,\"moe_intermediate_size\":24,\"shared_expert_intermediate_size\":40,\"num_experts\":4,\"num_experts_per_tok\":2,\"norm_topk_prob\":true,\"decoder_sparse_step\":1,\"mlp_only_layers\":[0],\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"max_position_embeddings\":64,\"rms_norm_eps\":1e-6,\"rope_theta\":10000.0,\"use_sliding_window\":false,\"sliding_window\":4096,\"max_window_layers\":2,\"output_router_logits\":true,\"router_aux_loss_coef\":0.02,\"qkv_bias\":true,\"tie_word_embeddings\":true,\"hidden_act\":\"silu\",\"torch_dtype\":\"float32\"}||--chunks 4"
  "moe_routed|F32|1|{\"architectures\":[\"MixtralForCausalLM\"],\"model_type\":\"mixtral\",\"vocab_size\":96,\"hidden_size\":32,\"intermediate_size\":48,\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,\"rope_theta\":1000000.0,\"sliding_window\":null,\"num_local_experts\":4,\"num_experts_per_tok\":2,\"output_router_logits\":true,\"router_aux_loss_coef\":0.02,\"tie_word_embeddings\":false,\"hidden_act\":\"silu\",\"torch_dtype\":\"float32\"}|--route-by-token|--chunks 4"
  "qwen2_bias|F32|3|{\"architectures\":[\"Qwen2ForCausalLM\"],\"model_type\":\"qwen2\",\"vocab_size\":96,\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"max_position_embeddings\":64,\"rms_norm_eps\":1e-6,\"rope_theta\":1000000.0,\"use_sliding_window\":false,\"sliding_window\":4096,\"max_window_layers\":2,\"tie_word_embeddings\":true,\"hidden_act\":\"silu\",\"torch_dtype\":\"float32\"}"
)
# Every case's commands in one Python process (hf_llama.py batch: importing torch costs 1.4 s a
# process): make the model, then its losses, each command's JSON line into a file of its own.
jobs=$out/jobs.txt
: >"$jobs"
for c in "${cases[@]}"; do
  IFS='|' read -r name dtype shards config make_extra train_extra <<<"$c"
  dir=$out/$name
  mkdir -p "$dir"
  echo "$config" >"$dir/config.in.json"
  common="--data $out/tokens.bin --rows $rows --seq $seq"
  cat >>"$jobs" <<JOBS
$dir/make.json make $dir/model --config $dir/config.in.json --seed 11 --dtype $dtype --shards $shards $make_extra
$dir/loss.json loss $dir/model $common
$dir/sgd.json train $dir/model $common --steps 10 --optimizer sgd --lr 0.5 $train_extra
$dir/adamw.json train $dir/model $common --steps 10 --optimizer adamw --lr 0.01 --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 $train_extra
$dir/bf16.json train $dir/model $common --steps 10 --optimizer sgd --lr 0.5 --precision bf16 $train_extra
JOBS
done
# llama_deep again at 16 rows a step, which 8 micro-batches divide over 1 or 2 data-parallel
# ranks (tests/dist/llama_pipeline_test.cpp: gradient accumulation 4 and 8 at up to 8 ranks).
deep=$out/llama_deep
cat >>"$jobs" <<JOBS
$deep/sgd16.json train $deep/model --data $out/tokens.bin --rows 16 --seq $seq --steps 10 --optimizer sgd --lr 0.5
$deep/adamw16.json train $deep/model --data $out/tokens.bin --rows 16 --seq $seq --steps 10 --optimizer adamw --lr 0.01 --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8
JOBS
routed=$out/moe_routed
for data in low halves; do
  echo "$routed/sgd_$data.json train $routed/model --data $out/$data.bin --rows $rows --seq $seq --steps 10 --optimizer sgd --lr 0.5 --chunks 4" >>"$jobs"
done
$ref batch "$jobs"
# LoRA (tests/reference/peft_lora.py, written from PEFT's code) on llama_gqa: an adapter on every
# linear layer (r 4, alpha 32), and an rsLoRA one (r 8, alpha 16) on q, k and up with lm_head saved
# whole; B drawn non-zero so that A's gradient shows from step 1. Their loss and 10 steps of SGD
# and AdamW over the frozen base, and the adapter after 3 steps of SGD, for
# tests/dist/llama_lora_test.cpp. SGD at lr 0.2, not the other cases' 0.5: at 0.5 the rsLoRA
# adapter with its whole lm_head amplifies fp32's rounding differences to 2e-4 of the weights by
# step 10 (and the losses past 1e-5); at 0.2 they stay within 3e-6.
lora=$out/llama_gqa
lora_common="--data $out/tokens.bin --rows $rows --seq $seq"
cat >"$out/lora_jobs.txt" <<JOBS
$lora/lora_all.make.json make $lora/model $lora/lora_all --r 4 --alpha 32 --targets all-linear
$lora/lora_rs.make.json make $lora/model $lora/lora_rs --r 8 --alpha 16 --targets q_proj,k_proj,up_proj --rslora --modules-to-save lm_head
JOBS
for adapter in lora_all lora_rs; do
  cat >>"$out/lora_jobs.txt" <<JOBS
$lora/$adapter.loss.json loss $lora/model $lora/$adapter $lora_common
$lora/$adapter.sgd.json train $lora/model $lora/$adapter $lora_common --steps 10 --optimizer sgd --lr 0.2
$lora/$adapter.sgd3.json train $lora/model $lora/$adapter $lora_common --steps 3 --optimizer sgd --lr 0.2 --out $lora/$adapter.sgd3
$lora/$adapter.adamw.json train $lora/model $lora/$adapter $lora_common --steps 10 --optimizer adamw --lr 0.01 --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8
JOBS
done
$py "$here/peft_lora.py" batch "$out/lora_jobs.txt"
for adapter in lora_all lora_rs; do
  printf '{"loss": %s, "sgd": %s, "adamw": %s}\n' "$(cat "$lora/$adapter.loss.json")" "$(cat "$lora/$adapter.sgd.json")" \
    "$(cat "$lora/$adapter.adamw.json")" >"$lora/$adapter.expected.json"
done
printf '{"low": %s, "halves": %s}\n' "$(cat "$routed/sgd_low.json")" "$(cat "$routed/sgd_halves.json")" >"$routed/expected_routed.json"
printf '{"sgd": %s, "adamw": %s}\n' "$(cat "$deep/sgd16.json")" "$(cat "$deep/adamw16.json")" >"$deep/expected16.json"
for c in "${cases[@]}"; do
  dir=$out/${c%%|*}
  printf '{"loss": %s, "sgd": %s, "adamw": %s, "bf16_sgd": %s}\n' "$(cat "$dir/loss.json")" "$(cat "$dir/sgd.json")" \
    "$(cat "$dir/adamw.json")" "$(cat "$dir/bf16.json")" >"$dir/expected.json"
done
echo "make_llama_cases: ${#cases[@]} cases in $out"
