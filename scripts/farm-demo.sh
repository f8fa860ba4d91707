#!/usr/bin/env bash
# The device-farm demo (docs/farm.md), on one machine: builds vmagent and the
# example-model generator, installs the vmrpc package with the farm's engine
# (Dask distributed) into the venv build/venv-py (as scripts/test.sh does),
# then starts on loopback a head and three vmagents, each served by its own
# node, fans `vmrpc-farm bench --all` out over them, kills one agent while it
# holds a job, and writes DIR/farm-results.json and DIR/farm-results.xml;
# then benchmarks two labels into a results store and writes a check and a report.
# Every process it starts is stopped on exit, Ctrl-C included.
#
#   scripts/farm-demo.sh [--out DIR] [--board]   (default DIR: the current directory)
#
# --board adds an emulated board: the aarch64 vmagent under qemu-user
# (scripts/board-aarch64.sh --prepare builds it and its arm64 root), served
# by a node tagged arch=aarch64; a `check --where arch=aarch64` job must
# land on it and pass.
#
# Exit status 0 when every job dispatched is accounted for (a final state in
# both files), 1 when one is not, other values when the demo could not run.
set -euo pipefail
out=.
board=()
while [ $# -gt 0 ]; do
  case $1 in
    --out) [ $# -ge 2 ] || { echo "farm-demo: --out needs a directory" >&2; exit 2; }
           out=$2; shift 2 ;;
    --out=*) out=${1#--out=}; shift ;;
    --board) board=(--board "${VMRPC_BOARD_BUILD_DIR:-build-aarch64}"); shift ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "farm-demo: unknown argument '$1' (usage: scripts/farm-demo.sh [--out DIR] [--board])" >&2
       exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."

build=${VMRPC_BUILD_DIR:-build}
echo "== dependencies and build ($build/)"
VMRPC_TARGETS="vmagent vmclient vmrpc-gen-model" scripts/build.sh "$build"
venv=$build/venv-py
echo "== the vmrpc package with the farm extra, into $venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q ".[farm]" numpy
export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$PWD/$build/pocl-cache}
mkdir -p "$POCL_CACHE_DIR"
if [ ${#board[@]} -gt 0 ]; then
  echo "== the emulated board (scripts/board-aarch64.sh --prepare)"
  VMRPC_BUILD_DIR=$build scripts/board-aarch64.sh --prepare
fi
VMRPC_BUILD_DIR=$PWD/$build "$venv/bin/python" scripts/farm_demo.py --out "$out" "${board[@]}"
# The farm remembers (docs/farm.md): two labels into a results store, then
# history, check and the HTML report: DIR/farm-results.db, farm-check.xml,
# farm-check.json, farm-report.html.
VMRPC_BUILD_DIR=$PWD/$build exec "$venv/bin/python" scripts/farm_store_demo.py --out "$out"
