#!/usr/bin/env bash
# Fan-out benchmark: builds in release mode, starts a private redis-server, the APNs sandbox and
# the workers on free loopback ports, then runs `activitycast bench fanout`: an audience of N
# tokens loaded straight into Redis, one event XADDed, timed to the sandbox's last receipt, and
# h2load sending N requests of the same shape through the same connections and streams. For each
# worker count in --workers (fresh worker processes each time) it measures every size in
# --tokens; the first sitting also measures Redis's work per event for each size in --trips.
# Everything it started is stopped by PID on exit, also when it fails.
#
#   bash scripts/bench-fanout.sh [--tokens 100000,1000000] [--workers 1,3] [--trips 1,1000,100000]
#                                [--connections 2] [--streams 1000] [--runs 1] [--no-h2load]
#                                [--ops on|off|scraped]   # the workers' ops endpoints: listening (default),
#                                                         # off, or listening and /metrics fetched every 100 ms
#   (defaults as shown: the workers' own defaults for apns.connections and max_concurrent_streams)
#   ACTIVITYCAST_FANOUT_BATCH=512 ACTIVITYCAST_FANOUT_SLICES_IN_HAND=8 bash scripts/bench-fanout.sh   # fanout.* settings reach the workers
#   BIN=/tmp/old/activitycast bash scripts/bench-fanout.sh   # another build, not rebuilt
#   PERF=/tmp/prof bash scripts/bench-fanout.sh ...   # also `perf record -g -a` of the whole machine during each sitting (DIR/perf-<sitting>.data; report with --comm or --pid)
#   PERF=/tmp/prof PERF_WORKERS=1 bash scripts/bench-fanout.sh ...   # the workers alone, DWARF call graphs (large files: use short runs)
#   LOGS=/tmp/fanout-logs LOG_LEVEL=info bash scripts/bench-fanout.sh ...   # keep the workers', sandbox's and redis-server's logs
#   bash scripts/bench-fanout.sh --cluster 3 ...   # against a private Redis Cluster of 3 primaries (no replicas); Redis's
#                                                  # work is every primary's added up, and shown per primary
set -euo pipefail
cd "$(dirname "$0")/.."
tokens=100000,1000000 worker_counts=1,3 trips=1,1000,100000 connections=2 streams=1000 ops=on cluster=0
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tokens) tokens=$2; shift 2 ;;
    --workers) worker_counts=$2; shift 2 ;;
    --trips) trips=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --streams) streams=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --cluster) cluster=$2; shift 2 ;;
    -h|--help) sed -n 2,22p "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
case "$ops" in on|off|scraped) ;; *) echo "--ops is on, off or scraped" >&2; exit 64 ;; esac
source scripts/lib.sh
if [ -n "${BIN:-}" ]; then bin=$BIN; else build_release; fi
work=$(mktemp -d)
pids=()
worker_pids=()
perf_pid=""
cleanup() {
  status=$?
  if [ "$status" -ne 0 ]; then
    for f in "$work"/*.log; do [ -s "$f" ] && { echo "--- $(basename "$f") (last lines)"; tail -5 "$f"; }; done
  fi
  [ -n "$perf_pid" ] && stop_pids "$perf_pid"
  stop_pids "${worker_pids[@]}" "${pids[@]}"
  if [ -n "${LOGS:-}" ]; then mkdir -p "$LOGS" && cp "$work"/*.log "$LOGS"/ 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

start_bench_redis "$work" "$cluster"
redis_pid_args=()
for pid in "${redis_pids[@]}"; do redis_pid_args+=(--redis-pid "$pid"); done

export ACTIVITYCAST_REDIS_URL="$redis_url" ACTIVITYCAST_SANDBOX_DIR="$work/sandbox"
export ACTIVITYCAST_SANDBOX_LISTEN="127.0.0.1:$(free_port)" ACTIVITYCAST_PREFIX="bench" ACTIVITYCAST_LOG_LEVEL="${LOG_LEVEL:-warning}"
export ACTIVITYCAST_APNS_CONNECTIONS="$connections" ACTIVITYCAST_APNS_MAX_CONCURRENT_STREAMS="$streams"
# h2load opens all its streams at once; the sandbox (like APNs) allows one stream before it has
# seen a provider token unless told otherwise. Our client waits by itself.
"$bin" sandbox --threads "${SANDBOX_THREADS:-2}" --streams-before-auth 1000 --delivery-log 1000 >"$work/sandbox.log" 2>&1 &
sandbox_pid=$!
pids+=("$sandbox_pid")
wait_for_sandbox "$work/sandbox.log"

echo "machine: $(nproc) cores, $(uname -m), $(redis-server --version | grep -Eo 'v=[0-9.]+'), $(h2load --version 2>/dev/null | head -1), $(date -u +%Y-%m-%d); build $(git rev-parse --short HEAD 2>/dev/null || echo '?'); redis: $([ "$cluster" -gt 0 ] && echo "cluster of $cluster primaries" || echo "one node"), feed shards ${ACTIVITYCAST_STREAMS_SHARDS:-1}"
echo "fanout settings from the environment: $(env | grep -E '^ACTIVITYCAST_(FANOUT|WORKER)_' | tr '\n' ' ' || true); ops endpoints: $ops"
sitting=0
IFS=, read -ra counts <<<"$worker_counts"
for n in "${counts[@]}"; do
  sitting=$((sitting + 1))
  worker_pids=()
  worker_args=()
  for i in $(seq "$n"); do
    ops_port=$(free_port)
    listen="127.0.0.1:$ops_port"
    [ "$ops" = off ] && listen=off
    ACTIVITYCAST_OPS_LISTEN="$listen" "$bin" worker --consumer "bench-s$sitting-w$i" >"$work/worker-$sitting-$i.log" 2>&1 &
    worker_args+=(--worker-pid "$!")
    worker_pids+=("$!")
    if [ "$ops" = scraped ]; then
      # A scraper far more eager than Prometheus (every 100 ms): an upper bound on a scrape's cost.
      # One process (no children to outlive it when it is stopped by PID).
      python3 -c 'import sys, time, urllib.request
while True:
    try: urllib.request.urlopen(sys.argv[1], timeout=1).read()
    except Exception: pass
    time.sleep(0.1)' "http://$listen/metrics" &
      worker_pids+=("$!")
    fi
  done
  if [ -n "${PERF:-}" ]; then
    mkdir -p "$PERF"
    perf_scope=(-g -a)
    # PERF_WORKERS=1: the workers alone, with DWARF call graphs (callers of libc and nghttp2 too).
    [ -n "${PERF_WORKERS:-}" ] && perf_scope=(--call-graph dwarf,16384 -p "$(IFS=,; echo "${worker_pids[*]}")")
    perf record "${perf_scope[@]}" -o "$PERF/perf-$sitting.data" >"$work/perf.log" 2>&1 &
    perf_pid=$!
  fi
  sitting_trips=$trips
  [ "$sitting" -gt 1 ] && sitting_trips=none
  "$bin" bench fanout --label "$n worker$([ "$n" -gt 1 ] && echo s)" --tokens "$tokens" --trips "$sitting_trips" \
    --sandbox-pid "$sandbox_pid" "${redis_pid_args[@]}" "${worker_args[@]}" "${args[@]}"
  if [ -n "$perf_pid" ]; then
    kill -INT "$perf_pid" 2>/dev/null || true
    wait "$perf_pid" 2>/dev/null || true
    perf_pid=""
    echo "perf data of the whole machine: $PERF/perf-$sitting.data (perf report -i $PERF/perf-$sitting.data --sort comm,dso,sym --no-children)"
  fi
  stop_pids "${worker_pids[@]}"
  worker_pids=()
done
