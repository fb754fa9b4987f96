#!/usr/bin/env python3
"""One op at one training / serving size through libkite, called twice (a warm-up, then the call
to profile), for a profiler such as Nsight Compute. The kernel is the one the registry picks, or
the one KITE_KERNELS pins (e.g. KITE_KERNELS=sdpa=cuda.mma). bf16 unless said.

  ncu --kernel-name regex:attend --launch-skip 1 --launch-count 1 --section SpeedOfLight \\
      python3 scripts/profile_one.py --op sdpa --d 128

  --op sdpa                     B 4, S 4096, Hq 32 / Hkv 8, D --d (64|128|256), causal unless
                                --non-causal
  --op sdpa_backward            the backward of --op sdpa (its O and lse from one forward call
                                before the two calls)
  --op paged_prefill            the same queries and keys, causal, the keys in a paged cache of
                                --block-size (default 16) slots a block, blocks in order
  --op cross_entropy_with_grad  N 8192 x V 128256, every 17th target ignored, mean, in place
  --op layer_norm_backward      T 8192 x H 4096 (dx, dw, db)
  --op sample                   B --b (default 1) x V 128256 f32 logits, top-k 50 + top-p 0.9
"""
import argparse
import ctypes as C
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peers import AttnOpts, CeOpts, Kite, SamplingParams, dl, dl_tensor  # noqa: E402


def sdpa(kite, args):
    B, S, HQ, HKV, D = 4, 4096, 32, 8, args.d
    q = torch.randn(B, HQ, S, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, HKV, S, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, HKV, S, D, device="cuda", dtype=torch.bfloat16)
    o = torch.empty_like(q)
    Q, K, V, O = dl(q), dl(k), dl(v), dl(o)
    opts = C.byref(AttnOpts(0.0, 0.0, -1, 0, 0 if args.non_causal else 1))
    return (lambda: kite.call("kite_sdpa", Q, K, V, None, None, opts, O, None),
            f"sdpa B{B} S{S} {HQ}/{HKV} D{D} {'non-causal' if args.non_causal else 'causal'}",
            dict(locals()))


def sdpa_backward(kite, args):
    B, S, HQ, HKV, D = 4, 4096, 32, 8, args.d
    rnd = lambda h: torch.randn(B, h, S, D, device="cuda", dtype=torch.bfloat16)
    q, k, v, dout = rnd(HQ), rnd(HKV), rnd(HKV), rnd(HQ)
    o, dq, dk, dv = (torch.empty_like(x) for x in (q, q, k, v))
    lse = torch.empty(B, HQ, S, device="cuda", dtype=torch.float32)
    Q, K, V, O, L, G, DQ, DK, DV = (dl(x) for x in (q, k, v, o, lse, dout, dq, dk, dv))
    opts = C.byref(AttnOpts(0.0, 0.0, -1, 0, 0 if args.non_causal else 1))
    kite.call("kite_sdpa", Q, K, V, None, None, opts, O, L)
    return (lambda: kite.call("kite_sdpa_backward", Q, K, V, None, None, opts, O, L, G, DQ, DK,
                              DV, None),
            f"sdpa_backward B{B} S{S} {HQ}/{HKV} D{D} "
            f"{'non-causal' if args.non_causal else 'causal'}",
            dict(locals()))


def paged_prefill(kite, args):
    B, L, HQ, HKV, D, BS = 4, 4096, 32, 8, args.d, args.block_size
    nb = B * L // BS
    kc = torch.randn(nb, HKV, BS, D, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn(nb, HKV, BS, D, device="cuda", dtype=torch.bfloat16)
    bt = torch.arange(nb, device="cuda", dtype=torch.int32).view(B, L // BS).contiguous()
    sl = torch.full((B,), L, device="cuda", dtype=torch.int32)
    cu = torch.arange(0, B * L + 1, L, device="cuda", dtype=torch.int32)
    q = torch.randn(B * L, HQ, D, device="cuda", dtype=torch.bfloat16)
    o = torch.empty_like(q)
    A = [dl(t) for t in (q, kc, vc, bt, cu, sl)]
    O = dl(o)
    opts = C.byref(AttnOpts(0.0, 0.0, -1, 0, 1))
    return (lambda: kite.call("kite_paged_prefill", *A, None, opts, O, None),
            f"paged_prefill B{B} x {L} {HQ}/{HKV} D{D} block {BS} causal",
            dict(locals()))


def cross_entropy_with_grad(kite, args):
    N, V = 8192, 128256
    t = torch.randint(0, V, (N,), device="cuda", dtype=torch.int32)
    t[::17] = -100
    x = torch.randn(N, V, device="cuda", dtype=torch.bfloat16) * 2
    loss, lse = torch.empty(1, device="cuda"), torch.empty(N, device="cuda")
    ce = CeOpts(-100, 0.0, 0.0, 0.0, 2)
    X, T, L, E = dl(x), dl(t), dl(loss), dl(lse)
    return (lambda: kite.call("kite_cross_entropy_with_grad", X, T, C.byref(ce), L, E, X),
            f"cross_entropy_with_grad N{N} x V{V}",
            dict(locals()))


def layer_norm_backward(kite, args):
    fn = kite.lib.kite_layer_norm_backward
    fn.argtypes = [C.c_void_p] * 4 + [C.c_float] + [C.c_void_p] * 3
    fn.restype = C.c_int
    T, H = 8192, 4096
    x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(H, device="cuda", dtype=torch.bfloat16)
    dx, dw, db = torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)
    A = [dl(a) for a in (x, w, dy)]
    R = [dl(a) for a in (dx, dw, db)]
    return (lambda: kite.call("kite_layer_norm_backward", *A, 1e-5, *R),
            f"layer_norm_backward T{T} x H{H}",
            dict(locals()))


def sample(kite, args):
    B, V = args.b, 128256
    logits = torch.randn(B, V, device="cuda") * 3.0
    temp = torch.ones(B, device="cuda")
    tk = torch.full((B,), 50, device="cuda", dtype=torch.int32)
    tp = torch.full((B,), 0.9, device="cuda")
    tok = torch.empty(B, device="cuda", dtype=torch.int32)
    keep = (dl_tensor(temp), dl_tensor(tk), dl_tensor(tp))
    params = SamplingParams(*(C.addressof(t) for t in keep), None, None, None, 1234, 0)
    L, TOK = dl(logits), dl(tok)
    return (lambda: kite.call("kite_sample", L, C.byref(params), TOK),
            f"sample B{B} x V{V} top-k 50 top-p 0.9",
            dict(locals()))


OPS = {"sdpa": sdpa, "sdpa_backward": sdpa_backward, "paged_prefill": paged_prefill,
       "cross_entropy_with_grad": cross_entropy_with_grad,
       "layer_norm_backward": layer_norm_backward, "sample": sample}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/lib/libkite.so")
    ap.add_argument("--op", default="sdpa", choices=sorted(OPS))
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--non-causal", action="store_true")
    ap.add_argument("--block-size", type=int, default=16,
                    help="slots a block, --op paged_prefill")
    ap.add_argument("--b", type=int, default=1, help="rows of --op sample")
    args = ap.parse_args()
    kite = Kite(args.lib)
    # the tensors (and their descriptors) live as long as the calls: the third item holds them
    fn, what, _keep = OPS[args.op](kite, args)
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    print(f"{what}: done")


if __name__ == "__main__":
    main()
