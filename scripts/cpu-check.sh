#!/usr/bin/env bash
# One pass over the CPU backend on a machine whose CPU has more than the development host's
# AVX2 (AVX-512, AVX-512-BF16, VNNI), from the repository root:
#   build    configure + build (Release), CPU backends only
#   check    kite check --backend cpu under every KITE_CPU_ISA cap the CPU reaches, and ctest
#   bench    kite bench --backend cpu, THREADS threads: linear (f32, bf16), linear_quant (int8),
#            fused_moe, and the bf16 core ops at LLM shapes
# Stages run in that order; pass some of their names to run only those (default: all).
# Logs go to $OUT (default ./out); a short table of the kernel-by-kernel GEMM rates comes last.
# Environment: BUILD (default build-cpu), JOBS (default: all cores), THREADS (default 2).
# Where dlpack/dlpack.h is not installed, a copy in .deps/dlpack/ is used.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
BUILD=${BUILD:-build-cpu}
JOBS=${JOBS:-$(nproc)}
THREADS=${THREADS:-2}
STAGES=${*:-build check bench}
mkdir -p "$OUT"
status=0
want() { [[ " $STAGES " == *" $1 "* ]]; }
stage() { echo; echo "==== $* ($(date +%T))"; }

grep -m1 "model name" /proc/cpuinfo
grep -m1 -o -w -E "avx512f|avx512_bf16|avx512_vnni|amx_bf16" /proc/cpuinfo | sort -u | tr '\n' ' '
echo

if want build; then
  stage build
  source scripts/dlpack-args.sh
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKITE_BUILD_CUDA=OFF "${dlpack[@]}" \
    > "$OUT/cpu-build.log" 2>&1 || { tail -30 "$OUT/cpu-build.log"; exit 1; }
  cmake --build "$BUILD" -j "$JOBS" >> "$OUT/cpu-build.log" 2>&1 ||
    { tail -40 "$OUT/cpu-build.log"; exit 1; }
  "$BUILD/bin/kite" list 2>&1 | awk '$1 == "linear" || $1 == "silu"' | cut -c1-40,190-
fi

if want check; then
  stage check
  : > "$OUT/cpu-check.log"
  for cap in default avx512bf16 avx512 avx2 scalar; do
    if [ "$cap" = default ]; then env=(env -u KITE_CPU_ISA); else env=(env KITE_CPU_ISA=$cap); fi
    printf '%-11s ' "$cap"
    "${env[@]}" "$BUILD/bin/kite" check --backend cpu >> "$OUT/cpu-check.log" 2>&1 || status=1
    tail -1 "$OUT/cpu-check.log"
  done
  grep -E "FAIL|failed [1-9]" "$OUT/cpu-check.log" | head -20
  ctest --test-dir "$BUILD" -j "$JOBS" > "$OUT/cpu-ctest.log" 2>&1 || status=1
  tail -3 "$OUT/cpu-ctest.log"
fi

if want bench; then
  stage bench "($THREADS threads)"
  : > "$OUT/cpu-bench.log"
  for spec in "linear f32" "linear bf16" "linear_quant bf16" "fused_moe bf16"; do
    set -- $spec
    "$BUILD/bin/kite" bench --backend cpu --op "$1" --dtype "$2" --threads "$THREADS" --repeat 3 \
      >> "$OUT/cpu-bench.log" 2>&1 || status=1
  done
  for op in rms_norm silu_and_mul softmax gelu; do
    "$BUILD/bin/kite" bench --backend cpu --op "$op" --dtype bf16 --threads "$THREADS" \
      --repeat 3 >> "$OUT/cpu-bench.log" 2>&1 || status=1
  done
  echo "-- GEMM rows (us, GFLOP/s) --"
  grep -E "^(linear|linear_quant|fused_moe) " "$OUT/cpu-bench.log" | grep -v skipped |
    awk '{printf "%-13s %-24s %-5s %-20s %10s %9s\n", $1, $2, $3, $4, $5, $9}'
  echo "-- core rows (%memcpy) --"
  grep -E "^(rms_norm|silu_and_mul|softmax|gelu) " "$OUT/cpu-bench.log" | grep -v -E "skipped|^\S+ +ref " |
    awk '{printf "%-13s %-18s %-5s %-20s %8s\n", $1, $2, $3, $4, $8}'
fi
exit $status
