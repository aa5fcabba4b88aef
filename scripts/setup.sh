#!/usr/bin/env bash
# Installs every Debian 12 package Archipelago needs (sudo when not root), then checks that an
# optimized BLAS (OpenBLAS) is the one libtorch will load: reference BLAS makes fp32 training ~30x slower.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libcaf-dev libtorch-dev libopenblas0-pthread libcapnp-dev capnproto libssl-dev
  librocksdb-dev libspdlog-dev libfmt-dev doctest-dev
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libxxhash-dev
  bible-kjv clang libclang-rt-14-dev iproute2 procps libedit-dev libcpp-httplib-dev chromium python3-torch python3-numpy libsentencepiece-dev python3-sentencepiece libgloo-dev
  libgoogle-perftools-dev libjemalloc2
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# libblas.so.3 is an alternative: make sure it points at OpenBLAS, not the reference implementation.
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 || true)
case "$blas" in
  *openblas*) echo "setup: BLAS in use: $blas" ;;
  *)
    echo "setup: libblas.so.3 resolves to '$blas', switching to OpenBLAS" >&2
    candidate=$(ls /usr/lib/x86_64-linux-gnu/openblas-*/libblas.so.3 | head -n 1)
    "${sudo_cmd[@]}" update-alternatives --set libblas.so.3-x86_64-linux-gnu "$candidate"
    ;;
esac
