"""Per-op table at LLM shapes (bf16): kite through torch.ops.kite beside PyTorch eager,
torch.compile of the eager code, and Liger-Kernel where it has the op and is installed.

GPU times come from triton.testing.do_bench (CUDA events, L2 cleared by writing a buffer before
each call, median); contestants alternate per op (kite first on even ops, last on odd ones) so no
one is always measured on the hotter GPU. On the CPU: the median wall time over repeated calls.

    python scripts/py_peers.py [--device cuda|cpu] [--json FILE] [--ops rms_norm,rope,...]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

import kite
import kite.torch  # noqa: F401

ops = torch.ops.kite


def bench(fn, device):
    if device.type == "cuda":
        from triton.testing import do_bench
        return do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3
    for _ in range(3):
        fn()
    ts = []
    for _ in range(15):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6


def cases(dev, dt, T):
    H, I, heads, kvh, D = 4096, 14336, 32, 8, 128
    r = lambda *s: torch.randn(*s, device=dev, dtype=dt)  # noqa: E731
    out = {}
    x, w = r(T, H), r(H)
    out["rms_norm"] = dict(kite=lambda: ops.rms_norm(x, w, 1e-6, 0.0),
                           eager=lambda: F.rms_norm(x, (H,), w, 1e-6),
                           liger=("liger_kernel.ops.rms_norm", "LigerRMSNormFunction",
                                  lambda f: f.apply(x, w, 1e-6)), bytes=2 * x.numel() * 2)
    res = r(T, H)
    out["add_rms_norm"] = dict(kite=lambda: ops.add_rms_norm(x, res.clone(), w, 1e-6, 0.0, 0),
                               eager=lambda: F.rms_norm(x + res.clone(), (H,), w, 1e-6),
                               bytes=4 * x.numel() * 2)
    b = r(H)
    out["layer_norm"] = dict(kite=lambda: ops.layer_norm(x, w, b, 1e-5),
                             eager=lambda: F.layer_norm(x, (H,), w, b, 1e-5),
                             liger=("liger_kernel.ops.layer_norm", "LigerLayerNormFunction",
                                    lambda f: f.apply(x, w, b, 1e-5)), bytes=2 * x.numel() * 2)
    gu = r(T, 2 * I)
    out["silu_and_mul"] = dict(kite=lambda: ops.silu_and_mul(gu, 0.0),
                               eager=lambda: F.silu(gu[:, :I]) * gu[:, I:],
                               liger=("liger_kernel.ops.swiglu", "LigerSiLUMulFunction",
                                      lambda f: f.apply(gu[:, :I], gu[:, I:])),
                               bytes=3 * T * I * 2)
    out["gelu_tanh_and_mul"] = dict(kite=lambda: ops.gelu_tanh_and_mul(gu, 0.0),
                                    eager=lambda: F.gelu(gu[:, :I], approximate="tanh") * gu[:, I:],
                                    liger=("liger_kernel.ops.geglu", "LigerGELUMulFunction",
                                           lambda f: f.apply(gu[:, :I], gu[:, I:])),
                                    bytes=3 * T * I * 2)
    q, k = r(T, heads, D), r(T, kvh, D)
    pos = torch.arange(T, device=dev, dtype=torch.int32)
    cs = kite.rope_cache(max(T, 1), D, 500000.0, like="torch").to(dev)
    cos, sin = cs[:, : D // 2].repeat(1, 2).to(dt), cs[:, D // 2:].repeat(1, 2).to(dt)

    def rope_eager():
        def rot(t):
            return torch.cat((-t[..., D // 2:], t[..., : D // 2]), -1)
        c, s = cos[:, None], sin[:, None]
        return q * c + rot(q) * s, k * c + rot(k) * s
    out["rope"] = dict(kite=lambda: ops.rope(q, k, pos, cs, D, 0), eager=rope_eager,
                       liger=("liger_kernel.ops.rope", "LigerRopeFunction",
                              lambda f: f.apply(q.view(1, T, heads, D).transpose(1, 2),
                                                k.view(1, T, kvh, D).transpose(1, 2),
                                                cos[None], sin[None])),
                       bytes=2 * (q.numel() + k.numel()) * 2)
    s = r(T, 32000)
    out["softmax"] = dict(kite=lambda: ops.softmax(s, 1.0), eager=lambda: torch.softmax(s, -1),
                          bytes=2 * s.numel() * 2)
    wl = r(H, H)
    out["linear"] = dict(kite=lambda: ops.linear(x, wl, None), eager=lambda: F.linear(x, wl),
                         flops=2 * T * H * H)
    S = T if T > 1 else 1024
    qa, ka, va = r(1, heads, T, D), r(1, kvh, S, D), r(1, kvh, S, D)
    out["sdpa"] = dict(kite=lambda: ops.sdpa(qa, ka, va, None, 0.0, 0.0, -1, 0, 1),
                       eager=lambda: F.scaled_dot_product_attention(qa, ka, va, is_causal=T > 1,
                                                                    enable_gqa=True),
                       flops=4 * heads * T * S * D // (2 if T > 1 else 1))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tokens", default="1,4096")
    ap.add_argument("--ops", default="")
    ap.add_argument("--json")
    a = ap.parse_args()
    dev = torch.device(a.device)
    dt = torch.bfloat16
    rows = []
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "host"
    print(f"---- kite (torch.ops.kite) vs PyTorch eager / torch.compile / Liger-Kernel, bf16, {name}")
    print(f"{'op':<18} {'T':>5} {'kite us':>9} {'eager':>9} {'compile':>9} {'liger':>9}  kernel")
    for T in [int(t) for t in a.tokens.split(",")]:
        for i, (op, c) in enumerate(cases(dev, dt, T).items()):
            if a.ops and op not in a.ops.split(","):
                continue
            fns = {"kite": c["kite"], "eager": c["eager"], "compile": torch.compile(c["eager"])}
            if "liger" in c:
                mod, cls, call = c["liger"]
                try:
                    f = getattr(__import__(mod, fromlist=[cls]), cls)
                    fns["liger"] = lambda call=call, f=f: call(f)
                except Exception:  # not installed, or no such op in this version
                    pass
            order = list(fns.items()) if i % 2 == 0 else list(fns.items())[::-1]
            t = {}
            for who, fn in order:
                try:
                    t[who] = bench(fn, dev)
                except Exception as e:  # a contestant that cannot run this shape
                    print(f"  {op} T={T} {who}: {type(e).__name__}: {str(e)[:120]}")
            c["kite"]()
            row = dict(op=op, T=T, device=name, kernel=kite.last_dispatch(), **{f"{k}_us": v for k, v in t.items()})
            rows.append(row)
            cell = lambda k: f"{t[k]:9.2f}" if k in t else f"{'-':>9}"  # noqa: E731
            print(f"{op:<18} {T:>5} {cell('kite')} {cell('eager')} {cell('compile')} {cell('liger')}  {row['kernel']}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
