#!/usr/bin/env bash
# Fuzzes the stream-entry decoder and the RESP reply path with libFuzzer (docs/fuzzing.md).
# Builds ActivityCastFuzz with --sanitize=fuzzer and address sanitizer in its own scratch path
# (.build-fuzz), then runs each target for N seconds on a fresh copy of its seed corpus
# (Fuzz/corpus/<target>; new inputs stay in the temporary copy, never in git). Prints how many
# inputs each target ran; exits non-zero if libFuzzer saved a crash, leak, timeout or
# out-of-memory input, and prints where it is with a hex dump of its start.
#
#   bash scripts/fuzz.sh                          # both targets, 60 s each
#   bash scripts/fuzz.sh --seconds 3600 --target resp
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=60 targets=(decoder resp)
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --target)
      case "$2" in
        all) targets=(decoder resp) ;;
        decoder|resp) targets=("$2") ;;
        *) echo "unknown target '$2' (decoder, resp or all)" >&2; exit 2 ;;
      esac
      shift 2 ;;
    -h|--help) sed -n 2,10p "$0"; exit 0 ;;
    *) echo "unknown argument '$1'" >&2; exit 2 ;;
  esac
done

bash scripts/install-deps.sh
work=$(mktemp -d)
fuzzer_pid=""
keep_work=0
cleanup() {
  if [ -n "$fuzzer_pid" ]; then kill "$fuzzer_pid" 2>/dev/null || true; wait "$fuzzer_pid" 2>/dev/null || true; fi
  if [ "$keep_work" -eq 0 ]; then rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --sanitize=fuzzer makes SwiftPM link libFuzzer's main instead of ours, but it instruments only
# the linked module for coverage; -Xswiftc -sanitize=fuzzer instruments every module it compiles.
# LIBFUZZER swaps the replay main for libFuzzer's entry points. The linker's warnings
# about ASan's local symbols are noise.
build=(swift build -c release --scratch-path .build-fuzz --product ActivityCastFuzz
       --sanitize=fuzzer --sanitize=address -Xswiftc -sanitize=fuzzer -Xswiftc -DLIBFUZZER)
started=$(date +%s)
if ! "${build[@]}" >"$work/build.log" 2>&1; then
  grep -v 'Cannot export local symbol' "$work/build.log" | tail -30 >&2
  echo "fuzz: the fuzz build failed" >&2
  exit 1
fi
echo "fuzz: built in $(( $(date +%s) - started )) s: $(grep -v 'Cannot export local symbol' "$work/build.log" | tail -1)"
bin=$("${build[@]}" --show-bin-path)/ActivityCastFuzz

summary=() found=0
for target in "${targets[@]}"; do
  mkdir -p "$work/$target/corpus" "$work/$target/artifacts"
  cp Fuzz/corpus/"$target"/* "$work/$target/corpus/"
  log="$work/$target/fuzz.log"
  # -timeout: one input may take at most 10 s (a hang); -rss_limit_mb and, from it, the malloc
  # limit: 2 GB (unbounded memory); leaks are reported too. Swift's own backtracer is off so
  # that libFuzzer's crash handler reports a trap and saves the input.
  # `exec` so that $! is the fuzzer itself (with a trap set, bash would otherwise keep a subshell
  # between them, and stopping it would leave the fuzzer running).
  (exec env SWIFT_BACKTRACE=enable=no "$bin" --target="$target" "$work/$target/corpus" \
    -dict="Fuzz/$target.dict" -max_len=16384 -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/$target/artifacts/" >"$log" 2>&1) &
  fuzzer_pid=$!
  run_started=$(date +%s)
  status=0
  wait "$fuzzer_pid" || status=$?
  fuzzer_pid=""
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  runs=${runs:-0}
  took=$(( $(date +%s) - run_started ))
  artifacts=("$work/$target/artifacts"/*)
  [ -e "${artifacts[0]}" ] || artifacts=()
  coverage=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
  echo "fuzz: $target: $runs inputs in $took s, ${coverage:-cov: ?}, corpus $(ls "$work/$target/corpus" | wc -l) inputs, exit $status"
  if [ ${#artifacts[@]} -gt 0 ] || [ "$status" -ne 0 ]; then
    found=$((found + ${#artifacts[@]}))
    [ ${#artifacts[@]} -eq 0 ] && found=$((found + 1))
    keep_work=1
    echo "fuzz: $target failed; libFuzzer's report ($log):"
    report=$(grep -v -E '^#[0-9]+|^INFO:' "$log" | grep -A 40 -m 1 -E '^==[0-9]+==|ERROR:|Fatal error|fuzz invariant' || true)
    if [ -n "$report" ]; then echo "$report" | head -60; else tail -30 "$log"; fi
    for a in "${artifacts[@]}"; do
      echo "fuzz: artifact $a ($(wc -c <"$a") bytes):"
      od -A x -t x1z -v "$a" | head -8
      echo "fuzz: reproduce with: $bin --target=$target $a"
    done
  fi
  summary+=("$target $runs runs")
done

IFS=,; list="${summary[*]}"; unset IFS
echo "fuzz: ${list//,/, }, $found crashes"
[ "$found" -eq 0 ]
