# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables are used by the scripts that source this
# Sourced by the scripts that check real ONNX models against onnxruntime
# (onnx-quant.sh, onnx-rapidocr.sh, onnx-recurrent.sh, onnx-zoo.sh): the
# tools they drive, the venv they share (BUILD/pyenv), PyPI downloads with
# one rule for skipping, and a vmagent serving opencl:0 on a free loopback
# port. Each script sets `root` (the source tree) before sourcing this.

# onnx_tools NAME [BUILD_DIR]: sets onnx_name, build, venv, vmclient and
# vmagent; exits 1 when the tools are not built.
onnx_tools() {
  onnx_name=$1
  build=$(cd "${2:-$root/build}" && pwd)
  venv=$build/pyenv
  vmclient=$build/client/vmclient
  vmagent=$build/agent/vmagent
  if [ ! -x "$vmclient" ] || [ ! -x "$vmagent" ]; then
    echo "$onnx_name: build vmclient and vmagent first" >&2
    exit 1
  fi
}

onnx_pypi_unreachable() {
  ! python3 -c 'import urllib.request; urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=20)' \
    2>/dev/null
}

# onnx_pip_failed WHAT: after a pip command failed: exits 77 (skipped) when
# PyPI cannot be reached, 1 (failed) when it can.
onnx_pip_failed() {
  if onnx_pypi_unreachable; then
    echo "$onnx_name: SKIPPED: pip cannot $1 (PyPI is unreachable)"
    exit 77
  fi
  echo "$onnx_name: FAILED: pip cannot $1 although PyPI is reachable" >&2
  exit 1
}

# onnx_venv MODULES PACKAGE...: makes sure the venv imports MODULES (a
# Python import list such as "onnx, numpy"); pip installs the packages
# when it does not.
onnx_venv() {
  local modules=$1
  shift
  "$venv/bin/python" -c "import $modules" 2>/dev/null && return 0
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q "$@" || onnx_pip_failed "install $*"
}

# onnx_download DIR SPEC...: the wheels SPEC names (no dependencies) into DIR,
# each fetched once (DIR/NAME.done marks it).
onnx_download() {
  local dir=$1 spec
  shift
  mkdir -p "$dir"
  for spec in "$@"; do
    [ -f "$dir/${spec%%==*}.done" ] && continue
    "$venv/bin/pip" download -q --no-deps -d "$dir" "$spec" || onnx_pip_failed "download $spec"
    touch "$dir/${spec%%==*}.done"
  done
}

# onnx_agent_start DIR: a vmagent serving opencl:0 (PoCL here) on a free
# loopback port with its cache in DIR/cache and its output in
# DIR/agent.out; exports VMCLIENT_HOST and stops the agent when the script
# exits.
onnx_agent_start() {
  local dir=$1 url='' _
  export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$build/pocl-cache}
  mkdir -p "$dir"
  "$vmagent" --listen tcp://127.0.0.1:0 --device opencl:0 --cache-dir "$dir/cache" >"$dir/agent.out" 2>&1 &
  onnx_agent=$!
  trap 'kill $onnx_agent 2>/dev/null || true' EXIT
  for _ in $(seq 1 600); do
    url=$(sed -n 's/^vmagent listening on //p' "$dir/agent.out")
    [ -n "$url" ] && break
    kill -0 "$onnx_agent" 2>/dev/null || { cat "$dir/agent.out" >&2; exit 1; }
    sleep 0.1
  done
  [ -n "$url" ] || { echo "$onnx_name: vmagent did not start" >&2; exit 1; }
  export VMCLIENT_HOST=$url
}
