#!/usr/bin/env bash
# Runs the whole product on local defaults: installs the system packages, builds, starts a private
# redis-server on a free loopback port (unless ACTIVITYCAST_REDIS_URL points at one), the built-in
# APNs sandbox and two workers in one consumer group; registers devices of every kind (on the
# broadcast channel, per-token, push-to-start followers; a push-started activity's update token is
# registered for the key its start names, read back from the device as an app would), plays a match
# from kick-off to full time (goals, a red card) and a bus trip, and after each event shows what
# every device displays (from the sandbox's device views); ends with `inspect`, a summary of pushes
# by kind and outcome, and whether every device ended on the final state; then stops everything it
# started, by PID.
#
#   bash scripts/run-local.sh                 # the demo, about a minute on a fresh machine
#   DEMO_STEP_SECONDS=3 bash scripts/run-local.sh  # slower, to watch the devices change
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
  stop_pids "${pids[@]}"
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
ops=()
for n in 1 2; do
  # Each worker serves /metrics, /healthz and /readyz on a port of its own.
  ops+=("127.0.0.1:$(free_port)")
  ACTIVITYCAST_OPS_LISTEN="${ops[-1]}" "$bin" worker --consumer "local-$n" 2>"$work/worker-$n.log" &
  pids+=($!)
  worker_pids+=($!)
done
echo "started 2 workers (ops endpoints: http://${ops[0]}/metrics, http://${ops[1]}/metrics)"
sleep 1

pub() { "$bin" publish "$@" >/dev/null; }
tok() { printf "$1%.0s" $(seq 32); }
step="${DEMO_STEP_SECONDS:-1}"
redis_cli_args=(-u "$ACTIVITYCAST_REDIS_URL")
# Who is watching: every kind of device the product serves.
devices=(
  "iphone-1 (iOS 18, started by push, on the channel)=channel:match:4711"
  "iphone-2 (started by push, per-token updates)=token:$(tok c2)"
  "iphone-3 (app-started, per-token)=token:$(tok c3)"
  "ipad-4 (app-started, subscribed to the channel)=channel:match:4711"
  "rider-5 (bus trip, started by push)=token:$(tok e5)"
)
view() {
  if [ -n "${ACTIVITYCAST_SANDBOX_LISTEN:-}" ] && [ -z "${ACTIVITYCAST_APNS_ENDPOINT:-}" ]; then
    python3 scripts/demo_view.py "$@" "$ACTIVITYCAST_SANDBOX_LISTEN" "$ACTIVITYCAST_SANDBOX_DIR/cert.pem" \
      "${redis_cli_args[@]}" "PREFIX=$ACTIVITYCAST_PREFIX" -- "${devices[@]}"
  fi
}
# A push-started activity is registered as a real app registers it: the app reads the started
# activity's attributes (matchId / tripId, the id in its key) and sends its update token for that
# key. Here the start the device received is read back from the sandbox's device view of its
# push-to-start token.
register_started() {  # DEVICE START_TOKEN ACTIVITY UPDATE_TOKEN
  local device=$1 start=$2 activity=$3 token=$4 key="" named=""
  if [ -z "${ACTIVITYCAST_SANDBOX_LISTEN:-}" ] || [ -n "${ACTIVITYCAST_APNS_ENDPOINT:-}" ]; then
    echo "   (no local sandbox to read $device's start back from: its update token is not registered)"
    return 0
  fi
  read -r key named < <(python3 scripts/demo_view.py started-key "$ACTIVITYCAST_SANDBOX_LISTEN" \
    "$ACTIVITYCAST_SANDBOX_DIR/cert.pem" "$start") || true
  if [ -z "$key" ]; then
    echo "   $device: its start names no key, so the app can't register the activity's update token"
    demo_failed=1
    return 0
  fi
  pub activity.token device="$device" key="$key" activity="$activity" token="$token" env=development
  echo "   $device: the started activity reads $named from its attributes and registers its update token for $key"
}
event() {  # publish a feed event, wait a step, show what every device displays
  local what="$1"; shift
  pub "$@"
  sleep "$step"
  echo "-- $what"
  view || true
}

# App backends register devices: push-to-start tokens, follows, settings.
pub device device=iphone-1 env=development tier=frequent broadcast=true
pub start.token device=iphone-1 activity_type=MatchActivityAttributes token=$(tok a1) env=development broadcast=true
pub follow device=iphone-1 target=team:ars
pub follow device=iphone-1 target=team:che   # follows both teams: still one start
pub start.token device=iphone-2 activity_type=MatchActivityAttributes token=$(tok a2) env=development
pub follow device=iphone-2 target=team:che
pub start.token device=rider-5 activity_type=TripActivityAttributes token=$(tok a5) env=development
pub follow device=rider-5 target=route:42

echo
echo "== a match from kick-off to full time, and a bus trip; what each device shows after each event =="
event "match.scheduled: the channel is created and announced before kick-off" \
  match.scheduled match=4711 home=ars away=che kickoff=$(( ($(date +%s) + 60) * 1000 )) competition="Premier League"
# Apps that started their activity themselves register it (one on the channel, one per token).
pub activity.token device=ipad-4 key=match:4711 activity=I4 token=$(tok c4) env=development broadcast=true
pub activity.token device=iphone-3 key=match:4711 activity=P3 token=$(tok c3) env=development
event "match.started: push-to-start to the followers" match.started match=4711 home=ars away=che competition="Premier League"
# iphone-2's started activity hands over its update token (input-push-token), for the key its
# start names.
register_started iphone-2 "$(tok a2)" S2 "$(tok c2)"
event "match.clock" match.clock match=4711 clock="12'" period=first_half
event "match.moment: goal" match.moment match=4711 moment=goal team=home player="B. Saka" clock="15'" home_score=1 away_score=0
event "match.moment: red card" match.moment match=4711 moment=red_card team=away player="C. Palmer" clock="40'"
event "match.moment: half time" match.moment match=4711 moment=half_time clock="45'" home_score=1 away_score=0
event "match.moment: goal" match.moment match=4711 moment=goal team=away player="N. Jackson" clock="61'" home_score=1 away_score=1
event "match.score" match.score match=4711 home_score=2 away_score=1 clock="88'" period=second_half
pub match.score match=4711 home_score=2 away_scroe=0   # a feed bug: a dead letter with its reason, not a crash
event "trip.started: push-to-start to the route's followers" trip.started trip=t-981 route=42 headsign="Central Station"
register_started rider-5 "$(tok a5)" R5 "$(tok e5)"
event "trip.eta" trip.eta trip=t-981 stop=s-17 eta=$(( ($(date +%s) + 240) * 1000 )) delay=60 stop_name="Market Sq"
event "trip.arriving" trip.arriving trip=t-981 stop=s-17 stop_name="Market Sq"
event "match.full_time" match.full_time match=4711 home_score=2 away_score=1
event "trip.ended" trip.ended trip=t-981
sleep 1

echo
echo "== activitycast inspect =="
"$bin" inspect

echo
echo "== summary =="
echo "pushes by kind and outcome:"
if [ -n "${ACTIVITYCAST_SANDBOX_LISTEN:-}" ] && [ -z "${ACTIVITYCAST_APNS_ENDPOINT:-}" ]; then
  python3 scripts/demo_view.py stats "$ACTIVITYCAST_SANDBOX_LISTEN" "$ACTIVITYCAST_SANDBOX_DIR/cert.pem"
fi
python3 scripts/demo_view.py sent "$work"/worker-*.log
final='{"iphone-1 (iOS 18, started by push, on the channel)":{"homeScore":2,"awayScore":1},"iphone-2 (started by push, per-token updates)":{"homeScore":2,"awayScore":1},"iphone-3 (app-started, per-token)":{"homeScore":2,"awayScore":1},"ipad-4 (app-started, subscribed to the channel)":{"homeScore":2,"awayScore":1},"rider-5 (bus trip, started by push)":{"status":"ended"}}'
view --final "$final" || demo_failed=1

echo
echo "== what a Prometheus scrape of local-1 shows (pushes and entries, the non-zero ones) =="
curl -s "http://${ops[0]}/metrics" | grep -E '^activitycast_(pushes_total|stream_entries_total)' | grep -v ' 0$' || echo "(no /metrics answer)"
echo "readiness: $(curl -s "http://${ops[0]}/readyz")"

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
exit "${demo_failed:-0}"
