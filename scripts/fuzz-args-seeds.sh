#!/usr/bin/env bash
# Writes the seeds of the argument fuzzer (fuzz/fuzz_args.c), one valid call per function of the
# op table: fuzz/corpus/args/fnN is function N in f32 with int8 codes, fnN-bf16 in bf16 with fp8
# codes. The bytes: N, the palette a 3, b 32, c 4, d 2, e 5, f 3 (as fuzz_args.c reads a size),
# the dtypes; every later byte reads as 0, the valid choice. Run it after adding a row to ops.def.
set -euo pipefail
cd "$(dirname "$0")/.."
n=$(grep -cE '^KITE_(OP|FN)\(' include/kite/ops.def)
dir=fuzz/corpus/args
mkdir -p "$dir"
rm -f "$dir"/fn*
for ((i = 0; i < n; i++)); do
  fn=$(printf '\\x%02x' "$i")
  printf "${fn}\\x02\\xe4\\x03\\x01\\x04\\x02\\x00" >"$dir/fn$i"
  printf "${fn}\\x02\\xe4\\x03\\x01\\x04\\x02\\x05" >"$dir/fn$i-bf16"
done
echo "fuzz-args-seeds: $n functions"
