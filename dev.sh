#!/usr/bin/env bash
# The two commands of Archipelago, on a fresh Debian 12 machine:
#   ./dev.sh run   installs what is missing, builds, and runs `archipelago train` on the embedded default
#   ./dev.sh test  installs what is missing, builds, and runs the whole test suite under CTest
# Extra arguments after `run` go to `archipelago train` (e.g. ./dev.sh run --json --set model.preset=tiny).
set -euo pipefail
cd "$(dirname "$0")"

command=${1:-}
case "$command" in
  run|test) shift ;;
  *) echo "usage: ./dev.sh run [archipelago train options] | ./dev.sh test" >&2; exit 2 ;;
esac

./scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
jobs=$(nproc)

if [ "$command" = run ]; then
  ninja -C build -j"$jobs" archipelago
  exec ./build/apps/archipelago train "$@"
fi

ninja -C build -j"$jobs"
ctest --test-dir build --output-on-failure --timeout 900 -j2  # tests/CMakeLists.txt: what may run side by side
