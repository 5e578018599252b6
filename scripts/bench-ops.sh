#!/usr/bin/env bash
# What the ops endpoints cost: the intake rate (one in-process worker, no sends) and the fan-out
# rate (one worker process sending 100,000 tokens to the sandbox), each with the endpoints off,
# on (listening, the group monitor checking Redis every second) and scraped (/metrics fetched every
# 100 ms: a hundred times Prometheus's usual 15 s), the modes taken in turn in every round; then
# what one scrape costs: 500 scrapes of a sending worker that has fanned out to 1,000 tokens
# (answer time p50/p99, size, and the worker's CPU per scrape against an idle stretch as long).
# Everything it starts is stopped by PID (see bench.sh and bench-fanout.sh), also on failure.
#
#   bash scripts/bench-ops.sh [--rounds 3] [--events 200000] [--tokens 100000]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3 events=200000 tokens=100000
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --events) events=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    -h|--help) sed -n 2,8p "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 64 ;;
  esac
done
source scripts/lib.sh
build_release
export BIN="$bin"
echo "== intake: $events events a run, $rounds rounds of off, on, scraped"
bash scripts/bench.sh --events "$events" --runs "$rounds" --ops off,on,scraped | grep -E '^(run|median|machine)'
echo "== fan-out: $tokens tokens, 1 worker, $rounds rounds of off, on, scraped"
for round in $(seq "$rounds"); do
  for mode in off on scraped; do
    line=$(bash scripts/bench-fanout.sh --tokens "$tokens" --workers 1 --trips none --no-h2load --ops "$mode" | grep -E 'tokens/s' | tail -1)
    echo "round $round, ops $mode: $line"
  done
done
echo "== one scrape: 500 scrapes of a sending worker"
work=$(mktemp -d)
pids=()
cleanup() { stop_pids "${pids[@]}"; rm -rf "$work"; }
trap cleanup EXIT
start_private_redis "$work"
export ACTIVITYCAST_REDIS_URL="redis://127.0.0.1:$redis_port" ACTIVITYCAST_SANDBOX_DIR="$work/sandbox" ACTIVITYCAST_PREFIX=bench
export ACTIVITYCAST_SANDBOX_LISTEN="127.0.0.1:$(free_port)" ACTIVITYCAST_LOG_LEVEL=warning
"$bin" sandbox --threads 1 >"$work/sandbox.log" 2>&1 &
pids+=("$!")
wait_for_sandbox "$work/sandbox.log"
ops_port=$(free_port)
ACTIVITYCAST_OPS_LISTEN="127.0.0.1:$ops_port" "$bin" worker --consumer bench-ops >"$work/worker.log" 2>&1 &
worker_pid=$!
pids+=("$worker_pid")
# Some traffic first, so every series exists: one fan-out of 1,000 tokens.
"$bin" bench fanout --tokens 1000 --trips none --no-h2load --worker-pid "$worker_pid" >/dev/null
python3 - "$ops_port" "$worker_pid" <<'PY'
import sys, time, urllib.request, statistics
port, pid = sys.argv[1], sys.argv[2]
url = f"http://127.0.0.1:{port}/metrics"
def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / 100.0  # utime + stime, clock ticks of 10 ms
body = urllib.request.urlopen(url, timeout=5).read()
c0 = cpu(); t0 = time.monotonic()
times = []
for _ in range(500):
    s = time.monotonic(); urllib.request.urlopen(url, timeout=5).read(); times.append((time.monotonic() - s) * 1000)
    time.sleep(0.002)
c1 = cpu(); span = time.monotonic() - t0
time.sleep(span)
c2 = cpu()
times.sort()
lines = body.count(10)
per = ((c1 - c0) - (c2 - c1)) / 500 * 1000
print(f"scrape: p50 {times[249]:.2f} ms, p99 {times[494]:.2f} ms, max {times[-1]:.2f} ms; {len(body)} bytes, {lines} lines; "
      f"worker CPU {c1 - c0:.2f} s over the scrapes against {c2 - c1:.2f} s idle for as long ({span:.1f} s): about {per:.2f} ms a scrape")
PY
