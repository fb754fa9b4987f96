#!/usr/bin/env python3
"""kite's CUDA attention (paged_decode, paged_prefill, sdpa) against a float32 PyTorch reference
on the GPU, over shapes that reach the edges: block sizes 1/16/17, ragged seq_lens with 0 and 1,
prefix (seq_len > q_len), softcap, window, both GQA layouts, head_dim 64/128/256, bf16 and f16,
the lse output. Then times decode (GB/s of KV read) and causal prefill (TFLOP/s) per kernel.

Usage: python3 scripts/attn_gpu_check.py --lib build/lib/libkite.so [--kernels cuda.mma,cuda.vec]
Each kernel is pinned through kite_config_set ("paged_decode=cuda.mma", ...). Exit status 1 on a
failed check.
"""
import argparse
import ctypes as C
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peers import AttnOpts, Kite, dl, time_us  # noqa: E402

GROUPED, INTERLEAVED = 0, 1


def heads_map(hq, hkv, layout):
    """kv head of each q head."""
    group = hq // hkv
    return [h // group if layout == GROUPED else h % hkv for h in range(hq)]


def ref_rows(q, k, v, pos, scale, softcap, window, causal, kvalid=None):
    """q[R, Hq, D] at positions pos[R]; k/v[Hq, n, D] (already mapped to q heads); kvalid[n]:
    False for absent keys. f32."""
    n = k.shape[1]
    s = torch.einsum("rhd,hjd->rhj", q.float(), k.float()) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    j = torch.arange(n, device=q.device)
    vis = torch.ones(len(pos), n, dtype=torch.bool, device=q.device)
    p = torch.tensor(pos, device=q.device).unsqueeze(1)
    if causal or window >= 0:
        vis &= j.unsqueeze(0) <= p
    if window >= 0:
        vis &= j.unsqueeze(0) >= p - window
    if kvalid is not None:
        vis &= kvalid.unsqueeze(0)
    s = s.masked_fill(~vis.unsqueeze(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    pr = torch.softmax(s, dim=-1).nan_to_num(0.0)
    o = torch.einsum("rhj,hjd->rhd", pr, v.float())
    return o, lse


def rel(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm().clamp_min(1e-6)).item()


class Checker:
    def __init__(self, kite):
        self.kite, self.fails, self.count = kite, 0, 0

    def report(self, what, o, ref_o, lse, ref_lse, tol):
        self.count += 1
        err = rel(o, ref_o)
        bad = not (err <= tol) or torch.isnan(o.float()).any().item()
        fin = torch.isfinite(ref_lse)
        lerr = 0.0
        if lse is not None:
            if fin.any():
                lerr = (lse[fin] - ref_lse[fin]).abs().max().item()
            if not (lerr <= 2e-2) or torch.isfinite(lse[~fin]).any().item():
                bad = True
        if bad:
            self.fails += 1
        if bad or os.environ.get("VERBOSE"):
            print(f"{'FAIL' if bad else 'ok  '} {what}: rel {err:.2e} lse {lerr:.2e}", flush=True)


def paged_case(ck, dt, D, HQ, HKV, BS, seq_lens, q_lens, layout, softcap, window, causal,
               decode, bad_blocks=False):
    """A batch over a paged cache with shuffled blocks; checks o and lse of every token."""
    B = len(seq_lens)
    dev = "cuda"
    max_blocks = max(1, max((n + BS - 1) // BS for n in seq_lens) + 1)
    nb = B * max_blocks + 3
    kc = torch.randn(nb, HKV, BS, D, device=dev, dtype=dt)
    vc = torch.randn(nb, HKV, BS, D, device=dev, dtype=dt)
    perm = torch.randperm(nb, device=dev, dtype=torch.int32)[:B * max_blocks]
    bt = perm.view(B, max_blocks).contiguous()
    if bad_blocks:  # absent keys: a negative and a too-large block id in every sequence
        bt[:, 1] = -1
        bt[:, 0] = nb + 7
    sl = torch.tensor(seq_lens, device=dev, dtype=torch.int32)
    T = sum(q_lens)
    q = torch.randn(T, HQ, D, device=dev, dtype=dt)
    o = torch.full_like(q, float("nan"))
    lse = torch.full((T, HQ), float("nan"), device=dev, dtype=torch.float32)
    scale = 1.0 / math.sqrt(D)
    opts = C.byref(AttnOpts(scale, softcap, window, layout, 1 if causal else 0))
    if decode:
        ck.kite.call("kite_paged_decode", dl(q), dl(kc), dl(vc), dl(bt), dl(sl), opts, dl(o),
                     dl(lse))
    else:
        cu = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), device=dev,
                          dtype=torch.int32)
        ck.kite.call("kite_paged_prefill", dl(q), dl(kc), dl(vc), dl(bt), dl(cu), dl(sl), opts,
                     dl(o), dl(lse))
    torch.cuda.synchronize()
    hm = torch.tensor(heads_map(HQ, HKV, layout), device=dev)
    ref_o, ref_l = torch.zeros_like(q, dtype=torch.float32), torch.zeros_like(lse)
    t0 = 0
    for b in range(B):
        n, ql = seq_lens[b], q_lens[b]
        idx = torch.arange(n, device=dev)
        blk = bt[b].long()[idx // BS]
        kvalid = (blk >= 0) & (blk < nb)
        slots = blk.clamp(0, nb - 1) * BS + idx % BS
        kd = kc.permute(0, 2, 1, 3).reshape(-1, HKV, D)[slots].permute(1, 0, 2)[hm]  # [Hq, n, D]
        vd = vc.permute(0, 2, 1, 3).reshape(-1, HKV, D)[slots].permute(1, 0, 2)[hm]
        pos = [n - ql + i for i in range(ql)]
        ro, rl = ref_rows(q[t0:t0 + ql], kd, vd, pos, scale, softcap, window,
                          causal and not decode, kvalid)
        ref_o[t0:t0 + ql], ref_l[t0:t0 + ql] = ro, rl
        t0 += ql
    what = (f"{'decode' if decode else 'prefill'} {str(dt)[6:]} D{D} {HQ}/{HKV} bs{BS} "
            f"n{seq_lens[:6]} q{q_lens[:6]} lay{layout} cap{softcap} win{window} c{int(causal)}")
    ck.report(what, o, ref_o, lse, ref_l, 2e-2)


def sdpa_case(ck, dt, D, HQ, HKV, B, SQ, SK, layout, softcap, window, causal, bshd):
    dev = "cuda"
    if bshd:  # [B, S, H, D] memory viewed as [B, H, S, D]
        q = torch.randn(B, SQ, HQ, D, device=dev, dtype=dt).transpose(1, 2)
        k = torch.randn(B, SK, HKV, D, device=dev, dtype=dt).transpose(1, 2)
        v = torch.randn(B, SK, HKV, D, device=dev, dtype=dt).transpose(1, 2)
    else:
        q = torch.randn(B, HQ, SQ, D, device=dev, dtype=dt)
        k = torch.randn(B, HKV, SK, D, device=dev, dtype=dt)
        v = torch.randn(B, HKV, SK, D, device=dev, dtype=dt)
    o = torch.full((B, HQ, SQ, D), float("nan"), device=dev, dtype=dt)
    lse = torch.full((B, HQ, SQ), float("nan"), device=dev, dtype=torch.float32)
    scale = 1.0 / math.sqrt(D)
    opts = C.byref(AttnOpts(scale, softcap, window, layout, 1 if causal else 0))
    ck.kite.call("kite_sdpa", dl(q), dl(k), dl(v), None, opts, dl(o), dl(lse))
    torch.cuda.synchronize()
    hm = torch.tensor(heads_map(HQ, HKV, layout), device=dev)
    ref_o, ref_l = torch.zeros_like(o, dtype=torch.float32), torch.zeros_like(lse)
    pos = [SK - SQ + i for i in range(SQ)]
    for b in range(B):
        ro, rl = ref_rows(q[b].transpose(0, 1), k[b][hm], v[b][hm], pos, scale, softcap, window,
                          causal)
        ref_o[b], ref_l[b] = ro.transpose(0, 1), rl.transpose(0, 1)
    what = (f"sdpa {str(dt)[6:]} D{D} {HQ}/{HKV} B{B} {SQ}x{SK} lay{layout} cap{softcap} "
            f"win{window} c{int(causal)} bshd{int(bshd)}")
    ck.report(what, o, ref_o, lse, ref_l, 2e-2)


def correctness(kite):
    ck = Checker(kite)
    torch.manual_seed(1)
    for dt in (torch.bfloat16, torch.float16):
        for D in (64, 128, 256):
            for BS in (1, 16, 17):
                for layout in (GROUPED, INTERLEAVED):
                    HQ, HKV = (8, 2) if layout == GROUPED else (12, 4)
                    sls = [0, 1, 37, 300, 129, 1000]
                    paged_case(ck, dt, D, HQ, HKV, BS, sls, [1] * len(sls), layout, 0.0, -1,
                               False, True)
                    # prefill: prefix, a sequence with no queries, single-token queries
                    sls2, qls = [300, 5, 0, 70, 1, 190], [300, 3, 0, 17, 1, 64]
                    paged_case(ck, dt, D, HQ, HKV, BS, sls2, qls, layout, 0.0, -1, True, False)
            paged_case(ck, dt, D, 32, 8, 16, [4096, 2000, 1], [1, 1, 1], GROUPED, 30.0, 100,
                       False, True)
            paged_case(ck, dt, D, 32, 8, 16, [700, 300], [600, 300], GROUPED, 20.0, 50, True,
                       False)
            paged_case(ck, dt, D, 16, 16, 16, [700, 300], [600, 2], INTERLEAVED, 0.0, -1, False,
                       False)
            paged_case(ck, dt, D, 8, 1, 16, [257, 64], [200, 64], GROUPED, 0.0, 0, True, False)
            paged_case(ck, dt, D, 8, 2, 16, [300, 20, 5], [1, 1, 1], GROUPED, 0.0, -1, False,
                       True, bad_blocks=True)
            paged_case(ck, dt, D, 8, 2, 5, [300, 20], [250, 20], GROUPED, 0.0, -1, True, False,
                       bad_blocks=True)
            for causal in (False, True):
                sdpa_case(ck, dt, D, 8, 2, 2, 130, 200, GROUPED, 0.0, -1, causal, False)
                sdpa_case(ck, dt, D, 16, 4, 2, 1, 5000, GROUPED, 0.0, -1, causal, False)
                sdpa_case(ck, dt, D, 8, 4, 2, 1, 333, INTERLEAVED, 0.0, -1, causal, True)
                sdpa_case(ck, dt, D, 4, 4, 1, 257, 257, GROUPED, 10.0, 64, causal, True)
                sdpa_case(ck, dt, D, 4, 1, 3, 200, 100, GROUPED, 0.0, -1, causal, False)
        for D in (80, 96):
            paged_case(ck, dt, D, 8, 2, 16, [0, 1, 37, 1000], [1, 1, 1, 1], GROUPED, 0.0, -1,
                       False, True)
            paged_case(ck, dt, D, 12, 4, 17, [300, 5, 0, 190], [300, 3, 0, 64], INTERLEAVED,
                       0.0, -1, True, False)
            sdpa_case(ck, dt, D, 8, 2, 2, 130, 200, GROUPED, 5.0, 40, True, True)
    print(f"attention checks: {ck.count - ck.fails}/{ck.count} passed", flush=True)
    return ck.fails


def perf(kite, which, dt=torch.bfloat16):
    """The torch_peers shapes: decode B64 L4096 32/8 D128 bs16, prefill 4x4096 causal."""
    B, L, HQ, HKV, D, BS = 64, 4096, 32, 8, 128, 16
    nb = B * L // BS
    kc = torch.randn(nb, HKV, BS, D, device="cuda", dtype=dt)
    vc = torch.randn(nb, HKV, BS, D, device="cuda", dtype=dt)
    bt = torch.randperm(nb, device="cuda", dtype=torch.int32).view(B, L // BS).contiguous()
    sl = torch.full((B,), L, device="cuda", dtype=torch.int32)
    q = torch.randn(B, HQ, D, device="cuda", dtype=dt)
    o = torch.empty_like(q)
    opts = C.byref(AttnOpts(0.0, 0.0, -1, 0, 1))
    args = [dl(t) for t in (q, kc, vc, bt, sl)]
    O = dl(o)
    us = time_us(lambda: kite.call("kite_paged_decode", *args, opts, O, None)) \
        if "decode" in which else float("nan")
    print(f"paged_decode B{B} L{L} {HQ}/{HKV} D{D} bs{BS}: {us:.1f} us, "
          f"{2 * B * L * HKV * D * 2 / us / 1e3:.0f} GB/s", flush=True)
    del kc, vc
    B, L = 4, 4096
    nb = B * L // BS
    kc = torch.randn(nb, HKV, BS, D, device="cuda", dtype=dt)
    vc = torch.randn(nb, HKV, BS, D, device="cuda", dtype=dt)
    bt = torch.arange(nb, device="cuda", dtype=torch.int32).view(B, L // BS).contiguous()
    sl = torch.full((B,), L, device="cuda", dtype=torch.int32)
    cu = torch.arange(0, B * L + 1, L, device="cuda", dtype=torch.int32)
    q = torch.randn(B * L, HQ, D, device="cuda", dtype=dt) * 0.5
    o = torch.empty_like(q)
    args = [dl(t) for t in (q, kc, vc, bt, cu, sl)]
    O = dl(o)
    us = time_us(lambda: kite.call("kite_paged_prefill", *args, opts, O, None), reps=10) \
        if "prefill" in which else float("nan")
    flop = 4.0 * B * L * L * D * HQ / 2
    print(f"paged_prefill B{B}x{L} causal {HQ}/{HKV} D{D}: {us:.1f} us, "
          f"{flop / us / 1e6:.1f} TFLOP/s", flush=True)
    q4 = q.view(B, L, HQ, D).transpose(1, 2)
    kd = kc.view(B, L // BS, HKV, BS, D).permute(0, 2, 1, 3, 4).reshape(B, HKV, L, D)
    vd = vc.view(B, L // BS, HKV, BS, D).permute(0, 2, 1, 3, 4).reshape(B, HKV, L, D)
    o4 = torch.empty(B, HQ, L, D, device="cuda", dtype=dt)
    args = [dl(t) for t in (q4, kd, vd)]
    O = dl(o4)
    us = time_us(lambda: kite.call("kite_sdpa", *args, None, opts, O, None), reps=10) \
        if "sdpa" in which else float("nan")
    print(f"sdpa B{B} {L}x{L} causal {HQ}/{HKV} D{D}: {us:.1f} us, "
          f"{flop / us / 1e6:.1f} TFLOP/s", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/lib/libkite.so")
    ap.add_argument("--kernels", default="cuda.mma", help="comma list of kernels to pin in turn")
    ap.add_argument("--no-perf", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--perf", default="decode,prefill,sdpa", help="which timings to take")
    args = ap.parse_args()
    kite = Kite(args.lib)
    T, f = C.c_void_p, C.c_float
    kite.lib.kite_sdpa.argtypes, kite.lib.kite_sdpa.restype = [T] * 8, C.c_int
    kite.lib.kite_config_set.argtypes, kite.lib.kite_config_set.restype = [C.c_char_p], C.c_int
    fails = 0
    for kern in args.kernels.split(","):
        cfg = f"paged_decode={kern},paged_prefill={kern},sdpa={kern}" if kern else ""
        kite.check(kite.lib.kite_config_set(cfg.encode()), "kite_config_set")
        print(f"==== {kern or 'default'}", flush=True)
        if not args.no_check:
            fails += correctness(kite)
        if not args.no_perf:
            perf(kite, args.perf.split(","))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
