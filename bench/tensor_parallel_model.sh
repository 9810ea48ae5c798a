#!/usr/bin/env bash
# Writes WORK/model (a random model of Qwen2.5-0.5B's shape in bf16, by the independent reference
# tests/reference/hf_llama.py) and WORK/tokens.bin (40 000 random tokens, llm.c's format) for the
# tensor-parallel benchmarks. (SmolLM2-360M's 15 heads do not split over 2 ranks; Qwen2.5-0.5B's 14 do.)
# LAYERS and VOCAB, when given, replace the config's num_hidden_layers and vocab_size (four
# ranks of the whole model do not fit 24 GiB on one machine).
#   bench/tensor_parallel_model.sh WORK [LAYERS VOCAB]
set -euo pipefail
cd "$(dirname "$0")/.."
work=$1
config=tests/models/hf_configs/Qwen__Qwen2.5-0.5B.config.json
if [[ $# -ge 3 ]]; then
  /usr/bin/python3 - "$config" "$2" "$3" >"$work/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["num_hidden_layers"], c["vocab_size"] = int(sys.argv[2]), int(sys.argv[3])
print(json.dumps(c, indent=2))
PY
  config=$work/config.json
fi
/usr/bin/python3 tests/reference/hf_llama.py make "$work/model" --config "$config" --seed 1 --dtype BF16 > /dev/null
vocab=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$config")
/usr/bin/python3 - "$work/tokens.bin" "$vocab" <<'PY'
import random, struct, sys
rng = random.Random(1)
ids = [rng.randrange(min(int(sys.argv[2]), 65535)) for _ in range(40000)]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)) + struct.pack(f"<{len(ids)}H", *ids))
PY
