#!/usr/bin/env bash
# Benchmarks in release mode against a private redis-server on a free loopback port, stopped by
# PID afterwards. Arguments go to `activitycast bench intake` (e.g. --events 500000 --runs 7).
#
#   bash scripts/bench.sh                      # stream intake, trivial handler
#   bash scripts/bench.sh --mode full          # intake with registrations/plans touching Redis
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
swift build -c release --product activitycast 2>&1 | tail -1
bin=$(swift build -c release --show-bin-path)/activitycast
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
redis_pid=$!
trap 'kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
echo "machine: $(nproc) cores, $(uname -m), $(redis-server --version | grep -Eo 'v=[0-9.]+'), $(date -u +%Y-%m-%d)"
"$bin" bench intake --redis "redis://127.0.0.1:$port" "$@"
