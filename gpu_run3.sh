#!/usr/bin/env bash
set -o pipefail
export PYTHONUNBUFFERED=1 OUT=${OUT:-out}
for f in .deps/debs/*.deb; do dpkg -x "$f" /; done; ldconfig
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
KITE_CMAKE_ARGS="-DKITE_BUILD_PYTHON=ON -DPython3_EXECUTABLE=$(command -v python3)" BUILD=build timeout 420 bash scripts/gpu-check.sh build opencl 2>&1 | tail -40
el opencl
python3 -m pip install -q --no-deps .gpuwheels/*.whl 2>&1 | tail -2
PYTHONPATH=build/python timeout 330 python3 scripts/train_bench.py --rounds 2 --steps 4 --warmup 2 --only liger,kite > $OUT/train.log 2>&1; echo "train rc=$?"
grep -v '^{' $OUT/train.log | tail -8
el done
