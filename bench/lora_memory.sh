#!/usr/bin/env bash
# Issue 43's side by side: a random model of SmolLM2-360M's shape (bf16 weights written by
# tests/reference/hf_llama.py) fine-tuned on 2 ranks at ZeRO stage 3 in bf16, 512 tokens a rank,
# three ways in one run: every weight; LoRA on every linear layer (r 16, alpha 32, the frozen base
# partitioned); QLoRA (the same adapter on an NF4 base with double quantization). Per way: peak RSS
# per rank, the engine's model-state bytes per rank by kind (its start-up line), tokens/s (median
# step after a warm-up one) and the first and last losses.
#   bench/lora_memory.sh [STEPS]   (default 3 timed steps after 1 warm-up step)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-3} warmup=1 rows=1 seq=512
source bench/peers/common.sh
"$python" tests/reference/hf_llama.py make "$tmp/model" --config tests/models/hf_configs/HuggingFaceTB__SmolLM2-360M.config.json \
  --seed 1 --dtype BF16 > /dev/null
perl -e 'local $/; my $b = <STDIN>; print pack("l<256", 20240520, 1, length $b, (0) x 253), pack("S<*", unpack("C*", $b));' \
  < README.md > "$tmp/tokens.bin"
zero_model=(--model "$tmp/model") zero_data=(--train-data "$tmp/tokens.bin")
echo "cpu flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o -w 'avx2\|fma\|avx512f\|avx512_bf16\|amx_bf16' | tr '\n' ' ')"
echo
echo "| way | peak RSS per rank (MiB) | frozen / trainable / gradients / master / optimizer MB per rank | step s | tokens/s | loss first → last |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
lora=(--use_peft --lora_r 16 --lora_alpha 32 --lora_dropout 0 --lora_target_modules all-linear)
for way in full lora qlora; do
  case $way in
    full) zero_extra=() ;;
    lora) zero_extra=("${lora[@]}") ;;
    qlora) zero_extra=("${lora[@]}" --load_in_4bit --bnb_4bit_quant_type nf4 --bnb_4bit_use_double_quant) ;;
  esac
  line=$(zerocpp_run 2 3 bf16)
  state=$(grep -m1 "zerocpp: per rank:" "$tmp/zerocpp-3-bf16-2.log")
  "$python" - "$line" "$way" "$state" <<'PY'
import json, re, sys
r, way, state = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
mb = lambda key: float((re.search(key + r" ([0-9.]+) MB", state) or [0, 0])[1])
kinds = " / ".join("%.1f" % mb(k) for k in ("frozen parameters", r"(?<!frozen )parameters", "gradients", "fp32 master", "optimizer state"))
print("| %s | %s | %s | %.2f | %.0f | %.4f → %.4f |" % (way, " / ".join(str(k // 1024) for k in r["rss_kib"]), kinds,
                                                      r["median_ms"] / 1e3, r["tokens_per_s"], r["first_loss"], r["last_loss"]))
PY
done
