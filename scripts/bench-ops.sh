#!/usr/bin/env bash
# What the ops endpoints cost: the intake rate (one in-process worker, no sends) and the fan-out
# rate (one worker process sending 100,000 tokens to the sandbox), each with the endpoints off,
# on (listening, the group monitor checking Redis every second) and scraped (/metrics fetched every
# 100 ms: a hundred times Prometheus's usual 15 s), the modes taken in turn in every round.
# Everything it starts is stopped by PID (see bench.sh and bench-fanout.sh).
#
#   bash scripts/bench-ops.sh [--rounds 3] [--events 200000] [--tokens 100000]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3 events=200000 tokens=100000
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --events) events=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    -h|--help) sed -n 2,8p "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 64 ;;
  esac
done
source scripts/lib.sh
build_release
export BIN="$bin"
echo "== intake: $events events a run, $rounds rounds of off, on, scraped"
bash scripts/bench.sh --events "$events" --runs "$rounds" --ops off,on,scraped | grep -E '^(run|median|machine)'
echo "== fan-out: $tokens tokens, 1 worker, $rounds rounds of off, on, scraped"
for round in $(seq "$rounds"); do
  for mode in off on scraped; do
    line=$(bash scripts/bench-fanout.sh --tokens "$tokens" --workers 1 --trips none --no-h2load --ops "$mode" | grep -E 'tokens/s' | tail -1)
    echo "round $round, ops $mode: $line"
  done
done
