#!/usr/bin/env bash
# Fuzzes every reader of outside input with libFuzzer (clang), over kgpt built with AddressSanitizer
# and UndefinedBehaviorSanitizer (docs/fuzzing.md).
#
#   scripts/fuzz.sh [--seconds N] [--readers artifact,deck,...] [--build-only] [--replay]
#
# Builds build-fuzz/ (CC=clang CXX=clang++, -DKGPT_FUZZ=ON), then runs each harness for N seconds
# (default 60) from the repository's root, on a working corpus in build-fuzz/corpus/<reader> seeded
# from tests/fuzz/corpus/<reader>. A crash, hang (10 s per input), leak or sanitizer report stops
# that harness and saves the input in build-fuzz/findings/<reader>/; copy it into
# tests/fuzz/corpus/<reader>/ once fixed, where ctest replays it in every build. Prints one line per
# reader (executions, corpus size, findings) and exits non-zero when any harness found something.
# --replay runs each harness once over its saved corpus, under the sanitizers, without mutating it.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
seconds=60
readers="artifact,checkpoint,deck,events,history,safetensors,sentencepiece,shard,sweep,task,tiktoken"
build_only=0
replay=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --readers) readers="$2"; shift 2 ;;
    --build-only) build_only=1; shift ;;
    --replay) replay=1; shift ;;
    *) echo "fuzz.sh: unknown argument $1 (--seconds N, --readers a,b, --build-only, --replay)" >&2; exit 2 ;;
  esac
done

build="${FUZZ_BUILD_DIR:-build-fuzz}"
if ! command -v clang++ > /dev/null; then
  echo "fuzz.sh: clang++ not found (Debian: apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi
IFS=, read -r -a list <<< "$readers"
if [[ "${FUZZ_NO_BUILD:-0}" != 1 ]]; then  # FUZZ_NO_BUILD=1: several runs of the script share one build
  CC=clang CXX=clang++ cmake -S . -B "$build" -DKGPT_FUZZ=ON -DKGPT_ENABLE_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
  cmake --build "$build" -j "${JOBS:-$(nproc)}" --target "${list[@]/#/fuzz_}"
fi
[[ "$build_only" == 1 ]] && exit 0

found=0
printf '| reader | seconds | executions | exec/s | corpus inputs | findings |\n|---|---|---|---|---|---|\n'
for reader in "${list[@]}"; do
  corpus="$build/corpus/$reader" findings="$build/findings/$reader"
  mkdir -p "$corpus" "$findings"
  log="$build/fuzz_$reader.log"
  harness="$build/tests/fuzz/fuzz_$reader"
  if [[ ! -x "$harness" ]]; then
    echo "fuzz.sh: $harness is not built (scripts/fuzz.sh --build-only, or without FUZZ_NO_BUILD=1)" >&2
    found=1
    continue
  fi
  earlier="$(find "$findings" -type f | wc -l)"  # findings of earlier runs, not yet handled
  status=0
  limit=(-max_total_time="$seconds")
  [[ "$replay" == 1 ]] && limit=(-runs=0)
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 LSAN_OPTIONS="suppressions=$root/tests/fuzz/lsan_suppressions.txt" \
    "$harness" "${limit[@]}" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$findings/" "$corpus" "tests/fuzz/corpus/$reader" > "$log" 2>&1 || status=$?
  runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)"
  inputs="$(find "$corpus" -type f | wc -l)"
  crashes=$(($(find "$findings" -type f | wc -l) - earlier))
  rate=0
  [[ -n "$runs" && "$seconds" -gt 0 ]] && rate=$((runs / seconds))
  printf '| %s | %s | %s | %s | %s | %s |\n' "$reader" "$seconds" "${runs:-?}" "$rate" "$inputs" "$crashes"
  if [[ "$status" != 0 || "$crashes" != 0 ]]; then
    found=1
    echo "fuzz.sh: $reader: libFuzzer exited with $status; see $log and $findings/" >&2
    grep -m3 -E "ERROR|SUMMARY|fuzz:" "$log" >&2 || true
  fi
done
exit "$found"
