# Sourced by the device scripts (gpu-check.sh, cpu-check.sh): sets the array `dlpack` to the
# CMake arguments that find dlpack/dlpack.h. Where it is not installed, the copy in .deps/dlpack/
# is used from outside the source tree: libkite's exported include paths may not point into it.
dlpack=()
if [ ! -f /usr/include/dlpack/dlpack.h ] && [ -f .deps/dlpack/dlpack.h ]; then
  mkdir -p /tmp/kite-deps && cp -r .deps/dlpack /tmp/kite-deps/
  dlpack=(-DDLPACK_INCLUDE_DIR=/tmp/kite-deps)
fi
