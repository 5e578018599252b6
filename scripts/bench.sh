#!/usr/bin/env bash
# Benchmarks in release mode against a private redis-server on a free loopback port, stopped by
# PID afterwards. Arguments go to `activitycast bench intake` (e.g. --events 500000 --runs 7).
#
#   bash scripts/bench.sh                      # stream intake, trivial handler
#   bash scripts/bench.sh --mode full          # intake with registrations/plans touching Redis
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
if [ -n "${BIN:-}" ]; then bin=$BIN; else build_release; fi
work=$(mktemp -d)
port=$(free_port)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
redis_pid=$!
trap 'kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; rm -rf "$work"' EXIT
wait_for_redis "$port"
echo "machine: $(nproc) cores, $(uname -m), $(redis-server --version | grep -Eo 'v=[0-9.]+'), $(date -u +%Y-%m-%d)"
"$bin" bench intake --redis "redis://127.0.0.1:$port" "$@"
