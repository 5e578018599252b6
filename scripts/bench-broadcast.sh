#!/usr/bin/env bash
# Broadcast latency benchmark: builds in release mode, starts a private redis-server, the APNs
# sandbox and N workers on free loopback ports, then runs `activitycast bench broadcast`: a steady
# stream of match.score events (XADD) over many keys, each one's latency measured to the
# sandbox's receipt of its broadcast. Everything it started is stopped by PID on exit.
#
#   bash scripts/bench-broadcast.sh [--workers N] [--events-per-second R] [--keys K] [--seconds D] [--runs X]
#   (defaults: 1 worker, 2000 events/s, 1000 keys, 10 s, 3 runs; other arguments go to the bench)
#   LOG_LEVEL=info bash scripts/bench-broadcast.sh   # workers log every plan and send (default: warning)
#   BIN=/tmp/old/activitycast bash scripts/bench-broadcast.sh   # another build (e.g. an older commit's), not rebuilt
#   WORKER_BIN=/tmp/old/activitycast bash scripts/bench-broadcast.sh   # only the workers from another build (A/B with one bench)
#   bash scripts/bench-broadcast.sh --cluster 3   # against a private Redis Cluster of 3 primaries (no replicas)
#   ACTIVITYCAST_STREAMS_SHARDS=3 bash scripts/bench-broadcast.sh --cluster 3   # the feed sharded over them
# Each run also prints what Redis did per event (INFO: CPU, round trips, commands, scripts), and the
# end splits Redis's CPU into the publisher's XADD (measured by itself) and the workers' share.
set -euo pipefail
cd "$(dirname "$0")/.."
workers=1 rate=2000 keys=1000 seconds=10 cluster=0
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers=$2; shift 2 ;;
    --events-per-second) rate=$2; args+=("$1" "$2"); shift 2 ;;
    --keys) keys=$2; args+=("$1" "$2"); shift 2 ;;
    --seconds) seconds=$2; args+=("$1" "$2"); shift 2 ;;
    --cluster) cluster=$2; shift 2 ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
source scripts/lib.sh
if [ -n "${BIN:-}" ]; then bin=$BIN; else build_release; fi
work=$(mktemp -d)
pids=()
cleanup() {
  status=$?
  if [ "$status" -ne 0 ]; then
    for f in "$work"/*.log; do [ -s "$f" ] && { echo "--- $(basename "$f") (last lines)"; tail -5 "$f"; }; done
  fi
  stop_pids "${pids[@]}"
  rm -rf "$work"
}
trap cleanup EXIT

start_bench_redis "$work" "$cluster"
redis_pid_args=()
for pid in "${redis_pids[@]}"; do redis_pid_args+=(--redis-pid "$pid"); done

# The sandbox keeps every broadcast of a run (two per event: a channel per APNs environment) until
# the bench has read them after the run.
delivery_log=$(awk -v r="$rate" -v s="$seconds" -v k="$keys" 'BEGIN { n = int(2.5 * (r * s + k)); print (n < 10000 ? 10000 : n) }')
export ACTIVITYCAST_REDIS_URL="$redis_url" ACTIVITYCAST_SANDBOX_DIR="$work/sandbox"
export ACTIVITYCAST_SANDBOX_LISTEN="127.0.0.1:$(free_port)" ACTIVITYCAST_PREFIX="bench" ACTIVITYCAST_LOG_LEVEL="${LOG_LEVEL:-warning}"
"$bin" sandbox --delivery-log "$delivery_log" >"$work/sandbox.log" 2>&1 &
sandbox_pid=$!
pids+=("$sandbox_pid")
wait_for_sandbox "$work/sandbox.log"

worker_args=()
for i in $(seq "$workers"); do
  ACTIVITYCAST_OPS_LISTEN="127.0.0.1:$(free_port)" "${WORKER_BIN:-$bin}" worker --consumer "bench-w$i" >"$work/worker-$i.log" 2>&1 &
  pids+=("$!")
  worker_args+=(--worker-pid "$!")
done

echo "machine: $(nproc) cores, $(uname -m), $(redis-server --version | grep -Eo 'v=[0-9.]+'), $(date -u +%Y-%m-%d); $workers worker(s), log level ${LOG_LEVEL:-warning}; redis: $([ "$cluster" -gt 0 ] && echo "cluster of $cluster primaries" || echo "one node"), feed shards ${ACTIVITYCAST_STREAMS_SHARDS:-1}"
"$bin" bench broadcast --sandbox-pid "$sandbox_pid" "${redis_pid_args[@]}" "${worker_args[@]}" "${args[@]}"
