#!/usr/bin/env bash
# Fuzzes the GGUF reader and the tokenizer loader (engine/fuzz_gguf.c, libFuzzer + ASan + UBSan).
#   scripts/fuzz-gguf.sh [RUNS] [BUILD]   default 2000000 runs, build folder ./build
# The seed corpus is the small model tests/test_engine.c writes; with short runs (ctest) the
# seed alone, with long runs a corpus folder kept in BUILD/fuzz-corpus grows between runs;
# crashes and timeouts land in BUILD/fuzz-findings (the timeout is generous: a shared host stalls).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-2000000}
BUILD=${2:-build}
FUZZ="$BUILD/bin/fuzz_gguf"
[ -x "$FUZZ" ] || { echo "no $FUZZ: configure with clang installed and build"; exit 1; }
CORPUS="$BUILD/fuzz-corpus"
mkdir -p "$CORPUS" "$BUILD/fuzz-findings"
"$BUILD/bin/test_engine" --write-seed "$CORPUS/seed.gguf"
"$FUZZ" -runs="$RUNS" -max_len=262144 -len_control=0 -timeout=120 \
  -artifact_prefix="$BUILD/fuzz-findings/" -print_final_stats=1 "$CORPUS" 2>&1 | tail -25
