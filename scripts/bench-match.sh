#!/usr/bin/env bash
# A whole real-shaped match, as devices see it: builds in release mode, starts a private
# redis-server, the APNs sandbox and one worker on free loopback ports, registers devices of
# every audience on one match (per-token standard and frequent tiers, and viewers on the key's
# broadcast channel), then plays 90 minutes of feed on a compressed clock (one match minute per
# 250 ms, the budgets' clock compressed to match): clock ticks every 20 s of match time (three
# per minute, as a feed sends them), each goal published as a moment and, 1 ms later, as the
# score with the same numbers, a card, half time, and full time. Prints, per audience, what each
# device received: pushes, pushes at priority 10, alerts, states it already showed (from the
# sandbox's delivery log), and the budget's p10 count. Everything it started is stopped by PID.
#
#   bash scripts/bench-match.sh                         # this build
#   BIN=/tmp/old/activitycast bash scripts/bench-match.sh   # another build, not rebuilt
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
if [ -n "${BIN:-}" ]; then bin=$BIN; else build_release; fi
work=$(mktemp -d)
pids=()
cleanup() {
  stop_pids "${pids[@]}"
  rm -rf "$work"
}
trap cleanup EXIT

start_private_redis "$work"
scale=240   # one match minute (60,000 ms) per 250 ms
epoch=$(( $(date +%s%3N) ))
export ACTIVITYCAST_REDIS_URL="redis://127.0.0.1:$redis_port" ACTIVITYCAST_SANDBOX_DIR="$work/sandbox"
export ACTIVITYCAST_SANDBOX_LISTEN="127.0.0.1:$(free_port)" ACTIVITYCAST_PREFIX="match" ACTIVITYCAST_LOG_LEVEL="${LOG_LEVEL:-warning}"
# The budgets decide on the match's clock, so an hour of match has an hour's budget; event times
# are hours ahead of Redis's clock by the end (builds that check it are told so).
export ACTIVITYCAST_TEST_BUDGET_CLOCK="${epoch}x${scale}" ACTIVITYCAST_LIMITS_MAX_FUTURE_MS=$((6 * 3600000))
"$bin" sandbox --delivery-log 100000 >"$work/sandbox.log" 2>&1 &
pids+=("$!")
wait_for_sandbox "$work/sandbox.log"
ACTIVITYCAST_OPS_LISTEN=off "$bin" worker --consumer m1 >"$work/worker.log" 2>&1 &
pids+=("$!")
cli() { redis-cli -p "$redis_port" "$@" >/dev/null; }
tok() { printf '%064x' "$1"; }
reg=match:registrations sports=match:feed:sports
match_now() { echo $(( epoch + ($(date +%s%3N) - epoch) * scale )); }

# Devices: 4 standard, 4 frequent (per token), 2 on the channel.
for i in 0 1 2 3; do
  cli XADD $reg '*' type activity.token ts "$epoch" device "s$i" key match:m activity "S$i" token "$(tok $((0x5000 + i)))" env development tier standard
  cli XADD $reg '*' type activity.token ts "$epoch" device "f$i" key match:m activity "F$i" token "$(tok $((0xf000 + i)))" env development tier frequent
done
for i in 0 1; do
  cli XADD $reg '*' type activity.token ts "$epoch" device "c$i" key match:m activity "C$i" token "$(tok $((0xc000 + i)))" env development broadcast true
done
sleep 1
echo "machine: $(nproc) cores, $(date -u +%Y-%m-%d); binary $bin; one worker; 90 match minutes in $((90 * 250 / 1000)) s"

home=0 away=0 events=0
goals=" 12:home 34:away 51:home 77:home 88:away "
for minute in $(seq 1 90); do
  period=first_half; [ "$minute" -gt 45 ] && period=second_half
  for tick in 0 1 2; do
    start=$(date +%s%3N)
    cli XADD $sports '*' type match.clock ts "$(match_now)" match m clock "$minute'" period "$period"; events=$((events + 1))
    if [ "$tick" = 1 ]; then
      team=$(echo "$goals" | grep -o " $minute:[a-z]*" | cut -d: -f2 || true)
      if [ -n "$team" ]; then
        if [ "$team" = home ]; then home=$((home + 1)); else away=$((away + 1)); fi
        t=$(match_now)
        cli XADD $sports '*' type match.moment ts "$t" match m moment goal team "$team" player "P$minute" home_score $home away_score $away clock "$minute'"
        cli XADD $sports '*' type match.score ts "$((t + 1))" match m home_score $home away_score $away clock "$minute'" period "$period"
        events=$((events + 2))
      fi
      if [ "$minute" = 60 ]; then
        cli XADD $sports '*' type match.moment ts "$(match_now)" match m moment red_card team away player "R60" clock "60'"; events=$((events + 1))
      fi
      if [ "$minute" = 45 ]; then
        cli XADD $sports '*' type match.moment ts "$(match_now)" match m moment half_time team home player "-" home_score $home away_score $away clock "45'"; events=$((events + 1))
      fi
    fi
    rest=$(( 83 - ($(date +%s%3N) - start) )); [ "$rest" -gt 0 ] && sleep "0.$(printf '%03d' "$rest")"
  done
done
cli XADD $sports '*' type match.full_time ts "$(match_now)" match m home_score $home away_score $away; events=$((events + 1))
sleep 3
budgets=$(for a in standard frequent channel; do echo "$a $(redis-cli -p "$redis_port" HGET 'match:{match:m}:budget:'$a p10)"; done)
curl -s --http2 --cacert "$work/sandbox/cert.pem" "https://$ACTIVITYCAST_SANDBOX_LISTEN/sandbox/deliveries?limit=100000" >"$work/deliveries.json"
channel=$(redis-cli -p "$redis_port" HGET 'match:{match:m}:channels' development | cut -d' ' -f1)
python3 - "$work/deliveries.json" "$events" "$home-$away" "$channel" "$budgets" <<'EOF'
import json, sys
log = json.load(open(sys.argv[1]))["deliveries"]
events, final, channel = sys.argv[2], sys.argv[3], sys.argv[4]
p10 = dict(line.split() if len(line.split()) == 2 else (line.strip(), "-") for line in sys.argv[5].splitlines() if line.strip())
def tok(n): return "%064x" % n
audiences = [("standard", [tok(0x5000 + i) for i in range(4)]), ("frequent", [tok(0xf000 + i) for i in range(4)]),
             ("channel", [channel] if channel else [])]
print(f"{events} events (final {final}); per device, the median over its audience:")
print(f"{'audience':10} {'pushes':>7} {'at 10':>6} {'alerts':>7} {'repeated states':>16} {'ended':>6} {'budget p10':>11}")
for name, targets in audiences:
    rows = []
    for t in targets:
        mine = sorted((d for d in log if d["target"] == t), key=lambda d: d["sequence"])
        shown, repeats = None, 0
        for d in mine:
            if d["event"] == "update":
                if d.get("contentState") == shown: repeats += 1
                shown = d.get("contentState")
        rows.append((len(mine), sum(d["priority"] == 10 for d in mine), sum(d["alert"] for d in mine), repeats,
                     bool(mine) and mine[-1]["event"] == "end"))
    if not rows: print(f"{name:10} (none)"); continue
    med = lambda i: sorted(r[i] for r in rows)[len(rows) // 2]
    print(f"{name:10} {med(0):7} {med(1):6} {med(2):7} {med(3):16} {str(all(r[4] for r in rows)):>6} {p10.get(name, '-'):>11}")
EOF
