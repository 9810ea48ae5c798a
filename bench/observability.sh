#!/usr/bin/env bash
# The cost of observability: the GPT's step time with everything on (wall_clock_breakdown,
# memory_breakdown, comms_logger, flops_profiler, csv_monitor, tensorboard, the Prometheus
# endpoint scraped every 0.5 s, the watchdog) as a ratio to everything off (the watchdog too:
# zero-run --timeout 0), side by side in one run: off, on, off, on, ... (`--repeats` pairs), at
# stage 2 and stage 3, 2 ranks, the same seed and steps (the losses are printed: they agree).
# Mean step time over the steps after the first of each run.
#   [REPEATS=2] bench/observability.sh [--layers L] [--channels C] [--heads H] [--seq T] [--steps N] [--ranks R]
set -euo pipefail
cd "$(dirname "$0")/.."
layers=4 channels=128 heads=4 seq=128 steps=30 ranks=2 dir=/var/tmp sub_group=0 repeats=${REPEATS:-2}
source bench/gpt_run_args.sh
work=$(mktemp -d /tmp/observability.XXXXXX)
scraper=""
trap '[[ -n $scraper ]] && kill $scraper 2> /dev/null; rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
port=$((20000 + RANDOM % 20000))
config() {  # config STAGE on|off -> file
  local file=$work/$1-$2.json extra=""
  [[ $2 == on ]] && extra='"wall_clock_breakdown": true, "memory_breakdown": true,
    "comms_logger": {"enabled": true}, "flops_profiler": {"enabled": true, "profile_step": 5},
    "csv_monitor": {"enabled": true, "output_path": "'$work'/runs", "job_name": "bench"},
    "tensorboard": {"enabled": true, "output_path": "'$work'/runs", "job_name": "bench"},
    "prometheus": {"enabled": true, "port": '$port'},'
  cat > "$file" <<EOF
{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0, "steps_per_print": 10,
 $extra
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
 "zero_optimization": {"stage": $1, "overlap_comm": true}}
EOF
  echo "$file"
}
run() {  # run STAGE on|off -> "mean_ms last_loss"
  local log=$work/run.log timeout=0
  [[ $2 == on ]] && timeout=1800
  if [[ $2 == on ]]; then  # a Prometheus-like scraper of rank 0 for the whole run
    (while true; do
       { exec 3<> "/dev/tcp/127.0.0.1/$port" && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3 > /dev/null; } 2> /dev/null
       exec 3>&-
       sleep 0.5
     done) &
    scraper=$!
  fi
  build/apps/zero-run -n "$ranks" --timeout $timeout build/apps/zero-train --config "$(config "$1" "$2")" \
    --layers "$layers" --channels "$channels" --heads "$heads" --max-seq "$seq" --steps "$steps" \
    --print-every 1 --no-progress > "$log" 2>&1 || { cat "$log" >&2; exit 1; }
  [[ -n $scraper ]] && { kill $scraper 2> /dev/null; wait $scraper 2> /dev/null || true; scraper=""; }
  awk '/^step/ { split($2, s, "/"); if (s[1] > 1) { sum += $(NF - 1); n++ } loss = $5 }
       END { printf "%.2f %s\n", sum / n, loss }' "$log"
}
echo "| stage | everything off, ms/step | everything on, ms/step | on / off | last loss off, on |"
echo "|---|---|---|---|---|"
for stage in 2 3; do
  off_sum=0 on_sum=0
  for _ in $(seq 1 "$repeats"); do
    read -r off loss_off < <(run "$stage" off)
    read -r on loss_on < <(run "$stage" on)
    off_sum=$(awk -v a="$off_sum" -v b="$off" 'BEGIN { print a + b }')
    on_sum=$(awk -v a="$on_sum" -v b="$on" 'BEGIN { print a + b }')
  done
  awk -v s="$stage" -v off="$off_sum" -v on="$on_sum" -v r="$repeats" -v lo="$loss_off" -v ln="$loss_on" \
    'BEGIN { printf "| %s | %.2f | %.2f | %.3f | %s, %s |\n", s, off / r, on / r, on / off, lo, ln }'
done
echo "(GPT L=$layers C=$channels NH=$heads T=$seq, $ranks ranks, $steps steps per run, $repeats runs each, alternating)"
