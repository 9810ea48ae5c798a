#!/usr/bin/env bash
# LoRA through the command-line tools, checked by the independent reference
# (tests/reference/peft_lora.py, PEFT's LoRA in Python with its own safetensors reader), on the
# llama_cases fixture's llama_gqa model and rsLoRA adapter (lm_head saved whole):
# - zero-train --model --use_peft --adapter_name_or_path on 4 ranks at stage 3, --export with
#   --merge_adapter: the adapter (DIR/adapter) reads back with every tensor's whole shape, and the
#   merged model's logits equal base + adapter's within 1e-5 of the largest logit (fp32); its
#   checkpoint consolidated (zero-ckpt consolidate --format hf) is the same adapter;
# - zero-ckpt merge-lora of the fixture's adapter: the same;
# - zero-ckpt merge-lora of that adapter onto another base fails naming the tensor, writing nothing.
#   ARGS: BIN_DIR SOURCE_DIR (ZERO_LLAMA_CASES from CTest's llama_cases fixture)
source "$(dirname "$0")/gpt_e2e_common.sh"
py=/usr/bin/python3
ref="$py $src/tests/reference/peft_lora.py"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cases=${ZERO_LLAMA_CASES:?set by the llama_cases fixture}
base=$cases/llama_gqa/model adapter=$cases/llama_gqa/lora_rs
data=(--data "$cases/tokens.bin" --rows 12 --seq 16)
# Merged logits against base + adapter's: within 1e-5 of the largest.
same_logits() {  # MERGED ADAPTER WHAT
  local out
  out=$($ref merged "$base" "$2" "$1" "${data[@]}") || { echo "FAIL $3: reference merged: $out"; fail=1; return; }
  $py -c "import json, sys; r = json.loads(sys.argv[1]); sys.exit(0 if r['max_abs_diff'] <= 1e-5 * r['max_abs_logit'] else 1)" "$out" ||
    { echo "FAIL $3: merged logits differ: $out"; fail=1; }
}

"$bin/zero-run" -n 4 "$bin/zero-train" --model "$base" --train-data "$cases/tokens.bin" --seq-len 16 --steps 2 \
  --config "$(config 3)" --use_peft --adapter_name_or_path "$adapter" --export "$tmp/out" --merge_adapter --save-dir "$tmp/ckpt" \
  --no-progress > "$tmp/train.log" 2>&1 || { echo "FAIL zero-train"; cat "$tmp/train.log"; exit 1; }
read=$($ref read "$tmp/out/adapter") || { echo "FAIL the reference cannot read the adapter: $read"; fail=1; }
$py - "$read" <<'PY' || { echo "FAIL adapter shapes: $read"; fail=1; }
import json, sys
t = json.loads(sys.argv[1])["tensors"]
p = "base_model.model.model.layers.2."
assert t[p + "self_attn.q_proj.lora_A.weight"] == [8, 64] and t[p + "self_attn.k_proj.lora_B.weight"] == [32, 8], t
assert t[p + "mlp.up_proj.lora_B.weight"] == [112, 8] and t["base_model.model.lm_head.weight"] == [96, 64], t
assert len(t) == 3 * 3 * 2 + 1, sorted(t)
PY
[[ -f $tmp/out/model.safetensors && -f $tmp/out/config.json && ! -e $tmp/out/adapter_config.json ]] ||
  { echo "FAIL the merged directory: $(ls "$tmp/out")"; fail=1; }
same_logits "$tmp/out" "$tmp/out/adapter" "--merge_adapter"
# The checkpoint consolidated is the same adapter (PEFT's files, the same config), bit for bit in fp32.
"$bin/zero-ckpt" consolidate "$tmp/ckpt" --format hf --dtype fp32 --out "$tmp/consolidated" > "$tmp/cons.log" 2>&1 ||
  { echo "FAIL consolidate"; cat "$tmp/cons.log"; fail=1; }
$py - "$src/tests/reference" "$tmp/consolidated" "$tmp/out/adapter" <<'PY' || { echo "FAIL the consolidated adapter differs from the export"; fail=1; }
import sys
sys.path.insert(0, sys.argv[1])
import peft_lora
ca, a = peft_lora.read_adapter(sys.argv[2])
cb, b = peft_lora.read_adapter(sys.argv[3])
assert sorted(a) == sorted(b) and all(bool((a[k] == b[k]).all()) for k in a), sorted(a)
for key in ("r", "lora_alpha", "target_modules", "use_rslora", "modules_to_save"):
    assert ca[key] == cb[key], key
PY

"$bin/zero-ckpt" merge-lora "$base" "$adapter" --out "$tmp/merged" > "$tmp/merge.log" 2>&1 ||
  { echo "FAIL zero-ckpt merge-lora"; cat "$tmp/merge.log"; exit 1; }
grep -q "9 merged with their adapter, 1 replaced" "$tmp/merge.log" || { echo "FAIL merge-lora: $(cat "$tmp/merge.log")"; fail=1; }
same_logits "$tmp/merged" "$adapter" "zero-ckpt merge-lora"

if "$bin/zero-ckpt" merge-lora "$cases/llama_wide/model" "$adapter" --out "$tmp/wrong" > "$tmp/wrong.log" 2>&1; then
  echo "FAIL merge-lora onto another base succeeded"; fail=1
fi
grep -q "adapter_model.safetensors: base_model.model.lm_head.weight has shape \[96, 64\], the base's lm_head.weight \[8192, 256\]" "$tmp/wrong.log" ||
  { echo "FAIL the error does not name the tensor: $(cat "$tmp/wrong.log")"; fail=1; }
[[ ! -e $tmp/wrong ]] || { echo "FAIL merge-lora left $tmp/wrong"; fail=1; }
[[ $fail == 0 ]] && echo "lora_e2e: ok"
exit $fail
