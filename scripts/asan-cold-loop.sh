#!/usr/bin/env bash
# Runs the OpenCL suites of the sanitizer build again and again, each time
# with a fresh, empty PoCL kernel cache (what a new CI machine sees), and
# counts the runs that pass: the check that LeakSanitizer's exit scan
# survives PoCL compiling kernels (cmake/sanitizer_defaults.c).
#
#   scripts/asan-cold-loop.sh [RUNS] [CTEST_REGEX]
#
# RUNS: how many runs [20]. CTEST_REGEX: the suites
# ['^(examples\.test_rt_models|opencl\.)' : the models, every opencl.*
# suite, the cl.kernel suite included].
# Needs a configured build-asan/ ($VMRPC_ASAN_BUILD); builds it first.
# Logs of failed runs stay in build-asan/cold-loop/. Exit status: 0 when
# every run passed, 1 otherwise, 2 bad usage.
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
regex=${2:-'^(examples\.test_rt_models|opencl\.)'}
case "$runs" in ''|*[!0-9]*) echo "asan-cold-loop.sh: RUNS must be a number" >&2; exit 2 ;; esac
build=${VMRPC_ASAN_BUILD:-build-asan}
if [ ! -f "$build/CMakeCache.txt" ]; then
  echo "asan-cold-loop.sh: configure $build first (see scripts/test.sh)" >&2
  exit 2
fi
cmake --build "$build" -j"$(nproc 2>/dev/null || echo 2)" >/dev/null || exit 1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
logs=$build/cold-loop
mkdir -p "$logs"
passed=0
for i in $(seq 1 "$runs"); do
  cache=$(mktemp -d "${TMPDIR:-/tmp}/vmrpc-pocl-cold.XXXXXX")
  if (cd "$build" && POCL_CACHE_DIR=$cache ctest -R "$regex" --output-on-failure \
        -j"$(nproc 2>/dev/null || echo 2)") >"$logs/run-$i.log" 2>&1; then
    passed=$((passed + 1))
    rm -f "$logs/run-$i.log"
    echo "run $i: passed"
  else
    echo "run $i: FAILED (log: $logs/run-$i.log)"
  fi
  rm -rf "$cache"
done
echo "asan-cold-loop.sh: $passed of $runs cold-cache runs passed"
[ "$passed" = "$runs" ]
