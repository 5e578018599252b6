#!/usr/bin/env bash
# The deployment, end to end on this machine: builds the image (scripts/build-image.sh), checks
# every manifest under Deploy/k8s against the Kubernetes schemas (kubernetes-validate, offline)
# and the KEDA ScaledObject against KEDA's documented fields (scripts/check-keda.py, with its
# self-test), then `podman kube play`s Redis, the sandbox and the worker Deployment (2 replicas)
# from those manifests (through scripts/k8s-podman-overlay.py: host network on 127.0.0.1 only),
# plays a match and a bus trip to devices of every kind, and checks:
#   - every device ends on the final state (the sandbox's device views);
#   - the workers stop on SIGTERM: drain logged, exit code 0, and how long it took;
#   - nothing pending, lagging or dead-lettered (`activitycast inspect --json`, run from the image);
#   - `podman kube down` leaves no pod, container or secret behind.
# Everything it starts is removed on exit, also on failure (pods and secrets by name, background
# processes by PID). A throwaway APNs key is made for the run (Deploy/k8s/local/make-secrets.sh).
#
#   bash scripts/test-deploy.sh          # about 20 s after the release build
#   BIN=/path/to/activitycast bash scripts/test-deploy.sh   # image that binary instead of building
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
repo=$(pwd)
t_start=$(date +%s.%N)
now() { date +%s.%N; }
took() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(now)"; }
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
pm() { $sudo env CONTAINERS_CONF="$repo/Deploy/podman/containers.conf" podman "$@"; }
# For background use: `( pm_exec … ) &` makes $! podman's own PID (or sudo's, which passes the
# signal on), so the trap's kill reaches it.
pm_exec() { exec $sudo env CONTAINERS_CONF="$repo/Deploy/podman/containers.conf" podman "$@"; }
image=${IMAGE:-localhost/activitycast:dev}
redis_image=localhost/activitycast-redis:dev
suffix="-t$$"
work=$(mktemp -d)
bg_pids=()
fail() { echo "test-deploy: FAILED: $*" >&2; exit 1; }

cleanup() {
  local status=$?
  set +e
  for pid in "${bg_pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${bg_pids[@]}"; do wait "$pid" 2>/dev/null; done
  # Only this run's pods and secrets: their names end in $suffix.
  for pod in $(pm pod ps --filter "name=$suffix" --format '{{.Name}}' 2>/dev/null); do
    [[ "$pod" == *"$suffix"* ]] && pm pod rm -f --time 0 "$pod" >/dev/null 2>&1
  done
  for secret in $(pm secret ls --format '{{.Name}}' 2>/dev/null); do
    [[ "$secret" == *"$suffix" ]] && pm secret rm "$secret" >/dev/null 2>&1
  done
  # kube play keeps each Secret's and ConfigMap's files in a named volume that kube down leaves.
  for volume in $(pm volume ls --format '{{.Name}}' 2>/dev/null); do
    [[ "$volume" == *"$suffix" ]] && pm volume rm -f "$volume" >/dev/null 2>&1
  done
  if [ "$status" -ne 0 ] && [ -d "$work" ]; then
    for log in "$work"/*.log; do [ -f "$log" ] && { echo "--- $(basename "$log") (last 20 lines)"; tail -20 "$log"; }; done >&2
  fi
  $sudo rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== image"
t=$(now)
bash scripts/build-image.sh | tee "$work/build.out"
t_image=$(took "$t")
bin=${BIN:-$(swift build -c release --show-bin-path)/activitycast}

# kube play needs catatonit for its pods' infra containers (podman builds the pause image from it).
bash scripts/install-deps.sh catatonit

echo "== manifests"
venv=.build/deploy-venv
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  python3 -m venv "$venv" 2>/dev/null || { bash scripts/install-deps.sh python3-venv; rm -rf "$venv"; /usr/bin/python3 -m venv "$venv"; }
  "$venv/bin/pip" install --quiet --disable-pip-version-check kubernetes-validate==1.37.0 PyYAML
fi
py="$venv/bin/python"
bash Deploy/k8s/local/make-secrets.sh >"$work/secrets.yaml"
# The schemas ship inside the package: no network needed (or used) from here on.
"$venv/bin/kubernetes-validate" --strict --quiet Deploy/k8s/config.yaml Deploy/k8s/worker.yaml Deploy/k8s/console.yaml \
  Deploy/k8s/local/config.yaml Deploy/k8s/local/redis.yaml Deploy/k8s/local/sandbox.yaml "$work/secrets.yaml" \
  Deploy/k8s/cluster/config.yaml Deploy/k8s/cluster/redis-cluster.yaml
"$py" scripts/check-keda.py Deploy/k8s/keda-scaledobject.yaml --worker-config Deploy/activitycast.yaml \
  --deployment Deploy/k8s/worker.yaml --self-test
# On a Redis Cluster: redis-cluster-streams triggers, one per shard of every feed (streams.shards in the ConfigMap).
"$py" scripts/check-keda.py Deploy/k8s/cluster/keda-scaledobject.yaml --worker-config Deploy/activitycast.yaml \
  --config-map Deploy/k8s/cluster/config.yaml --deployment Deploy/k8s/worker.yaml --self-test
"$py" scripts/check-compose.py Deploy/compose.yaml Deploy/compose-cluster.yaml

echo "== redis image (Debian's redis-server, for the local Redis pod)"
t=$(now)
$sudo mmdebstrap --quiet --variant=extract --include=redis-server bookworm "$work/redis-root" \
  "deb http://deb.debian.org/debian bookworm main" "deb http://deb.debian.org/debian-security bookworm-security main"
(cd "$work/redis-root" && $sudo rm -rf usr/share usr/sbin sbin var/cache var/lib/apt usr/lib/x86_64-linux-gnu/perl* \
  usr/lib/x86_64-linux-gnu/libperl* usr/lib/x86_64-linux-gnu/gconv \
  && $sudo find usr/bin bin -mindepth 1 ! -name 'redis-*' -delete)
$sudo tar --numeric-owner -C "$work/redis-root" -cf "$work/redis.tar" .
old_redis=$(pm image inspect --format '{{.Id}}' "$redis_image" 2>/dev/null || true)
pm import --quiet --change "ENV PATH=/usr/local/bin:/usr/bin:/bin" "$work/redis.tar" "$redis_image" >/dev/null
[ -z "$old_redis" ] || [ "$old_redis" = "$(pm image inspect --format '{{.Id}}' "$redis_image")" ] || pm rmi "$old_redis" >/dev/null 2>&1 || true
echo "built $redis_image in $(took "$t") s"

echo "== podman kube play"
redis_port=$(free_port)
sandbox_port=$(free_port)
"$py" scripts/k8s-podman-overlay.py --suffix="$suffix" --redis-port "$redis_port" --sandbox-port "$sandbox_port" \
  --redis-image "$redis_image" "$work/secrets.yaml" Deploy/k8s/local/config.yaml Deploy/k8s/local/redis.yaml \
  Deploy/k8s/local/sandbox.yaml Deploy/k8s/worker.yaml >"$work/play.yaml"
"$venv/bin/kubernetes-validate" --strict --quiet "$work/play.yaml"
# The sandbox's certificate, for reading its device views from here.
"$py" -c 'import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("activitycast-apns-ca"): print(d["data"]["ca.crt"], end="")' \
  "$work/play.yaml" >"$work/ca.crt"
(pm_exec events --format json --filter event=died) >"$work/events.json" 2>"$work/events.err" &
bg_pids+=($!)
t=$(now)
pm kube play "$work/play.yaml" >"$work/play.out"
t_play=$(took "$t")
pod_of() { echo "$1$suffix-pod-$2"; }
workers=("$(pod_of activitycast-worker 0)-worker" "$(pod_of activitycast-worker 1)-worker")
for c in "$(pod_of activitycast-redis 0)-redis" "$(pod_of activitycast-sandbox 0)-sandbox" "${workers[@]}"; do
  (pm_exec logs -f "$c") >"$work/$c.log" 2>&1 &
  bg_pids+=($!)
done
echo "pods: $(pm pod ps --filter "name=$suffix" --format '{{.Name}}' | sort | tr '\n' ' ')(kube play ${t_play} s)"

# Ready: Redis answers, the sandbox serves TLS with the generated certificate, every worker's
# /readyz says ready (each found its ops port, a free one, and logged it).
wait_until() {  # SECONDS DESCRIPTION COMMAND...
  local deadline=$(( $(date +%s) + $1 )) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "$what"
    sleep 0.2
  done
}
wait_until 30 "Redis did not answer on 127.0.0.1:$redis_port" redis-cli -p "$redis_port" ping
wait_until 30 "the sandbox did not answer on 127.0.0.1:$sandbox_port" \
  curl -sf --http2 --cacert "$work/ca.crt" "https://127.0.0.1:$sandbox_port/sandbox/stats"
ops=()
for w in "${workers[@]}"; do
  wait_until 30 "$w logged no ops address" grep -q '"ops endpoints listening"' "$work/$w.log"
  ops+=("$(grep -o '"listen":"127.0.0.1:[0-9]*"' "$work/$w.log" | head -1 | cut -d'"' -f4)")
done
for o in "${ops[@]}"; do
  wait_until 30 "a worker's /readyz ($o) did not become ready" curl -sf "http://$o/readyz"
  [ "$(curl -s "http://$o/healthz")" = "ok" ] || fail "/healthz on $o: $(curl -s "http://$o/healthz")"
done
t_ready=$(took "$t")
echo "ready after ${t_ready} s: Redis 127.0.0.1:$redis_port, sandbox 127.0.0.1:$sandbox_port, worker ops ${ops[*]}"

echo "== a match and a bus trip"
export ACTIVITYCAST_REDIS_URL="redis://127.0.0.1:$redis_port"
pub() { "$bin" publish "$@" >/dev/null; }
tok() { printf "$1%.0s" $(seq 32); }
drained() {  # every group of every stream: nothing pending, nothing lagging
  "$bin" inspect --json | "$py" -c 'import json, sys
r = json.load(sys.stdin)
groups = [g for s in r["streams"] for g in s.get("groups") or []]
sys.exit(0 if groups and all(g["pending"] == 0 and g["lag"] == 0 for g in groups) else 1)'
}
step() { wait_until 30 "the workers did not drain the streams" drained; }
t=$(now)
pub device device=iphone-1 env=development tier=frequent broadcast=true
pub start.token device=iphone-1 activity_type=MatchActivityAttributes token="$(tok a1)" env=development broadcast=true
pub follow device=iphone-1 target=team:ars
pub follow device=iphone-1 target=team:che
pub start.token device=iphone-2 activity_type=MatchActivityAttributes token="$(tok a2)" env=development
pub follow device=iphone-2 target=team:che
pub start.token device=rider-5 activity_type=TripActivityAttributes token="$(tok a5)" env=development
pub follow device=rider-5 target=route:42
step
pub match.scheduled match=4711 home=ars away=che kickoff=$(( ($(date +%s) + 60) * 1000 )) competition="Premier League"
step
pub activity.token device=ipad-4 key=match:4711 activity=I4 token="$(tok c4)" env=development broadcast=true
pub activity.token device=iphone-3 key=match:4711 activity=P3 token="$(tok c3)" env=development
step
pub match.started match=4711 home=ars away=che competition="Premier League"
step
pub activity.token device=iphone-2 key=match:4711 activity=S2 token="$(tok c2)" env=development
step
pub match.clock match=4711 clock="12'" period=first_half
pub match.moment match=4711 moment=goal team=home player="B. Saka" clock="15'" home_score=1 away_score=0
pub match.moment match=4711 moment=red_card team=away player="C. Palmer" clock="40'"
pub match.moment match=4711 moment=goal team=away player="N. Jackson" clock="61'" home_score=1 away_score=1
pub match.score match=4711 home_score=2 away_score=1 clock="88'" period=second_half
pub trip.started trip=t-981 route=42 headsign="Central Station"
step
pub activity.token device=rider-5 key=trip:t-981 activity=R5 token="$(tok e5)" env=development
step
pub trip.eta trip=t-981 stop=s-17 eta=$(( ($(date +%s) + 240) * 1000 )) delay=60 stop_name="Market Sq"
pub trip.arriving trip=t-981 stop=s-17 stop_name="Market Sq"
pub match.full_time match=4711 home_score=2 away_score=1
pub trip.ended trip=t-981
step
devices=(
  "iphone-1 (started by push, on the channel)=channel:match:4711"
  "iphone-2 (started by push, per-token)=token:$(tok c2)"
  "iphone-3 (app-started, per-token)=token:$(tok c3)"
  "ipad-4 (app-started, on the channel)=channel:match:4711"
  "rider-5 (bus trip, started by push)=token:$(tok e5)"
)
final='{"iphone-1 (started by push, on the channel)":{"homeScore":2,"awayScore":1},"iphone-2 (started by push, per-token)":{"homeScore":2,"awayScore":1},"iphone-3 (app-started, per-token)":{"homeScore":2,"awayScore":1},"ipad-4 (app-started, on the channel)":{"homeScore":2,"awayScore":1},"rider-5 (bus trip, started by push)":{"status":"ended"}}'
view_ok=0
for _ in $(seq 50); do
  python3 scripts/demo_view.py --final "$final" "127.0.0.1:$sandbox_port" "$work/ca.crt" -p "$redis_port" PREFIX=ac -- "${devices[@]}" \
    >"$work/view.out" 2>&1 && { view_ok=1; break; }
  sleep 0.2
done
cat "$work/view.out"
[ "$view_ok" = 1 ] || fail "not every device ended on the final state"
t_scenario=$(took "$t")
pushes=0
for o in "${ops[@]}"; do
  n=$(curl -s "http://$o/metrics" | awk '/^activitycast_pushes_total\{.*outcome="ok"/ {s += $NF} END {print s + 0}')
  pushes=$((pushes + n))
done
[ "$pushes" -gt 0 ] || fail "the workers' /metrics count no successful push"
echo "scenario ${t_scenario} s; the workers' /metrics: $pushes pushes answered ok"
# Each worker's resident memory now and at its peak, beside the manifest's limit.
for w in "${workers[@]}"; do
  pid=$(pm inspect --format '{{.State.Pid}}' "$w")
  echo "$w: $($sudo grep -E '^Vm(HWM|RSS)' "/proc/$pid/status" | tr -s ' \t' ' ' | tr '\n' ' ')(limit $(( $(pm inspect --format '{{.HostConfig.Memory}}' "$w") / 1048576 )) MiB)"
done

echo "== stop the workers (SIGTERM) and check what they left"
# `podman kube down` in podman before 5.1 kills the containers at once (SIGKILL, exit 137: podman
# issues 19135, 21767, fixed by pull request 22398), unlike a kubelet. `podman pod stop` sends the
# image's STOPSIGNAL (SIGTERM) and waits the grace period, as a kubelet does; kube down then only
# removes. Each worker pod is stopped at once, in parallel.
grace=$("$py" -c 'import sys, yaml
d = next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d["kind"] == "Deployment")
print(d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"])' Deploy/k8s/worker.yaml)
t_stop=$(now)
stop_pids=()
for i in 0 1; do
  pm pod stop --time "$grace" "$(pod_of activitycast-worker "$i")" >/dev/null &
  stop_pids+=($!)
done
for pid in "${stop_pids[@]}"; do wait "$pid"; done
t_stopped=$(took "$t_stop")
for w in "${workers[@]}"; do
  code=$(pm inspect --format '{{.State.ExitCode}}' "$w")
  [ "$code" = 0 ] || fail "$w exited $code"
  grep -q '"msg":"signal received: draining","signal":"15"' "$work/$w.log" || fail "$w did not log SIGTERM"
  grep -q '"msg":"worker stopped"' "$work/$w.log" || fail "$w did not log the end of its drain"
done
sleep 0.5  # the died events reach the events file
"$py" - "$work/events.json" "$t_stop" "$work" "${workers[@]}" <<'EOF'
import datetime, json, sys
events, t_stop, work, workers = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4:]
died = {}
for line in open(events):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    t = e["Time"]
    # RFC 3339 with nanoseconds: keep microseconds for fromisoformat.
    base, _, frac = t.rstrip("Z").partition(".")
    ts = datetime.datetime.fromisoformat(base).replace(tzinfo=datetime.timezone.utc).timestamp() + float("0." + (frac or "0"))
    died[e["Name"]] = (ts, e.get("ContainerExitCode", 0))
for w in workers:
    if w not in died:
        sys.exit(f"test-deploy: no died event for {w}")
    ts, code = died[w]
    drain = ""
    lines = [json.loads(l) for l in open(f"{work}/{w}.log") if l.startswith("{")]
    sig = next((l for l in lines if l.get("msg") == "signal received: draining"), None)
    end = next((l for l in lines if l.get("msg") == "worker stopped"), None)
    if sig and end:
        p = lambda s: datetime.datetime.fromisoformat(s.rstrip("Z")).replace(tzinfo=datetime.timezone.utc).timestamp()
        drain = f", SIGTERM to 'worker stopped' {1000 * (p(end['ts']) - p(sig['ts'])):.0f} ms (in flight at the signal: " \
                f"{next((l.get('in_flight') for l in lines if l.get('msg', '').startswith('stopping')), '?')})"
    print(f"{w}: exit {code}, {ts - t_stop:.2f} s from the stop request to exit{drain}")
    if code != 0:
        sys.exit(f"test-deploy: {w} exited {code}")
EOF
echo "both worker pods stopped in ${t_stopped} s (grace period ${grace} s)"

# What the workers left in Redis, read with the image's own CLI.
pm run --rm --read-only --network host --cap-drop all "$image" inspect --json --redis "redis://127.0.0.1:$redis_port" >"$work/inspect.json"
"$py" - "$work/inspect.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
problems = []
for s in r["streams"]:
    for g in s.get("groups") or []:
        if g["pending"] or g["lag"]:
            problems.append(f"{s['name']}: pending {g['pending']}, lag {g['lag']}")
if r["deadLetterCount"]:
    problems.append(f"{r['deadLetterCount']} dead letters: {[d.get('reason') for d in r['latestDeadLetters']]}")
if r["channels"]["sendFailures"]:
    problems.append(f"{r['channels']['sendFailures']} failed sends")
streams = {s["name"]: s.get("length") for s in r["streams"]}
print(f"inspect (from the image): pending 0, lag 0, dead letters 0, failed sends 0 across {len(streams)} streams {streams}"
      if not problems else "inspect: " + "; ".join(problems))
sys.exit(1 if problems else 0)
EOF

echo "== podman kube down"
pm pod stop --time 10 "$(pod_of activitycast-sandbox 0)" "$(pod_of activitycast-redis 0)" >/dev/null
t=$(now)
pm kube down "$work/play.yaml" >/dev/null
t_down=$(took "$t")
left=$(pm ps -a --filter "name=$suffix" --format '{{.Names}}'; pm pod ps --filter "name=$suffix" --format '{{.Name}}'; \
  pm secret ls --format '{{.Name}}' | grep -- "$suffix" || true)
[ -z "$left" ] || fail "left behind after kube down: $left"
# Podman 4.3's kube down leaves the volumes holding the Secrets' and ConfigMaps' files (the
# throwaway key among them): remove them by name.
volumes=$(pm volume ls --format '{{.Name}}' | grep -- "$suffix" || true)
for v in $volumes; do pm volume rm "$v" >/dev/null; done
echo "kube down ${t_down} s; no pod, container or secret of the run left; removed $(echo $volumes | wc -w) volumes it leaves"
grep '^timing:\|^image:' "$work/build.out" | sed 's/^/build-image: /'
echo "test-deploy: ok in $(took "$t_start") s (image ${t_image} s, kube play ${t_play} s, ready ${t_ready} s, scenario ${t_scenario} s, worker stop ${t_stopped} s, kube down ${t_down} s)"
