#!/usr/bin/env bash
# Configures and builds one build tree.
#   scripts/build.sh [BUILD_DIR] [extra cmake args...]
# BUILD_DIR defaults to build/. Installs dependencies first.
# VMRPC_TARGETS="a b" builds only those targets (scripts/demo.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
dir=${1:-build}
shift || true
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
targets=()
for t in ${VMRPC_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$dir" -j"$jobs" "${targets[@]}"
