#!/usr/bin/env bash
# One pass for the MLA ops on a GPU machine, from the repository root, in about 5 minutes:
# build (CUDA on, sm_90a only, the CLI, the plugin and two tests), kite check of mla_decode and
# mla_store_kv on every backend, test_bad_input and test_op_table, kite bench of mla_decode
# (DeepSeek-V3 shapes) beside the eager PyTorch absorbed form (scripts/mla_peer.py), then
# compute-sanitizer memcheck on the quick case set. Results in $OUT (default ./out).
# Where libcjson (the engine's JSON library) or dlpack.h is not installed, the copies in .deps/
# (.deps/debs/libcjson*.deb, .deps/dlpack) are used, from the checkout or the folder above it.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
DEPS=.deps
[ -d "$DEPS" ] || DEPS=../.deps
DL=()
if [ ! -f /usr/include/dlpack/dlpack.h ]; then
  mkdir -p /tmp/kd && cp -r "$DEPS/dlpack" /tmp/kd/ && DL=(-DDLPACK_INCLUDE_DIR=/tmp/kd)
fi
if ! pkg-config --exists libcjson 2> /dev/null; then
  for f in "$DEPS"/debs/libcjson*.deb; do dpkg -x "$f" /; done
fi
t0=$(date +%s)
{ cmake -S . -B b -G Ninja -DCMAKE_BUILD_TYPE=Release -DKITE_BUILD_CUDA=ON -DKITE_BUILD_PYTHON=OFF \
    "${DL[@]}" "-DKITE_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a" &&
  cmake --build b -j16 --target kite_cli kite-cuda test_bad_input test_op_table; } > "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
grep -i "warning" "$OUT/build.log" | head -5
K=b/bin/kite
$K list --op mla_decode 2>&1 | tail -6
for op in mla_decode mla_store_kv; do
  timeout 60 $K check --op $op > "$OUT/check_$op.log" 2>&1; echo "check $op rc $?"
  tail -7 "$OUT/check_$op.log"
done
(b/bin/test_bad_input | tail -2; b/bin/test_op_table | tail -2) 2>&1
timeout 90 $K bench --backend cuda --op mla_decode > "$OUT/bench.log" 2>&1; echo "bench rc $?"
grep -E "mla_decode|copy|memcpy" "$OUT/bench.log" | head -30
timeout 45 python3 scripts/mla_peer.py 2>&1 | tee "$OUT/peer.log"
left=$(( 285 - ($(date +%s) - t0) ))
[ "$left" -lt 20 ] && left=120 # past a 300 s budget: give it its own two minutes
echo "memcheck, limit ${left} s"
timeout $left compute-sanitizer --tool memcheck $K check --backend cuda --op mla_decode --quick > "$OUT/memcheck.log" 2>&1
echo "memcheck rc $?"; tail -6 "$OUT/memcheck.log"
