#!/usr/bin/env bash
# The console's page times and its cost to Redis, at the size issue 42 names: 1,000 live keys
# (each registered, started and scored through a real worker and the sandbox) and 100,000 dead
# letters. Prints, per page, the median and the slowest of --requests GETs (curl, one at a time),
# then Redis's CPU per overview read (INFO commandstats before and after) and what the live
# refresh costs Redis per second per open overview at console.refresh_ms.
#
#   bash scripts/bench-console.sh [--keys 1000] [--dead-letters 100000] [--requests 20]
#
# BIN: the binary to run (default: a release build). Stops what it starts by its PIDs.
set -euo pipefail
cd "$(dirname "$0")/.."
keys=1000 letters=100000 requests=20
while [ $# -gt 0 ]; do
  case "$1" in
    --keys) keys=$2; shift 2 ;;
    --dead-letters) letters=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    -h|--help) sed -n 2,10p "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
source scripts/lib.sh
if [ -n "${BIN:-}" ]; then bin=$BIN; else build_release; fi
work=$(mktemp -d)
pids=()
cleanup() { stop_pids "${pids[@]}"; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

start_private_redis "$work"
cli() { redis-cli -p "$redis_port" "$@"; }
export ACTIVITYCAST_REDIS_URL="redis://127.0.0.1:$redis_port" ACTIVITYCAST_PREFIX=bench ACTIVITYCAST_LOG_LEVEL=warning
export ACTIVITYCAST_SANDBOX_DIR="$work/sandbox" ACTIVITYCAST_SANDBOX_LISTEN="127.0.0.1:$(free_port)"
"$bin" sandbox >"$work/sandbox.out" 2>"$work/sandbox.log" &
pids+=($!)
wait_for_sandbox "$work/sandbox.out"
ops="127.0.0.1:$(free_port)"
ACTIVITYCAST_OPS_LISTEN="$ops" "$bin" worker --consumer bench-1 2>"$work/worker.log" &
worker_pid=$!
pids+=($worker_pid)
sleep 1

# Registrations, then each key's start and a score, as XADDs through redis-cli --pipe.
python3 - "$keys" "$letters" >"$work/seed.txt" <<'EOF'
import sys, time
keys, letters = int(sys.argv[1]), int(sys.argv[2])
now = int(time.time() * 1000) - 60_000
def xadd(stream, fields):
    args = ["XADD", stream, "*"] + [str(x) for kv in fields for x in kv]
    sys.stdout.write("*%d\r\n" % len(args) + "".join("$%d\r\n%s\r\n" % (len(a.encode()), a) for a in args))
for i in range(keys):
    xadd("bench:registrations", [("type", "activity.token"), ("ts", now + i), ("device", f"d-{i}"), ("key", f"match:{i}"),
                                 ("activity", f"A{i}"), ("token", "%064x" % (i + 1)), ("env", "development")])
for i in range(keys):
    xadd("bench:feed:sports", [("type", "match.started"), ("ts", now + 10_000 + i), ("match", i), ("home", "ars"), ("away", "che")])
    xadd("bench:feed:sports", [("type", "match.score"), ("ts", now + 20_000 + i), ("match", i), ("home_score", 1), ("away_score", 0)])
for i in range(letters):
    xadd("bench:deadletter", [("reason", ("unknown field 'away_scroe' for match.score" if i % 10 else f"field 'home' must be an identifier #{i}")),
                              ("stream", "bench:feed:sports"), ("id", f"{now}-{i}"), ("deliveries", 1), ("consumer", "bench"), ("at", now),
                              ("f:type", "match.score"), ("f:match", i % keys)])
EOF
cli --pipe <"$work/seed.txt" >/dev/null
for _ in $(seq 600); do
  lag=$(cli XINFO GROUPS bench:feed:sports 2>/dev/null | awk 'f{print; exit} /^lag$/{f=1}')
  pending=$(cli XPENDING bench:feed:sports activitycast 2>/dev/null | head -1)
  [ "${lag:-1}" = 0 ] && [ "${pending:-1}" = 0 ] && break
  sleep 0.2
done
echo "seeded: $(cli ZCARD bench:keys) live keys, $(cli XLEN bench:deadletter) dead letters, $(cli DBSIZE) Redis keys, $(cli INFO memory | awk -F: '/^used_memory_human/{print $2}' | tr -d '\r') used"

"$bin" console --listen 127.0.0.1:0 --metrics "http://$ops/metrics" >"$work/console.out" 2>"$work/console.log" &
pids+=($!)
for _ in $(seq 200); do grep -q "console listening" "$work/console.out" 2>/dev/null && break; sleep 0.05; done
url=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/console.out" | head -1)

time_page() {  # PATH: median and slowest of the requests, in ms
  local path=$1 t=()
  for _ in $(seq "$requests"); do
    t+=("$(curl -s -o /dev/null -w '%{time_total}' "$url$path")")
  done
  printf '%s\n' "${t[@]}" | sort -n | awk -v p="$path" '{a[NR]=$1} END {printf "  %-44s median %7.1f ms   slowest %7.1f ms\n", p, a[int((NR+1)/2)]*1000, a[NR]*1000}'
}
letter=$(cli XREVRANGE bench:deadletter + - COUNT 1 | head -1)
older=$(cli XREVRANGE bench:deadletter + - COUNT 50000 | grep -E '^[0-9]+-[0-9]+$' | tail -1)
echo "pages ($requests requests each, one at a time; the overview reads Redis at most once per refresh period):"
for path in / /overview/live /keys "/keys?q=match:99" /keys/match:7 /keys/match:7/devices/d-7 /devices/d-7 \
            /deadletters "/deadletters?reason=identifier" "/deadletters?before=$older" "/deadletters/$letter" /budgets "/budgets?sort=tokens&page=5" /channels; do
  time_page "$path"
done

# Redis's CPU for one overview read (the report and the channels, budgets and key counts it
# reads), with the worker stopped: every command Redis counts is then the console's.
kill "$worker_pid"; wait "$worker_pid" 2>/dev/null || true
cli CONFIG RESETSTAT >/dev/null
reads=20
for _ in $(seq "$reads"); do curl -s -o /dev/null "$url/overview/live"; sleep 3.1; done
read -r usec calls < <(cli INFO commandstats | awk -F'[=,]' '/^cmdstat_/ && !/cmdstat_config/ {u+=$4; c+=$2} END {print u, c}')
awk -v u="$usec" -v c="$calls" -v n="$reads" 'BEGIN {
  printf "Redis per overview read: %.0f µs of command time, %.0f commands (%d reads)\n", u / n, c / n, n
  printf "the live refresh costs Redis %.2f ms of CPU per second per console at console.refresh_ms 3000 (however many pages are open)\n", u / n / 3 / 1000
}'
