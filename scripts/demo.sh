#!/usr/bin/env bash
# The vmrpc demo, on one machine: installs dependencies, builds vmagent,
# vmclient and the example-model generator, starts a vmagent on a free
# loopback port serving PoCL's OpenCL device, and drives it with vmclient
# the way you would drive a phone or a board: info, upload, run with an
# .npy input, check against the host reference, bench (timed on the
# device), profile, then imports a real ONNX model (a text recognizer) and
# runs it remotely. The agent is stopped and the scratch files removed on
# every exit, Ctrl-C included.
#
#   scripts/demo.sh            build into build/ (only what the demo needs)
#   VMRPC_BUILD_DIR=DIR ...    another build directory
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

t_start=$(date +%s)
build=${VMRPC_BUILD_DIR:-build}
agent_pid=""
work=""

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$agent_pid" ] && kill -0 "$agent_pid" 2>/dev/null; then
    kill -TERM "$agent_pid" 2>/dev/null || true
    # SIGTERM is a clean shutdown; give it 10 s, then make sure.
    for _ in $(seq 1 100); do
      kill -0 "$agent_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$agent_pid" 2>/dev/null || true
    wait "$agent_pid" 2>/dev/null || true
  fi
  if [ -n "$work" ] && [ -d "$work" ]; then rm -rf "$work"; fi
  if [ $rc -eq 130 ] || [ $rc -eq 143 ]; then
    echo "demo: interrupted; the agent is stopped and the scratch files removed" >&2
  elif [ $rc -ne 0 ]; then
    echo "demo: FAILED (exit $rc)" >&2
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step() { printf '\n== %s\n' "$*"; }
show() {
  # Prints a command as the user would type it, then runs it.
  printf '$ %s\n' "$*" | sed -e "s|$bin/client/||g" -e "s|$bin/examples/||g"
  "$@"
}

step "dependencies and build ($build/)"
VMRPC_TARGETS="vmagent vmclient vmrpc-gen-model" scripts/build.sh "$build"
bin=$PWD/$build
vmclient=$bin/client/vmclient
vmagent=$bin/agent/vmagent
gen=$bin/examples/vmrpc-gen-model

work=$(mktemp -d "$PWD/$build/demo.XXXXXX")
cd "$work"

step "example models: weights from a seeded PRNG, .npy input and host reference output"
show "$gen" mlp --seed 1 --out mlp.vmx --input mlp_x.npy --expected mlp_y.npy --npy
show "$gen" cnn --seed 1 --out cnn.vmx --input cnn_x.npy --expected cnn_y.npy --npy
show "$vmclient" stats mlp.vmx

step "start vmagent on a free loopback port (PoCL, opencl:0)"
# Compiled OpenCL programs and the executable store live in the build
# tree, so a second run of the demo starts warm.
export POCL_CACHE_DIR=$bin/pocl-cache
mkdir -p "$POCL_CACHE_DIR"
"$vmagent" --listen tcp://127.0.0.1:0 --device opencl:0 --kernels cpu=allow --cache-dir "$bin/demo-cache" \
  --log-level warn >agent.out 2>agent.log &
agent_pid=$!
url=""
for _ in $(seq 1 600); do
  url=$(sed -n 's/^vmagent listening on //p' agent.out)
  [ -n "$url" ] && break
  if ! kill -0 "$agent_pid" 2>/dev/null; then
    echo "demo: vmagent exited before listening:" >&2
    cat agent.log >&2
    exit 1
  fi
  sleep 0.1
done
[ -n "$url" ] || { echo "demo: vmagent did not start within 60 s" >&2; exit 1; }
echo "vmagent $agent_pid listening on $url"
export VMCLIENT_HOST=$url # every vmclient below talks to it

step "the agent and its devices"
show "$vmclient" info

step "upload (SHA-256 first: a store hit sends nothing)"
show "$vmclient" upload mlp.vmx

step "run the MLP on the device; outputs come back as .npy"
echo "(a cold first run includes building the OpenCL kernels; the agent caches the binaries)"
show "$vmclient" run mlp.vmx --input x=mlp_x.npy --device opencl:0 --output-dir out

step "check the device's output against the host reference (numpy allclose rules)"
show "$vmclient" check mlp.vmx --input x=mlp_x.npy --expected mlp_y.npy --rtol 1e-4 --atol 1e-6
show "$vmclient" check cnn.vmx --input x=cnn_x.npy --expected cnn_y.npy --rtol 1e-4 --atol 1e-6

step "bench: TVM's time_evaluator on the device (the network is never timed)"
show "$vmclient" bench mlp.vmx --input x=mlp_x.npy --number 10 --repeat 20

step "profile: one run with per-operator timing"
show "$vmclient" profile mlp.vmx --input x=mlp_x.npy

step "a real model: import ONNX (the PP-OCRv4 text recognizer of the rapidocr-onnxruntime wheel)"
# The model comes inside a PyPI wheel; a venv in the build tree holds it with
# onnxruntime, which renders the reference here (the C side never needs
# Python). Without PyPI the step is skipped, said so.
venv=$bin/pyenv
if "$venv/bin/python" -c "import onnxruntime, rapidocr_onnxruntime, PIL, numpy" 2>/dev/null ||
   { python3 -m venv "$venv" && "$venv/bin/pip" install -q onnxruntime rapidocr-onnxruntime==1.4.4 pillow numpy; }; then
  ref=$root/tests/onnx/rapidocr_ref.py
  models=$("$venv/bin/python" "$ref" --models)
  cp "$models/ch_PP-OCRv4_rec_infer.onnx" rec.onnx
  mkdir -p ocr
  "$venv/bin/python" "$ref" ocr # renders "Hello vmrpc 2026" into ocr/rec_x.npy; onnxruntime's reading
  show "$vmclient" compile rec.onnx -o rec.vmx --input-shape x=1,3,48,320
  show "$vmclient" run rec.vmx --input x=ocr/rec_x.npy --device opencl:0 --output-dir ocr/out
  got=$("$venv/bin/python" "$ref" --decode ocr/out/output_softmax_11_tmp_0.npy)
  want=$(cat ocr/rec_text.txt)
  echo "the recognizer on the agent reads: '$got' (onnxruntime reads: '$want')"
  [ "$got" = "$want" ] || { echo "demo: the imported model reads another text" >&2; exit 1; }
  show "$vmclient" bench rec.vmx --input x=ocr/rec_x.npy --device opencl:0 --number 1 --repeat 10
else
  echo "demo: skipped the real model: pip could not install onnxruntime and rapidocr-onnxruntime (is PyPI reachable?)"
fi

step "the agent's counters"
show "$vmclient" stats

step "stop the agent"
kill -TERM "$agent_pid"
wait "$agent_pid" && echo "vmagent stopped cleanly"
agent_pid=""
echo
echo "demo: OK in $(($(date +%s) - t_start)) s"
