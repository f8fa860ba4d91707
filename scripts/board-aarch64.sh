#!/usr/bin/env bash
# The emulated board: runs the aarch64 vmagent and vmclient here, under
# qemu-user, and drives them (scripts/test.sh's board step; README "Boards
# and phones"). It
#   1. installs qemu-user-static, cross-builds vmagent, vmclient and the vm
#      suites (tests/vm) for aarch64 into build-aarch64/
#      (scripts/cross-aarch64.sh) and builds the native vmagent, vmclient and
#      vmrpc-gen-model into build/;
#   2. unpacks an arm64 root for the emulator into build-aarch64/sysroot:
#      Debian's arm64 packages of PoCL (pocl-opencl-icd, with its LLVM and
#      clang) and of the agent's runtime libraries, fetched with
#      `apt-get download` and unpacked with `dpkg -x` (PoCL for arm64 cannot
#      be installed by multiarch beside the amd64 Python: its LLVM pulls in
#      python3:arm64). Kept between runs; refreshed when a version changes;
#      under scripts/test.sh, kept in its cache between clones
#      ($VMRPC_TEST_CACHE/board-sysroot-*, with the aarch64 kernels);
#   3. runs the vm suites under the emulator (ctest: the executable format,
#      verifier, interpreter, allocators on an aarch64 CPU), then
#      scripts/board_aarch64.py: the aarch64 agent under
#      `qemu-aarch64-static -L SYSROOT` on a free loopback port, driven by
#      the native client (info: an aarch64 host with PoCL's aarch64 OpenCL
#      device; the example MLP checked against the host's reference on the
#      OpenCL and cpu devices; bench --json; hostile frames; the vmrpc
#      package when build/venv-py exists; SIGTERM -> exit 0), then the
#      aarch64 client against the native agent;
#   4. runs it again with each deliberate break (--self-test): the run must
#      fail at the check each break targets.
#
#   scripts/board-aarch64.sh                 everything above
#   scripts/board-aarch64.sh --prepare       steps 1 and 2 only (scripts/farm-demo.sh --board)
#   scripts/board-aarch64.sh --break MODE    one run with the agent broken on
#                                            purpose (native, crash, hang,
#                                            no-opencl): must exit 1
#   VMRPC_BOARD_SELFTEST=0                   skip step 4
#
# Exit status: 0 all passed, 1 a check failed, 77 skipped (the packages
# cannot be installed or downloaded here).
set -euo pipefail
cd "$(dirname "$0")/.."

native=${VMRPC_BUILD_DIR:-build}
board=${VMRPC_BOARD_BUILD_DIR:-build-aarch64}
sysroot=$board/sysroot
t0=$(date +%s)
# one run at a time per build tree (the farm demo's --board prepares it too)
mkdir -p "$board"
exec 9>"$board/.board-lock"
flock 9
step() { echo "== board: $* ($(( $(date +%s) - t0 )) s)"; }

apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get install -y -qq --no-install-recommends --no-remove "$@" >/dev/null ||
    { $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends --no-remove "$@" >/dev/null; }
}

step "qemu-user-static, the cross build ($board/) and the native build ($native/)"
if ! command -v qemu-aarch64-static >/dev/null 2>&1; then
  apt_install qemu-user-static ||
    { echo "board: SKIPPED: cannot install qemu-user-static" >&2; exit 77; }
fi
rc=0
# the vm suites too (cmocka for arm64), run by ctest through the emulator (step 3)
VMRPC_CROSS_EXTRA_PACKAGES=libcmocka-dev scripts/cross-aarch64.sh "$board" -DVMRPC_TESTS=ON \
  "-DCMAKE_CROSSCOMPILING_EMULATOR=qemu-aarch64-static;-L;$PWD/$sysroot" >/dev/null || rc=$?
[ "$rc" = 0 ] || exit "$rc"   # 77 there: its packages cannot be installed
vm_suites=()
for f in tests/vm/test_*.c; do vm_suites+=(--target "vm_$(basename "$f" .c)"); done
cmake --build "$board" -j"$(nproc 2>/dev/null || echo 2)" "${vm_suites[@]}" >/dev/null
VMRPC_TARGETS="vmagent vmclient vmrpc-gen-model" scripts/build.sh "$native" >/dev/null

# The arm64 root: PoCL, the OpenCL ICD loader and the agent's libraries with
# everything they depend on (the C library too), as Debian ships them.
step "the arm64 root for the emulator ($sysroot/)"
roots=(pocl-opencl-icd ocl-icd-libopencl1 libnng1 libprotobuf-c1 libssl3 libmbedtls14 libcmocka0)
# The closure: the :arm64 packages and the architecture-independent ones
# (PoCL's headers and kernel sources are in libpocl2-common, arch all).
closure() {
  local names
  names=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "${roots[@]/%/:arm64}" 2>/dev/null | grep -E '^[a-z0-9]' | sort -u)
  echo "$names" | grep ':arm64$' || true
  # shellcheck disable=SC2046
  [ -z "$names" ] || apt-cache show --no-all-versions $(echo "$names" | grep -v ':') 2>/dev/null |
    awk '/^Package:/ {p = $2} /^Architecture: all/ {print p}'
}
# (apt's cache can be caught mid-update by another apt: one more try)
pkgs=$(closure) || pkgs=""
if [ -z "$pkgs" ]; then
  sleep 5
  apt-get update -qq >/dev/null 2>&1 || true
  pkgs=$(closure) || pkgs=""
fi
[ -n "$pkgs" ] || { echo "board: SKIPPED: apt knows no arm64 packages of PoCL" >&2; exit 77; }
# the versions apt would fetch now: the root is rebuilt when one changes
# shellcheck disable=SC2086
versions() { apt-cache policy $pkgs | awk '/^[^ ]/ {p = $1} /Candidate:/ {print p " " $2}'; }
stamp=$(versions) || { sleep 5; stamp=$(versions); }
# Unpacks the packages into the new folder $1 (apt-get download, dpkg -x).
make_root() {
  local root=$1 debs=$1.debs
  rm -rf "$root" "$debs"
  mkdir -p "$debs" "$root"
  # shellcheck disable=SC2086
  (cd "$debs" && apt-get download -q -o APT::Sandbox::User=root $pkgs >/dev/null) ||
    { apt-get update -qq >/dev/null 2>&1 && (cd "$debs" && apt-get download -q -o APT::Sandbox::User=root $pkgs >/dev/null); } ||
    { echo "board: SKIPPED: cannot download the arm64 packages of PoCL" >&2; rm -rf "$root" "$debs"; exit 77; }
  for deb in "$debs"/*.deb; do dpkg -x "$deb" "$root"; done
  rm -rf "$debs"
  echo "$stamp" >"$root/.packages"
}
keep=${VMRPC_TEST_CACHE:-none}
if [ "$keep" != none ] && mkdir -p "$keep" 2>/dev/null && [ -w "$keep" ]; then
  # scripts/test.sh's cache: one root per set of package versions, unpacked
  # once for every clone (under a lock, moved into place whole), and
  # $sysroot links to it; the aarch64 kernels are kept beside it
  kept=$keep/board-sysroot-$(echo "$stamp" | sha256sum | cut -c1-16)
  if [ ! -f "$kept/.packages" ]; then
    exec 8>"$keep/.board-sysroot-lock"
    flock 8
    if [ ! -f "$kept/.packages" ]; then
      make_root "$kept.new"
      rm -rf "$kept"
      mv "$kept.new" "$kept"
    fi
    exec 8>&-
  fi
  # roots of package versions no run has used for 30 days go
  find "$keep" -mindepth 1 -maxdepth 1 -name 'board-sysroot-*' ! -path "$kept" -mtime +30 \
    -exec rm -rf {} + 2>/dev/null || true
  touch "$kept"
  rm -rf "$sysroot"
  ln -s "$kept" "$sysroot"
  export VMRPC_BOARD_POCL_CACHE_DIR=$keep/pocl-aarch64
  mkdir -p "$VMRPC_BOARD_POCL_CACHE_DIR"
elif [ "$(cat "$sysroot/.packages" 2>/dev/null)" != "$stamp" ]; then
  [ ! -L "$sysroot" ] || rm -f "$sysroot"
  make_root "$sysroot"
fi
echo "board: $(echo "$pkgs" | wc -l) arm64 packages in $sysroot"

[ "${1:-}" != --prepare ] || exit 0
args=(--native-build "$native" --board-build "$board" --sysroot "$sysroot")
mkdir -p "$board/pocl-cache"
if [ "${1:-}" = --break ]; then
  step "the checks with the agent broken on purpose: ${2:-}"
  exec python3 scripts/board_aarch64.py "${args[@]}" --break "${2:?--break needs a MODE: native, crash, hang or no-opencl}"
fi
step "the vm suites (tests/vm), aarch64 builds under the emulator"
(cd "$board" && ctest -R '^vm\.' -j"$(nproc 2>/dev/null || echo 2)" --output-on-failure) | tail -n 3
step "the checks"
python3 scripts/board_aarch64.py "${args[@]}"
if [ "${VMRPC_BOARD_SELFTEST:-1}" != 0 ]; then
  step "self-test: each deliberate break must fail its check"
  python3 scripts/board_aarch64.py "${args[@]}" --self-test --term-s 10
fi
step "passed"
