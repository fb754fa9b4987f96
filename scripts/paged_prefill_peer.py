"""paged_prefill beside kite's dense sdpa over the same keys (CUDA): B 4 x 4096 tokens, causal,
Hq 32 / Hkv 8, bf16, head_dim 128 and 64, block sizes 16 and 64, cache blocks in order and
shuffled; both alternated in one time_many (L2 flushed before each call). Prints TFLOP/s and the
paged / dense ratio.

    python3 scripts/paged_prefill_peer.py [--lib build/lib/libkite.so]
"""
import argparse
import ctypes as C
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peers import AttnOpts, Kite, dl, rel_err, time_many  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/lib/libkite.so")
    args = ap.parse_args()
    kite = Kite(args.lib)
    B, S, HQ, HKV, dt = 4, 4096, 32, 8, torch.bfloat16
    opts = C.byref(AttnOpts(0.0, 0.0, -1, 0, 1))
    for D in (128, 64):
        for BS in (16, 64):
            for order in ("in order", "shuffled"):
                nb = B * S // BS
                kc = torch.randn(nb, HKV, BS, D, device="cuda", dtype=dt)
                vc = torch.randn(nb, HKV, BS, D, device="cuda", dtype=dt)
                perm = (torch.arange(nb, device="cuda") if order == "in order"
                        else torch.randperm(nb, device="cuda"))
                bt = perm.to(torch.int32).view(B, S // BS).contiguous()
                sl = torch.full((B,), S, device="cuda", dtype=torch.int32)
                cu = torch.arange(0, B * S + 1, S, device="cuda", dtype=torch.int32)
                q = torch.randn(B * S, HQ, D, device="cuda", dtype=dt) * 0.5
                o = torch.empty_like(q)
                # the same keys laid out densely [B, Hkv, S, D]
                kd = kc[bt.long()].permute(0, 2, 1, 3, 4).reshape(B, HKV, S, D).contiguous()
                vd = vc[bt.long()].permute(0, 2, 1, 3, 4).reshape(B, HKV, S, D).contiguous()
                qd = q.view(B, S, HQ, D).transpose(1, 2).contiguous()
                od = torch.empty_like(qd)
                P = [dl(t) for t in (q, kc, vc, bt, cu, sl)]
                Od, Qd, Kd, Vd, Oo = dl(od), dl(qd), dl(kd), dl(vd), dl(o)
                fp = lambda: kite.call("kite_paged_prefill", *P, None, opts, Oo, None)
                fd = lambda: kite.call("kite_sdpa", Qd, Kd, Vd, None, None, opts, Od, None)
                fp(); fd(); torch.cuda.synchronize()
                err = rel_err(o.view(B, S, HQ, D).transpose(1, 2).float(), od.float())
                up, ud = time_many([fp, fd], reps=6, warmup=2)
                flop = 4.0 * B * S * S * D * HQ / 2
                print(f"D{D} bs{BS} {order}: paged {flop / up / 1e6:.0f}  dense "
                      f"{flop / ud / 1e6:.0f} TFLOP/s  paged/dense {ud / up * 100:.0f} %  "
                      f"err {err:.1e}", flush=True)
                del kc, vc, bt, q, o, kd, vd, qd, od, P
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
