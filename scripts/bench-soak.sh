#!/usr/bin/env bash
# Soak benchmark: builds in release mode, starts a private redis-server, the APNs sandbox and N
# workers on free loopback ports, then runs `activitycast bench soak`: a sustained, realistic feed
# (scores over many matches, clock ticks and moments, matches that end and new ones that start
# with push-to-start, audiences of thousands of tokens with register/unregister churn, follows
# coming and going, transit trips) for N minutes, sampled every 10 s (5 s for runs under 2
# minutes): Redis used_memory, every worker's RSS and peak RSS, broadcast latency p50/p99, the
# consumer group's lag and pending. Prints the samples as a table, writes them as CSV, draws a
# PNG (gnuplot), and ends with PASS or FAIL (exit 1) against: Redis memory flat after warm-up
# (< 1 MB/min), worker VmHWM <= 64 MiB, last p99 <= 1.5x the first after warm-up, nothing lost.
# Everything it started is stopped by PID on exit, also when it fails.
#
#   bash scripts/bench-soak.sh [--minutes 30 | --seconds S] [--workers 2] [--out DIR]
#                              [--events-per-second 1000] [--keys 500] [other `bench soak` options]
#   (defaults: 30 minutes, 2 workers, output in a new /tmp/activitycast-soak.* directory, kept)
#   bash scripts/bench-soak.sh --seconds 60          # the short run CI does (about 2 minutes in all)
#   BIN=/tmp/old/activitycast bash scripts/bench-soak.sh   # another build, not rebuilt
#   LOG_LEVEL=info bash scripts/bench-soak.sh ...    # workers log every plan and send (default: warning)
set -euo pipefail
cd "$(dirname "$0")/.."
workers=2 rate=1000 out="" seconds=1800 keys=500
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers=$2; shift 2 ;;
    --seconds) seconds=$2; args+=("$1" "$2"); shift 2 ;;
    --minutes) seconds=$(( $2 * 60 )); args+=("$1" "$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --events-per-second) rate=$2; args+=("$1" "$2"); shift 2 ;;
    --keys) keys=$2; args+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n 2,19p "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
source scripts/lib.sh
if [ -n "${BIN:-}" ]; then bash scripts/install-deps.sh; bin=$BIN; else build_release; fi
if [ -z "$out" ]; then out=$(mktemp -d /tmp/activitycast-soak.XXXXXX); fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
pids=()
cleanup() {
  status=$?
  # Workers first (they drain against Redis and the sandbox), then the sandbox, then Redis.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[$i]}" 2>/dev/null || true; wait "${pids[$i]}" 2>/dev/null || true; done
  mkdir -p "$out/logs" && cp "$work"/*.log "$out/logs/" 2>/dev/null || true
  if [ "$status" -ne 0 ]; then
    for f in "$out"/logs/*.log; do [ -s "$f" ] && { echo "--- $(basename "$f") (last lines)"; tail -5 "$f"; }; done
  fi
  rm -rf "$work"
  echo "output in $out: $(cd "$out" && ls | tr '\n' ' ')"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_private_redis "$work"

# The bench reads the sandbox's delivery log every half second; the log holds 40 s of broadcasts
# at the feed's rate (two per score) and the audiences' device pushes besides.
delivery_log=$(awk -v r="$rate" 'BEGIN { n = int(80 * r); print (n < 60000 ? 60000 : n) }')
# The streams keep acknowledged entries for a retention (60 s by default): until it has filled,
# Redis grows by design. The warm-up (a third of the run, at most 5 minutes) must cover it, so a
# short run keeps less: half its warm-up (10 s in the 60 s run). ACTIVITYCAST_STREAMS_RETENTION_MS
# set by the caller wins.
warmup=$(( seconds / 3 < 300 ? seconds / 3 : 300 ))
if [ -z "${ACTIVITYCAST_STREAMS_RETENTION_MS:-}" ]; then
  retention=$(( warmup * 500 < 60000 ? warmup * 500 : 60000 ))
  export ACTIVITYCAST_STREAMS_RETENTION_MS=$retention
  # A trim every 10 s saws the feed's length by 10 s of entries (0.5 MB at 1,000/s): in a short
  # run's few samples that is noise on the slope, so it trims every 2 s.
  if [ "$retention" -lt 60000 ] && [ -z "${ACTIVITYCAST_STREAMS_TRIM_INTERVAL_MS:-}" ]; then export ACTIVITYCAST_STREAMS_TRIM_INTERVAL_MS=2000; fi
fi
# Each key's trail (docs/schema.md, "Trails") grows by design until its cap (trace.max_records,
# 20,000 by default: hours of this feed), and an ended key's data stays for its dismissal window
# (the route's dismiss-after, an hour for a match) plus 10 minutes, its trail trace.retention_s
# longer (a day). The soak compresses those windows so that its steady state comes within the run:
# the 30-minute soak caps each trail to fill in 2 minutes (about 1.5 records per event),
# runs the built-in routes with dismiss-after 60 s and trace.retention_s 60 (an ended key is gone
# 12 minutes after its end), and warms up for 15 minutes (the trails' 2, the ended keys' 12, one
# to spare) before it judges Redis memory. A shorter run can't see ended keys' trails expire, so
# it runs without trails (said below). ACTIVITYCAST_TRACE_MAX_RECORDS set by the
# caller wins (and then nothing else here changes).
if [ -z "${ACTIVITYCAST_TRACE_MAX_RECORDS:-}" ]; then
  if [ "$seconds" -lt 1800 ]; then
    export ACTIVITYCAST_TRACE_MAX_RECORDS=0
  else
    export ACTIVITYCAST_TRACE_MAX_RECORDS=$(awk -v r="$rate" -v k="$keys" 'BEGIN { n = int(120 * 1.5 * r / k); print (n < 10 ? 10 : n) }')
    mkdir -p "$work/routes"
    for feed in sports transit; do
      "$bin" routes show "$feed" | sed -E 's/^( *)dismiss-after: [0-9]+/\1dismiss-after: 60/' >"$work/routes/$feed.yaml"
      grep -q 'dismiss-after: 60' "$work/routes/$feed.yaml" || { echo "routes show $feed: no dismiss-after to shorten" >&2; exit 1; }
    done
    export ACTIVITYCAST_ROUTES_SPORTS="$work/routes/sports.yaml" ACTIVITYCAST_ROUTES_TRANSIT="$work/routes/transit.yaml"
    export ACTIVITYCAST_TRACE_RETENTION_S=60
    args+=(--warmup-seconds 900)
  fi
fi
if [ "$ACTIVITYCAST_TRACE_MAX_RECORDS" = 0 ]; then
  echo "trails off (trace.max_records 0): a run under 30 minutes can't see ended keys' trails expire; the 30-minute soak keeps them"
else
  echo "each key's trail keeps ${ACTIVITYCAST_TRACE_MAX_RECORDS} records (trace.max_records), ${ACTIVITYCAST_TRACE_RETENTION_S:-86400} s after its key (trace.retention_s); routes: ${ACTIVITYCAST_ROUTES_SPORTS:-built in}"
fi
echo "streams keep acknowledged entries $(( ACTIVITYCAST_STREAMS_RETENTION_MS / 1000 )) s (streams.retention_ms) and the newest ${ACTIVITYCAST_STREAMS_RETENTION_ENTRIES:-10000}, trimmed every $(( ${ACTIVITYCAST_STREAMS_TRIM_INTERVAL_MS:-10000} / 1000 )) s; warm-up ${warmup} s"
export ACTIVITYCAST_REDIS_URL="redis://127.0.0.1:$redis_port" ACTIVITYCAST_SANDBOX_DIR="$work/sandbox"
export ACTIVITYCAST_SANDBOX_LISTEN="127.0.0.1:$(free_port)" ACTIVITYCAST_PREFIX="soak" ACTIVITYCAST_LOG_LEVEL="${LOG_LEVEL:-warning}"
"$bin" sandbox --delivery-log "$delivery_log" >"$work/sandbox.log" 2>&1 &
sandbox_pid=$!
pids+=("$sandbox_pid")
wait_for_sandbox "$work/sandbox.log"

worker_args=()
for i in $(seq "$workers"); do
  ops="127.0.0.1:$(free_port)"
  ACTIVITYCAST_OPS_LISTEN="$ops" "$bin" worker --consumer "soak-w$i" >"$work/worker-$i.log" 2>&1 &
  pids+=("$!")
  worker_args+=(--worker-pid "$!" --worker-metrics "http://$ops/metrics")
done

echo "machine: $(nproc) cores, $(uname -m), $(redis-server --version | grep -Eo 'v=[0-9.]+'), $(date -u +%Y-%m-%d); build $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $workers worker(s), log level ${LOG_LEVEL:-warning}; output in $out"
status=0
"$bin" bench soak --sandbox-pid "$sandbox_pid" --redis-pid "$redis_pid" "${worker_args[@]}" --out "$out" "${args[@]}" || status=$?
# The plot, whatever the verdict (a failed run is the one worth looking at).
if [ -s "$out/soak.csv" ] && [ -s "$out/soak-summary.gp" ]; then
  if gnuplot -e "csv='$out/soak.csv'; png='$out/soak.png'; summary='$out/soak-summary.gp'" scripts/soak-plot.gp 2>"$work/gnuplot.log"; then
    echo "plot: $out/soak.png"
  else
    echo "gnuplot failed:"; cat "$work/gnuplot.log"; [ "$status" -ne 0 ] || status=1
  fi
fi
exit "$status"
