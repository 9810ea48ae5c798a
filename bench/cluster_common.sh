# Sourced by the benchmarks on scripts/cluster's hosts, from the repository root after their
# options: $bin and $cluster, a work directory $work (removed, and the cluster taken down, on
# exit), one thread per rank, and cpu_line for the tables' heading (the CPU, its cores and flags).
bin=$PWD/build/apps cluster=$PWD/scripts/cluster
work=$(mktemp -d "${TMPDIR:-/tmp}/$(basename "$0" .sh).XXXXXX")
trap '"$cluster" down >/dev/null 2>&1; rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
cpu_line() {
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(getconf _NPROCESSORS_ONLN) cores;" \
    "flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o -w 'avx2\|fma\|avx512f\|avx512_bf16\|amx_bf16' | tr '\n' ' ')"
}
