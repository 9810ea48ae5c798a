#!/usr/bin/env bash
# SwapFile's sequential write and read bandwidth next to fio's on the same directory, with the same
# block size, queue depth, O_DIRECT and io_uring (installs fio from Debian when it is missing). Both
# time overwriting a file written once before, the steady state of an offloaded run. Then the same
# with encrypt_swap (AES-256-GCM), next to the cipher's own speed in memory.
#   bench/swap_vs_fio.sh [DIR] [GiB] [BLOCK_BYTES] [QUEUE_DEPTH]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/var/tmp} gib=${2:-1} block=${3:-1048576} depth=${4:-8}
if ! command -v fio > /dev/null; then
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends fio > /dev/null
fi
[[ -x build/bench/bench_swap ]] || scripts/bootstrap
file=$dir/fio_swap.$$
trap 'rm -f "$file"' EXIT
fio_gbs() {  # rw -> GB/s
  fio --name=swap --filename="$file" --size="${gib}G" --bs="$block" --iodepth="$depth" --rw="$1" --direct=1 \
      --ioengine=io_uring --output-format=json 2> /dev/null |
    python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print('%.3f' % (j['$2']['bw_bytes'] / 1e9))"
}
echo "swap_vs_fio: $dir, ${gib} GiB, block $block B, queue depth $depth, O_DIRECT, io_uring ($(date -u +%Y-%m-%d))"
fio_gbs write write > /dev/null  # lays the file out; the timed pass overwrites, as bench_swap's does
fio_write=$(fio_gbs write write)
fio_read=$(fio_gbs read read)
ours=$(build/bench/bench_swap --dir "$dir" --gib "$gib" --block-size "$block" --queue-depth "$depth")
sealed=$(build/bench/bench_swap --dir "$dir" --gib "$gib" --block-size "$block" --queue-depth "$depth" --encrypt)
echo "$ours"
echo "$sealed"
w=$(sed -E 's/.*write ([0-9.]+) GB\/s.*/\1/' <<<"$ours")
r=$(sed -E 's/.*read ([0-9.]+) GB\/s.*/\1/' <<<"$ours")
ew=$(head -1 <<<"$sealed" | sed -E 's/.*write ([0-9.]+) GB\/s.*/\1/')
er=$(head -1 <<<"$sealed" | sed -E 's/.*read ([0-9.]+) GB\/s.*/\1/')
seal=$(tail -1 <<<"$sealed" | sed -E 's/.*seal ([0-9.]+) GB\/s.*/\1/')
open=$(tail -1 <<<"$sealed" | sed -E 's/.*open ([0-9.]+) GB\/s.*/\1/')
echo "| | write GB/s | read GB/s |"
echo "|---|---:|---:|"
echo "| fio | $fio_write | $fio_read |"
echo "| SwapFile | $w | $r |"
echo "| SwapFile, encrypt_swap | $ew | $er |"
echo "| AES-256-GCM in memory (seal, open; one thread) | $seal | $open |"
python3 -c "print('| SwapFile / fio | %.2f | %.2f |' % ($w / $fio_write, $r / $fio_read))"
python3 -c "print('| encrypted / SwapFile | %.2f | %.2f |' % ($ew / $w, $er / $r))"
python3 -c "print('| encrypted / fio | %.2f | %.2f |' % ($ew / $fio_write, $er / $fio_read))"
