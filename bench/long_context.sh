#!/usr/bin/env bash
# Issue 42's memory at long contexts: peak RSS per rank of one training step of SmolLM2-135M's
# shape (random bf16 weights written by tests/reference/hf_llama.py, max_position_embeddings raised
# to 16384), one row of T tokens per rank, 2 ranks, ZeRO stage 3, bf16, activation checkpointing
# on every layer, at T = 2048, 8192 and 16384: with the fused kernels (zero::causal_attention: no
# [T, T] tensor) and without them (ZERO_FUSED_KERNELS=0: LibTorch's eager attention, whose fp32
# scores alone are heads·T²·4 bytes per layer). Each run is one step (peak RSS is reached in the
# first); the eager runs stop at --eager-up-to (default 8192; a run that does not finish a step,
# e.g. killed for memory, is a row saying how it ended).
#   bench/long_context.sh [--seqs "2048 8192 16384"] [--eager-up-to T]
set -euo pipefail
cd "$(dirname "$0")/.."
seqs="2048 8192 16384" eager_up_to=8192
while [[ $# -gt 0 ]]; do
  case $1 in
    --seqs) seqs=$2; shift 2 ;;
    --eager-up-to) eager_up_to=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
steps=1 warmup=0 rows=1
source bench/peers/common.sh
"$python" - "$tmp/config.json" <<'PY'
import json, sys
c = json.load(open("tests/models/hf_configs/HuggingFaceTB__SmolLM2-135M.config.json"))
c["max_position_embeddings"] = 16384
json.dump(c, open(sys.argv[1], "w"))
PY
"$python" tests/reference/hf_llama.py make "$tmp/model" --config "$tmp/config.json" --seed 1 --dtype BF16 > /dev/null
# The docs' bytes as an llm.c token shard: 2 rows of 16385 tokens fit in it.
cat README.md docs/*.md | perl -e 'local $/; my $b = <STDIN>; print pack("l<256", 20240520, 1, length $b, (0) x 253), pack("S<*", unpack("C*", $b));' \
  > "$tmp/tokens.bin"
zero_model=(--model "$tmp/model") zero_data=(--train-data "$tmp/tokens.bin") zero_extra=(--activation-checkpointing)
echo "cpu flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o -w 'avx2\|fma\|avx512f\|avx512_bf16\|amx_bf16' | tr '\n' ' ')"
echo
echo "| tokens per rank | attention | peak RSS per rank (MiB) | step s | loss |"
echo "| ---: | --- | ---: | ---: | ---: |"
for seq in $seqs; do
  for fused in 1 0; do
    [[ $fused == 0 && $seq -gt $eager_up_to ]] && continue
    attention=$([[ $fused == 1 ]] && echo "zero::causal_attention" || echo "LibTorch eager ([T, T] scores)")
    if ! line=$(ZERO_FUSED_KERNELS=$fused zerocpp_run 2 3 bf16 2> /dev/null); then
      # No step finished: say how it ended (an out-of-memory kill shows as a signal).
      why=$(grep -m1 -iE "killed|signal|error|what\(\)" "$tmp/zerocpp-3-bf16-2.log" | cut -c1-160 || true)
      echo "| $seq | $attention | did not train: ${why:-see the log} | | |"
      continue
    fi
    "$python" - "$line" "$seq" "$attention" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
rss = " / ".join(str(k // 1024) for k in r["rss_kib"])
print("| %s | %s | %s | %.1f | %.4f |" % (sys.argv[2], sys.argv[3], rss, r["median_ms"] / 1e3, r["first_loss"]))
PY
  done
done
