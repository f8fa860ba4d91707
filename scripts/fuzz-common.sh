# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables are used by the scripts that source this
# Sourced by scripts/fuzz.sh and scripts/fuzz-ci.sh (from the source root):
# where the clang fuzz build lives, how it is built, the sanitizer options
# the targets run with, and where fuzz_onnx's seed models are.

fuzz_build=${VMRPC_FUZZ_BUILD:-build-fuzz}
fuzz_asan_options=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1
fuzz_ubsan_options=print_stacktrace=1:halt_on_error=1
# fuzz_onnx: the node models of Debian's libonnx-testdata are the seeds.
fuzz_onnx_data=/usr/share/libonnx-testdata/data/node

# fuzz_build_targets NAME TARGET...: configures $fuzz_build (clang,
# -DVMRPC_FUZZ=ON: ASan + UBSan + coverage on our code) and builds the
# targets; NAME prefixes the error message.
fuzz_build_targets() {
  local name=$1 t args=()
  shift
  if ! command -v clang >/dev/null 2>&1; then
    echo "$name: clang not found: run scripts/install-deps.sh" >&2
    exit 1
  fi
  for t in "$@"; do args+=(--target "$t"); done
  echo "== configure + build: $fuzz_build ($*)"
  cmake -S . -B "$fuzz_build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DVMRPC_FUZZ=ON -DVMRPC_TESTS=ON -DVMRPC_BENCH=OFF >/dev/null
  cmake --build "$fuzz_build" -j"${VMRPC_JOBS:-$(nproc 2>/dev/null || echo 2)}" "${args[@]}"
}
