#!/usr/bin/env bash
# The APNs sandbox alone under h2load: for each activitycast binary given (default: this
# checkout's release build), starts its sandbox on a free loopback port, sends the benchmark's
# device pushes with h2load (`bench apns --h2load-only`) and reports the server's CPU time per
# request, its busiest thread's load and h2load's rate. Binaries take turns for --rounds rounds,
# so builds from different commits are compared in the same sitting (these machines' speed
# drifts by tens of percent within minutes). Every sandbox is stopped by its PID.
#
#   bash scripts/bench-sandbox.sh [--rounds 3] [--threads 1] [--requests 300000] [BINARY...]
#   e.g. compare with an older commit:
#     git worktree add /tmp/old <commit> && (cd /tmp/old && swift build -c release --product activitycast)
#     bash scripts/bench-sandbox.sh /tmp/old/.build/release/activitycast .build/release/activitycast
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3 threads=1 requests=300000
binaries=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    -h|--help) sed -n 2,13p "$0"; exit 0 ;;
    *) binaries+=("$1"); shift ;;
  esac
done
source scripts/lib.sh
build_release
bench=$bin
[ ${#binaries[@]} -eq 0 ] && binaries=("$bench")
work=$(mktemp -d)
sandbox_pid=""
trap '[ -n "$sandbox_pid" ] && kill "$sandbox_pid" 2>/dev/null && wait "$sandbox_pid" 2>/dev/null; rm -rf "$work"' EXIT
echo "machine: $(nproc) cores, $(uname -m), $(h2load --version 2>/dev/null | head -1), $(date -u +%Y-%m-%d); sandbox threads: $threads"
for round in $(seq "$rounds"); do
  for bin in "${binaries[@]}"; do
    port=$(free_port)
    # One directory for every build: the first sandbox makes the key and certificate, the
    # others reuse them, and the bench signs with that key.
    export ACTIVITYCAST_SANDBOX_DIR="$work" ACTIVITYCAST_SANDBOX_LISTEN="127.0.0.1:$port" ACTIVITYCAST_LOG_LEVEL=warning
    "$bin" sandbox --threads "$threads" --streams-before-auth 1000 >"$work/sandbox.log" 2>&1 &
    sandbox_pid=$!
    wait_for_sandbox "$work/sandbox.log"
    result=$("$bench" bench apns --h2load-only --runs 1 --requests "$requests" --server-pid "$sandbox_pid" 2>&1 | grep -E '^run 1|server during|host steal:' | tr -s ' ' | tr '\n' ' ')
    kill "$sandbox_pid"; wait "$sandbox_pid" 2>/dev/null || true
    sandbox_pid=""
    echo "round $round, $bin: $result"
  done
done
