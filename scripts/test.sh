#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test (they start their own
# redis-server on free loopback ports and stop it by PID), then the worker suites again with each
# Redis a 3-primary Redis Cluster (ACTIVITYCAST_TEST_REDIS_CLUSTER=3, docs/cluster.md), and ends
# with a plain summary line over both runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
swift build --build-tests
log=$(mktemp)
cluster_log=$(mktemp)
trap 'rm -f "$log" "$cluster_log"' EXIT
set +e
swift test --skip-build 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
echo "== the worker suites on a Redis Cluster of 3 primaries"
ACTIVITYCAST_TEST_REDIS_CLUSTER=3 swift test --skip-build --filter 'WorkerTests\.' --skip 'ClusterWorkerTests' 2>&1 | tee "$cluster_log"
cluster_status=${PIPESTATUS[0]}
set -e
# Swift Testing's closing line: "✔ Test run with N tests in M suites passed …" or
# "✘ Test run with N tests in M suites failed … with K issues".
count() {
  local total failed
  total=$(grep -Eo 'Test run with [0-9]+ tests?' "$1" | tail -1 | grep -Eo '[0-9]+' || echo 0)
  failed=$(grep -Ec '^✘ Test .* (failed|recorded)' "$1" || true)
  echo "$total $failed"
}
read -r total failed < <(count "$log")
read -r ctotal cfailed < <(count "$cluster_log")
echo "on a Redis Cluster: $((ctotal - cfailed)) passed, ${cfailed} failed"
echo "$((total + ctotal - failed - cfailed)) passed, $((failed + cfailed)) failed"
[ "$status" -eq 0 ] && [ "$cluster_status" -eq 0 ]
