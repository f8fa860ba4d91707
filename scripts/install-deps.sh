#!/usr/bin/env bash
# Installs the Debian packages vmrpc builds, tests and runs with.
# Idempotent and non-interactive: packages already installed are skipped, and
# nothing is done at all when everything is present.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config clang ccache
  libnng-dev libmbedtls-dev libssl-dev
  libprotobuf-c-dev protobuf-c-compiler libonnx-dev
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo
  libclblast-dev libopenblas-dev
  libcmocka-dev libonnx-testdata fonts-dejavu-core
  libclang-rt-14-dev
  openssl
  python3 python3-dev python3-venv
  postgresql chromium
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
