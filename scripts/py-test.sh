#!/usr/bin/env bash
# The Python suite: builds kite._C into the Release build (build/python, an importable tree) with
# the Python of the cached test venv (scripts/py-env.sh) and runs pytest over python/tests.
# Arguments go to pytest. Fails (non-zero) when the venv cannot be installed, when the build
# fails, when a test fails, and when no test was collected (pytest's exit code 5).
# Environment: BUILD (default build).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
if ! venv=$(bash scripts/py-env.sh); then
  echo "py-test: FAILED: the Python test environment (python/requirements-test.txt) could not be" \
    "installed; the Python suite did not run" >&2
  exit 1
fi
py=$venv/bin/python
cmake -S . -B "$BUILD" -DKITE_BUILD_PYTHON=ON -DPython3_EXECUTABLE="$py" >/dev/null || exit 1
cmake --build "$BUILD" -j"$(nproc)" || exit 1
PYTHONPATH=$PWD/$BUILD/python "$py" -m pytest -q -p no:cacheprovider python/tests "$@"
rc=$?
if [ $rc -eq 5 ]; then
  echo "py-test: FAILED: pytest collected no test" >&2
  exit 1
fi
exit $rc
