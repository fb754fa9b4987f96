#!/usr/bin/env bash
# Runs `kite check --seed S` for S = 1..N on one backend and prints one summary line; exit 1 when
# any seed failed. Exact-bound ops (quant, dequant, store_kv, topk ids) must agree with ref bit
# for bit on every seed, so one failing seed in N is a real disagreement, not noise.
#   scripts/seed-sweep.sh BACKEND [N] [more kite check arguments...]
#   e.g. scripts/seed-sweep.sh cpu 100 --quick;  scripts/seed-sweep.sh cuda 100 --op dequant
# Environment: KITE (the kite binary, default build/bin/kite), LOG (folder for the logs of failing
# seeds, default out/seed-sweep).
set -u
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
  sed -n '2,8p' "$0"
  exit 2
fi
backend=$1
n=${2:-100}
shift
[ $# -gt 0 ] && shift
KITE=${KITE:-build/bin/kite}
LOG=${LOG:-out/seed-sweep}
mkdir -p "$LOG"
failed=() passed=0 cases_failed=0
start=$(date +%s)
for s in $(seq 1 "$n"); do
  out=$("$KITE" check --backend "$backend" --seed "$s" "$@" 2>&1)
  rc=$?
  last=$(printf '%s\n' "$out" | tail -1)
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1))
  else
    failed+=("$s")
    printf '%s\n' "$out" > "$LOG/$backend-seed-$s.log"
    f=$(printf '%s\n' "$last" | sed -n 's/.* \([0-9][0-9]*\) failed.*/\1/p')
    cases_failed=$((cases_failed + ${f:-1}))
    echo "seed $s: $last (log: $LOG/$backend-seed-$s.log)"
    printf '%s\n' "$out" | grep '^FAIL' | head -5
  fi
done
echo "seed sweep $backend: $n seeds in $(($(date +%s) - start)) s: $passed clean, ${#failed[@]} with" \
  "failures (${cases_failed} failed cases)${failed:+; seeds: ${failed[*]}}"
[ ${#failed[@]} -eq 0 ]
