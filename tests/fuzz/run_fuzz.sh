#!/usr/bin/env bash
# Builds the libFuzzer targets of messages/ with clang (ASan + UBSan) in a separate build folder
# and runs each for SECONDS seconds from the committed seed corpus. Exits non-zero on any crash,
# sanitizer error or leak (libFuzzer's own exit status); the failing input is left in the build
# folder as <target>-crash-* / leak-* for reproduction: `<build>/tests/fuzz/<target> <file>`.
# Usage: tests/fuzz/run_fuzz.sh [SECONDS_PER_TARGET=30]   (env ARCHIPELAGO_FUZZ_BUILD: build dir)
set -euo pipefail

seconds="${1:-30}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${ARCHIPELAGO_FUZZ_BUILD:-$repo/build-fuzz}"
targets=(envelope_fuzz reassembler_fuzz tensor_codec_fuzz)

CC=clang CXX=clang++ cmake -S "$repo" -B "$build" -G Ninja -DARCHIPELAGO_FUZZ=ON >/dev/null
# One job: under `./dev.sh test` this runs beside a test that holds the machine's cores.
ninja -C "$build" -j1 "${targets[@]}"

for target in "${targets[@]}"; do
  # New inputs go to a scratch folder so the committed seeds stay exactly as generated.
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' EXIT
  echo "== $target: ${seconds}s"
  "$build/tests/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build/$target-" \
    "$scratch" "$repo/tests/fuzz/corpus/${target%_fuzz}"
  rm -rf "$scratch"
done
echo "fuzzing passed"
