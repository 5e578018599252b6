#!/usr/bin/env bash
# APNs client benchmark: builds in release mode, starts a private sandbox on a free loopback port
# (stopped by PID afterwards), then sends the same requests through our client and through
# h2load (same headers, payload, connections and streams) and reports both rates, their ratio
# and the CPU time per request. Arguments go to `activitycast bench apns`.
#
#   bash scripts/bench-apns.sh --requests 200000 --connections 4 --streams 100 --runs 3
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
build_release
work=$(mktemp -d)
port=$(free_port)
export ACTIVITYCAST_SANDBOX_DIR="$work" ACTIVITYCAST_SANDBOX_LISTEN="127.0.0.1:$port" ACTIVITYCAST_LOG_LEVEL=warning
# h2load opens all its streams at once; APNs (and the sandbox by default) allow one stream until
# a provider token has been seen, so h2load would lose the rest of its first burst. Our client
# waits by itself; for the comparison the sandbox allows the full burst.
"$bin" sandbox --threads "${SANDBOX_THREADS:-2}" --streams-before-auth 1000 >"$work/sandbox.log" 2>&1 &
sandbox_pid=$!
trap 'kill "$sandbox_pid" 2>/dev/null; wait "$sandbox_pid" 2>/dev/null; rm -rf "$work"' EXIT
wait_for_sandbox "$work/sandbox.log"
echo "machine: $(nproc) cores, $(uname -m), $(h2load --version 2>/dev/null | head -1), $(date -u +%Y-%m-%d)"
"$bin" bench apns --server-pid "$sandbox_pid" "$@"
