# Helpers shared by the scripts (source it; it runs nothing by itself).

# Installs the system packages and builds `activitycast` in release mode; sets $bin to it.
build_release() {
  bash scripts/install-deps.sh
  swift build -c release --product activitycast 2>&1 | tail -1
  bin=$(swift build -c release --show-bin-path)/activitycast
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

# Waits (up to 5 s) until the redis-server on PORT answers.
wait_for_redis() {
  for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "redis-server on port $1 did not answer" >&2; return 1
}
