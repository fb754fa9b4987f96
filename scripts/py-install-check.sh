#!/usr/bin/env bash
# Checks `pip install -e .` (scikit-build-core, editable): into a throwaway venv that sees the
# packages of the cached test venv (scripts/py-env.sh: torch, scikit-build-core) through a .pth
# file, `pip install --no-build-isolation -e .`, then from outside the repository with neither
# PYTHONPATH nor LD_LIBRARY_PATH set:
#   - `import kite` takes the package's Python files from the source tree (editable) and kite._C
#     finds libkite (and libkite-cuda.so where it was built) in the installed package;
#   - an edit to a Python file of the tree shows without reinstalling;
#   - KITE_KERNELS pins a kernel (kite.last_dispatch() names it) and KITE_BACKEND_PATH loads a
#     plugin (the test plugin of the C build: ${BUILD:-build}/tests/plugins-auto, linked against
#     the C build's libkite.so.0: it must bind to the package's library, not load that one);
#   - torch.ops.kite.rms_norm runs.
# The build is a Release build of libkite in build/python-<wheel tag> (pyproject.toml's build-dir,
# kept between runs): with CUDA=OFF about 4 minutes on the loaded 2-core host (217 s, partly
# reusing objects), 12 s when the build folder is current; the CUDA plugin's build adds well over
# 10 minutes there. Not part of scripts/test.sh for that reason.
# Environment: BUILD (the C build holding the test plugin, default build), KEEP=1 keeps the venv,
# CUDA=OFF leaves the CUDA plugin out where nvcc is on PATH (its build is the longest part).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
BUILD=${BUILD:-build}
plugins=$root/$BUILD/tests/plugins-auto
if [ ! -f "$plugins/libkite-testvendor.so" ]; then
  echo "py-install-check: FAILED: no test plugin in $plugins (build the C tests first:" \
    "cmake --build $BUILD)" >&2
  exit 1
fi
cached=$(bash scripts/py-env.sh)
tmp=$(mktemp -d /tmp/kite-install-check.XXXXXX)
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
site=$("$tmp/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
"$cached/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" \
  > "$site/kite-test-venv.pth"
py=$tmp/venv/bin/python
t0=$(date +%s)
cuda=()
[ "${CUDA:-}" = OFF ] && cuda=(-Ccmake.define.KITE_BUILD_CUDA=OFF)
"$py" -m pip install -q --no-build-isolation "${cuda[@]}" -e . > "$tmp/pip.log" 2>&1 ||
  { tail -30 "$tmp/pip.log"; echo "py-install-check: FAILED: pip install -e ." >&2; exit 1; }
echo "py-install-check: pip install --no-build-isolation -e . took $(($(date +%s) - t0)) s"

cd "$tmp"
unset PYTHONPATH LD_LIBRARY_PATH KITE_KERNELS KITE_BACKEND_PATH
"$py" - "$root" <<'EOF'
import os, sys
root = sys.argv[1]
import kite
assert os.path.realpath(kite.__file__).startswith(os.path.realpath(root) + "/python/kite"), \
    f"kite's Python files come from {kite.__file__}, not the source tree"
libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libkite" in l})
assert libs and all("/site-packages/" in l or "/build/" in l for l in libs), libs
assert not any(l.startswith(root + "/" + "build/lib") for l in libs), \
    f"libkite comes from the C build folder, not the package: {libs}"
print("kite", kite.__version__, "from", os.path.dirname(kite.__file__))
print("libraries:", *libs)
print("backends:", [b["name"] for b in kite.backends()])
EOF

# an edit to the tree's Python shows without reinstalling
marker=$root/python/kite/_install_check_marker.py
echo "VALUE = 42" > "$marker"
trap 'rm -f "$marker"; [ "${KEEP:-0}" = 1 ] || rm -rf "$tmp"' EXIT
"$py" -c "import kite._install_check_marker as m; assert m.VALUE == 42; print('editable: a new file of the tree imports')"
rm -f "$marker"

KITE_KERNELS=rms_norm=ref "$py" -c "
import numpy, kite
kite.ops.rms_norm(numpy.ones((2, 64), numpy.float32))
assert kite.last_dispatch().startswith('ref.'), kite.last_dispatch()
print('KITE_KERNELS: rms_norm ran on', kite.last_dispatch())"

KITE_BACKEND_PATH=$plugins "$py" -c "
import kite
names = [b['name'] for b in kite.backends()]
assert 'testvendor' in names, (names, kite.plugin_failures())
libs = sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libkite' in l})
assert not any('/build/lib/' in l for l in libs), f'a second libkite came with the plugin: {libs}'
print('KITE_BACKEND_PATH: backends', names)"

"$py" -c "
import torch, kite.torch
x = torch.randn(4, 256)
torch.testing.assert_close(torch.ops.kite.rms_norm(x), torch.nn.functional.rms_norm(x, (256,), eps=1e-6))
print('torch.ops.kite.rms_norm: ok')"
echo "py-install-check: OK"
