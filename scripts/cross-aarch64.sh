#!/usr/bin/env bash
# Cross-compiles vmagent and vmclient for 64-bit Arm Linux (aarch64 boards,
# servers, Linux phones) on Debian 12, with Debian's cross compiler
# (gcc-aarch64-linux-gnu) and multiarch :arm64 -dev packages, into
# build-aarch64/ (tests and benchmarks off). scripts/board-aarch64.sh (a step
# of scripts/test.sh) runs the results under emulation.
#
#   scripts/cross-aarch64.sh [BUILD_DIR] [extra cmake args...]
#
# Installs what is missing (enables the arm64 architecture in dpkg once;
# apt never removes a package for it: --no-remove). Copy the results to the
# board with their runtime libraries (libnng1, libprotobuf-c1, libssl3,
# ocl-icd-libopencl1 or the vendor's libOpenCL.so; libclblast1 for tuned GEMM
# on GPUs, opened when a GEMM first runs):
#   scp build-aarch64/agent/vmagent board:
#   ssh board ./vmagent --device opencl:0
set -euo pipefail
cd "$(dirname "$0")/.."

arch=arm64
triple=aarch64-linux-gnu
dir=${1:-build-aarch64}
shift || true

host_packages=(gcc-${triple} cmake pkg-config protobuf-c-compiler opencl-headers file)
# VMRPC_CROSS_EXTRA_PACKAGES: more :arm64 packages (scripts/board-aarch64.sh:
# libcmocka-dev for the test suites)
# shellcheck disable=SC2206
target_packages=(libc6-dev libnng-dev libmbedtls-dev libssl-dev libprotobuf-c-dev ocl-icd-opencl-dev
                 libclblast-dev ${VMRPC_CROSS_EXTRA_PACKAGES:-})

installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

missing=()
for p in "${host_packages[@]}"; do installed "$p" || missing+=("$p"); done
for p in "${target_packages[@]}"; do installed "$p:$arch" || missing+=("$p:$arch"); done

if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
      echo "cross-aarch64: need root (or sudo) to install: ${missing[*]}" >&2
      exit 77
    fi
  fi
  if ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
    echo "cross-aarch64: enabling the $arch architecture in dpkg"
    $SUDO dpkg --add-architecture "$arch"
  fi
  echo "cross-aarch64: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # exit 77 (skipped, for scripts/test.sh) when the packages cannot be had
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends --no-remove \
    "${missing[@]}" || { echo "cross-aarch64: cannot install ${missing[*]}" >&2; exit 77; }
fi

jobs=$(nproc 2>/dev/null || echo 2)
# Warnings stay visible but are not fatal here: -O3 and another target can
# raise warnings (maybe-uninitialized) that the CI build never sees.
cmake -S . -B "$dir" -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/toolchain-${triple}.cmake" \
  -DCMAKE_BUILD_TYPE=Release -DVMRPC_TESTS=OFF -DVMRPC_BENCH=OFF -DVMRPC_WERROR=OFF "$@" >/dev/null
cmake --build "$dir" -j"$jobs" --target vmagent vmclient
file "$dir/agent/vmagent" "$dir/client/vmclient"
