#!/usr/bin/env bash
# Issue 13's table through the CLI, on the issue's 23.2 M-parameter GPT (L=6, NH=8, C=512,
# V=8192) at 2 ranks: stage 3 with DeepSpeed's defaults (overlap_comm on), with a small
# reduce_bucket_size, with prefetching off, with overlap off, and stages 1 and 2 with overlap,
# must all print stage 0's losses (to the 6 digits printed) for 3 steps. Before the fix the first
# two aborted in the first step and the third drifted from step 2 on.
# ARGS: BIN_DIR SOURCE_DIR
source "$(dirname "$0")/gpt_e2e_common.sh"
# 60 000 random tokens below 8192 as an llm.c shard (perl-base is in every Debian).
perl -e 'srand(13); my $n = 60000; print pack("l<256", 20240520, 1, $n, (0) x 253);
         print pack("S<*", map { int(rand(8192)) } 1 .. $n);' > "$tmp/tokens.bin"
run() {  # run NAME ZERO_OPTIMIZATION -> the losses, one line
  printf '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}}, "zero_optimization": {%s}}\n' "$2" > "$tmp/$1.json"
  "$bin/zero-run" -n 2 "$bin/zero-train" --config "$tmp/$1.json" --layers 6 --heads 8 --channels 512 --vocab 8192 \
    --max-seq 64 --seq-len 64 --train-data "$tmp/tokens.bin" --steps 3 --no-progress > "$tmp/$1.log" 2>&1
  grep -E '^step' "$tmp/$1.log" | grep -oE 'loss [0-9.]+' | tr '\n' ' '
}
expected=$(run stage0 '"stage": 0')
[[ $(wc -w <<< "$expected") -eq 6 ]] || { echo "FAIL: stage 0 gave no losses"; tail -5 "$tmp/stage0.log"; exit 1; }
echo "stage 0: $expected"
for row in 'stage3_defaults|"stage": 3' 'stage3_bucket|"stage": 3, "reduce_bucket_size": 1000000' \
           'stage3_no_prefetch|"stage": 3, "stage3_prefetch_bucket_size": 0' \
           'stage3_no_overlap|"stage": 3, "overlap_comm": false' \
           'stage1_overlap|"stage": 1, "overlap_comm": true' 'stage2_overlap|"stage": 2, "overlap_comm": true'; do
  name=${row%%|*}
  got=$(run "$name" "${row#*|}")
  if [[ $got == "$expected" ]]; then
    echo "ok   $name"
  else
    echo "FAIL $name: $got"; grep -m3 -iE 'error|abort|signal' "$tmp/$name.log"; fail=1
  fi
done
exit $fail
