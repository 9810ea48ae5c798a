#!/usr/bin/env bash
# zero-train on a real cluster of hosts made on this machine (scripts/cluster: network
# namespaces joined by veth pairs, TCP between hosts, shared memory within one), launched by
# zero-run --hostfile from the first host. For ZeRO stages 1-3:
#   - 2 hosts x 2 ranks and 3 hosts x 1 rank give the losses of 4 and 3 ranks on one host;
#   - the bytes zero-train says each rank sent across nodes per step equal the formula for the
#     stage, exactly, and, summed over a host's ranks, the bytes the kernel counted on that host's
#     link per step within 5 % (TCP/IP headers aside: 66 bytes a packet).
# ARGS: BIN_DIR SOURCE_DIR. Needs root; exits 77 (skipped) without it.
source "$(dirname "$0")/common.sh"

# A GPT of 842,496 parameters: 4 blocks of 198,272 and a root unit (wte, wpe, ln_f) of 49,408.
model=(--layers 4 --heads 4 --channels 128 --max-seq 128 --vocab 256)
readonly blocks=$((4 * 198272)) root=49408
config() {  # config STAGE: stage 3 re-gathers every block in backward (no reuse), as the ZeRO paper counts
  cat >"$tmp/stage$1.json" <<JSON
{"train_batch_size": 12, "gradient_clipping": 1.0,
 "zero_optimization": {"stage": $1, "reduce_bucket_size": 20000, "stage3_param_persistence_threshold": 0,
                       "stage3_max_reuse_distance": 0, "stage3_max_live_parameters": 0},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}}}
JSON
  echo "$tmp/stage$1.json"
}
losses() { grep -E '^step' "$1" | awk '{print $4}'; }
same_losses() {  # within 1e-5 relative, step by step (the sums run in another order across hosts)
  paste <(losses "$1") <(losses "$2") | awk 'BEGIN{ok=1; n=0} {n++; d=$1-$2; if (d<0) d=-d; if (d > 1e-5*$2) ok=0}
    END{exit !(ok && n > 0)}'
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
# One run on the cluster: run_cluster OUT HOSTFILE STAGE STEPS
run_cluster() {
  "$cluster" bytes >"$1.before"
  timeout 600 "$cluster" exec zc-node1 "$bin/zero-run" --hostfile "$2" "$bin/zero-train" --config "$(config "$3")" \
    "${model[@]}" --steps "$4" --no-progress >"$1" 2>&1 || { echo "run failed: $1"; cat "$1"; fail=1; }
  "$cluster" bytes >"$1.after"
}

# Two hosts of two ranks ------------------------------------------------------------------------
"$cluster" up 2 --rate 10gbit || exit 1
"$cluster" hostfile 2 >"$tmp/hosts2x2"
for stage in 1 2 3; do
  run_one_host "$tmp/one_host_$stage" 4 $stage 8
  run_cluster "$tmp/short_$stage" "$tmp/hosts2x2" $stage 4
  run_cluster "$tmp/long_$stage" "$tmp/hosts2x2" $stage 8
  check "same_losses $tmp/one_host_$stage $tmp/long_$stage" "stage $stage: 2 hosts x 2 ranks follow 4 ranks on one host"
  read -r -a sent <<<"$(sent_per_rank "$tmp/long_$stage")"
  # Each rank's share of a collective that crosses: (H-1)/N of the fp32 message; the engine's
  # gradient norm and the trainer's loss ride in two 8-byte all-reduces (16 bytes each), and
  # stage 3's step flags in a third.
  if [[ $stage == 3 ]]; then
    expected=$(( (3 * blocks + 2 * root) * 4 / 4 + 48 ))  # root unit: gathered once, kept through backward
  else
    expected=$(( 2 * (blocks + root) * 4 / 4 + 32 ))
  fi
  check "[[ \${#sent[@]} == 4 && ${sent[0]:-0} == $expected && ${sent[1]:-0} == $expected && ${sent[2]:-0} == $expected && ${sent[3]:-0} == $expected ]]" \
    "stage $stage: each rank sends $expected bytes across nodes per step (said: ${sent[*]:-none})"
  for h in zc-node1 zc-node2; do
    read -r b0 p0 <<<"$(host_sent "$tmp/short_$stage.before" $h)"
    read -r b1 p1 <<<"$(host_sent "$tmp/short_$stage.after" $h)"
    read -r b2 p2 <<<"$(host_sent "$tmp/long_$stage.before" $h)"
    read -r b3 p3 <<<"$(host_sent "$tmp/long_$stage.after" $h)"
    # The 4 steps more of the long run, per step, headers aside.
    kernel=$(( ((b3 - b2) - (b1 - b0) - 66 * ((p3 - p2) - (p1 - p0))) / 4 ))
    said=$(( 2 * expected ))
    check "awk 'BEGIN{r=$kernel/$said; exit !(r > 0.95 && r < 1.05)}'" \
      "stage $stage: $h's link carried $kernel bytes per step, its ranks said $said"
  done
done
"$cluster" down

# Three hosts of one rank -----------------------------------------------------------------------
"$cluster" up 3 --rate 10gbit || exit 1
"$cluster" hostfile 1 >"$tmp/hosts3x1"
for stage in 1 2 3; do
  run_one_host "$tmp/one_host3_$stage" 3 $stage 6
  run_cluster "$tmp/three_$stage" "$tmp/hosts3x1" $stage 6
  check "same_losses $tmp/one_host3_$stage $tmp/three_$stage" "stage $stage: 3 hosts x 1 rank follow 3 ranks on one host"
  read -r -a sent <<<"$(sent_per_rank "$tmp/three_$stage")"
  check "[[ \${#sent[@]} == 3 && ${sent[0]:-0} -gt 0 && ${sent[0]:-0} == ${sent[1]:-1} && ${sent[1]:-0} == ${sent[2]:-1} ]]" \
    "stage $stage: 3 hosts: every rank sends the same bytes across nodes (${sent[*]:-none})"
done
grep -h "across nodes" "$tmp"/long_* "$tmp"/three_* || true
exit $fail
