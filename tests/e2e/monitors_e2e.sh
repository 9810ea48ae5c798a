#!/usr/bin/env bash
# DeepSpeed's csv_monitor and tensorboard blocks through zero-train at 2 ranks: rank 0 writes one
# CSV per event and one TensorBoard event file; tests/monitor/read_tfevents.py (Python's protobuf
# runtime, its own CRC-32C) reads the event file back; every step has each event, at DeepSpeed's
# step (global samples), the TensorBoard scalars equal the CSV values as float32, and the lr is
# the one zero-train printed.
# ARGS: BIN_DIR SOURCE_DIR
source "$(dirname "$0")/gpt_e2e_common.sh"
python=python3
/usr/bin/python3 -c 'import google.protobuf' 2> /dev/null && python=/usr/bin/python3
cat > "$tmp/monitors.json" <<JSON
{"train_batch_size": 12, "wall_clock_breakdown": true, "steps_per_print": 5,
 "csv_monitor": {"enabled": true, "output_path": "$tmp/runs", "job_name": "gpt"},
 "tensorboard": {"enabled": true, "output_path": "$tmp/runs", "job_name": "gpt"},
 "zero_optimization": {"stage": 2},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-3, "warmup_num_steps": 8, "warmup_type": "linear"}}}
JSON
"$bin/zero-run" -n 2 "$bin/zero-train" --config "$tmp/monitors.json" --layers 2 --heads 2 --channels 32 --max-seq 16 \
  --steps 12 --print-every 1 --no-progress > "$tmp/train.log" 2>&1 || { echo "FAIL: training"; cat "$tmp/train.log"; exit 1; }
events=("$tmp"/runs/gpt/events.out.tfevents.*)
[[ ${#events[@]} -eq 1 ]] || { echo "FAIL: want one event file (rank 0's), got ${#events[@]}"; exit 1; }
"$python" "$src/tests/monitor/read_tfevents.py" "${events[0]}" > "$tmp/scalars.tsv" ||
  { echo "FAIL: the independent reader rejected the event file"; exit 1; }
awk '/^step/ { split($2, s, "/"); print s[1] * 12, $8 }' "$tmp/train.log" > "$tmp/printed_lr"
"$python" - "$tmp/scalars.tsv" "$tmp/runs/gpt" "$tmp/printed_lr" <<'PY' || fail=1
import csv, struct, sys
scalars, csv_dir, printed = sys.argv[1:]
tags = ["train_loss", "lr", "grad_norm", "elapsed_time_ms_forward", "elapsed_time_ms_backward",
        "elapsed_time_ms_backward_inner", "elapsed_time_ms_backward_allreduce", "elapsed_time_ms_step"]
board = {}
for line in open(scalars):
    tag, step, value = line.rstrip("\n").split("\t")
    board[(tag, int(step))] = float(value)
steps = [12 * k for k in range(1, 13)]
for tag in tags:
    rows = list(csv.reader(open(f"{csv_dir}/Train_Samples_{tag}.csv", newline="")))
    if rows[0] != ["step", tag] or [int(r[0]) for r in rows[1:]] != steps:
        sys.exit(f"FAIL: Train_Samples_{tag}.csv: header {rows[0]}, steps {[r[0] for r in rows[1:]]}")
    for step, value in rows[1:]:
        as_float32 = struct.unpack("f", struct.pack("f", float(value)))[0]
        if abs(board[(f"Train/Samples/{tag}", int(step))] - as_float32) > 1e-6 * abs(as_float32):
            sys.exit(f"FAIL: {tag} at {step}: TensorBoard {board[('Train/Samples/' + tag, int(step))]}, CSV {value}")
for line in open(printed):
    step, lr = line.split()
    if abs(board[("Train/Samples/lr", int(step))] - float(lr)) > 1e-3 * float(lr) + 1e-12:
        sys.exit(f"FAIL: lr at {step}: TensorBoard {board[('Train/Samples/lr', int(step))]}, printed {lr}")
print(f"monitors_e2e: {len(board)} scalars read back ({len(tags)} events x {len(steps)} steps), CSV and printed lr agree")
PY
[[ $fail -eq 0 ]] && echo "monitors_e2e: all passed"
exit $fail
