#!/usr/bin/env bash
# The test command: builds Release (and the CUDA plugin when nvcc is present: compile and link
# only), runs every test; then builds with AddressSanitizer + UBSan and runs the tests again; then
# the fuzz targets' smoke run (clang, libFuzzer) and the concurrency test under ThreadSanitizer;
# then the Python suite (python/tests, pytest) over the Release build's kite._C, in the cached
# venv of python/requirements-test.txt (scripts/py-env.sh). The C tests run even when that venv
# cannot be installed; the run then fails at the end, loudly. pytest collecting no test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ctest --test-dir build --output-on-failure -j2
# the OpenCL backend, built out of tree against the installed Release build, on PoCL's CPU device
bash scripts/opencl-check.sh
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DKITE_SANITIZE=address,undefined \
  -DKITE_BUILD_CUDA=OFF -DKITE_BUILD_PYTHON=OFF >/dev/null
cmake --build build-asan -j"$(nproc)"
# LeakSanitizer aborts with "fatal error" on the threaded engine and check runs on these hosts
# (LeakSanitizer stops the threads to scan them, and that step fails here), so leaks are not
# checked in this stage; the timing tests do not run under the sanitizers (their figures mean
# nothing there). Both are said in the output, not only here.
echo "test.sh: sanitizer stage: AddressSanitizer + UBSan on every test except the benchmarks" \
  "($(ctest --test-dir build-asan -N -R bench | grep -c 'Test *#') bench tests: timings mean nothing" \
  "under sanitizers); leak detection OFF (LeakSanitizer stops with a fatal error on threaded runs on these hosts)"
ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j2 -E 'bench'
bash scripts/fuzz.sh
bash scripts/tsan.sh
bash scripts/py-test.sh
