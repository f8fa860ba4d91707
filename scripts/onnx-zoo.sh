#!/usr/bin/env bash
# Real models from PyPI wheels, and the variants users make of them, through
# the importer and a live vmagent's opencl:0 against onnxruntime: issue 22's
# eight models (scripts/onnx_zoo.py lists them) as shipped (fp32), converted to
# float16 by onnxconverter-common with keep_io_types (fp16) and without
# (fp16io), quantized by onnxruntime's quantize_static in QDQ format with a
# small calibration set (qdq) and by quantize_dynamic (dyn). Each is compiled
# (vmclient compile, fixed input shapes), run and compared with onnxruntime's
# outputs of the same variant (vmclient check; tolerances in docs/onnx.md).
# Downloads, variants, inputs and references are cached under BUILD/onnx-zoo.
#
# A model or variant that the compiler refuses may only be one that
# scripts/onnx-zoo-known-refusals.txt lists ("model/variant: reason", for
# operators other work adds); every other failure (a refusal not listed, a
# crash, a mismatch) fails the script. A listed one that compiles and matches
# now is printed as a note, so the list can shrink.
#
# Usage: scripts/onnx-zoo.sh [BUILD_DIR]   (default: build)
# Exit 0 when every model and variant matches or is listed; 77 (skipped) with
# a message only when PyPI cannot be reached; 1 otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/onnx-common.sh
. "$root/scripts/onnx-common.sh"
onnx_tools onnx-zoo "${1:-}"
work=$build/onnx-zoo
known=$root/scripts/onnx-zoo-known-refusals.txt
onnx_venv "onnx, onnxruntime, onnxconverter_common, numpy" \
  onnx==1.23.2 onnxruntime onnxconverter-common numpy
mkdir -p "$work"
rc=0
"$venv/bin/python" -W ignore "$root/scripts/onnx_zoo.py" "$work" >"$work/manifest.tsv" || rc=$?
[ "$rc" -eq 77 ] && exit 77
[ "$rc" -eq 0 ] || { echo "onnx-zoo: FAILED: making the models and references" >&2; exit 1; }

rm -rf "$work/run"
onnx_agent_start "$work/run"

listed() { grep -q "^$1:" "$known" 2>/dev/null; }
bad=0
table=$work/run/table.md
printf '| model/variant | compiles | matches | error |\n|---|---|---|---|\n' >"$table"
while IFS=$'\t' read -r name path copts chopts note; do
  vmx=$work/run/${name//\//_}.vmx
  log=$work/run/${name//\//_}.log
  if [ "$path" = - ]; then
    printf '| %s | - | - | %s |\n' "$name" "$(echo "$note" | cut -c1-160)" >>"$table"
    listed "$name" || { echo "onnx-zoo: $name: $note (not listed in $known)" >&2; bad=1; }
    continue
  fi
  crc=0
  # shellcheck disable=SC2086 # options are words without spaces
  "$vmclient" compile "$path" -o "$vmx" $copts >"$log" 2>&1 </dev/null || crc=$?
  if [ "$crc" -ne 0 ]; then
    err=$(grep -m1 'compile:' "$log" | sed 's/^vmclient: compile: compiling [^:]*: //; s/: supported: .*//' |
      cut -c1-160)
    printf '| %s | no (exit %s) | - | %s |\n' "$name" "$crc" "${err:-see $log}" >>"$table"
    if [ "$crc" -eq 3 ] && listed "$name"; then continue; fi
    echo "onnx-zoo: $name: compile failed (exit $crc): $(cat "$log")" >&2
    bad=1
    continue
  fi
  hrc=0
  # shellcheck disable=SC2086
  "$vmclient" check "$vmx" --device opencl:0 $chopts >>"$log" 2>&1 </dev/null || hrc=$?
  maxerr=$(grep -o 'max abs err [^,]*' "$log" | awk '{print $4}' | sort -g | tail -1) || true
  if [ "$hrc" -eq 0 ]; then
    printf '| %s | yes | yes (max abs error %s; %s) | |\n' "$name" "${maxerr:-0}" "$note" >>"$table"
    listed "$name" && echo "note: $name compiles and matches now: remove it from $known"
  else
    printf '| %s | yes | no (exit %s) | %s |\n' "$name" "$hrc" "$(tail -1 "$log" | cut -c1-160)" >>"$table"
    echo "onnx-zoo: $name: check failed (exit $hrc): $(cat "$log")" >&2
    bad=1
  fi
done <"$work/manifest.tsv"
cat "$table"
[ "$bad" -eq 0 ] || { echo "onnx-zoo: FAILED" >&2; exit 1; }
echo "onnx-zoo: OK"
