#!/usr/bin/env bash
# What a broadcast-only event's two scripts cost Redis by themselves: builds in release mode,
# starts a private redis-server on a free loopback port and runs `activitycast bench scripts`: the
# key-state merge and the channel's budget decision (with its guards) as the send path builds
# them, pipelined 100 at a time on one connection, each alone and both per event; µs per script
# call (INFO commandstats) and Redis process CPU per event (INFO cpu). Set beside
# bench-broadcast.sh's Redis CPU per event, the difference is what the round trips cost.
# The redis-server is stopped by PID on exit, also when the bench fails.
#
#   bash scripts/bench-scripts.sh [--events 20000]
#   BIN=/tmp/old/activitycast bash scripts/bench-scripts.sh   # another build, not rebuilt
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -h|--help) sed -n 2,11p "$0"; exit 0 ;; esac
source scripts/lib.sh
bench_on_private_redis scripts "$@"
