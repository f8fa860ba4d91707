#!/usr/bin/env bash
# The ONNX node test cases of onnx 1.23 (1,884 cases, opsets up to 28; Debian's
# libonnx-testdata is 1.12) through the importer, in both execution modes, on the
# OpenCL device (PoCL here): tests/compiler/test_rt_onnx_node.c over cases that
# the PyPI wheel onnx==1.23.2 generates (its backend test cases write each
# model with its inputs and expected outputs) into BUILD/onnx-node-1.23. A case
# may fail only when tests/compiler/onnx123_node_known_failures.txt lists it.
# The venv (BUILD/pyenv, shared with scripts/onnx-rapidocr.sh) makes the data
# only; the C core never needs Python.
#
# Usage: scripts/onnx-node-1.23.sh [BUILD_DIR]   (default: build)
# Exit 0 when every case passes or is listed; 77 (skipped) with a message when
# PyPI cannot be reached; 1 otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
venv=$build/pyenv
data=$build/onnx-node-1.23
runner=$build/tests/compiler_test_rt_onnx_node
version=1.23.2
[ -x "$runner" ] || { echo "onnx-node-1.23: build the tests first ($runner)" >&2; exit 1; }

have_onnx() {
  "$venv/bin/python" -c "import onnx, sys; sys.exit(onnx.__version__ != '$version')" 2>/dev/null
}
if ! have_onnx; then
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  if ! "$venv/bin/pip" install -q "onnx==$version"; then
    echo "onnx-node-1.23: SKIPPED: pip cannot install onnx==$version (is PyPI reachable?)"
    exit 77
  fi
fi
if [ ! -f "$data/.generated-$version" ]; then
  rm -rf "$data"
  # the wheel's generator, without its model-zoo cases (they would download)
  "$venv/bin/python" -W ignore - "$data" <<'EOF'
import argparse, sys, types
import onnx.backend.test.cmd_tools as ct
import onnx.backend.test.case.node as node_test
ct.model_test = types.SimpleNamespace(collect_testcases=lambda: node_test.collect_testcases())
ct.generate_data(argparse.Namespace(output=sys.argv[1]))
EOF
  touch "$data/.generated-$version"
fi

export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$build/pocl-cache}
for mode in bytecode compiled; do
  echo "== onnx-node-1.23: $mode mode"
  out=$(VMRPC_EXEC_MODE=$mode VMRPC_ONNX_TESTDATA=$data/node VMRPC_SOURCE_DIR=$root \
    VMRPC_BUILD_DIR=$build \
    VMRPC_ONNX_KNOWN_FAILURES=$root/tests/compiler/onnx123_node_known_failures.txt \
    "$runner" 2>&1) || { echo "$out"; echo "onnx-node-1.23: FAILED ($mode mode)" >&2; exit 1; }
  echo "$out" | grep -E '^(FAIL|note|total|bar) ' || true
done
echo "onnx-node-1.23: OK"
