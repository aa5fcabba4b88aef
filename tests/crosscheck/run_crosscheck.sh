#!/usr/bin/env bash
# Runs the exporter into a fresh temporary directory, then the PyTorch mirror on its export.
# Usage: run_crosscheck.sh EXPORTER PYTHON MIRROR_PY MODE
set -euo pipefail
if [ $# -ne 4 ]; then
  echo "usage: $0 EXPORTER PYTHON MIRROR_PY sync|ddp" >&2
  exit 2
fi
exporter=$1 python=$2 mirror=$3 mode=$4
if [ ! -x "$python" ]; then
  echo "crosscheck: no python interpreter at $python (scripts/setup.sh installs python3-torch)" >&2
  exit 1
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/archipelago-crosscheck.XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$exporter" --mode "$mode" --out "$dir"
# The mirror runs on one thread, OpenBLAS's included, as the exporter does (set_compute_threads(1)):
# the same kernels in the same order.
OPENBLAS_NUM_THREADS=1 "$python" "$mirror" "$dir"
