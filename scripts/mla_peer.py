"""MLA decode in PyTorch, the absorbed form as eager code writes it (two einsums and a softmax), for
the table beside `kite bench --op mla_decode` on the same GPU.

DeepSeek-V3 sizes: kv_lora_rank 512, rope dim 64, scale 1/sqrt(192) times yarn's mscale^2; every
sequence holds `--ctx` keys. Torch reads a dense latent cache [B, L, 576] (no block table: the
simplest layout for it), q [B, H, 576] = [q_nope W_UK | q_pe]. Prints one line per (B, H) with the
median time of CUDA-event-timed calls, the bytes of the cache read once (GB/s) and the FLOPs
(4 R + 2 P per head and key, as kite bench counts them).

usage: python3 scripts/mla_peer.py [--ctx 4096] [--batches 1,8,64] [--heads 128,16]
"""
import argparse
import math

import torch

R, P = 512, 64


def absorbed(q, cache, scale):
    """q[B, H, R + P], cache[B, L, R + P] -> o[B, H, R] (bf16, softmax in f32)."""
    s = torch.einsum("bhd,bld->bhl", q, cache).float() * scale
    p = torch.softmax(s, dim=-1).to(q.dtype)
    return torch.einsum("bhl,blr->bhr", p, cache[..., :R])


def time_ms(fn, repeat=50, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--heads", default="128,16")
    args = ap.parse_args()
    scale = 192 ** -0.5 * (0.1 * math.log(40.0) + 1.0) ** 2
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, L {args.ctx}, bf16")
    for H in (int(h) for h in args.heads.split(",")):
        for B in (int(b) for b in args.batches.split(",")):
            q = torch.randn(B, H, R + P, device="cuda", dtype=torch.bfloat16)
            cache = torch.randn(B, args.ctx, R + P, device="cuda", dtype=torch.bfloat16)
            ms = time_ms(lambda: absorbed(q, cache, scale))
            gb = B * args.ctx * (R + P) * 2 / 1e9
            tf = B * H * args.ctx * (4 * R + 2 * P) / 1e12
            print(f"mla_decode torch-eager B{B} L{args.ctx} H{H} {R}+{P}: {ms * 1e3:9.1f} us  "
                  f"{gb / (ms / 1e3):7.0f} GB/s  {tf / (ms / 1e3):6.1f} TFLOP/s")
            del q, cache


if __name__ == "__main__":
    main()
