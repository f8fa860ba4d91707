#!/usr/bin/env bash
# The ONNX import benchmark (bench/bench_onnx.py): the PP-OCRv4 recognizer
# compiled by vmrpc, timed on a vmagent's opencl:0 against onnxruntime on the
# CPU in the same run, plus compile time and peak compile memory for it and a
# generated 20 MB model. Prints JSON (also written to BUILD_DIR/bench-onnx.json).
#
#   scripts/bench-onnx.sh [BUILD_DIR] [REPEAT]     (defaults: build, 20)
#
# The venv BUILD_DIR/pyenv (made by scripts/onnx-rapidocr.sh too) gets
# onnxruntime, rapidocr-onnxruntime 1.4.4 (the model), onnx (to write the
# 20 MB model) and NumPy: references and tooling only, never the C core.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
repeat=${2:-20}
VMRPC_TARGETS="vmagent vmclient" "$root/scripts/build.sh" "$build" >/dev/null
build=$(cd "$build" && pwd)
venv=$build/pyenv
if ! "$venv/bin/python" -c "import onnxruntime, rapidocr_onnxruntime, onnx, numpy" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q onnxruntime rapidocr-onnxruntime==1.4.4 onnx pillow numpy
fi
export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$build/pocl-cache}
mkdir -p "$POCL_CACHE_DIR"
"$venv/bin/python" "$root/bench/bench_onnx.py" --build "$build" --repeat "$repeat" | tee "$build/bench-onnx.json"
