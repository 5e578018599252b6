#!/usr/bin/env bash
# The console in a real browser: Debian's chromium, headless, driven over the DevTools protocol
# (scripts/console_browser.py) against a private redis-server, the APNs sandbox and a worker
# after a match — sign in, the overview and its live refresh, a key's page with its devices and
# events, a device's pushes, a dead letter replayed to its stream, an action without the token
# refused, a team name with <script> shown as text, and every page within 1280 pixels. Screenshots
# go to OUT (default: a new directory under /tmp, printed at the end).
#
#   bash scripts/test-console-browser.sh [OUT]
#
# Uses the debug build (swift build --product activitycast) unless BIN names a binary. Stops
# every process it starts by its PID, also when it fails.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
out=${1:-$(mktemp -d /tmp/activitycast-console.XXXXXX)}
mkdir -p "$out"
command -v chromium >/dev/null || { echo "chromium is not installed: bash scripts/install-deps.sh installs it" >&2; exit 1; }
if [ -n "${BIN:-}" ]; then bin=$BIN; else swift build --product activitycast 2>&1 | tail -1; bin=$(swift build --show-bin-path)/activitycast; fi

work=$(mktemp -d)
pids=()
cleanup() {
  status=$?
  stop_pids "${pids[@]}"
  if [ "$status" -ne 0 ]; then
    for f in "$work"/*.log; do [ -s "$f" ] && { echo "--- $(basename "$f") (last lines)"; tail -8 "$f"; }; done
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_private_redis "$work"
export ACTIVITYCAST_REDIS_URL="redis://127.0.0.1:$redis_port" ACTIVITYCAST_PREFIX=demo
export ACTIVITYCAST_SANDBOX_DIR="$work/sandbox" ACTIVITYCAST_SANDBOX_LISTEN="127.0.0.1:$(free_port)"
"$bin" sandbox >"$work/sandbox.out" 2>"$work/sandbox.log" &
pids+=($!)
wait_for_sandbox "$work/sandbox.out"
ops="127.0.0.1:$(free_port)"
ACTIVITYCAST_OPS_LISTEN="$ops" "$bin" worker --consumer browser-1 2>"$work/worker.log" &
pids+=($!)

pub() { "$bin" publish "$@" >/dev/null; }
tok() { printf "$1%.0s" $(seq 32); }
pub activity.token device=ipad-4 key=match:4711 activity=I4 token="$(tok c4)" env=development broadcast=true
pub activity.token device=iphone-3 key=match:4711 activity=P3 token="$(tok c3)" env=development
pub match.started match=4711 home="<script>window.__pwned=1</script>" away=che competition="Premier League"
pub match.moment match=4711 moment=goal team=home player="B. Saka<img src=x onerror=window.__pwned=1>" clock="15'" home_score=1 away_score=0
pub match.score match=4711 home_score=2 away_scroe=0   # a feed bug: a dead letter
pub match.score match=4711 home_score=2 away_score=1 clock="88'"
for _ in $(seq 100); do
  [ "$(redis-cli -p "$redis_port" XLEN demo:deadletter)" -ge 1 ] && break; sleep 0.1
done

token=$(openssl rand -hex 24)
ACTIVITYCAST_CONSOLE_TOKEN="$token" ACTIVITYCAST_CONSOLE_REFRESH_MS=1000 "$bin" console --listen 127.0.0.1:0 --allow-actions \
  --metrics-service "$ops" >"$work/console.out" 2>"$work/console.log" &
pids+=($!)
for _ in $(seq 200); do grep -q "console listening" "$work/console.out" 2>/dev/null && break; sleep 0.05; done
url=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/console.out" | head -1)
[ -n "$url" ] || { echo "the console did not start" >&2; exit 1; }
echo "console at $url; chromium $(chromium --version 2>/dev/null | awk '{print $2}')"
REFRESH_SECONDS=1 FEED_STREAM=demo:feed:sports python3 scripts/console_browser.py "$url" "$token" match:4711 iphone-3 "$out" -p "$redis_port"
