#!/usr/bin/env bash
# Priority-10 latency under a priority-5 flood: builds in release mode, starts a private
# redis-server, the APNs sandbox (a delivery log that holds the flood) and one worker on free
# loopback ports, then runs `activitycast bench priority`: K critical match.score updates to a
# key B of a few tokens, idle, then again while the worker fans a routine match.clock update
# (priority 5) out to a key A of N tokens (300,000 by default, so that 100,000 or more are still
# queued for most of B's updates: the goal counts those, --queued); latency = the sandbox's
# receipt of B's push − the XADD.
# Budgets are generous for the measured key (set below unless already set in the environment),
# and the standard spacing is 0 so A's routine update isn't coalesced after its warm-up event.
# Everything it started is stopped by PID on exit, also when it fails.
#
#   bash scripts/bench-priority.sh [--updates 200] [--spacing-ms 10] [--audience 4] [--flood-tokens 300000] [--queued 100000]
#                                  [--workers 1] [--dump FILE]   (other arguments go to the bench)
#   bash scripts/bench-priority.sh --flood-priority 10   # the flood a critical update (B's lane and slices stream)
#   ACTIVITYCAST_BUDGETS_CHANNEL_NO_STORAGE_CAPACITY=4 bash scripts/bench-priority.sh   # budgets.* reach the worker
#   BIN=/tmp/old/activitycast bash scripts/bench-priority.sh   # another build, not rebuilt
#   SANDBOX_BIN=.build/release/activitycast BIN=/tmp/old/activitycast bash scripts/bench-priority.sh   # its worker, this sandbox
#   LOGS=/tmp/prio-logs LOG_LEVEL=info bash scripts/bench-priority.sh   # keep the worker's, sandbox's and redis-server's logs
set -euo pipefail
cd "$(dirname "$0")/.."
workers=1 flood=300000 updates=200 audience=4
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers=$2; shift 2 ;;
    --flood-tokens) flood=$2; shift 2 ;;
    --updates) updates=$2; args+=("$1" "$2"); shift 2 ;;
    --audience) audience=$2; args+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n 2,18p "$0"; exit 0 ;;
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
  if [ -n "${LOGS:-}" ]; then mkdir -p "$LOGS" && cp "$work"/*.log "$LOGS"/ 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

start_private_redis "$work"

# Generous budgets for every audience of the measured key (B's critical updates stay at 10, its
# broadcasts too), no spacing (A's routine update after its warm-up event goes at once, at 5).
export ACTIVITYCAST_BUDGETS_STANDARD_CAPACITY="${ACTIVITYCAST_BUDGETS_STANDARD_CAPACITY:-10000}"
export ACTIVITYCAST_BUDGETS_STANDARD_REFILL_PER_HOUR="${ACTIVITYCAST_BUDGETS_STANDARD_REFILL_PER_HOUR:-100000}"
export ACTIVITYCAST_BUDGETS_STANDARD_SPACING_MS="${ACTIVITYCAST_BUDGETS_STANDARD_SPACING_MS:-0}"
export ACTIVITYCAST_BUDGETS_FREQUENT_CAPACITY="${ACTIVITYCAST_BUDGETS_FREQUENT_CAPACITY:-10000}"
export ACTIVITYCAST_BUDGETS_FREQUENT_REFILL_PER_HOUR="${ACTIVITYCAST_BUDGETS_FREQUENT_REFILL_PER_HOUR:-100000}"
export ACTIVITYCAST_BUDGETS_FREQUENT_SPACING_MS="${ACTIVITYCAST_BUDGETS_FREQUENT_SPACING_MS:-0}"
export ACTIVITYCAST_BUDGETS_CHANNEL_NO_STORAGE_CAPACITY="${ACTIVITYCAST_BUDGETS_CHANNEL_NO_STORAGE_CAPACITY:-10000}"
export ACTIVITYCAST_BUDGETS_CHANNEL_NO_STORAGE_REFILL_PER_HOUR="${ACTIVITYCAST_BUDGETS_CHANNEL_NO_STORAGE_REFILL_PER_HOUR:-100000}"
export ACTIVITYCAST_BUDGETS_CHANNEL_NO_STORAGE_SPACING_MS="${ACTIVITYCAST_BUDGETS_CHANNEL_NO_STORAGE_SPACING_MS:-0}"
# The log keeps the whole flood and B's pushes (idle and flood, warm-up) until the bench reads them.
delivery_log=$((flood + 2 * (updates + 100) * (audience + 2) + 10000))
export ACTIVITYCAST_REDIS_URL="redis://127.0.0.1:$redis_port" ACTIVITYCAST_SANDBOX_DIR="$work/sandbox"
export ACTIVITYCAST_SANDBOX_LISTEN="127.0.0.1:$(free_port)" ACTIVITYCAST_PREFIX="bench" ACTIVITYCAST_LOG_LEVEL="${LOG_LEVEL:-warning}"
# --budget: the sandbox's per-device hourly budget, so B's devices aren't flagged over budget.
"${SANDBOX_BIN:-$bin}" sandbox --threads "${SANDBOX_THREADS:-2}" --delivery-log "$delivery_log" --budget 100000 >"$work/sandbox.log" 2>&1 &
sandbox_pid=$!
pids+=("$sandbox_pid")
wait_for_sandbox "$work/sandbox.log"

echo "machine: $(nproc) cores, $(uname -m), $(redis-server --version | grep -Eo 'v=[0-9.]+'), $(date -u +%Y-%m-%d); build $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $workers worker(s)"
echo "budgets and apns settings from the environment: $(env | grep -E '^ACTIVITYCAST_(BUDGETS|APNS)_' | sort | tr '\n' ' ')"
worker_args=()
for i in $(seq "$workers"); do
  ACTIVITYCAST_OPS_LISTEN="127.0.0.1:$(free_port)" "$bin" worker --consumer "bench-w$i" >"$work/worker-$i.log" 2>&1 &
  pids+=("$!")
  worker_args+=(--worker-pid "$!")
done
"$bin" bench priority --flood-tokens "$flood" --sandbox-pid "$sandbox_pid" --redis-pid "$redis_pid" "${worker_args[@]}" "${args[@]}"
