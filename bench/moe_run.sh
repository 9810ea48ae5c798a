#!/usr/bin/env bash
# Mixtures of experts against a dense Llama with the same active parameters per token (issue 41):
# a Mixtral-shaped model (8 experts, top 2, expert intermediate I) and a Llama whose MLP has 2·I,
# otherwise the same (hidden 256, 4 layers, 4 heads, vocab 4096), random weights written by the
# independent reference (tests/reference/hf_llama.py), zero-train --model on 2 ranks at ZeRO
# stage 2, fp32, AdamW, sequences of 256, 2 rows per rank; the MoE model at EP 1 (every expert on
# every rank) and EP 2 (4 experts per rank, tokens exchanged with MPI_Alltoallv). Prints the median
# step, tokens/s and the exchange's bytes per step and rank.
#   bench/moe_run.sh [STEPS]     (default 8 timed steps after 2 warm-up steps)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-8} warmup=2 seq=256 rows=2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
python=/usr/bin/python3  # Debian's, with python3-torch
perl -e 'local $/; my $b = <STDIN>; print pack("l<256", 20240520, 1, length $b, (0) x 253), pack("S<*", unpack("C*", $b));' \
  < README.md > "$tmp/tokens.bin"
common='"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
  "vocab_size": 4096, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false'
echo "{\"architectures\": [\"MixtralForCausalLM\"], \"model_type\": \"mixtral\", $common, \"intermediate_size\": 512,
  \"num_local_experts\": 8, \"num_experts_per_tok\": 2, \"output_router_logits\": false}" > "$tmp/moe.json"
echo "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", $common, \"intermediate_size\": 1024}" > "$tmp/dense.json"
for m in moe dense; do
  "$python" tests/reference/hf_llama.py make "$tmp/$m" --config "$tmp/$m.json" --seed 1 --dtype F32 > /dev/null
done
run() {  # run NAME MODEL EP
  local log=$tmp/$1.log
  cat > "$tmp/ds.json" <<JSON
{"train_micro_batch_size_per_gpu": $rows, "gradient_clipping": 1.0, "zero_optimization": {"stage": 2},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}}$([[ $3 -gt 1 ]] && echo ", \"expert_parallel\": {\"enabled\": true, \"autoep_size\": $3}")}
JSON
  build/apps/zero-run -n 2 build/apps/zero-train --model "$tmp/$2" --train-data "$tmp/tokens.bin" --seq-len $seq \
    --config "$tmp/ds.json" --steps $((steps + warmup)) --print-every 1 --eval-every 0 --sample-every 0 --no-progress > "$log" 2>&1
  "$python" - "$log" "$warmup" "$1" $((rows * 2 * seq)) <<'PY'
import re, statistics, sys
log, warmup, name, tokens = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
lines = open(log).read().splitlines()
steps = [float(l.split("|")[-1].split()[0]) for l in lines if l.startswith("step")][warmup:]
ms = statistics.median_low(steps)
rss = next(l for l in lines if l.startswith("zero-train: peak RSS"))
state = int(re.search(r"model state ([0-9]+) bytes", rss).group(1))
exchange = next((l for l in lines if "expert-parallel exchange" in l), "")
sent = re.search(r"\(([0-9]+) to other ranks\)", exchange)
print(f"| {name} | {ms:.0f} | {tokens / ms * 1e3:.0f} | {state / 1e6:.1f} | {int(sent.group(1)) / 1e6 if sent else 0:.2f} |")
PY
}
echo "cpu flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o -w 'avx2\|fma\|avx512f\|avx512_bf16\|amx_bf16' | tr '\n' ' ')"
echo "| run (2 ranks, stage 2, fp32) | step ms (median) | tokens/s | model state MB, rank 0 | exchange MB per step, sent to the other rank |"
echo "| --- | ---: | ---: | ---: | ---: |"
run "dense Llama (MLP 1024)" dense 1
run "Mixtral-shaped, EP 1" moe 1
run "Mixtral-shaped, EP 2" moe 2
