#!/usr/bin/env bash
# Prints the path of a Python virtual environment holding python/requirements-test.txt (torch,
# transformers, numpy, pytest, scikit-build-core), creating it on first use under
# ${KITE_CACHE:-~/.cache/kite}/venv-<hash of the requirements file>. A venv whose install did not
# finish is never reused: the marker file is written last. Exits non-zero when the install fails.
set -euo pipefail
cd "$(dirname "$0")/.."
req=python/requirements-test.txt
key=$(sha256sum "$req" | cut -c1-16)
cache=${KITE_CACHE:-$HOME/.cache/kite}
venv=$cache/venv-$key
if [ ! -f "$venv/.complete" ]; then
  mkdir -p "$cache"
  rm -rf "$venv"
  echo "py-env: installing $req into $venv (once; torch brings its CUDA libraries)" >&2
  # Debian's own python3 needs python3-venv for venvs and python3-dev for Python.h
  if ! python3 -m venv "$venv" >&2 || ! python3 -c \
    "import os, sysconfig; assert os.path.exists(sysconfig.get_paths()['include'] + '/Python.h')"; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv python3-dev >&2
    rm -rf "$venv"
    python3 -m venv "$venv" >&2
  fi
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  "$venv/bin/python" -m pip install -q -r "$req" >&2
  touch "$venv/.complete"
fi
echo "$venv"
