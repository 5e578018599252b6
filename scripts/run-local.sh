#!/usr/bin/env bash
# Runs ActivityCast end to end on local defaults: installs the system packages, builds, starts a
# private redis-server on a free loopback port (unless ACTIVITYCAST_REDIS_URL points at one) and
# the built-in APNs sandbox, starts two workers in one consumer group, publishes a demo
# (registrations, a match, a bus trip and one malformed entry), shows what the workers planned and
# what `inspect` sees, sends Live Activity pushes through the sandbox and shows what the device
# would display, then stops everything it started, by PID.
#
#   bash scripts/run-local.sh                 # the demo, about a minute on a fresh machine
#   RUN_SECONDS=600 bash scripts/run-local.sh # keep it running for 10 minutes to play with
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
bash scripts/install-deps.sh
swift build --product activitycast 2>&1 | tail -1
bin=$(swift build --show-bin-path)/activitycast

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

if [ -z "${ACTIVITYCAST_REDIS_URL:-}" ]; then
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
  pids+=($!)
  export ACTIVITYCAST_REDIS_URL="redis://127.0.0.1:$port"
  wait_for_redis "$port"
  echo "started redis-server on 127.0.0.1:$port (pid ${pids[0]})"
fi
export ACTIVITYCAST_PREFIX="${ACTIVITYCAST_PREFIX:-demo}"

# The APNs sandbox (unless an APNs endpoint is configured).
if [ -z "${ACTIVITYCAST_APNS_ENDPOINT:-}" ]; then
  sport=$(free_port)
  export ACTIVITYCAST_SANDBOX_DIR="$work/sandbox" ACTIVITYCAST_SANDBOX_LISTEN="127.0.0.1:$sport"
  "$bin" sandbox >"$work/sandbox.out" 2>"$work/sandbox.log" &
  pids+=($!)
  wait_for_sandbox "$work/sandbox.out"
  echo "started the APNs sandbox on 127.0.0.1:$sport (pid ${pids[-1]})"
fi

worker_pids=()
for n in 1 2; do
  "$bin" worker --consumer "local-$n" 2>"$work/worker-$n.log" &
  pids+=($!)
  worker_pids+=($!)
done
echo "started 2 workers"
sleep 1

pub() { "$bin" publish "$@" >/dev/null; }
# App backends: two devices register, follow teams and a route, and hand over tokens.
pub device device=iphone-1 env=development tier=frequent broadcast=true
pub device device=iphone-2 env=development tier=standard broadcast=false
pub follow device=iphone-1 target=team:ars
pub follow device=iphone-2 target=team:che
pub follow device=iphone-2 target=route:42
pub start.token device=iphone-1 activity_type=MatchActivityAttributes token=$(printf 'a1%.0s' $(seq 32))
pub start.token device=iphone-2 activity_type=MatchActivityAttributes token=$(printf 'b2%.0s' $(seq 32))
# The score feed: a match from kick-off to full time.
pub match.started match=4711 home=ars away=che competition="Premier League"
pub activity.token device=iphone-1 key=match:4711 activity=A1 token=$(printf 'c3%.0s' $(seq 32))
pub activity.token device=iphone-2 key=match:4711 activity=B7 token=$(printf 'd4%.0s' $(seq 32))
pub match.clock match=4711 clock="12'" period=first_half
pub match.moment match=4711 moment=goal team=home player="B. Saka" clock="15'" home_score=1 away_score=0
pub match.score match=4711 home_score=1 away_score=0 clock="15'" period=first_half
# The transit feed: a bus on route 42.
pub trip.started trip=t-981 route=42 headsign="Central Station"
pub trip.eta trip=t-981 stop=s-17 eta=$(( ($(date +%s) + 240) * 1000 )) delay=60 stop_name="Market Sq"
pub trip.arriving trip=t-981 stop=s-17 stop_name="Market Sq"
# A feed bug: a misspelt field becomes a dead letter with its reason, not a crash.
pub match.score match=4711 home_score=2 away_scroe=0
pub match.full_time match=4711 home_score=2 away_score=1
sleep 2

echo
echo "== what the workers would send (the worker sends through APNs in a later issue) =="
cat "$work"/worker-*.log | grep ' plan ' | sed -E 's/^[^ ]+ info worker: plan //' | sort || true
echo
echo "== activitycast inspect =="
"$bin" inspect

if [ -n "${ACTIVITYCAST_SANDBOX_LISTEN:-}" ] && [ -z "${ACTIVITYCAST_APNS_ENDPOINT:-}" ]; then
  token=$(printf 'c3%.0s' $(seq 32))
  echo
  echo "== Live Activity pushes through the APNs sandbox (HTTP/2 over TLS, JWT checked) =="
  echo "-- update to an activity token:"
  "$bin" send --token "$token" --event update --content-state '{"homeScore":1,"awayScore":0,"clock":"15'"'"'"}' \
    --alert-title "Goal!" --alert-body "B. Saka (ARS) 15'" || true
  echo "-- a malformed token:"
  "$bin" send --token not-hex --event update || true
  echo "-- a broadcast channel for the match, and a broadcast to it:"
  channel=$("$bin" channels create --policy 0 | sed -n 's/^apns-channel-id: //p')
  "$bin" send --channel "$channel" --event update --content-state '{"homeScore":2,"awayScore":1}' || true
  echo "-- what the device shows (GET /sandbox/devices/<token>):"
  curl -s --http2 --cacert "$ACTIVITYCAST_SANDBOX_DIR/cert.pem" "https://$ACTIVITYCAST_SANDBOX_LISTEN/sandbox/devices/$token" | head -c 1200; echo
fi

if [ -n "${RUN_SECONDS:-}" ]; then
  echo "running for $RUN_SECONDS s; ACTIVITYCAST_REDIS_URL=$ACTIVITYCAST_REDIS_URL ACTIVITYCAST_PREFIX=$ACTIVITYCAST_PREFIX"
  sleep "$RUN_SECONDS"
fi

echo
echo "== stopping workers (SIGTERM: drain, ack, exit 0) =="
for n in 1 2; do
  pid=${worker_pids[$((n - 1))]}
  kill -TERM "$pid"
  if wait "$pid"; then echo "worker local-$n exited 0"; else echo "worker local-$n exited $?"; fi
done
grep -h 'worker stopped' "$work"/worker-*.log | sed -E 's/^[^ ]+ info worker: //'
