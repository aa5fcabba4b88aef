#!/usr/bin/env bash
# Archipelago's learner step against a bare PyTorch eager step of the same model, in one run, on the
# same cores and allocator (bench/training/README.md, "The step against bare PyTorch").
#   bench/training/step_vs_bare.sh [OUT.json]   (after ./dev.sh test, or ninja -C build bench_training)
# For the small preset with each vocabulary (8192: the default SentencePiece tokenizer's; 256: bytes)
# and each precision this CPU has in hardware (fp32; bf16 with AVX512-BF16 or AMX), it times:
#   engine           Replica::step (bench_training), the allocator it links (tcmalloc) and its thread split
#   bare             bench/training/bare_step.py with tcmalloc preloaded, as a user runs it: LibTorch
#                    THREADS intra-op threads, OpenBLAS's default pool
#   bare_same_split  the same, with the engine's split of THREADS (training/replica.hpp, set_compute_threads)
#   bare_glibc       as `bare`, under glibc's malloc
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bench/results/training/step-vs-bare-$(date -u +%F).json}
steps=${STEPS:-20}
threads=${THREADS:-2}
tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
precisions=(fp32)
grep -qE 'avx512_bf16|amx_bf16' /proc/cpuinfo && precisions+=(bf16)
bare() {  # precision vocab [env...]
  local precision=$1 vocab=$2 torch_threads=$threads
  shift 2
  [ "${SPLIT:-}" = engine ] && { [ "$precision" = fp32 ] && torch_threads=1; }
  env "$@" /usr/bin/python3 bench/training/bare_step.py --preset small --vocab "$vocab" --precision "$precision" \
    --threads "$torch_threads" --steps "$steps"
}
rows=()
for vocab in 8192 256; do
  for precision in "${precisions[@]}"; do
    engine=$(./build/bench/training/bench_training --preset small --vocab "$vocab" --precision "$precision" \
               --steps "$steps" --threads "$threads" --skip-compare --cache-dir archipelago-runs/data | tail -n 1)
    plain=$(bare "$precision" "$vocab" LD_PRELOAD="$tcmalloc")
    # The engine's split: fp32 products in OpenBLAS's pool of THREADS, LibTorch 1; bf16 the other way.
    if [ "$precision" = fp32 ]; then
      split=$(SPLIT=engine bare "$precision" "$vocab" LD_PRELOAD="$tcmalloc" OPENBLAS_NUM_THREADS="$threads")
    else
      split=$(bare "$precision" "$vocab" LD_PRELOAD="$tcmalloc" OPENBLAS_NUM_THREADS=1)
    fi
    glibc=$(bare "$precision" "$vocab")
    rows+=("{\"vocab\": $vocab, \"precision\": \"$precision\", \"engine\": $engine, \"bare\": $plain, \"bare_same_split\": $split, \"bare_glibc\": $glibc}")
  done
done
mkdir -p "$(dirname "$out")"
{
  printf '{"made_by": "bench/training/step_vs_bare.sh", "commit": "%s", "cpu": "%s", "steps": %s, "threads": %s, "rows": [' \
    "$(git rev-parse --short HEAD)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')" "$steps" "$threads"
  (IFS=,; printf '%s' "${rows[*]}")
  printf ']}\n'
} | /usr/bin/python3 -m json.tool > "$out"
echo "$out"
