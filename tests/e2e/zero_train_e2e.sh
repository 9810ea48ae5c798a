#!/usr/bin/env bash
# zero-train as a user runs it: the same global batch gives the same losses at 1 rank stage 0,
# 2 ranks stage 2, 3 ranks stage 1 and 2 ranks stage 3 (within 1e-5), the same with activation
# checkpointing (exactly), and bad input is a clear error.
source "$(dirname "$0")/gpt_e2e_common.sh"
run() {  # run RANKS STAGE → the loss column
  "$bin/zero-run" -n "$1" "$bin/zero-train" --config "$(config "$2")" --text "$src/README.md" --steps 10 \
    --layers 2 --heads 2 --channels 32 --max-seq 16 2>&1 | awk '/^step/ {print $5}'
}
reference=$(run 1 0)
[[ $(wc -l <<<"$reference") -eq 10 ]] || { echo "FAIL reference run: $reference"; exit 1; }
for case in "2 2" "3 1" "2 3"; do
  got=$(run $case)
  if paste <(echo "$reference") <(echo "$got") |
     awk '{ if ($1 + 0 <= 0 || $2 + 0 <= 0 || NF != 2) bad = 1; d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) bad = 1 } END { exit bad }'; then
    echo "ok   ranks/stage $case: same 10 losses"
  else
    echo "FAIL ranks/stage $case"; paste <(echo "$reference") <(echo "$got"); fail=1
  fi
done
awk 'NR == 1 { first = $1 } END { exit !($1 < first) }' <<<"$reference" && echo "ok   loss falls" || { echo "FAIL loss does not fall"; fail=1; }
# --activation-checkpointing: the same losses to the last digit (stage 3 at 2 ranks: the units
# gathered again for the recomputation), and the start-up line says it is on.
plain=$(run 2 3)
log=$("$bin/zero-run" -n 2 "$bin/zero-train" --config "$(config 3)" --text "$src/README.md" --steps 10 \
        --layers 2 --heads 2 --channels 32 --max-seq 16 --activation-checkpointing 2>&1)
if [[ $(awk '/^step/ {print $5}' <<<"$log") == "$plain" ]] && grep -q "with it (on: every block)" <<<"$log"; then
  echo "ok   --activation-checkpointing: the same 10 losses"
else
  echo "FAIL --activation-checkpointing"; paste <(echo "$plain") <(awk '/^step/ {print $5}' <<<"$log"); fail=1
fi
# Ctrl-C saves and stops; --resume continues with the same losses as a run never stopped.
steps() {  # the "step N loss" pairs of a log
  awk '/^step/ { split($2, s, "/"); print s[1], $5 }' "$1"
}
args=(--config "$(config 2)" --text "$src/README.md" --layers 2 --heads 2 --channels 32 --max-seq 16 --no-progress)
"$bin/zero-run" -n 2 "$bin/zero-train" "${args[@]}" --steps 300 > "$tmp/straight.log" 2>&1
"$bin/zero-run" -n 2 "$bin/zero-train" "${args[@]}" --steps 1000000 --save-dir "$tmp/ckpt" > "$tmp/stopped.log" 2>&1 &
launcher=$!
for _ in $(seq 300); do grep -q '^step *20/' "$tmp/stopped.log" && break; sleep 0.1; done
kill -INT "$launcher"
wait "$launcher"
status=$?
stopped_at=$(sed -n 's/^zero-train: stopped by a signal after step //p' "$tmp/stopped.log")
if [[ $status -eq 130 && -n $stopped_at && $stopped_at -lt 300 && -f $tmp/ckpt/latest ]] &&
   grep -q "zero-train: saved $tmp/ckpt/global_step$stopped_at" "$tmp/stopped.log"; then
  echo "ok   ctrl_c saved at step $stopped_at"
  "$bin/zero-run" -n 2 "$bin/zero-train" "${args[@]}" --steps 300 --save-dir "$tmp/ckpt" --resume > "$tmp/resumed.log" 2>&1
  if grep -q "resumed from $tmp/ckpt at step $stopped_at" "$tmp/resumed.log" &&
     [[ $(steps "$tmp/resumed.log" | head -1 | cut -d' ' -f1) -eq $((stopped_at + 1)) ]] &&
     diff <(steps "$tmp/straight.log" | awk -v s="$stopped_at" '$1 > s') <(steps "$tmp/resumed.log") > "$tmp/diff"; then
    echo "ok   resume: steps $((stopped_at + 1))-300 print the same losses as the run never stopped"
  else
    echo "FAIL resume"; cat "$tmp/resumed.log" "$tmp/diff"; fail=1
  fi
else
  echo "FAIL ctrl_c: status $status, stopped at '$stopped_at'"; cat "$tmp/stopped.log"; fail=1
fi

out=$("$bin/zero-train" --config "$(config 0)" --text "$src/README.md" --vocab 100 2>&1)
[[ $? -ne 0 ]] && grep -q -- "train bytes: the model needs V = 256" <<<"$out" && echo "ok   bad vocab" || { echo "FAIL bad vocab: $out"; fail=1; }
out=$("$bin/zero-train" --val-data "$src/README.md" --steps 1 2>&1)
[[ $? -ne 0 ]] && grep -q -- "--val-data needs --text or --train-data" <<<"$out" && echo "ok   val-data without training data" || { echo "FAIL val-data: $out"; fail=1; }
exit $fail
