#!/usr/bin/env bash
# The collective watchdog: no stuck rank goes unseen (src/comm/watchdog.h).
# - a rank that skips one all-reduce and stays away: rank 0 warns, then ends the job within the
#   timeout plus a few seconds, naming rank 1 and what it is doing;
# - a stopped rank (SIGSTOP) among three: the waiting ranks name it as not answering;
# - zero-train under zero-run --timeout with one rank stopped: the job ends with the error, and
#   nothing is written to the checkpoint directory;
# - a pipeline's last stage stopped mid-schedule: the same; its first stage killed: zero-run ends
#   the job, naming it.
# ARGS: BIN_DIR SOURCE_DIR TESTS_BIN_DIR
set -u
bin=$(cd "$1" && pwd) src=$(cd "$2" && pwd) tests=$(cd "$3" && pwd)
tmp=$(mktemp -d)
trap 'pkill -CONT -x watchdog_probe; pkill -CONT -x zero-train; rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
fail=0
mpi=(mpirun --oversubscribe --bind-to none)
[[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root)
rank_pid() {  # rank_pid NAME RANK: the pid of this test's process NAME whose MPI rank is RANK
  # (Its zero-train command lines name $tmp: other tests' zero-train run beside this one under
  # ctest -j, and stopping one of theirs hangs both.)
  for pid in $(pgrep -x "$1"); do
    [[ $1 == watchdog_probe ]] || tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF "$tmp" || continue
    tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$pid"; return; }
  done
}
ends_failing() {  # ends_failing CASE LIMIT_MS: $job (timed from $start) ends, non-zero, within LIMIT_MS
  wait $job
  local status=$? elapsed=$((($(date +%s%N) - start) / 1000000))
  echo "$1: ended after $elapsed ms"
  [[ $status -ne 0 ]] || { echo "FAIL $1: the job ended with status 0"; fail=1; }
  ((elapsed < $2)) || { echo "FAIL $1: took $elapsed ms"; fail=1; }
}
expect() {  # expect LOG PATTERN WHAT
  grep -qE "$2" "$1" || { echo "FAIL $3: no line matching '$2' in:"; cat "$1"; fail=1; }
}

# 1. A skipped collective.
start=$(date +%s%N)
"${mpi[@]}" -np 2 "$tests/watchdog_probe" --skip-rank 1 --skip-step 3 --away 60 --timeout 3 --warning 1 \
  > "$tmp/skip.log" 2>&1 &
job=$!
ends_failing "skip (timeout 3 s)" $(((3 + 6) * 1000))
expect "$tmp/skip.log" 'warning: rank 0 has waited [0-9]+ s in all_reduce of step 3; did not arrive: rank 1 \(running step 3, in no collective\)' "skip warning"
expect "$tmp/skip.log" 'error: rank 0: collective timeout \(3 s\) in all_reduce of step 3; did not arrive: rank 1 \(running step 3, in no collective\)' "skip error"

# 2. A stopped rank among three.
"${mpi[@]}" -np 3 "$tests/watchdog_probe" --steps 1000000 --step-seconds 0.01 --timeout 4 --warning 2 \
  > "$tmp/stop.log" 2>&1 &
job=$!
sleep 3
victim=$(rank_pid watchdog_probe 1)
[[ -n $victim ]] || { echo "FAIL stop: rank 1 not found"; fail=1; }
start=$(date +%s%N)
kill -STOP "$victim"
ends_failing "stop (SIGSTOP, timeout 4 s)" $(((4 + 6) * 1000))
expect "$tmp/stop.log" 'error: rank [02]: collective timeout \(4 s\) in [a-z_]+ of step [0-9]+; did not arrive: rank 1 \(no answer: stopped, dead or unreachable\)' "stop error"

# 3. zero-train under zero-run --timeout, rank 1 stopped mid-run: an error, no checkpoint.
mkdir -p "$tmp/ckpt"
port=$((20000 + RANDOM % 20000))
"$bin/zero-run" -n 2 --timeout 5 "$bin/zero-train" --steps 100000 --print-every 1 --no-progress --metrics-port $port \
  --layers 1 --heads 2 --channels 32 --max-seq 16 --save-dir "$tmp/ckpt" --save-every 1000000 > "$tmp/train.log" 2>&1 &
job=$!
for _ in $(seq 1 300); do grep -q '^step' "$tmp/train.log" && break; sleep 0.2; done
victim=$(rank_pid zero-train 1)
[[ -n $victim ]] || { echo "FAIL train: rank 1 not found"; cat "$tmp/train.log"; fail=1; }
start=$(date +%s%N)
kill -STOP "$victim"
# Before the timeout, rank 0's gauge shows the wait (its metrics thread still answers).
sleep 3
wait_seconds=$(python3 -c "
import re, urllib.request
text = urllib.request.urlopen('http://127.0.0.1:$port/metrics', timeout=2).read().decode()
print(re.search(r'^deepspeed:collective_wait_seconds\{[^}]*\} (\S+)$', text, re.M).group(1))")
echo "zero-train: rank 0's deepspeed:collective_wait_seconds 3 s after SIGSTOP: $wait_seconds"
awk -v w="$wait_seconds" 'BEGIN { exit !(w >= 2 && w < 5) }' || { echo "FAIL train: the wait gauge reads '$wait_seconds'"; fail=1; }
ends_failing "zero-train (SIGSTOP, timeout 5 s)" $(((5 + 8) * 1000))
expect "$tmp/train.log" 'error: rank 0: collective timeout \(5 s\) in [a-z_]+ of step [0-9]+; did not arrive: rank 1 \(no answer: stopped, dead or unreachable\)' "train error"
[[ -z $(ls -A "$tmp/ckpt") ]] || { echo "FAIL train: the failing job wrote into the checkpoint directory:"; ls -R "$tmp/ckpt"; fail=1; }

# 4. A pipeline (PP 2, the Llama fixture's llama_gqa), its last stage stopped mid-schedule: the
# first stage, waiting in a point-to-point receive or the stages' norm, ends the job naming it.
# 5. The same with its first stage killed: the job ends at once, naming it.
pipeline_case() {  # pipeline_case SIGNAL RANK PATTERN
  "$bin/zero-run" -n 2 --timeout 5 "$bin/zero-train" --model "$cases/llama_gqa/model" --train-data "$cases/tokens.bin" \
    --seq-len 16 --config "$tmp/pp.json" --steps 1000000 --print-every 1 --no-progress > "$tmp/pipeline_$1.log" 2>&1 &
  job=$!
  for _ in $(seq 1 300); do grep -q '^step' "$tmp/pipeline_$1.log" && break; sleep 0.2; done
  victim=$(rank_pid zero-train "$2")
  [[ -n $victim ]] || { echo "FAIL pipeline: rank $2 not found"; cat "$tmp/pipeline_$1.log"; fail=1; }
  start=$(date +%s%N)
  kill -"$1" "$victim"
  ends_failing "pipeline (SIG$1 on rank $2, timeout 5 s)" $(((5 + 8) * 1000))
  expect "$tmp/pipeline_$1.log" "$3" "pipeline SIG$1"
}
cases=${ZERO_LLAMA_CASES:-}
if [[ -f $cases/llama_gqa/model/config.json ]]; then
  printf '%s' '{"train_batch_size": 12, "train_micro_batch_size_per_gpu": 3, "zero_allow_untested_optimizer": true,
    "zero_optimization": {"stage": 1}, "optimizer": {"type": "SGD", "params": {"lr": 0.05}},
    "pipeline_parallel": {"pp_size": 2}}' > "$tmp/pp.json"
  pipeline_case STOP 1 'error: rank 0: collective timeout \(5 s\) in [a-z_]+ of step [0-9]+; did not arrive: rank 1 \(no answer: stopped, dead or unreachable\)'
  pipeline_case KILL 0 'zero-run: rank 0 was killed by signal 9'
else
  echo "FAIL pipeline: ZERO_LLAMA_CASES has no llama_gqa (CTest's llama_cases fixture writes it)"; fail=1
fi

[[ $fail -eq 0 ]] && echo "watchdog_e2e: all passed"
exit $fail
