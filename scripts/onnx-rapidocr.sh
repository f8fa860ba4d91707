#!/usr/bin/env bash
# End-to-end check of the ONNX importer on two real models: the rapidocr
# text-line classifier and the PP-OCRv4 text recognizer (inside the PyPI wheel
# rapidocr-onnxruntime 1.4.4). A venv (BUILD/pyenv) gets onnxruntime, the
# wheel, Pillow and NumPy: they make the reference only, the C core never
# needs Python. A line of text is rendered, both models run with onnxruntime,
# then vmclient compiles each .onnx on the fly and runs it on a vmagent
# serving opencl:0 (PoCL here) and compares (vmclient check, rtol 1e-3, atol
# 1e-4; the recognizer also compiled with --fuse-elementwise); the recognizer's
# output must also decode to the same text.
#
# Usage: scripts/onnx-rapidocr.sh [BUILD_DIR]   (default: build)
# Exit 0 when both match; 77 (skipped) with a message when PyPI cannot be
# reached; 1 otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/onnx-common.sh
. "$root/scripts/onnx-common.sh"
onnx_tools onnx-rapidocr "${1:-}"
work=$build/onnx-rapidocr
onnx_venv "onnxruntime, rapidocr_onnxruntime, PIL, numpy" \
  onnxruntime rapidocr-onnxruntime==1.4.4 pillow numpy

rm -rf "$work"
mkdir -p "$work/out"
py=$venv/bin/python
ref=$root/tests/onnx/rapidocr_ref.py
"$py" "$ref" "$work"
models=$("$py" "$ref" --models)

onnx_agent_start "$work"

"$vmclient" compile "$models/ch_ppocr_mobile_v2.0_cls_infer.onnx" -o "$work/cls.vmx" --input-shape x=1,3,48,192
"$vmclient" compile "$models/ch_PP-OCRv4_rec_infer.onnx" -o "$work/rec_fused.vmx" --input-shape x=1,3,48,320 \
  --fuse-elementwise
"$vmclient" check "$models/ch_ppocr_mobile_v2.0_cls_infer.onnx" --device opencl:0 \
  --input x="$work/cls_x.npy" -e "$work/cls_y.npy" --rtol 1e-3 --atol 1e-4
"$vmclient" check "$models/ch_PP-OCRv4_rec_infer.onnx" --device opencl:0 \
  --input x="$work/rec_x.npy" -e "$work/rec_y.npy" --rtol 1e-3 --atol 1e-4 -o "$work/out"
# the same with elementwise chains fused into cl.elementwise calls
"$vmclient" check "$work/rec_fused.vmx" --device opencl:0 \
  --input x="$work/rec_x.npy" -e "$work/rec_y.npy" --rtol 1e-3 --atol 1e-4
want=$(cat "$work/rec_text.txt")
got=$("$py" "$ref" --decode "$work/out/output_softmax_11_tmp_0.npy")
echo "onnx-rapidocr: onnxruntime reads '$want', vmrpc reads '$got'"
[ "$got" = "$want" ] || { echo "onnx-rapidocr: FAILED: the texts differ" >&2; exit 1; }
echo "onnx-rapidocr: OK"
