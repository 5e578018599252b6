#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test (they start their own
# redis-server on free loopback ports and stop it by PID), then the worker suites again with each
# Redis a 3-primary Redis Cluster (ACTIVITYCAST_TEST_REDIS_CLUSTER=3, docs/cluster.md), then the
# console in headless chromium (scripts/test-console-browser.sh, each of its checks one test), and
# ends with a plain summary line over the three.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
swift build --build-tests
log=$(mktemp)
cluster_log=$(mktemp)
browser_log=$(mktemp)
trap 'rm -f "$log" "$cluster_log" "$browser_log"' EXIT
set +e
swift test --skip-build 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
echo "== the worker suites on a Redis Cluster of 3 primaries"
ACTIVITYCAST_TEST_REDIS_CLUSTER=3 swift test --skip-build --filter 'WorkerTests\.' --skip 'ClusterWorkerTests' 2>&1 | tee "$cluster_log"
cluster_status=${PIPESTATUS[0]}
echo "== the console in a real browser (headless chromium)"
bash scripts/test-console-browser.sh "${CONSOLE_SCREENSHOTS:-}" 2>&1 | tee "$browser_log"
browser_status=${PIPESTATUS[0]}
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
# The browser's checks: "ok   …" or "FAIL …"; a run that stopped before them counts as one failure.
bpassed=$(grep -c '^ok ' "$browser_log" || true)
bfailed=$(grep -c '^FAIL ' "$browser_log" || true)
if [ "$browser_status" -ne 0 ] && [ "$bfailed" -eq 0 ]; then bfailed=1; fi
echo "on a Redis Cluster: $((ctotal - cfailed)) passed, ${cfailed} failed"
echo "in the browser: ${bpassed} passed, ${bfailed} failed"
echo "$((total + ctotal + bpassed - failed - cfailed)) passed, $((failed + cfailed + bfailed)) failed"
[ "$status" -eq 0 ] && [ "$cluster_status" -eq 0 ] && [ "$browser_status" -eq 0 ]
