#!/usr/bin/env bash
# The real DeepSpeed configs that zerocpp accepts (tests/configs/real_expected.tsv), as a user
# runs them under zero-train at 2 ranks; the trainer's flags give the batch keys the file says
# "auto" (or leaves out entirely).
#   - Every one is checked at 2 ranks (zero-config check, the engine's own resolution). A file
#     whose batch triad only works at another world size, or that offloads to NVMe (not built
#     yet: docs/engine.md, "Not built yet"), is listed as not run, with the reason.
#   - Every code path they take trains two steps with finite losses. A code path is one value of
#     one setting that selects engine code (the stage, each offload device, the precision and
#     its loss scaling, the optimizer, the schedule, clipping, accumulation, overlap and the
#     reduction's form, ZeRO++, activation checkpointing, the monitors and breakdowns). A greedy
#     cover picks the fewest files that together take every value any of the files takes, and
#     those train. Training all 66 cost a minute of both cores, and 60 of those runs repeated
#     paths already trained (docs/testing.md).
source "$(dirname "$0")/gpt_e2e_common.sh"
real=$src/tests/configs/real
checked=0 not_run=0
# The settings whose values choose code, and how a number is read: its sign (0 or not), or
# whether it is above 1.
path_keys='zero_optimization.stage zero_optimization.offload_optimizer.device zero_optimization.offload_param.device
  fp16.enabled bf16.enabled fp16.loss_scale=sign optimizer.type scheduler.type scheduler.params.warmup_type
  gradient_clipping=sign gradient_accumulation_steps=above1 gradient_predivide_factor=above1 prescale_gradients
  communication_data_type data_types.grad_accum_dtype
  zero_optimization.overlap_comm zero_optimization.contiguous_gradients zero_optimization.reduce_scatter
  zero_optimization.round_robin_gradients zero_optimization.zero_quantized_weights
  zero_optimization.zero_hpz_partition_size=above1 zero_optimization.zero_quantized_gradients
  activation_checkpointing.partition_activations activation_checkpointing.cpu_checkpointing
  activation_checkpointing.contiguous_memory_optimization
  wall_clock_breakdown memory_breakdown tensorboard.enabled csv_monitor.enabled comms_logger.enabled
  flops_profiler.enabled'
: > "$tmp/paths"
declare -A flags_of
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
  if grep -qE '^ +tensor_parallel\.autotp_size +([2-9]|[1-9][0-9]+) ' <<<"$check"; then
    echo "not run $file: tensor parallelism trains the Llama family (--model), not this GPT: tests/dist/llama_tensor_parallel_test.cpp"
    not_run=$((not_run + 1))
    continue
  fi
  checked=$((checked + 1))
  flags_of[$file]="${batch_flags[*]}"
  # One line per file: the file, then KEY=VALUE for each path setting (from the resolved config).
  awk -v keys="$path_keys" -v file="$file" '
    BEGIN { n = split(keys, k, /[ \n]+/); for (i = 1; i <= n; i++) if (k[i] != "") {
              split(k[i], kv, "="); read_as[kv[1]] = kv[2]; order[++m] = kv[1] } }
    NR > 1 && ($1 in read_as) { v = $2
      if (read_as[$1] == "sign") v = (v + 0 == 0) ? "0" : "nonzero"
      else if (read_as[$1] == "above1") v = (v + 0 > 1) ? ">1" : "<=1"
      value[$1] = v }
    END { line = file; for (i = 1; i <= m; i++) line = line " " order[i] "=" (order[i] in value ? value[order[i]] : "-")
          print line }' <<<"$check" >> "$tmp/paths"
done < "$src/tests/configs/real_expected.tsv"

# The greedy cover: the file that takes the most values not yet trained, until none is left.
/usr/bin/python3 - "$tmp/paths" > "$tmp/chosen" <<'PY'
import sys
files = {}
for line in open(sys.argv[1]):
    name, *values = line.split()
    files[name] = set(values)
left = set().union(*files.values()) if files else set()
while left:
    best = max(sorted(files), key=lambda f: len(files[f] & left))
    print(best, len(files[best] & left))
    left -= files[best]
PY
values=$(tr ' ' '\n' < "$tmp/paths" | grep -c '=')
distinct=$(tr ' ' '\n' < "$tmp/paths" | grep '=' | sort -u | wc -l)
trained=0
while read -r file new_values; do
  read -r -a batch_flags <<<"${flags_of[$file]}"
  log=$tmp/run.log
  if "$bin/zero-run" -n 2 "$bin/zero-train" --config "$real/$file" "${batch_flags[@]}" --text "$src/README.md" \
       --steps 2 --layers 2 --heads 2 --channels 32 --max-seq 16 --no-progress < /dev/null > "$log" 2>&1 &&
     [[ $(awk '/^step/ && $5 + 0 > 0 && $5 + 0 < 100 { n++ } END { print n + 0 }' "$log") -eq 2 ]]; then
    trained=$((trained + 1))
    echo "trained $file (+$new_values paths)"
  else
    echo "FAIL $file:"; tail -5 "$log"; fail=1
  fi
done < "$tmp/chosen"
echo "real configs: $checked checked at 2 ranks, $not_run not run (reasons above); $trained trained 2 steps," \
     "taking all $distinct values of the path settings that the $checked files take"
[[ $checked -ge 60 ]] || { echo "FAIL too few real configs checked at 2 ranks ($checked)"; fail=1; }
[[ $trained -eq $(wc -l < "$tmp/chosen") && $trained -gt 0 ]] || { echo "FAIL not every chosen config trained"; fail=1; }
exit $fail
