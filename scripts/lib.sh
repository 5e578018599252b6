# Helpers shared by the scripts (source it; it runs nothing by itself).

# Installs the system packages and builds `activitycast` in release mode; sets $bin to it.
build_release() {
  bash scripts/install-deps.sh
  swift build -c release --product activitycast 2>&1 | tail -1
  bin=$(swift build -c release --show-bin-path)/activitycast
}

# Stops the processes whose PIDs are given (SIGTERM to each, then waits for each): what the
# scripts' EXIT traps do with the PIDs they started.
stop_pids() {
  local pid
  for pid in "$@"; do kill "$pid" 2>/dev/null || true; done
  for pid in "$@"; do wait "$pid" 2>/dev/null || true; done
}

# A free TCP port on loopback.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits (up to 10 s) until the sandbox writing to FILE says it is listening.
wait_for_sandbox() {
  for _ in $(seq 200); do grep -q '^listening' "$1" 2>/dev/null && return 0; sleep 0.05; done
  echo "the sandbox did not start; its output:" >&2; cat "$1" >&2; return 1
}

# Starts a private, non-persistent redis-server on a free loopback port, with its files and log in
# DIR; sets redis_port and redis_pid, adds the PID to the caller's `pids` array (stopped by its
# trap), and waits until it answers.
start_private_redis() {
  redis_port=$(free_port)
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$1" >"$1/redis.log" 2>&1 &
  redis_pid=$!
  pids+=("$redis_pid")
  wait_for_redis "$redis_port"
}

# Runs `activitycast bench SUBCOMMAND ARGS…` against a private redis-server of its own (BIN or a
# release build), prefix "bench"; everything it started is stopped by PID on exit, and the end of
# Redis's log is shown when the bench fails. For benches that need Redis and nothing else.
bench_on_private_redis() {
  local subcommand=$1
  shift
  if [ -n "${BIN:-}" ]; then bin=$BIN; else build_release; fi
  work=$(mktemp -d)
  pids=()
  trap 'status=$?; [ "$status" -ne 0 ] && [ -s "$work/redis.log" ] && { echo "--- redis.log (last lines)"; tail -5 "$work/redis.log"; }; stop_pids "${pids[@]}"; rm -rf "$work"' EXIT
  start_private_redis "$work"
  echo "machine: $(nproc) cores, $(uname -m), $(redis-server --version | grep -Eo 'v=[0-9.]+'), $(date -u +%Y-%m-%d); build $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  ACTIVITYCAST_REDIS_URL="redis://127.0.0.1:$redis_port" ACTIVITYCAST_PREFIX="bench" "$bin" bench "$subcommand" "$@"
}

# Starts the Redis the benches run against: with CLUSTER (a number, 0 or empty: one node) a Redis
# Cluster of that many primaries (no replicas), each a private, non-persistent redis-server on a
# free loopback port with its files and log in DIR/node-<port>, joined by `redis-cli --cluster
# create` (slots spread evenly). Sets redis_port (the first node), redis_pids (every node),
# redis_pid (the first), redis_url (every node as a seed, or the one node), and adds the PIDs to
# the caller's `pids` array (stopped by its trap).
start_bench_redis() {
  local dir=$1 n=${2:-0}
  if [ "${n:-0}" -le 0 ]; then
    start_private_redis "$dir"
    redis_pids=("$redis_pid")
    redis_url="redis://127.0.0.1:$redis_port"
    return
  fi
  redis_pids=()
  local ports=() seeds=() p
  for _ in $(seq "$n"); do
    # A cluster node also listens on port + 10000 (the cluster bus): at most 55535, both free.
    p=$(python3 -c '
import socket
while True:
    a = socket.socket(); a.bind(("127.0.0.1", 0)); port = a.getsockname()[1]
    if port > 55535: a.close(); continue
    b = socket.socket()
    try: b.bind(("127.0.0.1", port + 10000))
    except OSError: a.close(); continue
    print(port); break')
    mkdir -p "$dir/node-$p"
    redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir/node-$p" --cluster-enabled yes \
      --cluster-config-file nodes.conf --cluster-node-timeout 5000 >"$dir/node-$p/redis.log" 2>&1 &
    redis_pids+=("$!")
    pids+=("$!")
    ports+=("$p")
    seeds+=("127.0.0.1:$p")
  done
  for p in "${ports[@]}"; do wait_for_redis "$p"; done
  redis-cli --cluster create "${seeds[@]}" --cluster-replicas 0 --cluster-yes >"$dir/cluster-create.log" 2>&1 \
    || { cat "$dir/cluster-create.log" >&2; return 1; }
  for _ in $(seq 200); do
    redis-cli -p "${ports[0]}" cluster info | grep -q 'cluster_state:ok' && break
    sleep 0.05
  done
  redis_port=${ports[0]}
  redis_pid=${redis_pids[0]}
  redis_url="redis://$(IFS=,; echo "${seeds[*]}")"
}

# Waits (up to 5 s) until the redis-server on PORT answers.
wait_for_redis() {
  for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "redis-server on port $1 did not answer" >&2; return 1
}
