#!/usr/bin/env bash
# Builds one libFuzzer target and runs it for a while: a campaign that looks
# for new bugs (CI's deterministic fuzz step is scripts/fuzz-ci.sh).
#
#   scripts/fuzz.sh TARGET [SECONDS]
#
# TARGET: fuzz_loader, fuzz_asm, fuzz_npy, fuzz_request or fuzz_onnx (tests/fuzz/).
# SECONDS: how long to fuzz [$VMRPC_FUZZ_SECONDS, else 60].
#
# Configures a clang build in build-fuzz/ ($VMRPC_FUZZ_BUILD) with
# -DVMRPC_FUZZ=ON (ASan + UBSan + coverage on our code), builds TARGET, and
# runs it on build-fuzz/fuzz-work/TARGET/corpus: a working copy of
# tests/fuzz/corpus/TARGET/ (seeds are merged in on every run; what the
# fuzzer adds stays there for the next run, the committed seeds are never
# touched). Prints libFuzzer's final statistics (executions, cov, ft).
# Exit status: 0 no crash; 1 a crash, leak, timeout or OOM — the input is
# left in build-fuzz/fuzz-work/TARGET/artifacts/ (copy it into
# tests/fuzz/regressions/TARGET/ once fixed); 2 bad usage.
# Extra libFuzzer flags can be passed in $VMRPC_FUZZ_FLAGS.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
if [ $# -lt 1 ] || [ $# -gt 2 ]; then usage; fi
target=$1
case "$target" in
  fuzz_loader|fuzz_asm|fuzz_npy|fuzz_request|fuzz_onnx) ;;
  *) echo "fuzz.sh: unknown target '$target'" >&2; usage ;;
esac
seconds=${2:-${VMRPC_FUZZ_SECONDS:-60}}
case "$seconds" in ''|*[!0-9]*) echo "fuzz.sh: SECONDS must be a number" >&2; exit 2 ;; esac
# shellcheck source=scripts/fuzz-common.sh
. scripts/fuzz-common.sh
build=$fuzz_build
fuzz_build_targets fuzz.sh "$target"

work=$build/fuzz-work/$target
mkdir -p "$work/corpus" "$work/artifacts"
if [ -d "tests/fuzz/corpus/$target" ]; then
  cp -n "tests/fuzz/corpus/$target"/* "$work/corpus/" 2>/dev/null || true
fi
if [ "$target" = fuzz_onnx ] && [ -d "$fuzz_onnx_data" ]; then
  for d in "$fuzz_onnx_data"/test_*; do
    [ -f "$d/model.onnx" ] && cp -n "$d/model.onnx" "$work/corpus/$(basename "$d").onnx"
  done
fi
log=$work/last.log
export ASAN_OPTIONS=${ASAN_OPTIONS:-$fuzz_asan_options}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-$fuzz_ubsan_options}
echo "== fuzz: $target for ${seconds}s (corpus $work/corpus, log $log)"
set +e
# shellcheck disable=SC2086
"$build/tests/fuzz/$target" -max_total_time="$seconds" -print_final_stats=1 \
  -timeout=20 -rss_limit_mb=2048 -artifact_prefix="$work/artifacts/" \
  ${VMRPC_FUZZ_FLAGS:-} "$work/corpus" >"$log" 2>&1
rc=$?
set -e
grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::|^Done ' "$log" || true
if [ $rc -ne 0 ]; then
  tail -n 60 "$log" >&2
  echo "fuzz.sh: $target FAILED (exit $rc); inputs:" >&2
  ls -l "$work/artifacts/" >&2
  exit 1
fi
echo "fuzz.sh: $target ok (${seconds}s, corpus $(find "$work/corpus" -type f | wc -l) files)"
