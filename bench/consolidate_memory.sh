#!/usr/bin/env bash
# Peak RSS of `zero-ckpt consolidate` against the size of the model it consolidates: two
# checkpoints whose largest tensor is the same (C = 128: 4C×C = 65 536 elements) and whose models
# differ 24× (L = 2 and L = 48). Streaming means the peak follows the largest tensor.
#   bench/consolidate_memory.sh [BUILD_DIR]
set -eu
build=$(cd "${1:-build}" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for layers in 2 48; do
  "$build/apps/zero-train" --layers "$layers" --heads 4 --channels 128 --max-seq 64 --steps 1 --seq-len 64 \
    --save-dir "$tmp/L$layers" --no-progress --eval-every 0 --sample-every 0 > /dev/null 2>&1
  for format in safetensors llmc; do
    line=$("$build/apps/zero-ckpt" consolidate "$tmp/L$layers" --format "$format" --out "$tmp/out")
    printf 'L=%-3s %-12s model %6.1f MB, checkpoint %6.1f MB on disk: %s\n' "$layers" "$format" \
      "$(stat -c %s "$tmp/out" | awk '{print $1 / 1048576}')" \
      "$(du -sb "$tmp/L$layers" | awk '{print $1 / 1048576}')" "${line##*; }"
  done
done
