#!/usr/bin/env bash
# Installs the Debian packages actorflow needs, only those missing. Idempotent.
# Usage: scripts/setup.sh [--test|--bench]   (adds what the tests or benchmarks need: chromium, python3-torch; valgrind)
set -euo pipefail

packages=(
  build-essential cmake ccache pkg-config
  libcaf-dev libprotobuf-dev protobuf-compiler libboost-dev
  pybind11-dev python3-dev python3-pybind11
  libdnnl-dev ocl-icd-opencl-dev opencl-c-headers libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev
  python3-numpy python3-pytest python3-tqdm python3-matplotlib
  libssl-dev libcaf-openssl0.17 openssl python3-cryptography libgloo-dev
  graphviz dataset-fashion-mnist
)
# Tests render the trace viewer in Chromium, check some layers against PyTorch and cut a cluster
# off in a network namespace (unshare, ip); benchmarks compare with PyTorch side by side.
if [[ "${1:-}" == "--test" || "${1:-}" == "--bench" ]]; then
  packages+=(chromium python3-torch util-linux iproute2)
fi
# Compile-time profiles count instructions per step with callgrind (README "### Compile time").
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(valgrind)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
if [[ "$(id -u)" != "0" ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
