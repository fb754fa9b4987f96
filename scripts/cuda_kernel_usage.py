#!/usr/bin/env python3
"""Registers, stack, shared and local memory (spills) and the global load / store widths of the
CUDA kernels whose mangled names match a pattern, from cuobjdump on the built plugin:

    python3 scripts/cuda_kernel_usage.py build/lib/libkite-cuda.so norm_bwd_rows_kernel

16-byte accesses show as LDG.E.128 / STG.E.128. Needs cuobjdump (CUDA toolkit) on PATH."""
import collections
import re
import subprocess
import sys


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                             check=True).stdout.splitlines()
        return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    lib, pattern = sys.argv[1], re.compile(sys.argv[2])
    usage_txt = subprocess.run(["cuobjdump", "--dump-resource-usage", lib], capture_output=True,
                               text=True).stdout
    sass_txt = subprocess.run(["cuobjdump", "-sass", lib], capture_output=True, text=True).stdout
    usage, fn = {}, None
    for line in usage_txt.splitlines():
        m = re.search(r"Function (\S+?):?\s*$", line)
        if m:
            fn = m.group(1) if pattern.search(m.group(1)) else None
        elif fn and "REG:" in line:
            usage[fn] = " ".join(re.findall(r"(?:REG|STACK|SHARED|LOCAL):\d+", line))
    access, fn = collections.defaultdict(collections.Counter), None
    for line in sass_txt.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            fn = m.group(1) if pattern.search(m.group(1)) else None
        elif fn:
            for op in re.findall(r"\b((?:LDG|STG)\.E[.\w]*)", line):
                access[fn][op] += 1
    names = sorted(set(usage) | set(access))
    if not names:
        print(f"no kernel matches {sys.argv[2]} in {lib}")
        return 1
    pretty = demangle(names)
    for n in names:
        ops = " ".join(f"{k} x{v}" for k, v in sorted(access[n].items()))
        print(f"{pretty[n][:110]}\n    {usage.get(n, '?')}  {ops}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
