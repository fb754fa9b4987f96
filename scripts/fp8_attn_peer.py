"""sdpa_fp8 beside bf16 attention on CUDA: B 4, S 4096, Hq 32 / Hkv 8, head_dim 128, causal and
not. q, k, v are drawn in bf16 and quantized by kite_quant_fp8_blocks (e4m3, a scale per 128
rows); kite's sdpa_fp8 on them runs beside kite's sdpa and torch SDPA's cuDNN backend on the bf16
inputs, alternated in one time_many (L2 flushed before each call). Prints TFLOP/s, fp8 / bf16,
and sdpa_fp8's relative error against torch's f32 attention over the dequantized inputs.

    python3 scripts/fp8_attn_peer.py [--lib build/lib/libkite.so] [--kernels cuda.sm90fp8]
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
    ap.add_argument("--kernels", default="", help="sdpa_fp8 kernels to pin, comma-separated")
    ap.add_argument("--s", type=int, default=4096)
    args = ap.parse_args()
    from torch.nn.attention import sdpa_kernel, SDPBackend
    kite = Kite(args.lib)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    torch.manual_seed(0)
    B, S, HQ, HKV, D, dt = 4, args.s, 32, 8, 128, torch.bfloat16
    G, NB = HQ // HKV, (S + 127) // 128
    rnd = lambda h: torch.randn(B, h, S, D, device="cuda", dtype=dt)
    q, k, v = rnd(HQ), rnd(HKV), rnd(HKV)
    codes = [torch.empty(x.shape, device="cuda", dtype=torch.float8_e4m3fn) for x in (q, k, v)]
    scales = [torch.empty(B, x.shape[1], NB, device="cuda", dtype=torch.float32) for x in (q, k, v)]
    for x, c, s in zip((q, k, v), codes, scales):
        kite.call("kite_quant_fp8_blocks", dl(x), dl(c), dl(s))
    # the dequantized inputs, f32
    deq = [(c.float().view(B, -1, NB, 128, D) * s[..., None, None]).view(B, -1, S, D)
           for c, s in zip(codes, scales)]
    o8, o16 = torch.empty_like(q), torch.empty_like(q)
    Q8, K8, V8 = (dl(c) for c in codes)
    QS, KS, VS = (dl(s) for s in scales)
    Q, K, V, O8, O16 = (dl(x) for x in (q, k, v, o8, o16))
    kr, vr = (x.repeat_interleave(G, 1) for x in (k, v))
    kernels = [x for x in args.kernels.split(",") if x] or [""]
    for causal in (1, 0):
        name = f"B{B} S{S} {HQ}/{HKV} D{D} {'causal' if causal else 'non-causal'}"
        flop = 4.0 * B * S * S * D * HQ / (2 if causal else 1)
        opts = C.byref(AttnOpts(0.0, 0.0, -1, 0, causal))
        want = F.scaled_dot_product_attention(deq[0], deq[1].repeat_interleave(G, 1),
                                              deq[2].repeat_interleave(G, 1), is_causal=bool(causal))
        f16 = lambda: kite.call("kite_sdpa", Q, K, V, None, None, opts, O16, None)

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, kr, vr, is_causal=bool(causal))
        for kern in kernels:
            kite.lib.kite_config_set(f"sdpa_fp8={kern}".encode() if kern else b"")
            f8 = lambda: kite.call("kite_sdpa_fp8", Q8, K8, V8, QS, KS, VS, opts, O8, None)
            f8()
            torch.cuda.synchronize()
            err = rel_err(o8.float(), want)
            u8, u16, uc = time_many([f8, f16, cudnn], reps=8, warmup=2)
            print(f"{name} {kern or 'default'}: sdpa_fp8 {flop / u8 / 1e6:.1f}  sdpa bf16 "
                  f"{flop / u16 / 1e6:.1f}  cuDNN bf16 {flop / uc / 1e6:.1f} TFLOP/s  "
                  f"fp8/bf16 {u16 / u8:.3f}x  fp8/cuDNN {uc / u8:.3f}x  err {err:.1e}", flush=True)
        kite.lib.kite_config_set(b"")
        del want


if __name__ == "__main__":
    main()
