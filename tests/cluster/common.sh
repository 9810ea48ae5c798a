# Sourced by the cluster tests (ARGS: BIN_DIR SOURCE_DIR): sets bin, src, cluster (the script),
# tmp (removed, with the cluster, on exit), fail=0, check CONDITION MESSAGE and the loss
# comparisons of zero-train logs (losses, close_losses, same_losses). Exits 77
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
losses() { sed -nE 's/^step .*\| loss ([0-9.]+) .*/\1/p' "$1"; }
close_losses() {  # close_losses A B TOLERANCE: as many steps, each within TOLERANCE relative
  [[ $(losses "$1" | wc -l) == $(losses "$2" | wc -l) ]] &&
    paste <(losses "$1") <(losses "$2") | awk -v tol="$3" 'BEGIN{ok=1; n=0} {n++; d=$1-$2; if (d<0) d=-d; if (d > tol*$2) ok=0}
      END{exit !(ok && n > 0)}'
}
same_losses() { close_losses "$1" "$2" 1e-5; }  # the sums run in another order across hosts
