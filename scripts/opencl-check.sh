#!/usr/bin/env bash
# The OpenCL backend (backends-external/opencl) built and checked the way a vendor's plugin is:
#   1. installs kite's Release build ($BUILD, default build) into a fresh prefix;
#   2. configures and builds the plugin against that prefix only (CMAKE_PREFIX_PATH), and
#      installs libkite-opencl.so beside the installed libkite.so, where kite loads plugins from;
#   3. runs the installed `kite check --backend opencl $QUICK` plus this script's arguments, and
#      fails on any failure, or when no OpenCL device is present.
# Environment: BUILD; QUICK (default --quick, the reduced case set; QUICK= runs the full one);
# PREFIX (default: a temporary folder, removed afterwards; a PREFIX given is kept, as
# gpu-check.sh benchmarks the same install next).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
QUICK=${QUICK---quick}
if [ -z "${PREFIX:-}" ]; then
  PREFIX=$(mktemp -d)
  trap 'rm -rf "$PREFIX"' EXIT
fi
# an OpenCL loader and at least one driver (ICD) are needed before anything else
if ! ldconfig -p | grep 'libOpenCL\.so\.1' > /dev/null; then # no -q: pipefail and SIGPIPE
  echo "opencl-check: no OpenCL loader (libOpenCL.so.1) on this machine: install ocl-icd-libopencl1" \
    "and a driver (pocl-opencl-icd for the CPU; the GPU vendor's ICD)" >&2
  exit 1
fi
if [ -z "${OCL_ICD_VENDORS:-}" ] && ! ls /etc/OpenCL/vendors/*.icd > /dev/null 2>&1; then
  echo "opencl-check: no OpenCL driver registered (no /etc/OpenCL/vendors/*.icd, no OCL_ICD_VENDORS)" >&2
  exit 1
fi
t0=$(date +%s)
cmake --install "$BUILD" --prefix "$PREFIX" > /dev/null
cmake -S backends-external/opencl -B "$PREFIX/build-opencl" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$PREFIX" > "$PREFIX/opencl-configure.log" 2>&1 ||
  { cat "$PREFIX/opencl-configure.log"; exit 1; }
cmake --build "$PREFIX/build-opencl" -j"$(nproc)" > "$PREFIX/opencl-build.log" 2>&1 ||
  { cat "$PREFIX/opencl-build.log"; exit 1; }
cmake --install "$PREFIX/build-opencl" --prefix "$PREFIX" > /dev/null
# the kernels' binaries are cached in ~/.cache/kite/opencl (keyed by source, device and driver)
# and PoCL's in ~/.cache/pocl, as the Python venv is: only the first run on a machine compiles
# a caller's own queue and cl_mem as DLPack tensors, against the installed plugin (the file
# kite loads, as a program linking -lkite-opencl from the prefix gets it)
LD_LIBRARY_PATH="$PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$PREFIX/build-opencl/test_opencl_caller_mem"
# which ops the plugin serves (every other op stays on the backends that had it)
"$PREFIX/bin/kite" list --backend opencl
# shellcheck disable=SC2086
"$PREFIX/bin/kite" check --backend opencl $QUICK "$@"
echo "opencl-check: install, plugin build and check took $(($(date +%s) - t0)) s"
