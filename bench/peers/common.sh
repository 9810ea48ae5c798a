# What bench/peers/run (the GPT) and bench/peers/llama_run (a Hugging Face Llama) share. Its
# functions read what the sourcing script sets:
#   steps warmup rows seq dtypes   timed steps, untimed warm-up steps, rows per rank, row length
#   zero_model zero_data           zero-train's flags for the model and for the data (arrays)
#   zero_extra                     (optional) more zero-train flags, e.g. --activation-checkpointing
#   peer_script peer_model peer_data   the peer's Python script and its flags (arrays)
# and defines zerocpp_run, peer_run and print_tables. Each run leaves its log in $tmp.
python=/usr/bin/python3
if ! "$python" -c "import torch" 2> /dev/null; then
  echo "bench/peers: installing python3-torch (Debian)" >&2
  ${SUDO:-$([[ $(id -u) -eq 0 ]] || echo sudo)} apt-get install -y --no-install-recommends python3-torch >&2
fi
[[ -x build/apps/zero-train ]] || scripts/bootstrap >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1

# DTYPE: fp32, bf16 (its compute path as "auto" chooses it on this CPU), or bf16/fp32 and
# bf16/native: bf16 with that compute path forced (ZERO_BF16_COMPUTE, docs/precision.md).
zerocpp_run() {  # zerocpp_run RANKS STAGE DTYPE → one JSON line like the peers'
  local ranks=$1 stage=$2 dtype=$3 log=$tmp/zerocpp-$2-${3//\//-}-$1.log
  local path=auto
  [[ $dtype == */* ]] && path=${dtype#*/}
  cat > "$tmp/ds.json" <<JSON
{"train_micro_batch_size_per_gpu": $rows, "gradient_clipping": 1.0, "bf16": {"enabled": $([[ $dtype == bf16* ]] && echo true || echo false)},
 "zero_optimization": {"stage": $stage, "stage3_param_persistence_threshold": 0}, "wall_clock_breakdown": true, "steps_per_print": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}}}
JSON
  ZERO_BF16_COMPUTE=$path build/apps/zero-run -n "$ranks" build/apps/zero-train "${zero_model[@]}" "${zero_data[@]}" ${zero_extra[@]+"${zero_extra[@]}"} --seq-len "$seq" --config "$tmp/ds.json" \
    --steps $((steps + warmup)) --print-every 1 --eval-every 0 --sample-every 0 --no-progress > "$log" 2>&1
  # The phases from wall_clock_breakdown's lines (rank means, ms), medians over the timed steps.
  "$python" - "$log" "$warmup" "$stage" "$dtype" "$ranks" $((rows * ranks * seq)) <<'PY'
import json, re, statistics, sys
log, warmup, stage, dtype, ranks, tokens = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
lines = open(log).read().splitlines()
steps = [float(l.split("|")[-1].split()[0]) for l in lines if l.startswith("step")][warmup:]
phases = [dict((m[0], float(m[1])) for m in re.findall(r"\| (\w+): ([0-9.]+)/", l)) for l in lines if "time (ms) per step" in l][warmup:]
median = lambda xs: statistics.median_low(xs)
rss = next(l for l in lines if l.startswith("zero-train: peak RSS"))  # the largest rank's, and rank 0's state
losses = [float(l.split("|")[1].split()[1]) for l in lines if l.startswith("step")]
cpu = next(l for l in lines if l.startswith("zerocpp: CPU"))  # the engine's line: the path matrix work took
compute = "fp32" if dtype == "fp32" or "runs in fp32" in cpu else "bf16"
print(json.dumps({"mode": f"zerocpp stage {stage}", "dtype": dtype, "compute": compute, "ranks": ranks, "median_ms": median(steps),
                  "tokens_per_s": tokens / median(steps) * 1e3, "peak_rss_kib": int(rss.split()[3]),
                  "rss_kib": [int(k) for k in re.search(r"per rank: ([0-9 ]+)\)", rss).group(1).split()],
                  "state_bytes": int(re.search(r"model state ([0-9]+) bytes", rss).group(1)), "first_loss": losses[0], "last_loss": losses[-1],
                  "phases_ms": {k: median([p.get(k, 0.0) for p in phases]) for k in ("fwd", "bwd", "step", "all_reduce")}}))
PY
}

peer_run() {  # peer_run RANKS MODE DTYPE → its JSON line, or one saying why it did not run
  local ranks=$1 mode=$2 dtype=$3 log=$tmp/peer-$2-$3-$1.log
  if build/apps/zero-run -n "$ranks" "$python" "$peer_script" --mode "$mode" --dtype "$dtype" "${peer_model[@]}" \
      "${peer_data[@]}" --seq "$seq" --steps "$steps" --warmup "$warmup" --rows $((rows * ranks)) > "$log" 2>&1; then
    grep '^{' "$log"
  else
    printf '{"mode": "%s", "dtype": "%s", "ranks": %d, "error": "%s"}\n' "$mode" "$dtype" "$ranks" \
      "$(grep -E '^[A-Za-z]*Error' "$log" | head -1 | tr '"' "'")"
  fi
}

print_tables() {  # print_tables RESULTS FLOPS_PER_TOKEN: the markdown tables, machine limits, collectives
  build/bench/bench_limits > "$tmp/limits"
  build/apps/zero-run -n 2 build/bench/bench_comm --quick > "$tmp/comm" 2>&1 || true
  echo "cpu flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o -w 'avx2\|fma\|avx512f\|avx512_bf16\|amx_bf16' | tr '\n' ' ')"
  echo
  "$python" - "$1" "$tmp/limits" "$2" <<'PY'
import json, re, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
limits = open(sys.argv[2]).read()
flops_per_token = float(sys.argv[3])
peak = {dtype: float(re.search(rf"GEMM {dtype} 1024×1024×1024 \| 1 \| ([0-9.]+)", limits).group(1))
        for dtype in ("fp32", "bf16")}  # one thread's GEMM peak in each dtype
for r in rows:
    r.setdefault("compute", r["dtype"])
ran = [r for r in rows if "error" not in r]
peers = [r for r in ran if not r["mode"].startswith("zerocpp")]
print("| run | dtype | ranks | step ms (median) | forward / backward / optimizer ms | tokens/s | model GFLOP/s per rank (MFU) "
      "| peak RSS per rank (MiB) | model state per rank (MB) | loss first → last |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in ran:
    per_rank = r["tokens_per_s"] / r["ranks"] * flops_per_token / 1e9
    p = r.get("phases_ms")
    phases = f"{p['fwd']:.0f} / {p['bwd']:.0f} / {p['step']:.0f}" if p else ""
    print(f"| {r['mode']} | {r['dtype']} | {r['ranks']} | {r['median_ms']:.1f} | {phases} | {r['tokens_per_s']:.0f} "
          f"| {per_rank:.1f} ({per_rank / peak[r['compute']]:.0%}) | {r['peak_rss_kib'] / 1024:.0f} | {r['state_bytes'] / 1e6:.2f} "
          f"| {r['first_loss']:.6f} → {r['last_loss']:.6f} |")
for r in rows:
    if "error" in r:
        print(f"| {r['mode']} | {r['dtype']} | {r['ranks']} | did not run: {r['error']} | | | | | | |")
print()
print(f"MFU: model FLOP/s per rank ({flops_per_token / 1e6:.2f} MFLOP per token) over one thread's GEMM peak in the "
      f"dtype its matrix work ran in ({peak['fp32']:.1f} GFLOP/s fp32, {peak['bf16']:.1f} GFLOP/s bf16, below).")
print()
if peers:  # (none when zerocpp ran alone: PEERS_PEERS="")
    print("| zerocpp tokens/s ÷ peer tokens/s (same dtype and rank count) | " + " | ".join(f"{p['mode']} {p['dtype']} ({p['ranks']})" for p in peers) + " |")
    print("|---|" + "---|" * len(peers))
    for z in (r for r in ran if r["mode"].startswith("zerocpp")):
        cells = [f"{z['tokens_per_s'] / p['tokens_per_s']:.2f}" if (p["ranks"], p["dtype"]) == (z["ranks"], z["dtype"]) else ""
                 for p in peers]
        print(f"| {z['mode']} {z['dtype']} ({z['ranks']}) | " + " | ".join(cells) + " |")
    print()
print("Machine limits (bench_limits):")
print()
print(limits)
PY
  echo "Raw MPI vs zerocpp collectives, 2 ranks (bench_comm --quick):"
  echo
  grep -E '^\|' "$tmp/comm" || cat "$tmp/comm"
}
