#!/usr/bin/env bash
# zero-config check as a user runs it: exit codes and what it prints.
set -u
bin=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
fail=0
check() {  # check NAME EXPECTED_STATUS PATTERN -- command...
  local name=$1 want=$2 pattern=$3
  shift 4
  local out status
  out=$("$@" 2>&1)
  status=$?
  if [[ $status -ne $want ]]; then
    echo "FAIL $name: exit $status, wanted $want"; echo "$out"; fail=1; return
  fi
  if ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: output lacks /$pattern/"; echo "$out"; fail=1; return
  fi
  echo "ok   $name"
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cfg=$src/examples/configs
check resolved 0 'zero_optimization\.reduce_bucket_size +16777216 +auto' -- \
  "$bin/zero-config" check "$cfg/ds_zero3.json" --world-size 4 --hidden-size 4096
check sources 0 'zero_optimization\.stage +3 +file' -- "$bin/zero-config" check "$cfg/ds_zero3.json" --hidden-size 8
check defaults 0 'zero_optimization\.allgather_bucket_size +500000000 +default' -- \
  "$bin/zero-config" check "$cfg/ds_zero3.json" --hidden-size 8
check triad 0 'train_batch_size +16 +auto' -- "$bin/zero-config" check "$cfg/ds_zero3.json" --world-size 4 --hidden-size 8
check unresolved_listed 0 'left unresolved' -- "$bin/zero-config" check "$cfg/ds_zero3.json"
check unresolved_strict 1 'needs the model.s hidden size' -- "$bin/zero-config" check "$cfg/ds_zero3.json" --strict
check pattern_c 0 'valid for world size 64 \(pipeline 8 x tensor-parallel 8 x data-parallel 1: the batch counts data-parallel ranks, 16 micro-batches per step through the stages\)' -- \
  "$bin/zero-config" check "$cfg/pattern_c_3d.json" --world-size 64
printf '{"train_micro_batch_size_per_gpu": 4, "tensor_parallel": {"autotp_size": 2}}' > "$tmp/tp.json"
check tensor_parallel 0 'valid for world size 8 \(tensor-parallel 2 x data-parallel 4: the batch counts data-parallel ranks\)' -- \
  "$bin/zero-config" check "$tmp/tp.json" --world-size 8
printf '{"zero_optimization": {"stgae": 2}, "train_batch_size": 8}' > "$tmp/typo.json"
check typo 1 'zero_optimization\.stgae: unknown key \(did you mean "stage"\?\)' -- "$bin/zero-config" check "$tmp/typo.json"
check missing_file 1 'cannot open the config file: /nonexistent.json' -- "$bin/zero-config" check /nonexistent.json
check usage 106 'FILE' -- "$bin/zero-config" check
exit $fail
