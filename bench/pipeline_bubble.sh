#!/usr/bin/env bash
# The pipeline's bubble (issue 40): a random Llama of 8 equal decoder layers (hidden 256, 8 heads,
# a vocabulary of 256 so that the embedding and the head weigh little; "uniform" stages) trained by
# zero-train in fp32 as PP 2 and PP 4 with 1 row of 128 tokens per micro-batch, for 1 to 16
# micro-batches a step. 1F1B keeps each stage idle (p - 1) of every (m + p - 1) micro-batch
# slots. Prints the median step time, the time per micro-batch slot t from the step times'
# slope (T(m) = (m + p - 1) t), the idle fraction measured as 1 - m t / T(m), and the theory's.
# PP 4 runs 4 ranks on this machine's cores: with fewer cores than ranks a stage that idles lends
# its core to another, and the measured bubble is smaller than a machine of one core per rank's.
#   bench/pipeline_bubble.sh [STEPS]      default: 5 steps (the first not timed)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-5}
work=$(mktemp -d "${TMPDIR:-/tmp}/pipeline_bubble.XXXXXX")
trap 'rm -rf "$work"' EXIT
cat >"$work/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256, "hidden_size": 256,
 "intermediate_size": 688, "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 8,
 "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false,
 "hidden_act": "silu", "torch_dtype": "float32"}
JSON
/usr/bin/python3 tests/reference/hf_llama.py make "$work/model" --config "$work/config.json" --seed 1 --dtype F32 >/dev/null
/usr/bin/python3 - "$work/tokens.bin" <<'PY'
import random, struct, sys
rng = random.Random(1)
ids = [rng.randrange(256) for _ in range(200000)]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)) + struct.pack(f"<{len(ids)}H", *ids))
PY
echo "model: Llama, 8 layers of hidden 256 (6.3 M parameters), fp32, SGD; 1 row x 128 tokens per micro-batch"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(getconf _NPROCESSORS_ONLN) cores;" \
  "flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o -w 'avx2\|fma\|avx512f\|avx512_bf16' | tr '\n' ' ')"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
for p in 2 4; do
  : >"$work/times"
  for m in 1 2 4 8 16; do
    cat >"$work/ds.json" <<JSON
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": $m, "zero_allow_untested_optimizer": true,
 "zero_optimization": {"stage": 1}, "optimizer": {"type": "SGD", "params": {"lr": 0.01}},
 "pipeline": {"stages": $p, "partition": "uniform"}}
JSON
    build/apps/zero-run -n "$p" build/apps/zero-train --model "$work/model" --config "$work/ds.json" \
      --train-data "$work/tokens.bin" --seq-len 128 --steps "$steps" --print-every 1 --no-progress >"$work/log" 2>&1 ||
      { cat "$work/log"; exit 1; }
    /usr/bin/python3 - "$work/log" "$m" >>"$work/times" <<'PY'
import re, statistics, sys
ms = [float(x) for x in re.findall(r"^step .*\| ([0-9.]+) ms", open(sys.argv[1]).read(), re.M)][1:]
print(sys.argv[2], statistics.median(ms) / 1000)
PY
  done
  /usr/bin/python3 - "$work/times" "$p" <<'PY'
import sys
p = int(sys.argv[2])
rows = [(int(m), float(t)) for m, t in (line.split() for line in open(sys.argv[1]))]
t = (rows[-1][1] - rows[-2][1]) / (rows[-1][0] - rows[-2][0])  # per micro-batch slot, from 8 to 16
print(f"\nPP {p}: a micro-batch slot t = {t * 1000:.1f} ms (from the step times at 8 and 16)")
print("| micro-batches m | median step (s) | idle, measured 1 - m t / T(m) | idle, theory (p-1)/(m+p-1) |")
print("| ---: | ---: | ---: | ---: |")
for m, T in rows:
    print(f"| {m} | {T:.3f} | {1 - m * t / T:.2f} | {(p - 1) / (m + p - 1):.2f} |")
PY
done
