#!/usr/bin/env bash
# zero-train on a real cluster of hosts made on this machine (scripts/cluster: network
# namespaces joined by veth pairs, TCP between hosts, shared memory within one), launched by
# zero-run --hostfile from the first host. For ZeRO stages 1-3:
#   - 2 hosts x 2 ranks and 3 hosts x 1 rank give the losses of 4 and 3 ranks on one host (one
#     reference run each, at stage 1: on one host every stage gives the same losses);
#   - the bytes zero-train says each rank sent across nodes per step equal the formula for the
#     stage (and for ZeRO++'s qwZ, hpZ, qgZ and all three at stage 3), exactly, and, summed over a host's ranks, the bytes the kernel counted on that host's
#     link per step within 5 % (TCP/IP headers aside: 66 bytes a packet);
#   - hpZ, qwZ and qgZ together train to the golden trajectory's bits (tests/golden);
#   - tensor parallelism within the hosts and ZeRO-1 across: only the data-parallel bytes cross;
#   - the seed's pattern C scaled down (PP 2 x DP 2 x TP 2, a stage per host): only the stages' bytes cross.
# ARGS: BIN_DIR SOURCE_DIR. Needs root; exits 77 (skipped) without it.
source "$(dirname "$0")/common.sh"

# A GPT of 842,496 parameters: 4 blocks of 198,272 and a root unit (wte, wpe, ln_f) of 49,408.
model=(--layers 4 --heads 4 --channels 128 --max-seq 128 --vocab 256)
readonly blocks=$((4 * 198272)) root=49408
config() {  # config STAGE [NAME ZERO++KEYS]: stage 3 re-gathers every block in backward (no reuse), as the ZeRO paper counts
  local name=${2:-} keys=${3:-}
  cat >"$tmp/stage$1$name.json" <<JSON
{"train_batch_size": 12, "gradient_clipping": 1.0,
 "zero_optimization": {"stage": $1, "reduce_bucket_size": 20000, "stage3_param_persistence_threshold": 0,
                       "stage3_max_reuse_distance": 0, "stage3_max_live_parameters": 0 ${keys:+, $keys}},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}}}
JSON
  echo "$tmp/stage$1$name.json"
}
sent_per_rank() { sed -n 's/^zero-train: sent across nodes per step: \([0-9 ]*\) bytes by rank.*/\1/p' "$1"; }
host_sent() {  # host_sent FILE HOST: bytes and packets the host sent
  awk -v h="$2" '$1 == h {print $2, $3}' "$1"
}
# The same on one host (shared memory): run_one_host OUT RANKS STAGE STEPS
run_one_host() {
  timeout 600 "$bin/zero-run" -n "$2" "$bin/zero-train" --config "$(config "$3")" "${model[@]}" --steps "$4" \
    --no-progress >"$1" 2>&1 || { echo "one-host run failed: $1"; cat "$1"; fail=1; }
}
# One run on the cluster: run_cluster OUT HOSTFILE STAGE STEPS [NAME ZERO++KEYS]
run_cluster() {
  "$cluster" bytes >"$1.before"
  timeout 600 "$cluster" exec zc-node1 "$bin/zero-run" --hostfile "$2" "$bin/zero-train" --config "$(config "$3" "${5:-}" "${6:-}")" \
    "${model[@]}" --steps "$4" --no-progress >"$1" 2>&1 || { echo "run failed: $1"; cat "$1"; fail=1; }
  "$cluster" bytes >"$1.after"
}
# check_kernel NAME SHORT LONG EXPECTED [RANKS [EXPECTED_ON_NODE2]]: per host, the kernel's bytes
# per step (the long run's 4 steps more, headers aside) within 5 % of what the host's RANKS ranks
# (2) said, each EXPECTED bytes (EXPECTED_ON_NODE2 on the second host).
check_kernel() {
  local ranks=${5:-2}
  for h in zc-node1 zc-node2; do
    read -r b0 p0 <<<"$(host_sent "$2.before" $h)"
    read -r b1 p1 <<<"$(host_sent "$2.after" $h)"
    read -r b2 p2 <<<"$(host_sent "$3.before" $h)"
    read -r b3 p3 <<<"$(host_sent "$3.after" $h)"
    kernel=$(( ((b3 - b2) - (b1 - b0) - 66 * ((p3 - p2) - (p1 - p0))) / 4 ))
    said=$(( ranks * $([[ $h == zc-node2 ]] && echo "${6:-$4}" || echo "$4") ))
    check "awk 'BEGIN{r=$kernel/$said; exit !(r > 0.95 && r < 1.05)}'" \
      "$1: $h's link carried $kernel bytes per step, its $ranks ranks said $said"
  done
}
# check_sent NAME FILE EXPECTED: every one of the 4 ranks said it sent EXPECTED bytes per step.
check_sent() {
  read -r -a sent <<<"$(sent_per_rank "$2")"
  check "[[ \${#sent[@]} == 4 && ${sent[0]:-0} == $3 && ${sent[1]:-0} == $3 && ${sent[2]:-0} == $3 && ${sent[3]:-0} == $3 ]]" \
    "$1: each rank sends $3 bytes across nodes per step (said: ${sent[*]:-none})"
}
q8() { echo $(( $1 + 4 * (($1 + 255) / 256) )); }       # int8 message of N values (src/comm/quantize.h)
q4() { echo $(( ($1 + 1) / 2 + 4 * (($1 + 255) / 256) )); }  # int4

# Two hosts of two ranks ------------------------------------------------------------------------
"$cluster" up 2 --rate 10gbit || exit 1
"$cluster" hostfile 2 >"$tmp/hosts2x2"
# The reference: 4 ranks on one host, once. Stages 1-3 give the same losses there (every stage
# reproduces the single-process trajectory: tests/dist/engine_test.cpp), so each stage on the
# cluster is held to stage 1's run on one host.
run_one_host "$tmp/one_host" 4 1 8
for stage in 1 2 3; do
  run_cluster "$tmp/short_$stage" "$tmp/hosts2x2" $stage 4
  run_cluster "$tmp/long_$stage" "$tmp/hosts2x2" $stage 8
  check "same_losses $tmp/one_host $tmp/long_$stage" "stage $stage: 2 hosts x 2 ranks follow 4 ranks on one host"
  # Each rank's share of a collective that crosses: (H-1)/N of the fp32 message; the engine's
  # gradient norm and the trainer's loss ride in two 8-byte all-reduces (16 bytes each), and
  # stage 3's step flags in a third.
  if [[ $stage == 3 ]]; then
    expected=$(( (3 * blocks + 2 * root) * 4 / 4 + 48 ))  # root unit: gathered once, kept through backward
  else
    expected=$(( 2 * (blocks + root) * 4 / 4 + 32 ))
  fi
  check_sent "stage $stage" "$tmp/long_$stage" $expected
  check_kernel "stage $stage" "$tmp/short_$stage" "$tmp/long_$stage" $expected
done

# ZeRO++ at stage 3 on 2 hosts x 2 ranks. Per rank and step, with c = a block's elements per rank
# and r = the root's: each of the 4 blocks crosses in its forward gather, its backward gather and
# its reduce-scatter (4c bytes each in fp32); the root in its reduce-scatter and its gather after
# the step. qwZ sends int8 messages in both gathers, hpZ keeps the backward gather within the
# host, qgZ sends int4 partial sums.
c=$((blocks / 4 / 4)) r=$((root / 4))
declare -A zeropp=(
  [qwz]='"zero_quantized_weights": true'
  [hpz]='"zero_hpz_partition_size": 2'
  [qgz]='"zero_quantized_gradients": true'
  [all]='"zero_quantized_weights": true, "zero_hpz_partition_size": 2, "zero_quantized_gradients": true')
declare -A zeropp_bytes=(
  [qwz]=$(( 4 * (2 * $(q8 $c) + 4 * c) + 8 * r + 48 ))
  [hpz]=$(( 4 * (4 * c + 4 * c) + 8 * r + 48 ))
  [qgz]=$(( 4 * (8 * c + $(q4 $c)) + 4 * r + $(q4 $r) + 48 ))
  [all]=$(( 4 * ($(q8 $c) + $(q4 $c)) + 4 * r + $(q4 $r) + 48 )))
for name in qwz hpz qgz all; do
  run_cluster "$tmp/short_$name" "$tmp/hosts2x2" 3 4 "$name" "${zeropp[$name]}"
  run_cluster "$tmp/long_$name" "$tmp/hosts2x2" 3 8 "$name" "${zeropp[$name]}"
  check_sent "ZeRO++ $name" "$tmp/long_$name" ${zeropp_bytes[$name]}
  check_kernel "ZeRO++ $name" "$tmp/short_$name" "$tmp/long_$name" ${zeropp_bytes[$name]}
done
# hpZ alone changes no value; quantization keeps the losses within 1 % over 8 steps.
check "same_losses $tmp/one_host $tmp/long_hpz" "ZeRO++ hpz: the losses of stage 3 without it"
check "close_losses $tmp/long_all $tmp/one_host 0.01" "ZeRO++ all: losses within 1 % of stage 3 without it"
# The golden trajectory of hpZ, qwZ and qgZ together (tests/golden, recorded on one machine as
# two "nodes" of two ranks) on two real hosts: the same bits. The pins reach every rank the way
# a user's variables do, through a .deepspeed_env file.
printf '%s\n' ZERO_SIMD=avx2 ATEN_CPU_CAPABILITY=avx2 OPENBLAS_CORETYPE=Haswell ZERO_BF16_COMPUTE=fp32 >"$tmp/golden.env"
DS_ENV_FILE=$tmp/golden.env timeout 600 "$cluster" exec zc-node1 "$bin/zero-run" --hostfile "$tmp/hosts2x2" \
  "$bin/zero-train" --config "$src/tests/golden/configs/s3_zeropp.json" --layers 3 --heads 4 --channels 64 \
  --max-seq 32 --vocab 256 --steps 4 --print-every 1 --no-progress --export "$tmp/golden.bin" >"$tmp/golden.log" 2>&1 ||
  { echo "golden run failed"; cat "$tmp/golden.log"; fail=1; }
golden=$(awk -F'\t' '$1 == "s3_zeropp_two_nodes" && $2 == "np4" { print $3 }' "$src/tests/golden/trajectories.tsv")
got=$( (sha256sum <"$tmp/golden.bin" 2>/dev/null || echo none) | cut -c1-32)
check "[[ $got == $golden ]]" "ZeRO++ all on 2 hosts x 2 ranks: the golden trajectory's weights, bit for bit ($got)"

# Tensor parallelism within the hosts, ZeRO-1 across them (issue 39): llama_mha (the Llama
# fixture's case, tests/reference/make_llama_cases.sh) as TP 2 x DP 2. The tensor-parallel
# groups are the hosts' pairs of consecutive ranks, so only the data-parallel collectives cross:
# each rank's slice is 87 552 / 2 split parameters + 320 norms whole = 44 096, reduce-scattered
# and all-gathered between the hosts ((H-1)/N = 1/2 of 4 bytes each), and the loss and the
# gradient norm's 16 bytes: 4 x 44 096 + 32 bytes per rank per step, nothing of the layers'.
cases=${ZERO_LLAMA_CASES:-}
if [[ -f $cases/llama_mha/model/config.json ]]; then
  cat >"$tmp/tp.json" <<JSON
{"train_batch_size": 12, "zero_allow_untested_optimizer": true, "gradient_clipping": 1.0,
 "zero_optimization": {"stage": 1, "reduce_bucket_size": 20000},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}, "tensor_parallel": {"autotp_size": 2}}
JSON
  tp=(--model "$cases/llama_mha/model" --train-data "$cases/tokens.bin" --seq-len 16 --config "$tmp/tp.json" --no-progress)
  timeout 600 "$bin/zero-run" -n 4 "$bin/zero-train" "${tp[@]}" --steps 8 >"$tmp/tp_one_host" 2>&1 ||
    { echo "one-host run failed"; cat "$tmp/tp_one_host"; fail=1; }
  for steps in 4 8; do
    "$cluster" bytes >"$tmp/tp_$steps.before"
    timeout 600 "$cluster" exec zc-node1 "$bin/zero-run" --hostfile "$tmp/hosts2x2" "$bin/zero-train" "${tp[@]}" \
      --steps $steps >"$tmp/tp_$steps" 2>&1 || { echo "run failed: tp_$steps"; cat "$tmp/tp_$steps"; fail=1; }
    "$cluster" bytes >"$tmp/tp_$steps.after"
  done
  check "same_losses $tmp/tp_one_host $tmp/tp_8" "TP 2 x DP 2: 2 hosts x 2 ranks follow 4 ranks on one host"
  check "grep -q 'tensor-parallel 2 x data-parallel 2' $tmp/tp_8" "TP 2 x DP 2: the grid zero-train says"
  check_sent "TP 2 x DP 2" "$tmp/tp_8" $((4 * 44096 + 32))
  check_kernel "TP 2 x DP 2" "$tmp/tp_4" "$tmp/tp_8" $((4 * 44096 + 32))

  # The seed's pattern C, its sizes scaled down (issue 40): PP 2 x DP 2 x TP 2 on 2 hosts x 4
  # ranks, each stage on one host, llama_deep (5 layers, tied embeddings) in 4 micro-batches of
  # 3 rows x 64 tokens. Only the stages' traffic crosses: per step, every stage-0 rank sends its
  # half (pipe_partitioned) of 4 activations of 3 x 64 x 32 fp32 and the tied embedding's slice
  # (48 x 32) to the last stage, every stage-1 rank the same sizes of gradients back; the pipeline
  # pair's all-reduces of the gradient norm and the stop flag (one row each way: 16 bytes each),
  # and the last stage's loss to the first (8).
  cat >"$tmp/pattern_c.json" <<JSON
{"zero_optimization": {"stage": 1, "overlap_comm": true, "contiguous_gradients": true},
 "tensor_parallel": {"tp_size": 2}, "pipeline_parallel": {"pp_size": 2},
 "gradient_accumulation_steps": 4, "train_micro_batch_size_per_gpu": 3, "gradient_clipping": 1.0,
 "zero_allow_untested_optimizer": true, "optimizer": {"type": "AdamW", "params": {"lr": 1.5e-3}},
 "activation_checkpointing": {"partition_activations": true, "contiguous_memory_optimization": true}}
JSON
  "$cluster" hostfile 4 >"$tmp/hosts2x4"
  pc=(--model "$cases/llama_deep/model" --train-data "$cases/tokens.bin" --seq-len 64 --config "$tmp/pattern_c.json"
      --activation-checkpointing --no-progress)
  timeout 600 "$bin/zero-run" -n 8 "$bin/zero-train" "${pc[@]}" --steps 8 >"$tmp/pc_one_host" 2>&1 ||
    { echo "one-host run failed"; cat "$tmp/pc_one_host"; fail=1; }
  for steps in 4 8; do
    "$cluster" bytes >"$tmp/pc_$steps.before"
    timeout 600 "$cluster" exec zc-node1 "$bin/zero-run" --hostfile "$tmp/hosts2x4" "$bin/zero-train" "${pc[@]}" \
      --steps $steps >"$tmp/pc_$steps" 2>&1 || { echo "run failed: pc_$steps"; cat "$tmp/pc_$steps"; fail=1; }
    "$cluster" bytes >"$tmp/pc_$steps.after"
  done
  check "same_losses $tmp/pc_one_host $tmp/pc_8" "pattern C (PP 2 x DP 2 x TP 2): 2 hosts x 4 ranks follow 8 ranks on one host"
  first=$((4 * 3 * 64 * 32 * 4 / 2 + 48 * 32 * 4 + 32)) last=$((4 * 3 * 64 * 32 * 4 / 2 + 48 * 32 * 4 + 32 + 8))
  read -r -a sent <<<"$(sent_per_rank "$tmp/pc_8")"
  check "[[ '${sent[*]:-}' == '$first $first $first $first $last $last $last $last' ]]" \
    "pattern C: ranks send $first (stage 0) and $last (stage 1) bytes across nodes per step (said: ${sent[*]:-none})"
  check_kernel "pattern C" "$tmp/pc_4" "$tmp/pc_8" $first 4 $last
else
  echo "FAILED: ZERO_LLAMA_CASES has no llama_mha (CTest's llama_cases fixture writes it)"; fail=1
fi
"$cluster" down

# Three hosts of one rank -----------------------------------------------------------------------
"$cluster" up 3 --rate 10gbit || exit 1
"$cluster" hostfile 1 >"$tmp/hosts3x1"
run_one_host "$tmp/one_host3" 3 1 6
for stage in 1 2 3; do
  run_cluster "$tmp/three_$stage" "$tmp/hosts3x1" $stage 6
  check "same_losses $tmp/one_host3 $tmp/three_$stage" "stage $stage: 3 hosts x 1 rank follow 3 ranks on one host"
  read -r -a sent <<<"$(sent_per_rank "$tmp/three_$stage")"
  check "[[ \${#sent[@]} == 3 && ${sent[0]:-0} -gt 0 && ${sent[0]:-0} == ${sent[1]:-1} && ${sent[1]:-0} == ${sent[2]:-1} ]]" \
    "stage $stage: 3 hosts: every rank sends the same bytes across nodes (${sent[*]:-none})"
done
grep -h "across nodes" "$tmp"/long_* "$tmp"/three_* || true
exit $fail
