#!/usr/bin/env bash
# Checkpoints as a user meets them, through zero-train and zero-ckpt:
# - resume anywhere: saved at 4 ranks stage 3, resumed at 2 ranks stage 1 and at 1 rank stage 0
#   (and the reverse: saved there, resumed at 4 ranks stage 3): the next 10 losses match the
#   uninterrupted 4-rank run within 1e-5;
# - crash safety: a rank SIGKILLed half-way through writing its file leaves `latest` on the
#   previous checkpoint, which verifies and resumes to the same losses; the next saves succeed;
# - zero-ckpt: inspect verifies; consolidate --format llmc equals zero-train's --export of the same
#   weights byte for byte and loads back with --init; a flipped byte is an error naming the file.
source "$(dirname "$0")/gpt_e2e_common.sh"
train() {  # train RANKS STAGE LOG [zero-train flags...]
  local ranks=$1 stage=$2 log=$3
  shift 3
  "$bin/zero-run" -n "$ranks" "$bin/zero-train" --config "$(config "$stage")" --text "$src/README.md" \
    --layers 2 --heads 2 --channels 32 --max-seq 16 --no-progress "$@" > "$log" 2>&1
}
steps() {  # "STEP LOSS" per step line of a log
  awk '/^step/ { split($2, s, "/"); print s[1], $5 }' "$1"
}
same_losses() {  # same_losses EXPECTED GOT: same steps, losses within 1e-5 relative
  [[ $(wc -l < "$1") -gt 0 ]] && join "$1" "$2" | awk -v n="$(wc -l < "$1")" '
    { d = $2 - $3; if (d < 0) d = -d; if (d > 1e-5 * $2) bad = 1; count++ } END { exit bad || count != n }'
}

# Resume anywhere.
train 4 3 "$tmp/straight.log" --steps 20 || { echo "FAIL straight run"; cat "$tmp/straight.log"; exit 1; }
steps "$tmp/straight.log" | awk '$1 > 10' > "$tmp/expected"
train 4 3 "$tmp/first.log" --steps 10 --save-dir "$tmp/at4"
for case in "2 1" "1 0"; do
  set -- $case
  rm -rf "$tmp/copy" && cp -r "$tmp/at4" "$tmp/copy"
  train "$1" "$2" "$tmp/resumed.log" --steps 20 --save-dir "$tmp/copy" --resume
  steps "$tmp/resumed.log" > "$tmp/got"
  if grep -q "resumed from $tmp/copy at step 10" "$tmp/resumed.log" && same_losses "$tmp/expected" "$tmp/got"; then
    echo "ok   saved at 4 ranks stage 3, resumed at $1 rank(s) stage $2: steps 11-20 match"
  else
    echo "FAIL resume at $1 rank(s) stage $2"; paste "$tmp/expected" "$tmp/got"; tail -5 "$tmp/resumed.log"; fail=1
  fi
done
for case in "1 0" "2 1"; do
  set -- $case
  train "$1" "$2" "$tmp/saving.log" --steps 10 --save-dir "$tmp/at$1"
  train 4 3 "$tmp/resumed.log" --steps 20 --save-dir "$tmp/at$1" --resume
  steps "$tmp/resumed.log" > "$tmp/got"
  # --resume without a checkpoint starts afresh: the run must say where it resumed.
  if grep -q "resumed from $tmp/at$1 at step 10" "$tmp/resumed.log" && same_losses "$tmp/expected" "$tmp/got"; then
    echo "ok   saved at $1 rank(s) stage $2, resumed at 4 ranks stage 3: steps 11-20 match"
  else
    echo "FAIL resume at 4 ranks stage 3 from $1 rank(s) stage $2"; paste "$tmp/expected" "$tmp/got"; fail=1
  fi
done

# Crash safety: rank 1 dies half-way through writing its file in the second save (step 10).
train 2 2 "$tmp/whole.log" --steps 20
ZERO_TEST_KILL_IN_SAVE=1:2 train 2 2 "$tmp/crash.log" --steps 20 --save-every 5 --save-dir "$tmp/crash"
status=$?
latest=$(cat "$tmp/crash/latest" 2>/dev/null)
if [[ $status -ne 0 && $latest == global_step5 && ! -e $tmp/crash/global_step10 && -d $tmp/crash/global_step10.partial ]] &&
   "$bin/zero-ckpt" inspect "$tmp/crash" > "$tmp/inspect.log" 2>&1 && grep -q "^verified" "$tmp/inspect.log"; then
  echo "ok   killed mid-save: latest is global_step5 and verifies"
else
  echo "FAIL crash: status $status, latest '$latest'"; ls "$tmp/crash"; cat "$tmp/inspect.log"; fail=1
fi
train 2 2 "$tmp/after.log" --steps 20 --save-every 5 --save-dir "$tmp/crash" --resume
if grep -q "resumed from $tmp/crash at step 5" "$tmp/after.log" &&
   diff <(steps "$tmp/whole.log" | awk '$1 > 5') <(steps "$tmp/after.log") > /dev/null &&
   [[ $(cat "$tmp/crash/latest") == global_step20 && -d $tmp/crash/global_step10 ]]; then
  echo "ok   resumed after the crash: the same losses (all decimals), later saves complete"
else
  echo "FAIL after the crash"; tail -5 "$tmp/after.log"; ls "$tmp/crash"; fail=1
fi

# zero-ckpt consolidate: the same weights as zero-train's own export, and loadable by --init.
train 2 3 "$tmp/export.log" --steps 6 --save-dir "$tmp/ex" --export "$tmp/export.bin"
"$bin/zero-ckpt" consolidate "$tmp/ex" --format llmc --out "$tmp/consolidated.bin" > "$tmp/cons.log" 2>&1
if cmp -s "$tmp/export.bin" "$tmp/consolidated.bin"; then
  echo "ok   consolidate --format llmc equals --export byte for byte"
else
  echo "FAIL consolidate llmc"; cat "$tmp/cons.log"; fail=1
fi
"$bin/zero-train" --init "$tmp/consolidated.bin" --text "$src/README.md" --steps 0 --no-progress \
  --export "$tmp/reexport.bin" > "$tmp/init.log" 2>&1
if cmp -s "$tmp/consolidated.bin" "$tmp/reexport.bin"; then
  echo "ok   the consolidated file loads with --init to the same weights (re-exported byte for byte)"
else
  echo "FAIL --init of the consolidated file"; cat "$tmp/init.log"; fail=1
fi
"$bin/zero-ckpt" consolidate "$tmp/ex" --out "$tmp/model.safetensors" --dtype bf16 > "$tmp/cons.log" 2>&1 &&
  grep -q "wrote $tmp/model.safetensors" "$tmp/cons.log" && echo "ok   consolidate to bf16 safetensors" ||
  { echo "FAIL consolidate safetensors"; cat "$tmp/cons.log"; fail=1; }
printf '\xff' | dd of="$tmp/ex/global_step6/rank1.bin" bs=1 seek=100 conv=notrunc status=none
out=$("$bin/zero-ckpt" inspect "$tmp/ex" 2>&1)
[[ $? -ne 0 ]] && grep -q "rank1.bin: checksum mismatch" <<<"$out" && echo "ok   a flipped byte names the file" ||
  { echo "FAIL corrupt file: $out"; fail=1; }
# Random-state files are checked too: one byte changed in rank0.rng (not the shards) is named.
rng="$tmp/crash/global_step20/rank0.rng"
byte=$(od -An -tu1 -j20 -N1 "$rng" | tr -d ' ')
printf "\\$(printf %o $((255 - byte)))" | dd of="$rng" bs=1 seek=20 conv=notrunc status=none
out=$("$bin/zero-ckpt" inspect "$tmp/crash" 2>&1)
[[ $? -ne 0 ]] && grep -q "rank0.rng: checksum mismatch" <<<"$out" && echo "ok   a changed random-state file names the file" ||
  { echo "FAIL corrupt rng file: $out"; fail=1; }
exit $fail
