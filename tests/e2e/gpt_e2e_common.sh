# Sourced by the zero-train end-to-end scripts (ARGS: BIN_DIR SOURCE_DIR): sets bin, src, a
# temporary directory removed on exit, fail=0, and config STAGE, which writes a DeepSpeed config
# with a fixed global batch of 12 rows (the same batches at any rank count) and prints its path.
set -u
bin=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
config() {
  cat > "$tmp/stage$1.json" <<JSON
{"train_batch_size": 12, "gradient_clipping": 1.0,
 "zero_optimization": {"stage": $1, "reduce_bucket_size": 20000, "stage3_param_persistence_threshold": 0},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}}}
JSON
  echo "$tmp/stage$1.json"
}
