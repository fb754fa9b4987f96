#!/usr/bin/env bash
# The test command: builds Release (and the CUDA plugin when nvcc is present: compile and link
# only), runs every test; then builds with AddressSanitizer + UBSan and runs the tests again; then
# the fuzz targets' smoke run (clang, libFuzzer) and the concurrency test under ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ctest --test-dir build --output-on-failure -j2
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DKITE_SANITIZE=address,undefined \
  -DKITE_BUILD_CUDA=OFF >/dev/null
cmake --build build-asan -j"$(nproc)"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j2 -E 'bench'
bash scripts/fuzz.sh
bash scripts/tsan.sh
