#!/usr/bin/env bash
# Priority lanes of the APNs client: builds in release mode, starts a private sandbox on a free
# loopback port (stopped by PID afterwards), then times priority-10 requests through the client
# idle and while N priority-5 requests are queued in it. Arguments go to `activitycast bench lanes`.
#
#   bash scripts/bench-lanes.sh --flood 100000 --probes 200 --runs 3
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
build_release
work=$(mktemp -d)
port=$(free_port)
export ACTIVITYCAST_SANDBOX_DIR="$work" ACTIVITYCAST_SANDBOX_LISTEN="127.0.0.1:$port" ACTIVITYCAST_LOG_LEVEL=warning
# The sandbox keeps no per-device views beyond its default; the flood's tokens are all new.
"$bin" sandbox --threads "${SANDBOX_THREADS:-2}" >"$work/sandbox.log" 2>&1 &
sandbox_pid=$!
trap 'kill "$sandbox_pid" 2>/dev/null; wait "$sandbox_pid" 2>/dev/null; rm -rf "$work"' EXIT
wait_for_sandbox "$work/sandbox.log"
echo "machine: $(nproc) cores, $(uname -m), $(date -u +%Y-%m-%d), load $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin" bench lanes "$@"
