#!/usr/bin/env bash
# The deterministic fuzz step of scripts/test.sh: the same tree gives the
# same result and the same statistics on every run.
#
#   scripts/fuzz-ci.sh [TARGET...]
#
# TARGET: fuzz_loader, fuzz_asm, fuzz_npy, fuzz_request, fuzz_onnx (tests/fuzz/);
# none: all five. For each target, in the clang build $VMRPC_FUZZ_BUILD
# (build-fuzz/, configured as scripts/fuzz.sh does):
#  1. replay: every committed input runs once, unmutated: the seeds
#     (tests/fuzz/corpus/TARGET/; for fuzz_onnx the node models of Debian's
#     libonnx-testdata) and every input that ever crashed
#     (tests/fuzz/regressions/TARGET/);
#  2. smoke: a fixed-seed, fixed-count run (-seed=$VMRPC_FUZZ_SEED [1],
#     -runs=the target's count below x $VMRPC_FUZZ_RUNS_SCALE [1]) that starts
#     from those same inputs only, in a fresh temporary corpus that is deleted
#     afterwards (never the work corpus of scripts/fuzz.sh), with corpus
#     reloading off, one process, and address-space randomisation off
#     (setarch -R): libFuzzer feeds the operands of the target's comparisons
#     back into its mutations, and some of those are addresses, so with ASLR
#     two runs of the same seed mutate differently after a few 100,000
#     executions; and with -use_cmp=0 (no comparison feedback), since ASLR off
#     alone still left runs from folders of different path lengths apart.
#     Where setarch -R is refused (a container without the personality
#     syscall) -use_cmp=0 alone keeps it repeatable; the line says which.
#     One exception: fuzz_request's agent serves Invokes in its own threads
#     against 10 ms deadlines and the harness's 30 ms Cancel watchdog, so
#     which of those paths a request takes depends on timing: its replay and
#     its executions are fixed, its cov and ft vary by a few (marked
#     "timing-dependent").
# Prints one line per target: inputs replayed, then the smoke's executions,
# cov, ft, corpus size and new units.
# Exit status: 0 all passed; 1 a replayed input or the smoke crashed, leaked,
# timed out or ran out of memory (its input is kept in
# $VMRPC_FUZZ_BUILD/fuzz-ci/TARGET/: see "Fuzzing" in docs/security.md for how
# a finding becomes a regression input); 2 bad usage.
# Time-bound campaigns that look for new bugs are scripts/fuzz.sh's job.
set -euo pipefail
cd "$(dirname "$0")/.."

all="fuzz_loader fuzz_asm fuzz_npy fuzz_request fuzz_onnx"
usage() { sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
targets=${*:-$all}
for t in $targets; do
  case " $all " in *" $t "*) ;; *) echo "fuzz-ci.sh: unknown target '$t'" >&2; usage ;; esac
done
# Smoke executions per target: all five together took 290 s on a 2-core
# machine shared with other builds (load average 20), less than the 5 x 60 s
# of the time-bound runs this step replaced; a quiet machine needs less.
# All but fuzz_npy were halved when scripts/test.sh passed its 30-minute
# budget (fuzz_request ~20 ms an execution: an agent, deadlines, a
# watchdog; fuzz_onnx whole compiles); VMRPC_FUZZ_RUNS_SCALE=2 gives the
# old counts.
runs_of() {
  case "$1" in
    fuzz_loader) echo 100000 ;;
    fuzz_asm) echo 150000 ;;
    fuzz_npy) echo 1000000 ;;
    fuzz_request) echo 5000 ;;
    fuzz_onnx) echo 50000 ;;
  esac
}
seed=${VMRPC_FUZZ_SEED:-1}
scale=${VMRPC_FUZZ_RUNS_SCALE:-1}
for v in "$seed" "$scale"; do
  case "$v" in ''|*[!0-9]*) echo "fuzz-ci.sh: VMRPC_FUZZ_SEED and VMRPC_FUZZ_RUNS_SCALE must be numbers" >&2; exit 2 ;; esac
done
# shellcheck source=scripts/fuzz-common.sh
. scripts/fuzz-common.sh
build=$fuzz_build
# shellcheck disable=SC2086
fuzz_build_targets fuzz-ci.sh $targets

# Fixed (not taken from the environment), as everything else that decides
# the outcome.
export ASAN_OPTIONS=$fuzz_asan_options
export UBSAN_OPTIONS=$fuzz_ubsan_options

# Lists TARGET's committed inputs, one path a line, in name order.
inputs_of() {
  local t=$1 d
  for d in "tests/fuzz/corpus/$t" "tests/fuzz/regressions/$t"; do
    [ -d "$d" ] && find "$d" -maxdepth 1 -type f ! -name '.*' | LC_ALL=C sort
  done
  if [ "$t" = fuzz_onnx ] && [ -d "$fuzz_onnx_data" ]; then
    find "$fuzz_onnx_data" -mindepth 2 -maxdepth 2 -path '*/test_*/model.onnx' -type f | LC_ALL=C sort
  fi
}

# field NAME LOG: NAME's value (cov, ft, corp) on libFuzzer's final DONE line;
# stat NAME LOG: a stat:: figure of -print_final_stats.
field() { grep -E '^#[0-9]+[[:space:]]+DONE' "$2" | tail -n 1 | sed -nE "s/.* $1: ([^ ]+).*/\1/p"; }
stat() { sed -nE "s/^stat::$1:[[:space:]]+([0-9]+).*/\1/p" "$2" | tail -n 1; }

# ASLR off if this machine allows it (see 2. above).
# Comparison feedback off too: with ASLR off, runs of one tree in two
# folders of different path lengths still drifted apart (the stack, and
# so the addresses compared, move with the environment and arguments).
norandom=(setarch "$(uname -m)" -R)
cmp_flag=-use_cmp=0
mode="aslr-off, use_cmp=0"
if ! "${norandom[@]}" true 2>/dev/null; then
  norandom=()
  mode=use_cmp=0
  echo "fuzz-ci.sh: setarch -R is refused here: smoke runs with -use_cmp=0 only" >&2
fi

failed=0
fail() {
  local t=$1 what=$2 log=$3
  tail -n 60 "$log" >&2
  echo "fuzz-ci.sh: $t FAILED in the $what (log $log; crash input in $work/)" >&2
  failed=1
}

for t in $targets; do
  bin=$build/tests/fuzz/$t
  work=$build/fuzz-ci/$t
  rm -rf "$work"
  mkdir -p "$work/corpus"
  mapfile -t inputs < <(inputs_of "$t")
  if [ "${#inputs[@]}" = 0 ]; then
    echo "fuzz-ci.sh: $t has no committed inputs" >&2
    exit 1
  fi
  # 1. replay: libFuzzer runs files named on its command line once each.
  set +e
  "$bin" -timeout=60 -rss_limit_mb=2048 -artifact_prefix="$work/" "${inputs[@]}" \
    >"$work/replay.log" 2>&1
  rc=$?
  set -e
  if [ $rc -ne 0 ]; then fail "$t" replay "$work/replay.log"; continue; fi
  replayed=$(grep -c '^Executed ' "$work/replay.log" || true)
  if [ "$replayed" != "${#inputs[@]}" ]; then
    echo "fuzz-ci.sh: $t replayed $replayed of ${#inputs[@]} inputs" >&2
    failed=1
    continue
  fi
  # 2. smoke: numbered copies so that the load order (by size, then name) is
  # fixed whatever the paths.
  i=0
  for f in "${inputs[@]}"; do
    cp "$f" "$work/corpus/$(printf '%05d' $i)"
    i=$((i + 1))
  done
  runs=$(($(runs_of "$t") * scale))
  set +e
  # shellcheck disable=SC2086
  "${norandom[@]}" "$bin" -seed="$seed" -runs="$runs" -reload=0 $cmp_flag -print_final_stats=1 \
    -timeout=60 -rss_limit_mb=2048 -artifact_prefix="$work/" "$work/corpus" \
    >"$work/smoke.log" 2>&1
  rc=$?
  set -e
  if [ $rc -ne 0 ]; then fail "$t" "smoke (-seed=$seed -runs=$runs)" "$work/smoke.log"; continue; fi
  note=$mode
  [ "$t" = fuzz_request ] && note="$mode, cov/ft timing-dependent"
  printf 'fuzz-ci: %-12s replayed %4d, seed %s runs %d (%s): executions %s cov %s ft %s corp %s new_units %s\n' \
    "$t" "$replayed" "$seed" "$runs" "$note" "$(stat number_of_executed_units "$work/smoke.log")" \
    "$(field cov "$work/smoke.log")" "$(field ft "$work/smoke.log")" \
    "$(field corp "$work/smoke.log")" "$(stat new_units_added "$work/smoke.log")"
  rm -rf "$work/corpus"
done
[ $failed = 0 ] || exit 1
echo "fuzz-ci.sh: all targets passed"
