#!/usr/bin/env bash
# One learner of the default model under each allocator, in one run (bench/training/README.md,
# "Allocators"): the build's archipelago (tcmalloc linked), the same objects linked without it
# (glibc's malloc), and that one with jemalloc preloaded. Each trains `train.mode = ddp` with one
# learner on 2 threads for SECONDS (default 40); tokens/s from its summary, user and system time and
# minor page faults from GNU time.
#   bench/training/allocators.sh [OUT.json]   (after ./dev.sh test or ninja -C build archipelago)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bench/results/training/allocators-$(date -u +%F).json}
seconds=${SECONDS_PER_RUN:-40}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The glibc variant: the build's own link command without the allocator (same objects, same flags).
(cd build && eval "$(ninja -t commands apps/archipelago | tail -n 1 | tr ' ' '\n' |
   grep -v -e tcmalloc -e push-state -e pop-state | sed "s#^apps/archipelago\$#$work/archipelago-glibc#" | tr '\n' ' ')")
jemalloc=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
rows=()
run() {  # name, preload, binary
  local name=$1 preload=$2 binary=$3
  env ${preload:+LD_PRELOAD=$preload} /usr/bin/time -f '%U %S %R' -o "$work/time" "$binary" train --json \
    --run-dir "$work/$name" --set train.mode=ddp --set train.learners=1 --set train.threads=2 \
    --set train.max_seconds="$seconds" > "$work/$name.out" 2> "$work/$name.err"
  read -r user sys faults < "$work/time"
  local summary
  summary=$(tail -n 1 "$work/$name.out")
  rows+=("$(/usr/bin/python3 -c '
import json, sys
s = json.loads(sys.argv[1])
print(json.dumps({"allocator": sys.argv[2], "tokens_per_s": s["tokens_per_s"], "steps": s["steps"],
                  "wall_s": s["wall_s"], "precision": s["precision"], "user_s": float(sys.argv[3]),
                  "sys_s": float(sys.argv[4]), "minor_faults": int(sys.argv[5]), "blas_gflops": s["blas_gflops"]}))
' "$summary" "$name" "$user" "$sys" "$faults")")
}
run tcmalloc "" ./build/apps/archipelago
run glibc "" "$work/archipelago-glibc"
run jemalloc "$jemalloc" "$work/archipelago-glibc"
mkdir -p "$(dirname "$out")"
{
  printf '{"made_by": "bench/training/allocators.sh", "commit": "%s", "cpu": "%s", "seconds_per_run": %s, "rows": [' \
    "$(git rev-parse --short HEAD)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')" "$seconds"
  (IFS=,; printf '%s' "${rows[*]}")
  printf ']}\n'
} | /usr/bin/python3 -m json.tool > "$out"
cat "$out"
