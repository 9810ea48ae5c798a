#!/usr/bin/env bash
# zero-run as a user runs it: a real 3-rank run, per-rank logs, a failing rank, the dry run.
set -u
bin=$(cd "$1" && pwd) src=$2 tests=$(cd "$3" && pwd)
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
say() { echo "$@"; }
bad() { echo "FAIL $*"; fail=1; }

# A real 3-rank MPI run: the communicator tests themselves.
if out=$("$bin/zero-run" -n 3 "$tests/dist_comm_tests" --gtest_filter='World.*:Collectives.AllReduce*' 2>&1); then
  grep -q 'PASSED' <<<"$out" && say "ok   three_ranks" || bad "three_ranks: no PASSED"$'\n'"$out"
else
  bad "three_ranks: exit $?"$'\n'"$out"
fi

# One log per rank.
cat > "$tmp/hello.sh" <<'SH'
#!/usr/bin/env bash
echo "hello from rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE"
echo "to stderr $OMPI_COMM_WORLD_RANK" >&2
SH
chmod +x "$tmp/hello.sh"
if "$bin/zero-run" -n 2 --log-dir "$tmp/logs" --env GREETING=hi "$tmp/hello.sh" >/dev/null 2>&1 &&
   grep -q 'hello from rank 1 of 2' "$tmp/logs/rank.1.log" && grep -q 'to stderr 0' "$tmp/logs/rank.0.log"; then
  say "ok   log_dir"
else
  bad "log_dir: $(ls "$tmp/logs" 2>&1)"
fi

# --env reaches the ranks.
out=$("$bin/zero-run" -n 2 --env GREETING=hi bash -c 'echo "got $GREETING"' 2>&1)
[[ $(grep -c 'got hi' <<<"$out") -eq 2 ]] && say "ok   env" || bad "env: $out"

# Rank 2 of 3 exits with status 3 while the others sleep: over within seconds, non-zero, naming rank 2.
cat > "$tmp/fail.sh" <<'SH'
#!/usr/bin/env bash
if [[ $OMPI_COMM_WORLD_RANK == 2 ]]; then sleep 0.5; exit 3; fi
sleep 60
SH
chmod +x "$tmp/fail.sh"
start=$(date +%s)
out=$("$bin/zero-run" -n 3 "$tmp/fail.sh" 2>&1)
status=$?
elapsed=$(( $(date +%s) - start ))
if [[ $status -eq 3 && $elapsed -lt 30 ]] && grep -q 'zero-run: rank 2 exited with status 3' <<<"$out"; then
  say "ok   failing_rank (${elapsed}s)"
else
  bad "failing_rank: status $status after ${elapsed}s"$'\n'"$out"
fi

# Ctrl-C (SIGINT to zero-run) stops every rank within seconds.
cat > "$tmp/sleeper.sh" <<'SH'
#!/usr/bin/env bash
echo $$ > "$1/pid.$OMPI_COMM_WORLD_RANK"
sleep 60
SH
chmod +x "$tmp/sleeper.sh"
mkdir -p "$tmp/pids"
"$bin/zero-run" -n 2 "$tmp/sleeper.sh" "$tmp/pids" > "$tmp/int.out" 2>&1 &
launcher=$!
for _ in $(seq 50); do [[ -f $tmp/pids/pid.0 && -f $tmp/pids/pid.1 ]] && break; sleep 0.2; done
start=$(date +%s)
kill -INT "$launcher"
wait "$launcher"
status=$?
elapsed=$(( $(date +%s) - start ))
alive=0
for f in "$tmp"/pids/pid.*; do kill -0 "$(cat "$f")" 2>/dev/null && alive=1; done
if [[ $status -ne 0 && $alive -eq 0 && $elapsed -lt 20 ]]; then
  say "ok   ctrl_c (${elapsed}s, status $status)"
else
  bad "ctrl_c: status $status, ranks alive: $alive, ${elapsed}s"$'\n'"$(cat "$tmp/int.out")"
fi

# A program that ignores the stop request is killed when --stop-grace runs out.
cat > "$tmp/stubborn.sh" <<'SH'
#!/usr/bin/env bash
trap '' INT
echo $$ > "$1/stubborn.$OMPI_COMM_WORLD_RANK"
for _ in $(seq 600); do sleep 0.1; done
SH
chmod +x "$tmp/stubborn.sh"
"$bin/zero-run" -n 2 --stop-grace 2 "$tmp/stubborn.sh" "$tmp/pids" > "$tmp/stubborn.out" 2>&1 &
launcher=$!
for _ in $(seq 50); do [[ -f $tmp/pids/stubborn.0 && -f $tmp/pids/stubborn.1 ]] && break; sleep 0.2; done
start=$(date +%s)
kill -INT "$launcher"
wait "$launcher"
status=$?
elapsed=$(( $(date +%s) - start ))
# A killed wrapper's orphaned child is reaped by PID 1, which may be slow in a container: a
# zombie is not alive, and the kill may take a moment to land.
running() { [[ -r /proc/$1/stat ]] && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]; }
alive=1
for _ in $(seq 30); do
  alive=0
  for f in "$tmp"/pids/stubborn.*; do running "$(cat "$f")" && alive=1; done
  [[ $alive -eq 0 ]] && break
  sleep 0.1
done
if [[ $status -ne 0 && $alive -eq 0 && $elapsed -ge 2 && $elapsed -lt 20 ]] && grep -q "asking every rank to stop" "$tmp/stubborn.out"; then
  say "ok   stop_grace (${elapsed}s, status $status)"
else
  bad "stop_grace: status $status, ranks alive: $alive, ${elapsed}s"$'\n'"$(cat "$tmp/stubborn.out")"
fi

# Dry run prints the exact mpirun command.
out=$("$bin/zero-run" -n 2 --dry-run ./train --config ds.json 2>&1)
grep -qE '^mpirun .*--bind-to none --mca odls_base_signal_direct_children_only 1 -np 2 .*--rank-wrapper .* -- \./train --config ds\.json$' <<<"$out" && say "ok   dry_run" || bad "dry_run: $out"
printf 'worker-1 slots=2\nworker-2 slots=2\n' > "$tmp/hosts"
out=$("$bin/zero-run" --hostfile "$tmp/hosts" --include 'worker-2:1' --dry-run ./train 2>&1)
grep -q -- '-np 1 -H worker-2:1 -x CUDA_VISIBLE_DEVICES=1' <<<"$out" && say "ok   dry_run_hostfile" || bad "dry_run_hostfile: $out"
out=$("$bin/zero-run" --hostfile "$tmp/hosts" --include 'worker-9' --dry-run ./train 2>&1)
[[ $? -eq 2 ]] && grep -q 'host "worker-9" is not in the hostfile' <<<"$out" && say "ok   bad_include" || bad "bad_include: $out"

# .deepspeed_env in the working directory is exported.
(cd "$tmp" && printf 'FROM_FILE=42\n' > .deepspeed_env && "$bin/zero-run" -n 1 bash -c 'echo "file $FROM_FILE"' > out.txt 2>&1)
grep -q 'file 42' "$tmp/out.txt" && say "ok   deepspeed_env" || bad "deepspeed_env: $(cat "$tmp/out.txt")"

# A missing program: a clear error and non-zero status.
out=$("$bin/zero-run" -n 1 /nonexistent/program 2>&1)
[[ $? -ne 0 ]] && grep -q 'cannot run /nonexistent/program' <<<"$out" && say "ok   missing_program" || bad "missing_program: $out"
exit $fail
