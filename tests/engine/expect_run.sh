#!/bin/sh
# expect_run.sh STATUS REGEX KITE [ARGS...]: runs `KITE run ARGS`, shows its output, and passes
# when the exit status is STATUS and the output (stdout and stderr together) has a line matching
# the extended REGEX. Both are checked: a ctest PASS_REGULAR_EXPRESSION alone ignores the status.
status=$1
regex=$2
kite=$3
shift 3
out=$("$kite" run "$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne "$status" ]; then
  echo "expect_run: exit status $rc, expected $status"
  exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$regex"; then
  echo "expect_run: no line matches: $regex"
  exit 1
fi
