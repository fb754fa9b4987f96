# Sourced by the device scripts (gpu-check.sh, cpu-check.sh): sets the array `dlpack` to the
# CMake arguments that find dlpack/dlpack.h. Where it is not installed, the copy in .deps/dlpack/
# is used from outside the source tree: libkite's exported include paths may not point into it.
dlpack=()
if [ ! -f /usr/include/dlpack/dlpack.h ] && [ -f .deps/dlpack/dlpack.h ]; then
  mkdir -p /tmp/kite-deps && cp -r .deps/dlpack /tmp/kite-deps/
  dlpack=(-DDLPACK_INCLUDE_DIR=/tmp/kite-deps)
fi

# The same for oneDNN (the cpu.onednn variant): where libdnnl-dev is not installed, a copied tree
# .deps/onednn/{include/oneapi/dnnl, lib/libdnnl.so.2.6 and its libOpenCL.so.1} is used; sets the
# array `onednn` and puts the copy on LD_LIBRARY_PATH.
onednn=()
if [ ! -f /usr/include/oneapi/dnnl/dnnl.h ] && [ -f .deps/onednn/lib/libdnnl.so.2.6 ]; then
  mkdir -p /tmp/kite-deps && cp -r .deps/onednn /tmp/kite-deps/
  ln -sf libdnnl.so.2.6 /tmp/kite-deps/onednn/lib/libdnnl.so.2
  ln -sf libdnnl.so.2 /tmp/kite-deps/onednn/lib/libdnnl.so
  onednn=(-DKITE_ONEDNN_ROOT=/tmp/kite-deps/onednn)
  export LD_LIBRARY_PATH=/tmp/kite-deps/onednn/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
