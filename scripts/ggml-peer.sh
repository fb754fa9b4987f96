#!/usr/bin/env bash
# Builds ggml's CPU backend (Release, -march=native, no GPU backends) from a ggml checkout and
# times it with scripts/ggml_peer_bench.c on the shapes of `kite bench --shapes llm`.
# Nothing is written inside the kite tree.
#
#   GGML_SRC=/path/to/ggml scripts/ggml-peer.sh [driver args...]
#
# Environment:
#   GGML_SRC   ggml checkout (required; llama.cpp's ggml/ directory works too)
#   BUILD_DIR  where ggml and the driver are built (default: a new temporary directory)
#   THREADS    threads for ggml (default 2)
#   JOBS       parallel build jobs (default 2)
#   KITE       a built `kite` binary: when set, kite bench runs on the same ops and threads
#              after ggml (f32 and bf16), for the side-by-side table
# Driver args pass through, e.g. --ops rope,softmax --repeat 7 --f16.
#
# ggml is built with OpenMP (its default where found), whose barriers spin between graph nodes.
# On a machine with more runnable threads than cores a spinning thread waits out the other's
# whole time slice (a floor of tens of ms per graph); OMP_WAIT_POLICY=passive in the
# environment makes the barriers sleep instead, and is what to use on a shared machine.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
: "${GGML_SRC:?set GGML_SRC to a ggml checkout}"
THREADS=${THREADS:-2}
JOBS=${JOBS:-2}
BUILD_DIR=${BUILD_DIR:-$(mktemp -d -t ggml-peer.XXXXXX)}
mkdir -p "$BUILD_DIR"

commit=$(git -C "$GGML_SRC" rev-parse HEAD 2>/dev/null || echo unknown)
echo "# ggml $GGML_SRC ($commit), build in $BUILD_DIR" >&2

cmake -S "$GGML_SRC" -B "$BUILD_DIR/ggml" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DBUILD_SHARED_LIBS=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF \
  -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF >"$BUILD_DIR/cmake.log"
cmake --build "$BUILD_DIR/ggml" -j"$JOBS" >"$BUILD_DIR/build.log"

# static libraries: ggml, ggml-cpu, ggml-base (their location moved between ggml versions)
libs=()
for name in ggml ggml-cpu ggml-base; do
  lib=$(find "$BUILD_DIR/ggml/" -name "lib$name.a" | head -n 1)
  [ -n "$lib" ] || { echo "lib$name.a not found under $BUILD_DIR/ggml" >&2; exit 1; }
  libs+=("$lib")
done
cc -O2 -std=c11 -Wall -Wextra -I"$GGML_SRC/include" "$here/ggml_peer_bench.c" \
  -o "$BUILD_DIR/ggml_peer_bench" "${libs[@]}" -lstdc++ -fopenmp -lm -lpthread

"$BUILD_DIR/ggml_peer_bench" --threads "$THREADS" "$@"

if [ -n "${KITE:-}" ]; then
  for dtype in f32 bf16; do
    for op in rms_norm silu_and_mul rope softmax; do
      "$KITE" bench --backend cpu --op "$op" --dtype "$dtype" --threads "$THREADS" --shapes llm
    done
  done
fi
