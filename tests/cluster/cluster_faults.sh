#!/usr/bin/env bash
# Faults on a real cluster of hosts made on this machine (scripts/cluster), 2 hosts x 2 ranks of
# zero-train at stage 2 with a checkpoint every 3 steps and a 15 s collective timeout:
#   - a link that goes down mid-step (ip link set down: the cable pulled);
#   - a host's ranks killed (kill -9);
#   - a hostfile naming a host that is not there, or one whose link is down at launch.
# Each must end every rank within the watchdog's timeout (no hang) with an error naming the rank
# and its host, and the last checkpoint must load: training resumes from it on the healed cluster.
# ARGS: BIN_DIR SOURCE_DIR. Needs root; exits 77 (skipped) without it.
source "$(dirname "$0")/common.sh"
cat >"$tmp/stage2.json" <<JSON
{"train_batch_size": 12, "zero_optimization": {"stage": 2, "reduce_bucket_size": 20000},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}}}
JSON
"$cluster" up 2 --rate 1gbit || exit 1
"$cluster" hostfile 2 >"$tmp/hosts"
train() {  # train LOG STEPS [zero-train flags]: on the cluster, in the background; sets $job
  local log=$1 steps=$2; shift 2
  "$cluster" exec zc-node1 "$bin/zero-run" --hostfile "$tmp/hosts" --timeout 15 "$bin/zero-train" \
    --config "$tmp/stage2.json" --steps "$steps" --save-dir "$tmp/ckpt" --save-every 3 --no-progress "$@" \
    >"$log" 2>&1 &
  job=$!
}
wait_for_step() {  # wait_for_step LOG STEP: until the log shows the step (at most 120 s)
  for _ in $(seq 1 240); do
    grep -q "^step *$2/" "$1" && return 0
    sleep 0.5
  done
  echo "no step $2 in $1"; cat "$1"; return 1
}
status=0
ended_within() {  # ended_within SECONDS: the job ended in time (else it is killed: a hang)
  local start=$SECONDS
  while kill -0 "$job" 2>/dev/null; do
    if (( SECONDS - start > $1 )); then kill -9 "$job"; return 1; fi
    sleep 0.5
  done
  wait "$job"
  status=$?
  return 0
}
latest_step() { sed -n 's/^global_step//p' "$tmp/ckpt/latest" 2>/dev/null; }
resumes() {  # a healed cluster resumes from the newest checkpoint and trains on
  local saved; saved=$(latest_step)
  "$cluster" exec zc-node1 "$bin/zero-run" --hostfile "$tmp/hosts" "$bin/zero-train" --config "$tmp/stage2.json" \
    --steps $((saved + 2)) --save-dir "$tmp/ckpt" --resume --no-progress >"$tmp/resume.log" 2>&1 &&
    grep -q "^step *$((saved + 1))/" "$tmp/resume.log" && ! grep -q "^step *$saved/" "$tmp/resume.log" ||
    { echo "--- the resumed run:"; tail -20 "$tmp/resume.log"; return 1; }
}

# 1. The link of zc-node2 goes down mid-run.
train "$tmp/link.log" 1000
wait_for_step "$tmp/link.log" 7 || fail=1
"$cluster" link zc-node2 down
check "ended_within 60" "link down: the job ended within 60 s (timeout 15 s)"
check "[[ $status != 0 ]]" "link down: zero-run failed (status $status)"
check "grep -Eq 'collective timeout \(15 s\).*did not arrive: rank [23] on zc-node2 \(no answer' $tmp/link.log" \
  "link down: the error names the ranks on zc-node2"
"$cluster" link zc-node2 up
# What an operator does before restarting: nothing of the dead job may linger on the hosts (the
# daemon behind the pulled link never heard that the job ended).
for h in zc-node1 zc-node2; do ip netns pids $h | xargs -r kill -9; done
sleep 1
check "[[ -n \"$(latest_step)\" ]] && resumes" "link down: the last checkpoint (step $(latest_step)) loads and training goes on"

# 2. Every rank of zc-node2 killed.
rm -rf "$tmp/ckpt"
train "$tmp/kill.log" 1000
wait_for_step "$tmp/kill.log" 7 || fail=1
ip netns pids zc-node2 | while read -r pid; do
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == zero-train ]] && kill -9 "$pid"
done
check "ended_within 60" "ranks killed: the job ended within 60 s"
check "grep -Eq 'rank [23] .*(signal 9|Killed)' $tmp/kill.log" "ranks killed: zero-run names a killed rank"
check "[[ -n \"$(latest_step)\" ]] && resumes" "ranks killed: the last checkpoint (step $(latest_step)) loads"

# 3. A hostfile naming a host that is not in the cluster.
printf 'zc-node1 slots=2\nzc-node9 slots=2\n' >"$tmp/bad_hosts"
"$cluster" exec zc-node1 "$bin/zero-run" --hostfile "$tmp/bad_hosts" "$bin/zero-train" --config "$tmp/stage2.json" \
  --steps 2 --no-progress >"$tmp/bad.log" 2>&1 &
job=$!
check "ended_within 60" "unknown host: the launch ended within 60 s"
check "[[ $status != 0 ]] && grep -q zc-node9 $tmp/bad.log" "unknown host: the error names zc-node9"
# 4. A host in the hostfile whose link is down at launch, its peers' addresses still known (as
# behind a switch that drops): its daemon's call back to mpirun is lost, and mpirun would wait
# for it for ever. zero-run's --launch-timeout ends the launch and names the host.
mac=$(ip netns exec zc-node1 cat /sys/class/net/eth0/address)
ip -n zc-node2 neigh replace 198.18.77.11 lladdr "$mac" dev eth0 nud permanent
"$cluster" link zc-node2 down
"$cluster" exec zc-node1 "$bin/zero-run" --hostfile "$tmp/hosts" --launch-timeout 15 "$bin/zero-train" \
  --config "$tmp/stage2.json" --steps 2 --no-progress >"$tmp/unreachable.log" 2>&1 &
job=$!
check "ended_within 60" "unreachable host: the launch ended within 60 s (--launch-timeout 15)"
check "[[ $status != 0 ]] && grep -q 'had not started 15 s after the launch.*every other host (zc-node2)' $tmp/unreachable.log" \
  "unreachable host: the error names zc-node2 (status $status)"
"$cluster" link zc-node2 up
for log in link kill bad unreachable; do echo "--- $log"; grep -E "error|zero-run|cluster:" "$tmp/$log.log" | head -5; done
exit $fail
