#!/usr/bin/env bash
# One pass over the CPU backend on a machine whose CPU has more than the development host's
# AVX2 (AVX-512, AVX-512-BF16, VNNI), from the repository root:
#   build    configure + build (Release), CPU backends only
#   check    kite check --backend cpu under every KITE_CPU_ISA cap the CPU reaches, and ctest
#   llama    kite run against llama.cpp on tiny_gguf.py's model of each architecture
#            (tests/engine/check_tiny_llama.py; skipped where python3 lacks llama_cpp,
#            torch, transformers or gguf)
#   bench    kite bench --backend cpu, THREADS threads: linear (f32, bf16), linear_quant (int8),
#            fused_moe, and the bf16 core ops at LLM shapes
#   gemm     (only when named) the GEMM family alone: check of linear, linear_quant, group_gemm and
#            fused_moe under every cap, then the linear / linear_quant benches
# Stages run in that order; pass some of their names to run only those (default: all).
# Logs go to $OUT (default ./out); a short table of the kernel-by-kernel GEMM rates comes last.
# Environment: BUILD (default build-cpu), JOBS (default: all cores), THREADS (default 2),
# KITE_CMAKE_ARGS (more configure arguments).
# Where dlpack/dlpack.h is not installed, a copy in .deps/dlpack/ is used.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
BUILD=${BUILD:-build-cpu}
JOBS=${JOBS:-$(nproc)}
THREADS=${THREADS:-2}
STAGES=${*:-build check llama bench}
mkdir -p "$OUT"
status=0
want() { [[ " $STAGES " == *" $1 "* ]]; }
stage() { echo; echo "==== $* ($(date +%T))"; }

grep -m1 "model name" /proc/cpuinfo
grep -m1 -o -w -E "avx512f|avx512_bf16|avx512_vnni|amx_bf16" /proc/cpuinfo | sort -u | tr '\n' ' '
echo

source scripts/dlpack-args.sh
if want build; then
  stage build
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKITE_BUILD_CUDA=OFF "${dlpack[@]}" \
    "${onednn[@]}" ${KITE_CMAKE_ARGS:-} \
    > "$OUT/cpu-build.log" 2>&1 || { tail -30 "$OUT/cpu-build.log"; exit 1; }
  cmake --build "$BUILD" -j "$JOBS" >> "$OUT/cpu-build.log" 2>&1 ||
    { tail -40 "$OUT/cpu-build.log"; exit 1; }
  "$BUILD/bin/kite" list 2>&1 | awk '$1 == "linear" || $1 == "linear_quant"' | cut -c1-60
fi

caps="default amx avx512bf16 avx512vnni avx512 avx2 scalar"
# Runs "$@" under KITE_CPU_ISA=$cap (unset for default).
capped() {
  local cap=$1
  shift
  if [ "$cap" = default ]; then env -u KITE_CPU_ISA "$@"; else env KITE_CPU_ISA=$cap "$@"; fi
}

if want gemm; then
  stage gemm check
  : > "$OUT/cpu-gemm-check.log"
  for cap in $caps; do
    for op in linear linear_quant group_gemm fused_moe; do
      printf '%-11s %-13s ' "$cap" "$op"
      capped "$cap" "$BUILD/bin/kite" check --backend cpu --op "$op" >> "$OUT/cpu-gemm-check.log" 2>&1 ||
        status=1
      tail -1 "$OUT/cpu-gemm-check.log"
    done
  done
  grep -E "FAIL" "$OUT/cpu-gemm-check.log" | head -20
  stage gemm bench "($THREADS threads)"
  : > "$OUT/cpu-gemm-bench.log"
  for spec in "linear f32" "linear bf16" "linear_quant bf16"; do
    set -- $spec
    "$BUILD/bin/kite" bench --backend cpu --op "$1" --dtype "$2" --threads "$THREADS" --repeat 3 \
      >> "$OUT/cpu-gemm-bench.log" 2>&1 || status=1
  done
  grep -E "^(linear|linear_quant) " "$OUT/cpu-gemm-bench.log" | grep -v -E "skipped|^\S+ +ref " |
    cut -c1-150
fi

if want check; then
  stage check
  : > "$OUT/cpu-check.log"
  for cap in $caps; do
    printf '%-11s ' "$cap"
    capped "$cap" "$BUILD/bin/kite" check --backend cpu >> "$OUT/cpu-check.log" 2>&1 || status=1
    tail -1 "$OUT/cpu-check.log"
  done
  grep -E "FAIL|failed [1-9]" "$OUT/cpu-check.log" | head -20
  ctest --test-dir "$BUILD" -j "$JOBS" > "$OUT/cpu-ctest.log" 2>&1 || status=1
  tail -3 "$OUT/cpu-ctest.log"
fi

if want llama; then
  stage "kite run against llama.cpp, tiny models"
  python3 tests/engine/check_tiny_llama.py "$BUILD/bin/kite" > "$OUT/cpu-llama.log" 2>&1
  rc=$?
  tail -25 "$OUT/cpu-llama.log"
  [ $rc -eq 0 ] || [ $rc -eq 77 ] || status=1
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
