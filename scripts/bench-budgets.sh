#!/usr/bin/env bash
# Budget decisions per second: builds in release mode, starts a private redis-server on a free
# loopback port and runs `activitycast bench budgets`: BudgetScripts.decide (SCRIPT LOAD first,
# then EVALSHA) in pipelines, on many keys and on one hot key, over 1 and 4 connections, with
# Redis's clock and an explicit one; decisions/s (median of the runs) and Redis CPU per decision.
# The redis-server is stopped by PID on exit, also when the bench fails.
#
#   bash scripts/bench-budgets.sh [--seconds 3] [--runs 3] [--keys 10000] [--pipeline 64]
#                                 [--connections 1,4] [--cases many,hot] [--clocks redis,explicit]
#   ACTIVITYCAST_BUDGETS_STANDARD_CAPACITY=10000 bash scripts/bench-budgets.sh   # the policy decided with (default: the standard tier's defaults)
#   BIN=/tmp/old/activitycast bash scripts/bench-budgets.sh   # another build, not rebuilt
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -h|--help) sed -n 2,11p "$0"; exit 0 ;; esac
source scripts/lib.sh
bench_on_private_redis budgets "$@"
