#!/usr/bin/env bash
# `archipelago export` checked from the other side: a short tiny run, its latest version exported in
# fp32 and bf16, the C++ model's logits of that version (export_logits), and plain PyTorch loading
# both exports (load_export.py). Then the refusals: each bad input exits 2 with its reason.
# Usage: run_export_check.sh ARCHIPELAGO EXPORT_LOGITS PYTHON LOAD_EXPORT_PY
set -euo pipefail
if [ $# -ne 4 ]; then
  echo "usage: $0 ARCHIPELAGO EXPORT_LOGITS PYTHON LOAD_EXPORT_PY" >&2
  exit 2
fi
archipelago=$1 export_logits=$2 python=$3 loader=$4
dir=$(mktemp -d "${TMPDIR:-/tmp}/archipelago-export-check.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "export check: FAILED: $*" >&2; exit 1; }

timeout 300 "$archipelago" train --run-dir "$dir/run" --set model.preset=tiny --set data.tokenizer=bytes --set train.learners=2 \
  --set inner.batch_size=8 --set train.inner_steps=10 --set train.max_tokens=81920 --set train.max_seconds=0 \
  --set train.threads=1 --set runtime.store_sync=false --set data.cache_dir="${TMPDIR:-/tmp}/archipelago-test-data" \
  > "$dir/train.out" 2>&1 || { cat "$dir/train.out" >&2; fail "the training run failed"; }

"$archipelago" export --run-dir "$dir/run" --out "$dir/fp32" --torch-save --json > "$dir/export.out" || fail "export fp32"
version=$("$python" -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])["version"])' < "$dir/export.out")
[ "$version" -ge 2 ] || fail "the run committed only version $version"
"$archipelago" export --run-dir "$dir/run" --version "$version" --dtype bf16 --torch-save --out "$dir/bf16" > /dev/null || fail "export bf16"
"$export_logits" --run-dir "$dir/run" --version "$version" --out "$dir/reference"
"$python" "$loader" "$dir/fp32" "$dir/bf16" "$dir/reference"

# The version before the latest differs from it: the export is of the version asked for.
earlier=$((version - 1))
"$archipelago" export --run-dir "$dir/run" --version "$earlier" --out "$dir/earlier" > /dev/null || fail "export of version $earlier"
cmp -s "$dir/earlier/model.safetensors" "$dir/fp32/model.safetensors" && fail "versions $earlier and $version exported the same bytes"

refused() {  # expected reason, then the command
  local reason=$1; shift
  set +e
  "$@" > "$dir/refused.out" 2>&1
  local code=$?
  set -e
  [ "$code" -eq 2 ] || { cat "$dir/refused.out" >&2; fail "'$*' exited $code, not 2"; }
  grep -qF -- "$reason" "$dir/refused.out" || { cat "$dir/refused.out" >&2; fail "'$*' did not say '$reason'"; }
}
refused "no run directory" "$archipelago" export --run-dir "$dir/nowhere" --out "$dir/x"
refused "is not a run directory" "$archipelago" export --run-dir "$dir/fp32" --out "$dir/x"
refused "version 999999 is not a committed version" "$archipelago" export --run-dir "$dir/run" --version 999999 --out "$dir/x"
refused "--dtype must be fp32 or bf16" "$archipelago" export --run-dir "$dir/run" --dtype fp8 --out "$dir/x"
echo "export check: version $version exported, loaded by PyTorch, refusals clear"
