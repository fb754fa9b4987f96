#!/bin/sh
# `kite check` must fail on the planted testvendor.wrong kernel and pass testvendor.fast.
kite=$1
shift
out=$("$kite" check --op rms_norm --backend testvendor "$@" 2>&1)
rc=$?
echo "$out" | tail -n 20
[ $rc -ne 0 ] || { echo "FAIL: kite check exited 0 although testvendor.wrong is registered"; exit 1; }
echo "$out" | grep -q "testvendor.wrong" || { echo "FAIL: no failure names testvendor.wrong"; exit 1; }
if echo "$out" | grep -E "FAIL" | grep -q "testvendor.fast"; then
  echo "FAIL: the correct testvendor.fast kernel was reported failing"; exit 1
fi
echo "$out" | tail -n 1 | grep -Eq '^[0-9]+ passed, [1-9][0-9]* failed' || {
  echo "FAIL: last line is not 'N passed, M failed' with M > 0"; exit 1; }
echo "ok: the harness caught testvendor.wrong"
