#!/usr/bin/env bash
# Prometheus, the real thing (Debian's prometheus), scraping a running zero-train:
# - two ranks serve /metrics on PORT and PORT+1; Prometheus scrapes them every second and loads
#   examples/prometheus/deepspeed_rules.yml; every exported metric is read back through its HTTP
#   API, for both ranks;
# - while it trains, a client sends garbage and another connects and never reads: the training
#   goes on, and its losses are the same as a run with no metrics at all.
# ARGS: BIN_DIR SOURCE_DIR
source "$(dirname "$0")/gpt_e2e_common.sh"
command -v prometheus > /dev/null || { echo "FAIL: prometheus is not installed (scripts/bootstrap installs it)"; exit 1; }
port=$((20000 + RANDOM % 20000)) prom_port=$((port + 7))
model=(--layers 2 --heads 2 --channels 64 --max-seq 32 --no-progress --print-every 1)
cfg=$(config 3)

"$bin/zero-run" -n 2 "$bin/zero-train" --config "$cfg" "${model[@]}" --steps 40 > "$tmp/plain.log" 2>&1 ||
  { echo "FAIL: the run without metrics"; cat "$tmp/plain.log"; exit 1; }

"$bin/zero-run" -n 2 "$bin/zero-train" --config "$cfg" "${model[@]}" --steps 1000000 --metrics-port "$port" \
  > "$tmp/train.log" 2>&1 &
job=$!
cat > "$tmp/prometheus.yml" <<YAML
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: ["$src/examples/prometheus/deepspeed_rules.yml"]
scrape_configs:
  - job_name: zerocpp
    static_configs: [{targets: ["127.0.0.1:$port", "127.0.0.1:$((port + 1))"]}]
YAML
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" > "$tmp/prometheus.log" 2>&1 &
prom=$!
trap 'kill $prom $job 2> /dev/null; wait; rm -rf "$tmp"' EXIT

# Bad clients against rank 0 while it trains: garbage, then silence; and one that never reads.
for _ in $(seq 1 100); do grep -q "serves Prometheus metrics at http://127.0.0.1:$port/" "$tmp/train.log" && break; sleep 0.2; done
exec 3<> "/dev/tcp/127.0.0.1/$port" && printf 'GET /metrics HTTP/1.1\r\n\x00\xff garbage\r\n\r\n\x01\x02' >&3
exec 4<> "/dev/tcp/127.0.0.1/$port" && printf 'GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n' >&4  # never read
exec 5<> "/dev/tcp/127.0.0.1/$port"                                                            # never sends

metrics=(step_time_seconds optimizer_step_seconds allgather_seconds_bucket allgather_seconds_count
         reduce_scatter_seconds_bucket grad_norm samples_per_second tokens_per_second loss lr loss_scale
         skipped_steps_total global_step memory_bytes collective_bytes_total swap_bytes_total
         collective_wait_seconds model_flops_per_second)
python3 - "$prom_port" "${metrics[@]}" <<'PY' || fail=1
import json, sys, time, urllib.parse, urllib.request
port, names = sys.argv[1], sys.argv[2:]
def query(q):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)["data"]["result"]
checks = {
    "min(deepspeed:loss) > 0": "a loss",
    "min(deepspeed:step_time_seconds) > 0": "a step time",
    "min(deepspeed:collective_bytes_total{op=\"all_gather\"}) > 0": "bytes all-gathered",
    "min(deepspeed:allgather_seconds_count) > 0": "all-gather latencies",
    "count(deepspeed:memory_bytes{category=\"rss\"} > 1e6) == 2": "an RSS per rank",
    "histogram_quantile(0.99, sum by (le) (rate(deepspeed:allgather_seconds_bucket[1m]))) >= 0": "the p99 of the rule",
}
deadline, missing, failing = time.time() + 60, names, checks
while time.time() < deadline:
    try:
        missing = [n for n in names if {s["metric"].get("rank") for s in query(f"deepspeed:{n}")} != {"0", "1"}]
        failing = {q: what for q, what in checks.items() if not query(q)}
    except OSError:
        pass
    if not missing and not failing:
        break
    time.sleep(1)
if missing:
    print("FAIL: not read back through Prometheus for both ranks:", " ".join(missing)); sys.exit(1)
for q, what in failing.items():
    print(f"FAIL: {what}: {q} is empty"); sys.exit(1)
rules = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/rules", timeout=5))["data"]["groups"]
loaded = sorted(r["name"] for g in rules for r in g["rules"])
if loaded != ["DeepSpeedAllGatherP99", "DeepSpeedGradNormSpike", "DeepSpeedOptimizerStepSlow", "DeepSpeedStepTimeRegression"]:
    print("FAIL: rules loaded:", loaded); sys.exit(1)
print(f"prometheus_e2e: {len(names)} metrics read back for ranks 0 and 1; 4 rules loaded")
PY
exec 3>&- 4>&- 5>&-
for _ in $(seq 1 300); do grep -q '^step    40/' "$tmp/train.log" && break; sleep 0.2; done
kill -INT $job
wait $job
grep -q "stopped by a signal" "$tmp/train.log" || { echo "FAIL: the metrics run did not stop cleanly"; tail "$tmp/train.log"; fail=1; }
steps() { awk '/^step/ { split($2, s, "/"); print s[1], $5 }' "$1"; }
join <(steps "$tmp/plain.log") <(steps "$tmp/train.log") > "$tmp/both"
[[ $(wc -l < "$tmp/both") -eq 40 ]] && awk '$2 != $3 { bad = 1 } END { exit bad }' "$tmp/both" ||
  { echo "FAIL: losses with metrics served (and bad clients) differ from the plain run:"; head "$tmp/both"; fail=1; }
[[ $fail -eq 0 ]] && echo "prometheus_e2e: all passed"
exit $fail
