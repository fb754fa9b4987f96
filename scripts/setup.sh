#!/usr/bin/env bash
# Installs what kite needs (Debian packages) and builds it in ./build (Release).
# The CUDA plugin is built too when nvcc is on PATH and a GPU is visible, or with CI=true in the
# environment (CMake's KITE_BUILD_CUDA=AUTO; it only runs where a GPU is).
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
# clang: the libFuzzer targets (scripts/fuzz.sh); libmicrohttpd, cJSON: kite serve (and kite run's
# conversation files); OpenCL (loader, PoCL's CPU driver, CLBlast): the out-of-tree OpenCL backend
# (scripts/opencl-check.sh)
for pkg in cmake make gcc clang libdlpack-dev libopenblas-dev libdnnl-dev libmicrohttpd-dev \
  libcjson-dev pkg-config ocl-icd-opencl-dev pocl-opencl-icd libclblast-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
