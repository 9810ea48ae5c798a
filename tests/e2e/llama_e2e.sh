#!/usr/bin/env bash
# A Hugging Face model through the command-line tools, checked by the independent reference
# (tests/reference/hf_llama.py, its own safetensors parser):
# - zero-train --model on 2 ranks at stage 3 with --save-dir and --export (bf16 → shards): the
#   exported directory reads back in the reference (framing, index total_size, "format": "pt");
#   the reference's loss of the exported model on the next batch equals zero-train's next loss;
# - zero-ckpt consolidate --format hf of the checkpoint equals the export (same names, same bytes
#   in the training dtype), and --dtype fp32 writes the fp32 master;
# - resume at 1 rank stage 0 from the 2-rank stage-3 checkpoint continues with the same losses;
# - a bad model directory fails before training, naming the tensor, and writes nothing.
source "$(dirname "$0")/gpt_e2e_common.sh"
py=/usr/bin/python3
ref="$py $src/tests/reference/hf_llama.py"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cat > "$tmp/config.in.json" <<'JSON'
{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 96, "hidden_size": 64,
 "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
 "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": false,
 "use_sliding_window": false, "hidden_act": "silu", "torch_dtype": "bfloat16"}
JSON
$ref make "$tmp/model" --config "$tmp/config.in.json" --seed 3 --dtype F32 --shards 2 > /dev/null || { echo "FAIL reference make"; exit 1; }
$py - "$tmp" <<'PY'
import random, struct, sys
rng = random.Random(5)
ids = [rng.randrange(96) for _ in range(12 * 16 * 12 + 1)]
def shard(path, tokens):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)) + struct.pack(f"<{len(tokens)}H", *tokens))
shard(f"{sys.argv[1]}/tokens.bin", ids)
shard(f"{sys.argv[1]}/tail.bin", ids[6 * 12 * 16:])
PY
cat > "$tmp/ds.json" <<'JSON'
{"train_batch_size": 12, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
 "stage3_gather_16bit_weights_on_model_save": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}}
JSON
losses() { awk '/^step/ { split($2, s, "/"); print s[1], $5 }' "$1"; }
train() {  # train RANKS LOG [flags]
  local ranks=$1 log=$2
  shift 2
  "$bin/zero-run" -n "$ranks" "$bin/zero-train" --model "${model:-$tmp/model}" --train-data "$tmp/tokens.bin" --seq-len 16 \
    --no-progress "$@" > "$log" 2>&1
}

# fp32, 2 ranks, stage 3: save at step 6 and export; the straight run goes on to step 8.
train 2 "$tmp/straight.log" --config "$tmp/ds.json" --steps 8 || { echo "FAIL straight"; cat "$tmp/straight.log"; exit 1; }
train 2 "$tmp/six.log" --config "$tmp/ds.json" --steps 6 --save-dir "$tmp/ckpt" --export "$tmp/out" --max-shard-size 100KB ||
  { echo "FAIL six"; cat "$tmp/six.log"; exit 1; }
read_json=$($ref read "$tmp/out") || { echo "FAIL the reference cannot read the export: $read_json"; fail=1; }
[[ $(ls "$tmp"/out/model-*-of-*.safetensors | wc -l) -ge 2 ]] || { echo "FAIL export not sharded"; fail=1; }
grep -q '"torch_dtype": "float32"' "$tmp/out/config.json" || { echo "FAIL torch_dtype"; fail=1; }
for f in generation_config.json tokenizer.json tokenizer_config.json; do
  [[ -f $tmp/out/$f ]] || { echo "FAIL $f not copied"; fail=1; }
done
# The reference's loss of the exported weights on batch 6 is zero-train's step-7 loss.
want=$(losses "$tmp/straight.log" | awk '$1 == 7 { print $2 }')
got=$($ref loss "$tmp/out" --data "$tmp/tail.bin" --rows 12 --seq 16 | $py -c 'import json,sys; print(json.load(sys.stdin)["loss"])')
awk -v a="$want" -v b="$got" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5) }' ||
  { echo "FAIL reference loss of the export $got != zero-train's next loss $want"; fail=1; }
echo "export: zero-train step 7 loss $want, the reference on the exported model $got"

# Offline: consolidate --format hf equals the export (fp32 run: fp32 both).
"$bin/zero-ckpt" consolidate "$tmp/ckpt" --format hf --out "$tmp/consolidated" > "$tmp/zc.log" 2>&1 ||
  { echo "FAIL consolidate"; cat "$tmp/zc.log"; fail=1; }
$ref compare "$tmp/out" "$tmp/consolidated" --tol 0 > "$tmp/cmp.json" || { echo "FAIL consolidate != export"; cat "$tmp/cmp.json"; fail=1; }
"$bin/zero-ckpt" consolidate "$tmp/ckpt" --format hf --dtype bf16 --out "$tmp/bf16" > /dev/null 2>&1 &&
  grep -q '"torch_dtype": "bfloat16"' "$tmp/bf16/config.json" && $ref read "$tmp/bf16" | grep -q '"BF16"' ||
  { echo "FAIL consolidate --dtype bf16"; fail=1; }

# Resume at 1 rank, stage 0, from the 2-rank stage-3 checkpoint: steps 7 and 8 as the straight run.
sed 's/"stage": 3/"stage": 0/' "$tmp/ds.json" > "$tmp/ds0.json"
train 1 "$tmp/resumed.log" --config "$tmp/ds0.json" --steps 8 --save-dir "$tmp/ckpt" --resume ||
  { echo "FAIL resume"; cat "$tmp/resumed.log"; exit 1; }
losses "$tmp/straight.log" | awk '$1 > 6' > "$tmp/expected"
losses "$tmp/resumed.log" > "$tmp/got"
[[ $(wc -l < "$tmp/got") -eq 2 ]] && join "$tmp/expected" "$tmp/got" |
  awk '{ d = $2 - $3; if (d < 0) d = -d; if (d > 1e-5 * $2) bad = 1 } END { exit bad }' ||
  { echo "FAIL resumed losses"; cat "$tmp/expected" "$tmp/got"; fail=1; }

# A broken model directory: the error names the tensor, nothing is trained or written.
cp -r "$tmp/model" "$tmp/broken"
first=$(ls "$tmp"/broken/model-*.safetensors | head -1)
truncate -s -64 "$first"
if model=$tmp/broken train 2 "$tmp/broken.log" --config "$tmp/ds.json" --steps 2 --save-dir "$tmp/never" --export "$tmp/never_out"; then
  echo "FAIL a truncated shard trained"; fail=1
fi
grep -q "truncated" "$tmp/broken.log" && grep -q "tensor " "$tmp/broken.log" || { echo "FAIL error text"; cat "$tmp/broken.log"; fail=1; }
grep -q "^step" "$tmp/broken.log" && { echo "FAIL trained on a broken model"; fail=1; }
[[ ! -e $tmp/never && ! -e $tmp/never_out ]] || { echo "FAIL something was written"; fail=1; }
[[ $fail -eq 0 ]] && echo "llama_e2e: OK"
exit $fail
