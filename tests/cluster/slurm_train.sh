#!/usr/bin/env bash
# zero-train under a real Slurm (scripts/slurm: Debian's slurmctld, slurmd and munged on
# loopback), as users launch it:
#   - sbatch -n 2 with zero-run inside the allocation (which starts the ranks with srun) and a
#     plain `srun -n 2 --mpi=pmix zero-train` give the losses of `zero-run -n 2` over mpirun;
#   - srun without an MPI plugin (the cluster's MpiDefault is none) is refused by every rank,
#     not run as two lone trainings;
#   - a failing rank ends the job at once, and zero-run names the rank and its exit status;
#   - Ctrl-C stops every rank (zero-train saves); a second one aborts ranks that ignore it;
#   - on two Slurm nodes (a slurmd in each host of scripts/cluster), sbatch -N 2 places 2 ranks on
#     each, World finds the 2 hosts, and the losses are those of 4 ranks on one host.
# ARGS: BIN_DIR SOURCE_DIR. Needs root and Slurm (scripts/bootstrap); exits 77 (skipped) without.
source "$(dirname "$0")/common.sh"
slurm=$src/scripts/slurm
for tool in slurmctld slurmd munged sbatch; do
  command -v $tool >/dev/null || { echo "skipped: $tool is not installed (scripts/bootstrap installs Slurm)"; exit 77; }
done
trap '"$slurm" down; "$cluster" down; rm -rf "$tmp"' EXIT
"$slurm" up --cpus 4 || exit 1
export SLURM_CONF=$("$slurm" conf)

cat >"$tmp/stage2.json" <<JSON
{"train_batch_size": 8, "gradient_clipping": 1.0, "zero_optimization": {"stage": 2, "reduce_bucket_size": 20000},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}}}
JSON
gpt=("$bin/zero-train" --config "$tmp/stage2.json" --layers 2 --heads 2 --channels 64 --max-seq 64 --vocab 256
     --no-progress)
train=("${gpt[@]}" --steps 5)
# sbatch's --wrap runs a shell line: the same command, quoted for it.
train_line=$(printf '%q ' "${train[@]}")

# The reference: mpirun on this host, outside Slurm.
(unset SLURM_CONF; timeout 300 "$bin/zero-run" -n 2 "${train[@]}") >"$tmp/mpirun.out" 2>&1 ||
  { echo "mpirun run failed"; cat "$tmp/mpirun.out"; fail=1; }

# zero-run inside an allocation: its plan is srun's, and the ranks train together.
timeout 300 sbatch --wait -n 2 -o "$tmp/dry.out" --wrap "$bin/zero-run --dry-run $train_line" >/dev/null
check "grep -q '^env MASTER_ADDR=$(hostname -s) .* srun --mpi=pmix --kill-on-bad-exit=1' $tmp/dry.out" \
  "zero-run in an allocation launches with srun ($(head -c 120 "$tmp/dry.out"))"
timeout 300 sbatch --wait -n 2 -o "$tmp/sbatch.out" --wrap "$bin/zero-run $train_line" >/dev/null
status=$?
check "[[ $status == 0 ]] && grep -q '^zero-train: 2 ranks' $tmp/sbatch.out && same_losses $tmp/mpirun.out $tmp/sbatch.out" \
  "sbatch -n 2 + zero-run: 2 ranks with the losses of mpirun's"

# srun straight, the ranks' World from Slurm's PMIx.
timeout 300 srun -n 2 --mpi=pmix "${train[@]}" >"$tmp/srun.out" 2>&1
status=$?
check "[[ $status == 0 ]] && grep -q '^zero-train: 2 ranks' $tmp/srun.out && same_losses $tmp/mpirun.out $tmp/srun.out" \
  "srun -n 2 --mpi=pmix: 2 ranks with the losses of mpirun's"

# srun with no MPI plugin: each task would be a world of one.
timeout 300 srun -n 2 "${train[@]}" >"$tmp/nompi.out" 2>&1
status=$?
check "[[ $status != 0 ]] && grep -q 'srun started 2 tasks without an MPI process manager' $tmp/nompi.out &&
       ! grep -q '^step' $tmp/nompi.out" "srun without --mpi=pmix is refused (status $status): $(grep -m1 -o 'srun started.*' "$tmp/nompi.out")"

# A rank that fails: srun ends the other at once (--kill-on-bad-exit), zero-run names the rank.
start=$SECONDS
timeout 120 sbatch --wait -n 2 -o "$tmp/fail.out" \
  --wrap "$bin/zero-run bash -c '[[ \$SLURM_PROCID == 1 ]] && exit 3; sleep 100'" >/dev/null
status=$? took=$((SECONDS - start))
check "[[ $status == 3 && $took -lt 60 ]] && grep -q 'zero-run: rank 1 exited with status 3' $tmp/fail.out" \
  "a rank exiting 3 ends the job in ${took} s with status $status: $(grep -m1 '^zero-run: rank' "$tmp/fail.out")"
# Ctrl-C to zero-run: srun forwards the stop to every rank, zero-train saves and exits, zero-run
# exits 130. A second Ctrl-C aborts a step whose program ignores the first.
interrupt_job() {  # interrupt_job NAME TIMES PROGRAM...: run under sbatch -n 2, SIGINT zero-run TIMES
  local name=$1 times=$2; shift 2
  printf '#!/bin/bash\n' >"$tmp/$name.sh"
  printf '%q ' "$bin/zero-run" "$@" >>"$tmp/$name.sh"
  printf '&\necho $! >%q\nwait $!\necho "zero-run exit $?"\n' "$tmp/$name.pid" >>"$tmp/$name.sh"
  sbatch -n 2 -o "$tmp/$name.out" "$tmp/$name.sh" >/dev/null
  for _ in $(seq 120); do grep -q '^step\|^started' "$tmp/$name.out" 2>/dev/null && break; sleep 0.5; done
  kill -INT "$(cat "$tmp/$name.pid")"
  [[ $times == 2 ]] && { sleep 2; kill -INT "$(cat "$tmp/$name.pid")"; }
  for _ in $(seq 120); do [[ -z $(squeue -h) ]] && return 0; sleep 0.5; done
  echo "the job did not end"; scancel --quiet --partition=debug; return 1
}
interrupt_job stop 1 "${gpt[@]}" --save-dir "$tmp/ckpt" --steps 100000
check "grep -q 'zero-run exit 130' $tmp/stop.out && grep -q 'zero-train: saved' $tmp/stop.out && [[ -f $tmp/ckpt/latest ]]" \
  "Ctrl-C under srun: every rank stops, the checkpoint is saved ($(cat "$tmp/ckpt/latest" 2>/dev/null)), exit 130"
start=$SECONDS
interrupt_job abort 2 bash -c 'echo started; trap "" INT; sleep 100'
took=$((SECONDS - start))
check "[[ $took -lt 40 ]] && grep -q 'zero-run exit 130' $tmp/abort.out" \
  "a second Ctrl-C under srun aborts ranks that ignore the first (ended after $took s; they sleep 100 s)"

# Two Slurm nodes: hosts of scripts/cluster, TCP between them.
"$slurm" down
(unset SLURM_CONF; timeout 300 "$bin/zero-run" -n 4 "${train[@]}") >"$tmp/mpirun4.out" 2>&1 ||
  { echo "4-rank mpirun run failed"; cat "$tmp/mpirun4.out"; fail=1; }
"$cluster" up 2 --rate 10gbit >/dev/null || exit 1
"$slurm" up --cluster --cpus 2 || exit 1
timeout 300 sbatch --wait -N 2 --ntasks-per-node 2 -o "$tmp/two_nodes.out" --wrap "$bin/zero-run $train_line" >/dev/null
status=$?
check "[[ $status == 0 ]] && grep -q '^zero-train: 4 ranks' $tmp/two_nodes.out && same_losses $tmp/mpirun4.out $tmp/two_nodes.out" \
  "sbatch -N 2 --ntasks-per-node 2 + zero-run: 4 ranks with the losses of 4 on one host"
# Stage 2 on 2 hosts x 2 ranks: in each pass (the fp32 gradients' reduce-scatter, the fp32
# parameters' all-gather) a rank sends (H-1)/N = 1/4 of the 4 x 120,576 bytes across, and the
# loss and the gradient norm add two 16-byte all-reduces.
expected=$((2 * 120576 + 32))
check "grep -q 'sent across nodes per step: $expected $expected $expected $expected bytes by rank (2 hosts)' $tmp/two_nodes.out" \
  "the ranks found Slurm's 2 nodes and each sent $expected bytes across per step: $(grep -m1 -o 'sent across nodes.*' "$tmp/two_nodes.out")"
[[ $fail == 0 ]] || "$slurm" logs
exit $fail
