#!/usr/bin/env python3
"""sdpa_backward on CUDA, B 4, S 4096, Hq 32 / Hkv 8, bf16, head_dim 64 and 128, causal and not:
each kite kernel named on the command line (pinned with kite_config_set, e.g. cuda.sm90ws and
cuda.mma) beside the backward of torch SDPA's flash and cuDNN backends (torch.autograd.grad of
their output with K and V already repeated to Hq heads), alternated, L2 flushed (torch_peers's
timing). Per kite kernel it also reports whether two calls give the same bits of dq, dk and dv,
and the relative error of dq, dk, dv against the flash backward's (dk, dv summed over each GQA
group). FLOPs: 2.5 x the forward's 4 S^2 D Hq per sequence, halved for causal.

  scripts/attn_bwd_peers.py [--lib build/lib/libkite.so] [--kernels cuda.sm90ws,cuda.mma]
                            [--d 64,128] [--s 4096]
"""
import argparse
import ctypes as C
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peers import AttnOpts, Kite, dl, rel_err, time_many  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/lib/libkite.so")
    ap.add_argument("--kernels", default="cuda.sm90ws,cuda.mma")
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--s", type=int, default=4096)
    args = ap.parse_args()
    from torch.nn.attention import sdpa_kernel, SDPBackend
    kite = Kite(args.lib)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    torch.manual_seed(0)
    B, S, HQ, HKV, dt = 4, args.s, 32, 8, torch.bfloat16
    G = HQ // HKV
    bad = 0
    for D in (int(x) for x in args.d.split(",")):
        rnd = lambda h: torch.randn(B, h, S, D, device="cuda", dtype=dt)
        q, k, v, dout = rnd(HQ), rnd(HKV), rnd(HKV), rnd(HQ)
        o, dq, dk, dv = (torch.empty_like(x) for x in (q, q, k, v))
        lse = torch.empty(B, HQ, S, device="cuda", dtype=torch.float32)
        Q, K, V, O, L, G_, DQ, DK, DV = (dl(x) for x in (q, k, v, o, lse, dout, dq, dk, dv))
        qr = q.detach().requires_grad_()
        kr, vr = (x.repeat_interleave(G, 1).requires_grad_() for x in (k, v))
        for causal in (1, 0):
            name = f"B{B} S{S} {HQ}/{HKV} D{D} {'causal' if causal else 'non-causal'}"
            flop = 2.5 * 4.0 * B * S * S * D * HQ / (2 if causal else 1)
            opts = C.byref(AttnOpts(0.0, 0.0, -1, 0, causal))
            kite.lib.kite_config_set(b"")
            kite.call("kite_sdpa", Q, K, V, None, None, opts, O, L)
            fns, names = [], []
            for be, peer in ((SDPBackend.FLASH_ATTENTION, "flash"),
                             (SDPBackend.CUDNN_ATTENTION, "cudnn")):
                try:
                    with sdpa_kernel(be):
                        out = F.scaled_dot_product_attention(qr, kr, vr, is_causal=bool(causal))
                    fns.append(lambda out=out: torch.autograd.grad(out, (qr, kr, vr), dout,
                                                                   retain_graph=True))
                    names.append(peer)
                except RuntimeError as ex:
                    print(f"{name}: {peer}: {ex}", flush=True)
            want = None
            if names and names[0] == "flash":
                gq, gk, gv = fns[0]()
                want = torch.cat([gq.flatten().float(),
                                  gk.float().view(B, HKV, G, S, D).sum(2).flatten(),
                                  gv.float().view(B, HKV, G, S, D).sum(2).flatten()])
                del gq, gk, gv
            for kern in args.kernels.split(","):
                cfg = f"sdpa_backward={kern}".encode()
                kite.lib.kite_config_set(cfg)
                kfn = lambda: kite.call("kite_sdpa_backward", Q, K, V, None, None, opts, O, L,
                                        G_, DQ, DK, DV, None)
                try:
                    kfn()
                except Exception as ex:  # a kernel that cannot run here is reported
                    print(f"{name}: {kern}: {ex}", flush=True)
                    bad += 1
                    continue
                torch.cuda.synchronize()
                first = [t.clone() for t in (dq, dk, dv)]
                kfn()
                torch.cuda.synchronize()
                same = all(torch.equal(a.view(torch.int16), b.view(torch.int16))
                           for a, b in zip(first, (dq, dk, dv)))
                err = None
                if want is not None:
                    err = rel_err(torch.cat([dq.flatten().float(), dk.flatten().float(),
                                             dv.flatten().float()]), want)
                bad += (not same) + (err is not None and not err < 2e-2)
                times = time_many([kfn] + fns, reps=6, warmup=2)
                peers = "  ".join(f"{n} {flop / t / 1e6:6.1f}" for n, t in zip(names, times[1:]))
                print(f"{name:<32} {kern:<10} {times[0]:9.1f} us {flop / times[0] / 1e6:6.1f} "
                      f"TFLOP/s | {peers} TFLOP/s | same bits twice: {same} | rel_err "
                      f"{err if err is None else f'{err:.1e}'}", flush=True)
            kite.lib.kite_config_set(b"")
            del fns, out
        del q, k, v, dout, o, lse, dq, dk, dv, qr, kr, vr, want
        torch.cuda.empty_cache()
    print(f"failures: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
