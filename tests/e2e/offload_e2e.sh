#!/usr/bin/env bash
# NVMe offload as a user meets it, through zero-train:
# - resume anywhere: saved at 2 ranks stage 3 with the optimizer and the parameters on NVMe,
#   resumed at 1 rank stage 2 in memory and at 4 ranks stage 3 on NVMe with the swap encrypted
#   (encrypt_swap), and saved in memory at 4 ranks, resumed on NVMe at 2: the next 10 losses
#   match the uninterrupted run within 1e-5;
# - Ctrl-C: SIGINT stops the run cleanly, its swap folder removed;
# - kill -9 of an encrypted run mid-run leaves its swap folder behind and no file; the next run on
#   the same nvme_path removes it, trains, and leaves nothing.
source "$(dirname "$0")/gpt_e2e_common.sh"
nvme=$tmp/nvme
mkdir -p "$nvme"
nvme_config() {  # nvme_config STAGE -> path: config STAGE with the optimizer (and at 3 the parameters) on NVMe
  local param=""
  [[ $1 == 3 ]] && param=", \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"$nvme\"}"
  sed "s|\"stage3_param_persistence_threshold\": 0|&, \"sub_group_size\": 3000, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$nvme\", \"pipeline_read\": true, \"pipeline_write\": true}$param|" \
    "$(config "$1")" > "$tmp/nvme$1.json"
  echo "$tmp/nvme$1.json"
}
encrypted() {  # encrypted CONFIG -> path: the same with "zerocpp": {"encrypt_swap": true}
  sed '0,/{/s//{"zerocpp": {"encrypt_swap": true}, /' "$1" > "${1%.json}e.json"
  echo "${1%.json}e.json"
}
train() {  # train RANKS CONFIG LOG [zero-train flags...]
  local ranks=$1 cfg=$2 log=$3
  shift 3
  "$bin/zero-run" -n "$ranks" "$bin/zero-train" --config "$cfg" --text "$src/README.md" \
    --layers 2 --heads 2 --channels 32 --max-seq 16 --no-progress "$@" > "$log" 2>&1
}
steps() { awk '/^step/ { split($2, s, "/"); print s[1], $5 }' "$1"; }
same_losses() {  # same_losses EXPECTED GOT: same steps, losses within 1e-5 relative
  [[ $(wc -l < "$1") -gt 0 ]] && join "$1" "$2" | awk -v n="$(wc -l < "$1")" '
    { d = $2 - $3; if (d < 0) d = -d; if (d > 1e-5 * $2) bad = 1; count++ } END { exit bad || count != n }'
}
swap_folders() { find "$nvme" -maxdepth 1 -name 'zerocpp-swap-*' | wc -l; }

train 4 "$(config 3)" "$tmp/straight.log" --steps 20 || { echo "FAIL straight run"; cat "$tmp/straight.log"; exit 1; }
steps "$tmp/straight.log" | awk '$1 > 10' > "$tmp/expected"
train 2 "$(nvme_config 3)" "$tmp/first.log" --steps 10 --save-dir "$tmp/at2" ||
  { echo "FAIL first NVMe run"; cat "$tmp/first.log"; exit 1; }
train 4 "$(config 3)" "$tmp/first4.log" --steps 10 --save-dir "$tmp/at4"
for case in "1 $(config 2) at2" "4 $(encrypted "$(nvme_config 3)") at2" "2 $(nvme_config 3) at4"; do
  set -- $case
  rm -rf "$tmp/copy" && cp -r "$tmp/$3" "$tmp/copy"
  train "$1" "$2" "$tmp/resumed.log" --steps 20 --save-dir "$tmp/copy" --resume
  steps "$tmp/resumed.log" > "$tmp/got"
  what="saved $3 ($( [[ $3 == at2 ]] && echo "2 ranks, NVMe" || echo "4 ranks, memory")), resumed at $1 rank(s) with $(basename "$2")"
  if grep -q "resumed from $tmp/copy at step 10" "$tmp/resumed.log" && same_losses "$tmp/expected" "$tmp/got"; then
    echo "ok   $what: steps 11-20 match"
  else
    echo "FAIL $what"; paste "$tmp/expected" "$tmp/got"; tail -5 "$tmp/resumed.log"; fail=1
  fi
done
[[ $(swap_folders) == 0 ]] && echo "ok   no swap folder outlived its run" || { echo "FAIL swap folders left"; ls "$nvme"; fail=1; }

# Ctrl-C: the run stops at the end of its step, and its swap folder goes with it.
train 1 "$(nvme_config 3)" "$tmp/int.log" --steps 100000 &
for _ in $(seq 100); do grep -q "^step" "$tmp/int.log" 2> /dev/null && break; sleep 0.2; done
pkill -INT -f "^$bin/zero-train --config $tmp/nvme3.json"
wait
if grep -q "stopped by a signal" "$tmp/int.log" && [[ $(swap_folders) == 0 ]]; then
  echo "ok   Ctrl-C: stopped cleanly, swap folder removed"
else
  echo "FAIL Ctrl-C"; tail -3 "$tmp/int.log"; ls "$nvme"; fail=1
fi

# kill -9: nothing of the swap (weights, optimizer state; here encrypted too) is left on disk: its
# files' names went when they were opened (the seed's security note). The empty folder stays; the next run removes it
# (its process is gone) and leaves nothing.
train 1 "$(encrypted "$(nvme_config 3)")" "$tmp/killed.log" --steps 100000 &
for _ in $(seq 100); do grep -q "^step" "$tmp/killed.log" 2> /dev/null && break; sleep 0.2; done
pkill -KILL -f "^$bin/zero-train --config $tmp/nvme3e.json"
wait
files_left=$(find "$nvme" -type f | wc -l)
[[ $files_left == 0 ]] && echo "ok   kill -9 left no swap file on disk" ||
  { echo "FAIL kill -9 left $files_left file(s):"; find "$nvme" -type f; fail=1; }
left=$(swap_folders)
train 1 "$(nvme_config 3)" "$tmp/next.log" --steps 2
if [[ $left -ge 1 ]] && grep -q "^step     2/2" "$tmp/next.log" && [[ $(swap_folders) == 0 ]]; then
  echo "ok   kill -9 left $left swap folder(s); the next run removed them and left nothing"
else
  echo "FAIL after kill -9: $left folder(s) left, then"; tail -3 "$tmp/next.log"; ls "$nvme"; fail=1
fi
exit $fail
