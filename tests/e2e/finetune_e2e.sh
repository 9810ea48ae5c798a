#!/usr/bin/env bash
# The seed's quick start, run as given (README, "Quick start"): only the program (zero-finetune),
# the model path (a small random Llama with Llama 3's real tokenizer) and the data set (the 64
# shortest records of the alpaca demo data, tests/data/finetune) replaced, under zero-run -n 4
# with the seed's ds_zero3.json unchanged (ZeRO-3, CPU offload of optimizer and parameters, bf16).
# - as given: 12 steps (4 a epoch × 3); the Trainer's log line at step 10 with the cosine lr that
#   transformers computes; checkpoint-12 holds global_step12/, latest, model.safetensors (the config
#   gathers 16-bit weights), config.json, the tokenizer files and trainer_state.json; the final model
#   in output_dir reads back in the independent reference (tests/reference/hf_llama.py).
# - with --logging_steps 1 --save_steps 4: the loss falls (epoch 3's mean below epoch 1's, same
#   records), checkpoints at 4, 8 and 12; --resume_from_checkpoint checkpoint-4 (with
#   --save_total_limit 2) logs steps 5-12 exactly as the run never stopped, and keeps 8 and 12.
# - LoRA with TRL's flags: PEFT's adapter files in each checkpoint and output_dir, whole at stage 3,
#   read by the independent reader; resumed from checkpoint-4 exactly as the straight run.
#   ARGS: BIN_DIR SOURCE_DIR TOKENIZER_CASES
source "$(dirname "$0")/gpt_e2e_common.sh"
tokenizers=$3
py=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cat > "$tmp/config.in.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 64,
 "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": true,
 "hidden_act": "silu", "torch_dtype": "bfloat16", "bos_token_id": 128000, "eos_token_id": 128009}
JSON
$py "$src/tests/reference/hf_llama.py" make "$tmp/Meta-Llama-3-8B" --config "$tmp/config.in.json" --seed 3 --dtype BF16 > /dev/null ||
  { echo "FAIL reference make"; exit 1; }
cp "$tokenizers/llama3_1/tokenizer.json" "$tokenizers/llama3_1/tokenizer_config.json" "$tmp/Meta-Llama-3-8B/"
# The 64 shortest records, in the file's order: a step's cost is its tokens through Llama 3's
# 128256-entry vocabulary, and the first 64 records have 10 times the text (the run took 45 s,
# now 14 s); what the run checks does not depend on the rows' lengths (cuts at model_max_length
# are checked in finetune_data and dist_finetune).
$py - "$src/tests/data/finetune/alpaca_en_demo.json" "$tmp/alpaca-cleaned.json" <<'PY'
import json, sys
records = json.load(open(sys.argv[1]))
size = lambda r: len(r["instruction"]) + len(r.get("input", "")) + len(r["output"])
keep = sorted(sorted(range(len(records)), key=lambda i: (size(records[i]), i))[:64])
json.dump([records[i] for i in keep], open(sys.argv[2], "w"), indent=2)
PY
cp "$src/examples/configs/ds_zero3.json" "$tmp/ds_zero3.json"
cd "$tmp"
quick_start=(--deepspeed ds_zero3.json --model_name_or_path Meta-Llama-3-8B --dataset alpaca-cleaned.json
  --bf16 true --num_train_epochs 3 --per_device_train_batch_size 1 --learning_rate 2e-5 --warmup_ratio 0.03
  --lr_scheduler_type cosine)
run() { "$bin/zero-run" -n 4 "$bin/zero-finetune" "${quick_start[@]}" "$@"; }

# 1. As given.
run --output_dir ./llama3-8b-sft --logging_steps 10 --save_strategy steps --save_steps 500 > given.log 2>&1 ||
  { echo "FAIL the quick start as given"; cat given.log; exit 1; }
line=$(grep "^{'loss'" given.log)
# transformers' cosine with 1 warmup step (ceil(0.03 × 12)) of 12: the lr logged after step 10 is
# the scheduler's after 10 steps (the one step 11 runs at), 2e-5 × 0.5 × (1 + cos(π × (10 - 1) / (12 - 1))).
# (Written as transformers' _get_cosine_schedule_with_warmup_lr_lambda computes it, so that every bit agrees.)
want_lr=$($py -c "import math; p = float(10 - 1) / float(max(1, 12 - 1)); print(repr(2e-5 * max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(0.5) * 2.0 * p)))))")
[[ "$line" =~ ^\{\'loss\':\ [0-9.]+,\ \'grad_norm\':\ [0-9.e-]+,\ \'learning_rate\':\ ${want_lr},\ \'epoch\':\ 2\.5\}$ ]] ||
  { echo "FAIL log line '$line' (lr $want_lr)"; fail=1; }
grep -q "Total optimization steps = 12" given.log || { echo "FAIL step count"; fail=1; }
c=llama3-8b-sft/checkpoint-12
for f in latest global_step12 model.safetensors config.json tokenizer.json tokenizer_config.json trainer_state.json; do
  [[ -e $c/$f ]] || { echo "FAIL $c/$f missing"; fail=1; }
done
[[ "$(cat $c/latest 2>/dev/null)" == global_step12 ]] || { echo "FAIL $c/latest"; fail=1; }
[[ $(ls -d llama3-8b-sft/checkpoint-* | wc -l) == 1 ]] || { echo "FAIL checkpoints besides the last"; fail=1; }
# The checkpoint's state is written before the run's summary; output_dir's after it.
$py - "$c/trainer_state.json" llama3-8b-sft/trainer_state.json <<'PY' || fail=1
import json, sys
for path, steps in zip(sys.argv[1:], ([10], [10, 12])):
    s = json.load(open(path))
    assert s["global_step"] == 12 and s["max_steps"] == 12 and s["logging_steps"] == 10, s
    assert [e.get("step") for e in s["log_history"]] == steps, (path, s["log_history"])
    assert s["log_history"][0]["loss"] > 0 and s["log_history"][0]["epoch"] == 2.5, s["log_history"][0]
assert "train_loss" in s["log_history"][-1], s["log_history"][-1]
PY
$py "$src/tests/reference/hf_llama.py" read llama3-8b-sft > read.json || { echo "FAIL reference read of the final model"; fail=1; }

# 2. Every step logged, a checkpoint every 4 steps.
run --output_dir ./full --logging_steps 1 --save_strategy steps --save_steps 4 > full.log 2>&1 ||
  { echo "FAIL full run"; cat full.log; exit 1; }
for n in 4 8 12; do [[ -d full/checkpoint-$n/global_step$n ]] || { echo "FAIL full/checkpoint-$n"; fail=1; }; done
$py - full.log <<'PY' || { echo "FAIL the loss does not fall"; fail=1; }
import ast, sys
losses = [ast.literal_eval(l)["loss"] for l in open(sys.argv[1]) if l.startswith("{'loss'")]
assert len(losses) == 12, losses
first, last = sum(losses[:4]) / 4, sum(losses[8:]) / 4
print(f"finetune_e2e: epoch 1 mean loss {first:.4f}, epoch 3 {last:.4f}")
assert last < first - 0.003, (first, last)
PY

# 3. Resumed from checkpoint-4: the same log lines from step 5 on.
mkdir resumed && cp -r full/checkpoint-4 resumed/
run --output_dir ./resumed --logging_steps 1 --save_strategy steps --save_steps 4 --save_total_limit 2 \
  --resume_from_checkpoint resumed/checkpoint-4 > resumed.log 2>&1 || { echo "FAIL resumed run"; cat resumed.log; exit 1; }
diff <(grep "^{'loss'" full.log | tail -8) <(grep "^{'loss'" resumed.log) > /dev/null ||
  { echo "FAIL resumed losses differ:"; diff <(grep "^{'loss'" full.log | tail -8) <(grep "^{'loss'" resumed.log); fail=1; }
[[ "$(cd resumed && ls -d checkpoint-* | tr '\n' ' ')" == "checkpoint-12 checkpoint-8 " ]] ||
  { echo "FAIL rotation left: $(ls resumed)"; fail=1; }
grep -q "Deleting older checkpoint" resumed.log || { echo "FAIL no rotation line"; fail=1; }
# 4. LoRA with TRL's flags (docs/lora.md), a checkpoint every 4 steps: each checkpoint and
#    output_dir hold PEFT's adapter files (no model.safetensors), whole at stage 3 on 4 ranks as the
#    independent reader (tests/reference/peft_lora.py) sees them; resumed from checkpoint-4 the run
#    logs steps 5-12 exactly as the straight one.
lora=(--use_peft --lora_r 8 --lora_alpha 16 --lora_dropout 0 --lora_target_modules all-linear --logging_steps 1
  --save_strategy steps --save_steps 4)
run --output_dir ./lora "${lora[@]}" > lora.log 2>&1 || { echo "FAIL LoRA run"; cat lora.log; exit 1; }
for d in lora lora/checkpoint-4 lora/checkpoint-12; do
  [[ -f $d/adapter_model.safetensors && -f $d/adapter_config.json && ! -e $d/model.safetensors ]] ||
    { echo "FAIL $d: $(ls $d)"; fail=1; }
done
$py "$src/tests/reference/peft_lora.py" read lora > lora_read.json || { echo "FAIL reference read of the adapter"; fail=1; }
$py - lora_read.json <<'PY' || { echo "FAIL adapter shapes: $(head -c 400 lora_read.json)"; fail=1; }
import json, sys
a = json.load(open(sys.argv[1]))
t, c = a["tensors"], a["config"]
assert c["r"] == 8 and c["lora_alpha"] == 16 and c["target_modules"] == "all-linear" and c["peft_type"] == "LORA", c
assert len(t) == 2 * 7 * 2, sorted(t)  # 2 layers x 7 linear layers x A, B
p = "base_model.model.model.layers.1."
assert t[p + "self_attn.q_proj.lora_A.weight"] == [8, 64] and t[p + "self_attn.k_proj.lora_B.weight"] == [32, 8], t
assert t[p + "mlp.down_proj.lora_A.weight"] == [8, 128] and t[p + "mlp.up_proj.lora_B.weight"] == [128, 8], t
PY
mkdir lora_resumed && cp -r lora/checkpoint-4 lora_resumed/
run --output_dir ./lora_resumed "${lora[@]}" --resume_from_checkpoint lora_resumed/checkpoint-4 > lora_resumed.log 2>&1 ||
  { echo "FAIL LoRA resumed run"; cat lora_resumed.log; exit 1; }
diff <(grep "^{'loss'" lora.log | tail -8) <(grep "^{'loss'" lora_resumed.log) > /dev/null ||
  { echo "FAIL LoRA resumed losses differ:"; diff <(grep "^{'loss'" lora.log | tail -8) <(grep "^{'loss'" lora_resumed.log); fail=1; }
[[ $fail == 0 ]] && echo "finetune_e2e: ok"
exit $fail
