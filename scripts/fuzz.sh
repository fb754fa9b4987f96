#!/usr/bin/env bash
# libFuzzer targets (fuzz/) built with clang, AddressSanitizer and UBSan in build-fuzz.
#   scripts/fuzz.sh            the smoke run the test command uses: a few seconds per target
#   scripts/fuzz.sh long [N]   N executions per target (default 10^7), corpus kept in
#                              build-fuzz/corpus-<target>, findings in build-fuzz/findings/
# KITE_FUZZ_BACKENDS picks the built-in backends (default "ref": the validation front-end is the
# target, and ref reads every element a call admits).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang >/dev/null; then
  echo "fuzz: clang not found; skipped"
  exit 0
fi
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DKITE_FUZZ=ON \
  -DKITE_SANITIZE=address,undefined -DKITE_BUILD_TESTS=OFF -DKITE_BUILD_CUDA=OFF \
  -DKITE_WERROR=OFF "-DKITE_BUILTIN_BACKENDS=${KITE_FUZZ_BACKENDS:-ref}" >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_config fuzz_args
if [ "${1:-smoke}" != long ]; then
  ctest --test-dir build-fuzz -R '^fuzz_smoke_' --output-on-failure
  exit 0
fi
runs=${2:-10000000}
mkdir -p build-fuzz/findings
for t in config args; do
  mkdir -p "build-fuzz/corpus-$t"
  echo "fuzz_$t: $runs executions"
  build-fuzz/bin/fuzz_$t -runs="$runs" -max_len=512 -print_final_stats=1 \
    -artifact_prefix=build-fuzz/findings/ "build-fuzz/corpus-$t" "fuzz/corpus/$t"
done
