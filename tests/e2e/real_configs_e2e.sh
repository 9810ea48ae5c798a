#!/usr/bin/env bash
# Every real DeepSpeed config that zerocpp accepts (tests/configs/real_expected.tsv) trains the GPT
# for two steps at 2 ranks under zero-train, as a user would run it: the trainer's flags give the
# batch keys the file says "auto" (or leaves out entirely). A file whose batch triad only works at
# another world size, or that offloads to NVMe (not built yet: docs/engine.md, "Not built yet"), is
# listed as not run, with the reason; every other one, CPU offload included, must train with finite
# losses.
source "$(dirname "$0")/gpt_e2e_common.sh"
real=$src/tests/configs/real
ran=0 not_run=0
while IFS=$'\t' read -r file world outcome why; do
  [[ $file == file || $outcome != accepted ]] && continue
  document=$("$bin/zero-config" json "$real/$file" < /dev/null)
  batch_flags=()
  if grep -q '"train_micro_batch_size_per_gpu": "auto"' <<<"$document" ||
     ! grep -qE '"(train_batch_size|train_micro_batch_size_per_gpu)"' <<<"$document"; then
    batch_flags+=(--micro-batch 2)
  fi
  if grep -q '"gradient_accumulation_steps": "auto"' <<<"$document" ||
     ! grep -qE '"(train_batch_size|train_micro_batch_size_per_gpu|gradient_accumulation_steps)"' <<<"$document"; then
    batch_flags+=(--grad-accum 1)
  fi
  if ! check=$("$bin/zero-config" check --world-size 2 "${batch_flags[@]}" "$real/$file" 2>&1); then
    if grep -q '^  train_batch_size: ' <<<"$check"; then
      echo "not run $file: its batch triad is written for $world ranks"
      not_run=$((not_run + 1))
      continue
    fi
    echo "FAIL $file: accepted at its own world size, refused at 2 ranks:"; echo "$check"; fail=1; continue
  fi
  if grep -qE '^ +zero_optimization\.offload_(optimizer|param)\.device +"nvme"' <<<"$check"; then
    echo "not run $file: it offloads to NVMe, which the engine refuses (docs/engine.md, \"Not built yet\")"
    not_run=$((not_run + 1))
    continue
  fi
  log=$tmp/run.log
  if "$bin/zero-run" -n 2 "$bin/zero-train" --config "$real/$file" "${batch_flags[@]}" --text "$src/README.md" \
       --steps 2 --layers 2 --heads 2 --channels 32 --max-seq 16 --no-progress < /dev/null > "$log" 2>&1 &&
     [[ $(awk '/^step/ && $5 + 0 > 0 && $5 + 0 < 100 { n++ } END { print n + 0 }' "$log") -eq 2 ]]; then
    ran=$((ran + 1))
  else
    echo "FAIL $file:"; tail -5 "$log"; fail=1
  fi
done < "$src/tests/configs/real_expected.tsv"
echo "real configs: $ran trained 2 steps at 2 ranks, $not_run not run (reasons above)"
[[ $ran -ge 60 ]] || { echo "FAIL too few real configs trained ($ran)"; fail=1; }
exit $fail
