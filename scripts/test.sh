#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test suite: first the normal
# build (build/), then the same tests in the sanitizer build (build-asan/,
# AddressSanitizer + UndefinedBehaviorSanitizer), then a short run of every
# libFuzzer target (scripts/fuzz.sh, clang build in build-fuzz/).
#
#   scripts/test.sh            everything
#   VMRPC_SKIP_ASAN=1 ...      no sanitizer build (quicker while developing)
#   VMRPC_SKIP_FUZZ=1 ...      no fuzzing
#   VMRPC_FUZZ_SECONDS=N       seconds per fuzz target [60]
#   VMRPC_LOAD_SECONDS=N       length of the load test (agent.test_load) [60]
#   VMRPC_SKIP_ONNX_MODELS=1   no rapidocr check (scripts/onnx-rapidocr.sh; it skips
#                              itself when PyPI cannot be reached)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

jobs=$(nproc 2>/dev/null || echo 2)
# PoCL is the OpenCL device on machines without a GPU; keep its kernel cache
# inside the build tree so runs do not depend on a home directory.
export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$PWD/build/pocl-cache}
mkdir -p "$POCL_CACHE_DIR"

run_suite() {
  local dir=$1; shift
  echo "== configure + build: $dir"
  cmake -S . -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j"$jobs"
  echo "== test: $dir"
  (cd "$dir" && ctest --output-on-failure -j"$jobs")
}

run_suite build -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [ "${VMRPC_SKIP_ONNX_MODELS:-0}" != 1 ]; then
  echo "== ONNX models against onnxruntime: scripts/onnx-rapidocr.sh"
  rc=0
  scripts/onnx-rapidocr.sh build || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || exit "$rc"
fi
if [ "${VMRPC_SKIP_ASAN:-0}" != 1 ]; then
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DVMRPC_SANITIZE=ON -DVMRPC_BENCH=OFF
fi
if [ "${VMRPC_SKIP_FUZZ:-0}" != 1 ]; then
  for target in fuzz_loader fuzz_asm fuzz_npy fuzz_request fuzz_onnx; do
    scripts/fuzz.sh "$target" "${VMRPC_FUZZ_SECONDS:-60}"
  done
fi
echo "test.sh: all suites passed"
