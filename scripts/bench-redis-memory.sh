#!/usr/bin/env bash
# Redis sizing: what Redis holds per registered token, per active key and per event per second.
# Builds in release mode, starts a private redis-server, the sandbox and one worker on free
# loopback ports, then measures `used_memory` (INFO memory) before and after each phase, with the
# streams' own memory (`MEMORY USAGE … SAMPLES 0`) taken out:
#   1. --tokens activity-token registrations (each its own device) over --token-keys keys;
#   2. one score event on each of --keys keys with nobody's token (an active key: its state,
#      channels, budgets, fan-out name, index entry);
#   3. a stream entry's size (the feed's entries per byte), times the retention's 60 s: what a
#      steady feed of one event per second keeps in Redis;
#   4. a key's trail (`trace.*`): --trail-events scores on one key, its trail's bytes per event
#      and what a full trail (trace.max_records) holds.
# Everything it started is stopped by PID on exit. docs/operations.md ("Redis memory") has the figures.
#
#   bash scripts/bench-redis-memory.sh [--tokens 50000] [--token-keys 50] [--keys 5000] [--trail-events 2000]
#   BIN=/path/to/activitycast bash scripts/bench-redis-memory.sh   # another build, not rebuilt
set -euo pipefail
cd "$(dirname "$0")/.."
tokens=50000 token_keys=50 keys=5000 trail_events=2000
while [ $# -gt 0 ]; do
  case "$1" in
    --tokens) tokens=$2; shift 2 ;;
    --token-keys) token_keys=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    --trail-events) trail_events=$2; shift 2 ;;
    -h|--help) sed -n 2,17p "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
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

start_private_redis "$work"
cli() { redis-cli -p "$redis_port" "$@"; }
export ACTIVITYCAST_REDIS_URL="redis://127.0.0.1:$redis_port" ACTIVITYCAST_SANDBOX_DIR="$work/sandbox"
export ACTIVITYCAST_SANDBOX_LISTEN="127.0.0.1:$(free_port)" ACTIVITYCAST_PREFIX="mem" ACTIVITYCAST_LOG_LEVEL="warning"
export ACTIVITYCAST_OPS_LISTEN=off
"$bin" sandbox --max-channels 100000 >"$work/sandbox.log" 2>&1 &
pids+=("$!")
wait_for_sandbox "$work/sandbox.log"
"$bin" worker --consumer mem-w1 >"$work/worker.log" 2>&1 &
pids+=("$!")

used() { cli info memory | awk -F: '/^used_memory:/ { gsub("\r", ""); print $2 }'; }
stream_bytes() { local b; b=$(cli memory usage "$1" samples 0); echo "${b:-0}"; }
# Waits until the group has nothing undelivered or pending on STREAM (up to 120 s).
drained() {
  for _ in $(seq 1200); do
    local state
    state=$(cli xinfo groups "$1" 2>/dev/null | awk 'prev == "pending" { p = $1 } prev == "lag" { l = $1 } { prev = $1 } END { print p + 0, l + 0 }')
    [ "$state" = "0 0" ] && return 0
    sleep 0.1
  done
  echo "the worker did not drain $1" >&2; return 1
}
settle() { sleep 1; cli memory purge >/dev/null 2>&1 || true; sleep 0.5; }
reg=mem:registrations sports=mem:feed:sports
for _ in $(seq 100); do cli exists "$sports" | grep -q 1 && break; sleep 0.1; done
settle
m0=$(used); r0=$(stream_bytes "$reg"); s0=$(stream_bytes "$sports")

# 1. Registered tokens: one activity token each, each its own device, over token_keys keys.
ts=$(( $(date +%s) * 1000 - 3600000 ))
awk -v n="$tokens" -v k="$token_keys" -v ts="$ts" -v s="$reg" 'BEGIN {
  for (i = 0; i < n; i++) printf "XADD %s * type activity.token ts %.0f device dev%d key match:t%d activity a%d token %064d env development\n", s, ts + i, i, i % k, i, i
}' | cli --pipe >/dev/null
drained "$reg"
settle
m1=$(used); r1=$(stream_bytes "$reg"); s1=$(stream_bytes "$sports")
per_token=$(( (m1 - m0 - (r1 - r0) - (s1 - s0)) / tokens ))

# 2. Active keys: one score each, nobody's token (state, channels, budgets, fan-out name, index).
awk -v n="$keys" -v ts="$ts" -v s="$sports" 'BEGIN {
  for (i = 0; i < n; i++) printf "XADD %s * type match.score ts %.0f match k%d home_score 1 away_score 0 period first_half\n", s, ts + 3600000 - n + i, i
}' | cli --pipe >/dev/null
drained "$sports"
settle
m2=$(used); r2=$(stream_bytes "$reg"); s2=$(stream_bytes "$sports")
per_key=$(( (m2 - m1 - (r2 - r1) - (s2 - s1)) / keys ))
len=$(cli xlen "$sports")
per_entry=$(( s2 / (len > 0 ? len : 1) ))
fans=$(cli --scan --pattern 'mem:*:fan:*' | wc -l)

# 4. A key's trail: scores on one key, one a second apart in event time (nobody's token).
awk -v n="$trail_events" -v ts="$ts" -v s="$sports" 'BEGIN {
  for (i = 1; i <= n; i++) printf "XADD %s * type match.score ts %.0f match trail home_score %d away_score 0 period first_half\n", s, ts + i * 1000, i
}' | cli --pipe >/dev/null
drained "$sports"
trail='mem:{match:trail}:trail'
trail_len=$(cli xlen "$trail"); trail_bytes=$(stream_bytes "$trail")
max_records=${ACTIVITYCAST_TRACE_MAX_RECORDS:-20000}

echo "machine: $(nproc) cores, $(redis-server --version | grep -Eo 'v=[0-9.]+'), $(date -u +%Y-%m-%d)"
echo "Redis used_memory: start $m0 B; after $tokens tokens $m1 B; after $keys keys $m2 B"
echo "per registered token (tokens, meta, device hash, index): $per_token B"
echo "per active key (state, 2 channels, budgets, gen, index; no tokens): $per_key B"
echo "per stream entry (match.score, $len entries kept): $per_entry B; per event/s at the default retention (60 s): $(( per_entry * 60 )) B"
echo "fan-out records left after the events: $fans"
echo "trail of one key after $trail_events events: $trail_len records, $trail_bytes B: $(( trail_bytes / trail_events )) B per event, $(( trail_bytes / (trail_len > 0 ? trail_len : 1) )) B per record; full (trace.max_records $max_records): about $(( trail_bytes / (trail_len > 0 ? trail_len : 1) * max_records )) B"
