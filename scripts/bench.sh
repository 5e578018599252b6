#!/usr/bin/env bash
# Benchmarks in release mode against a private redis-server on a free loopback port (or a private
# Redis Cluster: --cluster N primaries), stopped by PID afterwards. Other arguments go to
# `activitycast bench intake` (e.g. --events 500000 --runs 7).
#
#   bash scripts/bench.sh                      # stream intake, trivial handler
#   bash scripts/bench.sh --mode full          # intake with registrations/plans touching Redis
#   bash scripts/bench.sh --cluster 3          # the same against 3 primaries
#   ACTIVITYCAST_STREAMS_SHARDS=3 bash scripts/bench.sh --cluster 3   # the feed sharded over them
set -euo pipefail
cd "$(dirname "$0")/.."
cluster=0
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --cluster) cluster=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
source scripts/lib.sh
if [ -n "${BIN:-}" ]; then bin=$BIN; else build_release; fi
work=$(mktemp -d)
pids=()
cleanup() {
  stop_pids "${pids[@]}"
  rm -rf "$work"
}
trap cleanup EXIT
start_bench_redis "$work" "$cluster"
echo "machine: $(nproc) cores, $(uname -m), $(redis-server --version | grep -Eo 'v=[0-9.]+'), $(date -u +%Y-%m-%d); redis: $([ "$cluster" -gt 0 ] && echo "cluster of $cluster primaries" || echo "one node"), feed shards ${ACTIVITYCAST_STREAMS_SHARDS:-1}"
"$bin" bench intake --redis "$redis_url" "${args[@]}"
