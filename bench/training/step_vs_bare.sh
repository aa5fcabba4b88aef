#!/usr/bin/env bash
# Archipelago's learner step against a bare PyTorch eager step of the same model, in one run, on the
# same threads and allocator (bench/training/README.md, "The step against bare PyTorch").
#   bench/training/step_vs_bare.sh [OUT.json]   (after ./dev.sh test or ninja -C build bench_training)
# For each vocabulary (8192: the default SentencePiece tokenizer's; 256: bytes) it times the engine's
# fp32 and bf16 steps (build/bench/training/bench_training), then the bare step under the allocator
# the engine links (tcmalloc, preloaded into python3) and under glibc's malloc, each precision.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bench/results/training/step-vs-bare-$(date -u +%F).json}
steps=${STEPS:-20}
threads=${THREADS:-2}
tcmalloc=$(ls /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 2>/dev/null || true)
rows=()
for vocab in 8192 256; do
  engine=$(./build/bench/training/bench_training --preset small --vocab "$vocab" --steps "$steps" --threads "$threads" \
             --skip-compare --cache-dir archipelago-runs/data | tail -n 1)
  rows+=("{\"vocab\": $vocab, \"engine\": $engine")
  for precision in fp32 bf16; do
    linked=$(LD_PRELOAD="$tcmalloc" /usr/bin/python3 bench/training/bare_step.py --preset small --vocab "$vocab" \
               --precision "$precision" --threads "$threads" --steps "$steps")
    glibc=$(/usr/bin/python3 bench/training/bare_step.py --preset small --vocab "$vocab" \
              --precision "$precision" --threads "$threads" --steps "$steps")
    rows[-1]+=", \"bare_${precision}_tcmalloc\": $linked, \"bare_${precision}_glibc\": $glibc"
  done
  rows[-1]+="}"
done
mkdir -p "$(dirname "$out")"
{
  printf '{"made_by": "bench/training/step_vs_bare.sh", "commit": "%s", "cpu": "%s", "steps": %s, "threads": %s, "rows": [' \
    "$(git rev-parse --short HEAD)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')" "$steps" "$threads"
  (IFS=,; printf '%s' "${rows[*]}")
  printf ']}\n'
} | /usr/bin/python3 -m json.tool > "$out"
echo "$out"
