#!/usr/bin/env bash
# The concurrency test under ThreadSanitizer, in its own build folder (build-tsan): worker threads
# call ops on their own ctxs while others change the config, load plugins and read the registry;
# then the engine's tensor-parallel ranks (test_engine_tp: a thread per rank, the ref
# communicator's rendezvous).
# KITE_TSAN_BACKENDS picks the built-in backends (default "ref;cpu"); KITE_TEST_ITERS the calls per
# worker (default 3000).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DKITE_SANITIZE=thread -DKITE_BUILD_CUDA=OFF \
  -DKITE_WERROR=OFF "-DKITE_BUILTIN_BACKENDS=${KITE_TSAN_BACKENDS:-ref;cpu}" >/dev/null
cmake --build build-tsan -j"$(nproc)" --target test_concurrency kite-testvendor2 kite-failreg \
  kite-badstatus test_engine_tp
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
  ctest --test-dir build-tsan -R '^(concurrency|engine_tp)$' --output-on-failure
