# Sourced by the cluster tests (ARGS: BIN_DIR SOURCE_DIR): sets bin, src, cluster (the script),
# tmp (removed, with the cluster, on exit), fail=0 and check CONDITION MESSAGE. Exits 77
# (skipped) without root: the cluster's network namespaces need it.
set -u
bin=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
[[ $(id -u) -eq 0 ]] || { echo "skipped: the cluster needs root (network namespaces)"; exit 77; }
cluster=$src/scripts/cluster
tmp=$(mktemp -d "/tmp/$(basename "$0" .sh).XXXXXX")
trap '"$cluster" down; rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
fail=0
check() {  # check CONDITION MESSAGE
  if eval "$1"; then echo "ok: $2"; else echo "FAILED: $2"; fail=1; fi
}
