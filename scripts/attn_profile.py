#!/usr/bin/env python3
"""One dense sdpa call for a profiler: B 4, S 4096, Hq 32 / Hkv 8, bf16, causal by default,
through libkite (the kernel as the registry picks it, or as KITE_KERNELS pins it, e.g.
KITE_KERNELS=sdpa=cuda.mma). Two calls: a warm-up, then the one to profile, e.g.

  ncu --kernel-name regex:attend --launch-skip 1 --launch-count 1 --section SpeedOfLight \\
      --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active \\
      python3 scripts/attn_profile.py --lib build/lib/libkite.so --d 128

  scripts/attn_profile.py [--lib PATH] [--d 64|128|256] [--non-causal]
"""
import argparse
import ctypes as C
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peers import AttnOpts, Kite, dl  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/lib/libkite.so")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--non-causal", action="store_true")
    args = ap.parse_args()
    kite = Kite(args.lib)
    B, S, HQ, HKV, D = 4, 4096, 32, 8, args.d
    q = torch.randn(B, HQ, S, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, HKV, S, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, HKV, S, D, device="cuda", dtype=torch.bfloat16)
    o = torch.empty_like(q)
    Q, K, V, O = dl(q), dl(k), dl(v), dl(o)
    opts = C.byref(AttnOpts(0.0, 0.0, -1, 0, 0 if args.non_causal else 1))
    for _ in range(2):
        kite.call("kite_sdpa", Q, K, V, None, None, opts, O, None)
    torch.cuda.synchronize()
    print(f"sdpa B{B} S{S} {HQ}/{HKV} D{D} {'non-causal' if args.non_causal else 'causal'}: "
          f"done, |o| = {o.float().norm().item():.3f}")


if __name__ == "__main__":
    main()
