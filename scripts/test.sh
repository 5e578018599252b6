#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test (they start their own
# redis-server on free loopback ports and stop it by PID), and ends with a plain summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
swift build --build-tests
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
swift test --skip-build 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# Swift Testing's closing line: "✔ Test run with N tests in M suites passed …" or
# "✘ Test run with N tests in M suites failed … with K issues".
total=$(grep -Eo 'Test run with [0-9]+ tests?' "$log" | tail -1 | grep -Eo '[0-9]+' || echo 0)
failed=$(grep -Ec '^✘ Test .* (failed|recorded)' "$log" || true)
echo "$((total - failed)) passed, ${failed} failed"
exit "$status"
