#!/usr/bin/env python3
"""kite's CUDA ops beside their PyTorch peers (eager and torch.compile) on the same GPU tensors.

kite is called through ctypes on tensors that PyTorch allocated, so both sides run the same shapes
on the same memory and are timed the same way: CUDA events around one call, the L2 cache flushed
before each timed call, the median over the repeats after a warm-up. The contestants of a row are
timed in alternation (kite, peers, then the reverse order on the next repeat), so that none is
measured only on a hotter, more throttled GPU, and the SM clock read after each row is printed
beside it. Decode-sized calls are timed as the replay of a CUDA graph of many calls (GPU time per
call, launch overhead excluded).
GB/s counts the fewest bytes each op must move (the byte counts of `kite bench`), and the ceiling
is a 1 GiB device-to-device copy timed with events in the same run (bytes read + bytes written).
The L2 is flushed by writing a 256 MB buffer (as triton.testing.do_bench does): a flush that
only reads leaves the timed kernel's own last writes in L2 when the timer stops, tens of MB that
never reach DRAM inside the timing, which inflates a large op's GB/s above what DRAM can give.

Prints one comparison table last; writes peers.json and peers.csv into --out.
"""
import argparse
import ctypes as C
import json
import os
import statistics
import subprocess
import sys

import torch
import torch.nn.functional as F

# ---- kite through ctypes ------------------------------------------------------------------------
KDL_CUDA = 2
DL_INT, DL_FLOAT, DL_BFLOAT = 0, 2, 4
KITE_NORM_PRE = 0
KITE_ROPE_NEOX = 0


class DLDevice(C.Structure):
    _fields_ = [("device_type", C.c_int), ("device_id", C.c_int)]


class DLDataType(C.Structure):
    _fields_ = [("code", C.c_uint8), ("bits", C.c_uint8), ("lanes", C.c_uint16)]


class DLTensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("device", DLDevice), ("ndim", C.c_int32),
                ("dtype", DLDataType), ("shape", C.POINTER(C.c_int64)),
                ("strides", C.POINTER(C.c_int64)), ("byte_offset", C.c_uint64)]


class CtxParams(C.Structure):
    _fields_ = [("device", DLDevice), ("stream", C.c_void_p), ("num_threads", C.c_int),
                ("seed", C.c_uint64), ("checks", C.c_uint32)]


DTYPES = {torch.float32: (DL_FLOAT, 32), torch.float16: (DL_FLOAT, 16),
          torch.bfloat16: (DL_BFLOAT, 16), torch.int32: (DL_INT, 32), torch.uint8: (1, 8),
          torch.float8_e4m3fn: (10, 8)}  # kDLFloat8_e4m3fn


def dl_tensor(t):
    """A DLTensor viewing torch tensor t (its shape and strides arrays ride along on it)."""
    code, bits = DTYPES[t.dtype]
    shape = (C.c_int64 * t.dim())(*t.shape)
    strides = (C.c_int64 * t.dim())(*t.stride())
    d = DLTensor(t.data_ptr(), DLDevice(KDL_CUDA, t.device.index or 0), t.dim(),
                 DLDataType(code, bits, 1), shape, strides, 0)
    d._keep = (shape, strides, t)
    return d


def dl(t):
    return C.byref(dl_tensor(t))


class Kite:
    def __init__(self, path):
        self.lib = C.CDLL(path)
        self.lib.kite_last_error.restype = C.c_char_p
        self.lib.kite_ctx_create.argtypes = [C.POINTER(CtxParams), C.POINTER(C.c_void_p)]
        T, f = C.c_void_p, C.c_float
        sig = {"kite_rms_norm": [T, T, T, f, f, T],
               "kite_rms_norm_backward": [T, T, T, T, f, f, T, T],
               "kite_add_rms_norm": [T, T, T, T, f, f, C.c_int, T],
               "kite_silu_and_mul": [T, T, f, T],
               "kite_rope": [T, T, T, T, T, C.c_int64, C.c_int],
               "kite_softmax": [T, T, f, T],
               "kite_embedding": [T, T, T, T],
               "kite_linear": [T, T, T, T, T],
               "kite_paged_decode": [T] * 10,
               "kite_paged_prefill": [T] * 11,
               "kite_sdpa": [T] * 9,
               "kite_sdpa_fp8": [T] * 10,
               "kite_config_set": [C.c_char_p],
               "kite_quant_fp8_blocks": [T] * 4,
               "kite_sdpa_backward": [T] * 14,
               "kite_sdpa_varlen": [T] * 6 + [C.c_int64] * 2 + [T] * 4,
               "kite_sdpa_varlen_backward": [T] * 6 + [C.c_int64] * 2 + [T] * 9,
               "kite_sample": [T, T, T, T],
               "kite_cross_entropy": [T, T, T, T, T, T],
               "kite_cross_entropy_backward": [T, T, T, T, T, T, T],
               "kite_cross_entropy_with_grad": [T, T, T, T, T, T, T],
               "kite_fused_linear_cross_entropy": [T, T, T, T, T, T, T, T, T, T]}
        for name, args in sig.items():
            fn = getattr(self.lib, name)
            fn.argtypes, fn.restype = args, C.c_int
        self.ctxs = {}

    def ctx(self):
        """The kite ctx bound to PyTorch's current stream (graph capture uses its own stream)."""
        stream = torch.cuda.current_stream().cuda_stream
        if stream not in self.ctxs:
            p = CtxParams(DLDevice(KDL_CUDA, torch.cuda.current_device()), stream, 0, 0, 0)
            out = C.c_void_p()
            self.check(self.lib.kite_ctx_create(C.byref(p), C.byref(out)), "kite_ctx_create")
            self.ctxs[stream] = out
        return self.ctxs[stream]

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: {self.lib.kite_last_error().decode()}")

    def call(self, name, *args):
        self.check(getattr(self.lib, name)(self.ctx(), *args), name)


# ---- timing -------------------------------------------------------------------------------------
_flush = None


def _event_us(fn, flush):
    if flush:  # written: evicts what the previous call left in L2, its dirty lines included
        _flush.zero_()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) * 1e3


def time_many(fns, reps=30, warmup=5, flush=True):
    """Median GPU time of one call of each of fns, L2 flushed before each call. The calls
    alternate: every repeat runs each contestant once, in forward order on even repeats and
    reversed on odd ones, so clock changes over the run affect all of them alike."""
    global _flush
    if _flush is None:
        _flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for fn in fns:
        for _ in range(warmup):
            fn()
    times = [[] for _ in fns]
    for r in range(reps):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            times[i].append(_event_us(fns[i], flush))
    return [statistics.median(t) for t in times]


def time_us(fn, reps=30, warmup=5, flush=True):
    """Median GPU time of one call of fn, L2 flushed before each."""
    return time_many([fn], reps, warmup, flush)[0]


def sm_clock_mhz():
    """The GPU's current SM clock (MHz), or None where neither nvidia-smi nor torch can say."""
    try:
        dev = str(torch.cuda.current_device())
        out = subprocess.run(["nvidia-smi", "-i", dev, "--query-gpu=clocks.sm",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=10)
        return int(out.stdout.strip().splitlines()[0])
    except Exception:
        pass
    try:
        return int(torch.cuda.clock_rate())
    except Exception:
        return None


def graph_us(fn, calls=100, reps=10):
    """GPU time per call of fn, replayed as a CUDA graph of `calls` calls."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn()  # load modules and make kite's ctx for this stream outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    return statistics.median(times)


def copy_gbs(nbytes=1 << 30):
    x = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    us = time_us(lambda: y.copy_(x), reps=20, flush=False)  # 1 GiB: far larger than any L2
    return 2 * nbytes / (us * 1e-6) / 1e9


# ---- the ops: kite call, eager peer, the function torch.compile gets, byte count ---------------
EPS = 1e-6


def rms_ref(x, w):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    return w * h.to(x.dtype)


def add_rms_ref(x, r, w):
    s = x + r
    return rms_ref(s, w), s


def silu_mul_ref(x):
    i = x.shape[-1] // 2
    return F.silu(x[..., :i]) * x[..., i:]


def rope_ref(q, k, pos, cos_sin):
    half = cos_sin.shape[1] // 2
    cs = cos_sin[pos]
    cos, sin = cs[:, None, :half], cs[:, None, half:]

    def rot(x):
        x1, x2 = x[..., :half].float(), x[..., half:2 * half].float()
        r = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).to(x.dtype)
        return torch.cat([r, x[..., 2 * half:]], -1)

    return rot(q), rot(k)


def softmax_ref(x):
    return torch.softmax(x, dim=-1)


def rms_bwd_ref(x, w, dy):
    """dx, dw of F.rms_norm in f32 (x, w and dy as given, results in their dtype)."""
    xf, wf = x.float().requires_grad_(), w.float().requires_grad_()
    dx, dw = torch.autograd.grad(F.rms_norm(xf, (x.shape[-1],), wf, EPS), (xf, wf), dy.float())
    return torch.cat([dx.to(x.dtype).flatten(), dw.to(w.dtype).flatten()])


def rms_bwd_compiled(x, w, dy):
    """A closure running the backward graph alone of a torch.compile'd F.rms_norm."""
    comp = torch.compile(lambda a, b: F.rms_norm(a, (a.shape[-1],), b, EPS), dynamic=False)
    xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
    y = comp(xg, wg)
    run = lambda: torch.autograd.grad(y, (xg, wg), dy, retain_graph=True)
    run()
    return run


rms_bwd_compiled.builds_compiled = True


def compiled(ref_fn, ref_args):
    """A closure timing torch.compile's version of ref_fn (the backward cases build their own:
    their backward graph alone)."""
    if getattr(ref_fn, "builds_compiled", False):
        return ref_fn(*ref_args)
    comp = torch.compile(ref_fn, dynamic=False)
    comp(*ref_args)
    return lambda: comp(*ref_args)


def after(kfn, out, ref_fn):
    """A check: runs kite, then returns (kite's output, the reference)."""
    def check():
        kfn()
        return out, ref_fn()
    return check


def make_case(kite, op, T, dt=torch.bfloat16):
    """(shape string, bytes, kite fn, eager fn, function to compile, its args, check fn)."""
    e = torch.tensor([], dtype=dt).element_size()
    rnd = lambda *s: torch.randn(*s, device="cuda", dtype=dt)
    if op in ("rms_norm", "add_rms_norm"):
        H = 4096
        x, r, w, y = rnd(T, H), rnd(T, H), rnd(H), torch.empty(T, H, device="cuda", dtype=dt)
        X, R, W, Y = dl(x), dl(r), dl(w), dl(y)
        if op == "rms_norm":
            k = lambda: kite.call("kite_rms_norm", X, W, EPS, 0.0, Y)
            eager = lambda: F.rms_norm(x, (H,), w, EPS)
            return (f"{T}x{H}", (2 * T * H + H) * e, k, eager, rms_ref, (x, w),
                    after(k, y, lambda: rms_ref(x, w)))
        r0 = r.clone()
        k = lambda: kite.call("kite_add_rms_norm", X, R, W, EPS, 0.0, KITE_NORM_PRE, Y)

        def check():
            r.copy_(r0)
            k()
            yr, sr = add_rms_ref(x, r0, w)
            return torch.cat([y, r]), torch.cat([yr, sr])

        eager = lambda: F.rms_norm(x + r0, (H,), w, EPS)
        return (f"{T}x{H}", (4 * T * H + H) * e, k, eager, add_rms_ref, (x, r0, w), check)
    if op == "rms_norm_backward":
        # bytes as the issue counts them: x, w, dy read, dx written (dw, H elements, aside);
        # every contestant computes dx and dw; eager and compile time their backward graph alone
        H = 4096
        x, w, dy = rnd(T, H), rnd(H), rnd(T, H)
        dx, dw = torch.empty_like(x), torch.empty_like(w)
        X, W, DY, DX, DW = dl(x), dl(w), dl(dy), dl(dx), dl(dw)
        k = lambda: kite.call("kite_rms_norm_backward", X, W, DY, EPS, 0.0, DX, DW)
        xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
        y = F.rms_norm(xg, (H,), wg, EPS)
        eager = lambda: torch.autograd.grad(y, (xg, wg), dy, retain_graph=True)

        def check():
            k()
            return torch.cat([dx.flatten(), dw.flatten()]), rms_bwd_ref(x, w, dy)

        return (f"{T}x{H}", (3 * T * H + H) * e, k, eager, rms_bwd_compiled, (x, w, dy), check)
    if op == "silu_and_mul":
        I = 14336
        x, y = rnd(T, 2 * I), torch.empty(T, I, device="cuda", dtype=dt)
        X, Y = dl(x), dl(y)
        k = lambda: kite.call("kite_silu_and_mul", X, 0.0, Y)
        return (f"{T}x{I}", 3 * T * I * e, k, lambda: silu_mul_ref(x), silu_mul_ref, (x,),
                after(k, y, lambda: silu_mul_ref(x)))
    if op == "rope":
        Hq, Hkv, D, max_pos = 32, 8, 128, max(T, 8192)
        q, k_ = rnd(T, Hq, D), rnd(T, Hkv, D)
        q0, k0 = q.clone(), k_.clone()
        pos = torch.randperm(max_pos, device="cuda")[:T].to(torch.int32)
        ang = torch.arange(max_pos, device="cuda")[:, None] * \
            (10000.0 ** (-torch.arange(0, D, 2, device="cuda") / D))[None, :]
        cos_sin = torch.cat([ang.cos(), ang.sin()], -1).float().contiguous()
        Q, K, P, CS = dl(q), dl(k_), dl(pos), dl(cos_sin)
        kc = lambda: kite.call("kite_rope", Q, K, P, CS, D, KITE_ROPE_NEOX)
        posl = pos.long()

        def check():
            q.copy_(q0), k_.copy_(k0)
            kc()
            qr, kr = rope_ref(q0, k0, posl, cos_sin)
            return torch.cat([q.flatten(), k_.flatten()]), torch.cat([qr.flatten(), kr.flatten()])

        nbytes = 2 * T * (Hq + Hkv) * D * e + 4 * T + 4 * min(T, max_pos) * D
        return (f"{T}x{Hq}x{Hkv}x{D}", nbytes, kc, lambda: rope_ref(q, k_, posl, cos_sin),
                rope_ref, (q, k_, posl, cos_sin), check)
    if op == "softmax":
        V = 32000
        x, y = rnd(T, V), torch.empty(T, V, device="cuda", dtype=dt)
        X, Y = dl(x), dl(y)
        k = lambda: kite.call("kite_softmax", X, 1.0, Y)
        return (f"{T}x{V}", 2 * T * V * e, k, lambda: softmax_ref(x), softmax_ref, (x,),
                after(k, y, lambda: softmax_ref(x)))
    if op == "embedding":
        V, H = 128256, 4096
        table = rnd(V, H)
        ids = torch.randint(0, V, (T,), device="cuda", dtype=torch.int32)
        y = torch.empty(T, H, device="cuda", dtype=dt)
        I_, TB, Y = dl(ids), dl(table), dl(y)
        k = lambda: kite.call("kite_embedding", I_, TB, Y)
        idl = ids.long()
        return (f"{T}x{H}", 4 * T + 2 * T * H * e, k, lambda: F.embedding(idl, table),
                F.embedding, (idl, table), after(k, y, lambda: F.embedding(idl, table)))
    raise ValueError(op)


def rel_err(got, want):
    got, want = got.float(), want.float()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def rope_edge_checks(kite):
    """Positions outside [0, max_pos) leave their token as it was; q/k as slices of a fused qkv
    projection (strided tokens) rotate like compact ones."""
    T, Hq, Hkv, D, max_pos = 64, 8, 2, 128, 100
    qkv = torch.randn(T, (Hq + 2 * Hkv) * D, device="cuda", dtype=torch.bfloat16)
    q = qkv[:, :Hq * D].view(T, Hq, D)
    k = qkv[:, Hq * D:(Hq + Hkv) * D].view(T, Hkv, D)
    q0, k0 = q.clone(), k.clone()
    pos = torch.randint(0, max_pos, (T,), device="cuda", dtype=torch.int32)
    pos[3], pos[10], pos[20] = -1, max_pos, 1 << 30
    ang = torch.arange(max_pos, device="cuda")[:, None] * \
        (10000.0 ** (-torch.arange(0, 64, 2, device="cuda") / 64))[None, :]
    cos_sin = torch.cat([ang.cos(), ang.sin()], -1).float().contiguous()  # rot_dim 64 < D
    kite.call("kite_rope", dl(q), dl(k), dl(pos), dl(cos_sin), 64, KITE_ROPE_NEOX)
    torch.cuda.synchronize()
    good = (pos >= 0) & (pos < max_pos)
    qr, kr = rope_ref(q0, k0, pos.clamp(0, max_pos - 1).long(), cos_sin)
    untouched = torch.equal(q[~good], q0[~good]) and torch.equal(k[~good], k0[~good])
    err = max(rel_err(q[good], qr[good]), rel_err(k[good], kr[good]))
    return untouched and err < 1e-2, f"bad positions untouched: {untouched}, fused-qkv err {err:.1e}"


def kite_bench_gbs(path):
    """Best cuda kernel GB/s per (op, shape) from `kite bench --json` output, if given."""
    best = {}
    if not path or not os.path.exists(path):
        return best
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if str(r.get("kernel", "")).startswith("cuda.") and r.get("dtype") == "bf16" \
                    and "gb_s" in r:
                key = (r["op"], r["shape"])
                best[key] = max(best.get(key, 0.0), r["gb_s"])
    return best


class AttnOpts(C.Structure):
    _fields_ = [("scale", C.c_float), ("softcap", C.c_float), ("window_left", C.c_int32),
                ("gqa", C.c_int), ("causal", C.c_int32)]


def compute_rows(kite):
    """linear (TFLOP/s vs torch.mm), paged_decode (GB/s of KV read), paged_prefill (TFLOP/s vs
    torch SDPA, flash backend, on the same keys laid out densely), then sdpa_rows. bf16."""
    rows, dt = [], torch.bfloat16
    opts = C.byref(AttnOpts(0.0, 0.0, -1, 0, 1))
    # linear 8192^3
    n = 8192
    x, w = torch.randn(n, n, device="cuda", dtype=dt), torch.randn(n, n, device="cuda", dtype=dt)
    y = torch.empty(n, n, device="cuda", dtype=dt)
    X, W, Y = dl(x), dl(w), dl(y)
    kfn = lambda: kite.call("kite_linear", X, W, None, Y)
    kfn()
    err = rel_err(y.float(), (x @ w.t()).float())
    flop = 2.0 * n ** 3
    ku, tu = time_many([kfn, lambda: x @ w.t()], reps=20, flush=False)
    rows.append({"op": "linear", "shape": f"{n}^3", "kite_us": ku, "kite_tflops": flop / ku / 1e6,
                 "peer": "torch.mm", "peer_tflops": flop / tu / 1e6, "rel_err": err,
                 "sm_mhz": sm_clock_mhz()})
    del x, w, y, X, W, Y
    # paged decode: batch 64, ctx 4096, Hq 32 / Hkv 8, D 128, block 16
    B, L, HQ, HKV, D, BS = 64, 4096, 32, 8, 128, 16
    nb = B * L // BS
    kc = torch.randn(nb, HKV, BS, D, device="cuda", dtype=dt)
    vc = torch.randn(nb, HKV, BS, D, device="cuda", dtype=dt)
    bt = torch.randperm(nb, device="cuda", dtype=torch.int32).view(B, L // BS).contiguous()
    sl = torch.full((B,), L, device="cuda", dtype=torch.int32)
    q = torch.randn(B, HQ, D, device="cuda", dtype=dt)
    o = torch.empty_like(q)
    args = [dl(t) for t in (q, kc, vc, bt, sl)]
    O = dl(o)
    kfn = lambda: kite.call("kite_paged_decode", *args, None, opts, O, None)
    kfn()

    def dense(t, b):  # [Hkv, L, D] of sequence b
        return t[bt[b].long()].permute(1, 0, 2, 3).reshape(HKV, L, D)
    ref = torch.stack([F.scaled_dot_product_attention(
        q[b].unsqueeze(1), dense(kc, b), dense(vc, b), enable_gqa=True).squeeze(1)
        for b in range(4)])
    err = rel_err(o[:4].float(), ref.float())
    kv_bytes = 2 * B * L * HKV * D * 2
    ku = time_us(kfn)
    rows.append({"op": "paged_decode", "shape": f"B{B} L{L} {HQ}/{HKV} D{D} bs{BS}",
                 "kite_us": ku, "kite_gbs": kv_bytes / ku / 1e3, "rel_err": err,
                 "sm_mhz": sm_clock_mhz()})
    del kc, vc, bt, q, o, args, O
    # paged prefill: 4 x 4096 tokens, causal
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
    kfn = lambda: kite.call("kite_paged_prefill", *args, None, opts, O, None)
    kfn()
    kd = kc.view(B, L // BS, HKV, BS, D).permute(0, 2, 1, 3, 4).reshape(B, HKV, L, D)
    vd = vc.view(B, L // BS, HKV, BS, D).permute(0, 2, 1, 3, 4).reshape(B, HKV, L, D)
    qd = q.view(B, L, HQ, D).transpose(1, 2)
    kr, vr = kd.repeat_interleave(HQ // HKV, 1), vd.repeat_interleave(HQ // HKV, 1)
    from torch.nn.attention import sdpa_kernel, SDPBackend
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        tfn = lambda: F.scaled_dot_product_attention(qd, kr, vr, is_causal=True)
        ref = tfn()
        ku, tu = time_many([kfn, tfn], reps=6, warmup=2)
    err = rel_err(o.view(B, L, HQ, D).transpose(1, 2).float(), ref.float())
    flop = 4.0 * B * L * L * D * HQ / 2
    rows.append({"op": "paged_prefill", "shape": f"B{B}x{L} causal {HQ}/{HKV} D{D}",
                 "kite_us": ku, "kite_tflops": flop / ku / 1e6, "peer": "torch SDPA flash",
                 "peer_tflops": flop / tu / 1e6, "rel_err": err, "sm_mhz": sm_clock_mhz()})
    del kc, vc, bt, q, o, args, O, kd, vd, qd, kr, vr, ref
    torch.cuda.empty_cache()
    return rows + sdpa_rows(kite)


def sdpa_rows(kite):
    """Dense sdpa, B 4, S 4096, Hq 32 / Hkv 8, D 128 / 64 / 256, causal and not, bf16: kite (its
    default kernel on an H100: cuda.sm90pp at D 64 / 128, cuda.sm90 at D 256) beside torch SDPA's
    flash and cuDNN backends, each alternated with kite. FLOPs 4 S^2 D Hq per sequence, halved for
    causal (as kite bench counts)."""
    from torch.nn.attention import sdpa_kernel, SDPBackend
    rows, dt = [], torch.bfloat16
    B, S, HQ, HKV = 4, 4096, 32, 8
    for D in (128, 64, 256):
        q = torch.randn(B, HQ, S, D, device="cuda", dtype=dt)
        k = torch.randn(B, HKV, S, D, device="cuda", dtype=dt)
        v = torch.randn(B, HKV, S, D, device="cuda", dtype=dt)
        kr, vr = k.repeat_interleave(HQ // HKV, 1), v.repeat_interleave(HQ // HKV, 1)
        o = torch.empty_like(q)
        Q, K, V, O = dl(q), dl(k), dl(v), dl(o)
        for causal in (1, 0):
            opts = C.byref(AttnOpts(0.0, 0.0, -1, 0, causal))
            kfn = lambda: kite.call("kite_sdpa", Q, K, V, None, None, opts, O, None)
            kfn()
            flop = 4.0 * B * S * S * D * HQ / (2 if causal else 1)
            name = "causal" if causal else "non-causal"
            err = None
            for peer, be in (("torch SDPA flash", SDPBackend.FLASH_ATTENTION),
                             ("torch SDPA cuDNN", SDPBackend.CUDNN_ATTENTION)):
                try:
                    with sdpa_kernel(be):
                        tfn = lambda: F.scaled_dot_product_attention(q, kr, vr,
                                                                     is_causal=bool(causal))
                        if err is None:
                            err = rel_err(o.float(), tfn().float())
                        ku, tu = time_many([kfn, tfn], reps=6, warmup=2)
                except RuntimeError as ex:  # a backend this torch build lacks is reported
                    print(f"sdpa D{D} {name}: {peer}: {ex}", flush=True)
                    continue
                rows.append({"op": "sdpa", "shape": f"B{B}x{S} {name} {HQ}/{HKV} D{D}",
                             "kite_us": ku, "kite_tflops": flop / ku / 1e6, "peer": peer,
                             "peer_tflops": flop / tu / 1e6, "rel_err": err,
                             "sm_mhz": sm_clock_mhz()})
        del q, k, v, kr, vr, o, Q, K, V, O
        torch.cuda.empty_cache()
    return rows


def sdpa_backward_rows(kite):
    """sdpa_backward, B 4, S 4096, Hq 32 / Hkv 8, D 128, causal and not, bf16: kite (its default
    kernel) beside the backward of torch SDPA's flash and cuDNN backends (torch.autograd.grad of
    their output, K and V given already repeated to Hq heads, so the peers' time is their backward
    kernels alone), alternated. FLOPs 2.5 x the forward's 4 S^2 D Hq per sequence, halved for
    causal. rel_err: kite's dq, dk, dv (one vector) against the flash backward's (dk, dv summed
    over each GQA group)."""
    from torch.nn.attention import sdpa_kernel, SDPBackend
    rows, dt = [], torch.bfloat16
    B, S, HQ, HKV, D = 4, 4096, 32, 8, 128
    G = HQ // HKV
    q = torch.randn(B, HQ, S, D, device="cuda", dtype=dt)
    k = torch.randn(B, HKV, S, D, device="cuda", dtype=dt)
    v = torch.randn(B, HKV, S, D, device="cuda", dtype=dt)
    dout = torch.randn(B, HQ, S, D, device="cuda", dtype=dt)
    o, lse = torch.empty_like(q), torch.empty(B, HQ, S, device="cuda", dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    Q, K, V, O, L, G_, DQ, DK, DV = map(dl, (q, k, v, o, lse, dout, dq, dk, dv))
    qr = q.detach().requires_grad_()
    kr = k.repeat_interleave(G, 1).requires_grad_()
    vr = v.repeat_interleave(G, 1).requires_grad_()
    for causal in (1, 0):
        opts = C.byref(AttnOpts(0.0, 0.0, -1, 0, causal))
        kite.call("kite_sdpa", Q, K, V, None, None, opts, O, L)
        kfn = lambda: kite.call("kite_sdpa_backward", Q, K, V, None, None, opts, O, L, G_, DQ,
                                DK, DV, None)
        kfn()
        flop = 2.5 * 4.0 * B * S * S * D * HQ / (2 if causal else 1)
        name = "causal" if causal else "non-causal"
        err = None
        for peer, be in (("torch SDPA flash bwd", SDPBackend.FLASH_ATTENTION),
                         ("torch SDPA cuDNN bwd", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(be):
                    out = F.scaled_dot_product_attention(qr, kr, vr, is_causal=bool(causal))
                    tfn = lambda: torch.autograd.grad(out, (qr, kr, vr), dout, retain_graph=True)
                    if err is None:
                        gq, gk, gv = tfn()
                        gk = gk.float().view(B, HKV, G, S, D).sum(2)
                        gv = gv.float().view(B, HKV, G, S, D).sum(2)
                        err = rel_err(torch.cat([dq.flatten(), dk.flatten(), dv.flatten()]),
                                      torch.cat([gq.flatten().float(), gk.flatten(),
                                                 gv.flatten()]))
                        del gq, gk, gv
                    ku, tu = time_many([kfn, tfn], reps=6, warmup=2)
                    del out
            except RuntimeError as ex:  # a backend this torch build lacks is reported
                print(f"sdpa_backward {name}: {peer}: {ex}", flush=True)
                continue
            rows.append({"op": "sdpa_backward", "shape": f"B{B}x{S} {name} {HQ}/{HKV} D{D}",
                         "kite_us": ku, "kite_tflops": flop / ku / 1e6, "peer": peer,
                         "peer_tflops": flop / tu / 1e6, "rel_err": err,
                         "sm_mhz": sm_clock_mhz()})
            print(json.dumps(rows[-1]), flush=True)
    del q, k, v, dout, o, lse, dq, dk, dv, qr, kr, vr
    torch.cuda.empty_cache()
    return rows


class SamplingParams(C.Structure):
    _fields_ = [("temperature", C.c_void_p), ("top_k", C.c_void_p), ("top_p", C.c_void_p),
                ("min_p", C.c_void_p), ("seeds", C.c_void_p), ("steps", C.c_void_p),
                ("seed", C.c_uint64), ("step", C.c_uint64)]


def torch_sample_sorted(logits, top_k, top_p, gen=None):
    """The sort-based top-k + top-p sampler engines fall back to: sort the vocabulary, mask past
    the k-th and past the top-p mass, softmax, multinomial."""
    srt, idx = logits.sort(dim=-1, descending=True)
    ar = torch.arange(logits.shape[-1], device=logits.device)
    srt = srt.masked_fill(ar[None, :] >= top_k[:, None], float("-inf"))
    probs = srt.softmax(dim=-1)
    cum = probs.cumsum(dim=-1) - probs  # mass strictly above each token
    srt = srt.masked_fill(cum > top_p[:, None], float("-inf"))
    pick = torch.multinomial(srt.softmax(dim=-1), 1, generator=gen)
    return idx.gather(-1, pick).squeeze(-1)


def sampling_rows(kite):
    """sample, V = 128256 f32 logits, top-k 50 + top-p 0.9, B in {1, 256}: kite beside the sort-based
    torch sampler and, if importable, FlashInfer's top_k_top_p_sampling_from_logits (per-row tensors,
    and the same filters as plain numbers: "fi int k"). The token kite
    draws must lie in the set the filters keep (checked against torch's sorted view)."""
    rows = []
    try:
        import flashinfer.sampling as fis
    except Exception as ex:  # not installed: the row says so
        fis = None
        print(f"flashinfer not importable ({ex}); sampling peer is torch only", flush=True)
    V = 128256
    for B in (1, 64, 256):
        logits = torch.randn(B, V, device="cuda", dtype=torch.float32) * 3.0
        temp = torch.ones(B, device="cuda", dtype=torch.float32)
        tk = torch.full((B,), 50, device="cuda", dtype=torch.int32)
        tp = torch.full((B,), 0.9, device="cuda", dtype=torch.float32)
        tok = torch.empty(B, device="cuda", dtype=torch.int32)
        L, TOK = dl(logits), dl(tok)
        TT, TK, TP = dl_tensor(temp), dl_tensor(tk), dl_tensor(tp)
        params = SamplingParams(C.addressof(TT), C.addressof(TK), C.addressof(TP), None, None,
                                None, 1234, 0)
        kfn = lambda: kite.call("kite_sample", L, C.byref(params), TOK)
        kfn()
        torch.cuda.synchronize()
        # the kept set: the top 50, then the top-p prefix of their renormalized softmax
        srt, idx = logits.topk(50, dim=-1)
        pr = srt.softmax(dim=-1)
        kept = (pr.cumsum(-1) - pr) < 0.9
        ok = bool(((idx == tok.long()[:, None]) & kept).any(-1).all())
        row = {"op": "sample", "shape": f"{B}x{V} k50 p0.9 f32", "kite_us": time_us(kfn),
               "kite_graph_us": graph_us(kfn), "in_kept_set": ok}
        row["torch_sort_us"] = time_us(lambda: torch_sample_sorted(logits, tk, tp))
        if fis is not None:
            try:
                ffn = lambda: fis.top_k_top_p_sampling_from_logits(logits, tk, tp)
                ffn()
                row["flashinfer_us"] = time_us(ffn)
                # the same filters as plain numbers (its path for one top-k for every row)
                fin = lambda: fis.top_k_top_p_sampling_from_logits(logits, 50, 0.9)
                fin()
                row["flashinfer_int_us"] = time_us(fin)
            except Exception as ex:
                print(f"flashinfer sampling failed: {ex}", flush=True)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


class CeOpts(C.Structure):
    _fields_ = [("ignore_index", C.c_int32), ("label_smoothing", C.c_float), ("z_loss", C.c_float),
                ("softcap", C.c_float), ("reduction", C.c_int)]


class FlceOpts(C.Structure):
    _fields_ = [("ce", CeOpts), ("chunk_bytes", C.c_size_t)]


def _peak_extra_bytes(fn):
    """Peak bytes fn allocates through PyTorch's allocator beyond what was allocated before."""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def loss_rows(kite, compile_peers):
    """The training losses, bf16, mean reduction, every 17th target ignored:
    cross_entropy forward + backward at N 8192 x V 128256 (kite: the forward, then the backward
    written over the logits, and cross_entropy_with_grad, both in one pass, as with_grad_us; GB/s
    of the fewest bytes: logits read once, dlogits written once),
    and fused_linear_cross_entropy at N 8192, H 4096, V 128256, forward + backward (TFLOP/s of
    its three products, 6 N V H; GiB of extra memory: the gradients and all scratch), beside
    torch eager, torch.compile and Liger-Kernel where it is installed."""
    rows, dt = [], torch.bfloat16
    N, V, H = 8192, 128256, 4096
    try:
        from liger_kernel.transformers import (LigerCrossEntropyLoss,
                                               LigerFusedLinearCrossEntropyLoss)
    except Exception as ex:  # a missing peer is reported, not fatal
        print(f"liger_kernel not available: {ex}", flush=True)
        LigerCrossEntropyLoss = LigerFusedLinearCrossEntropyLoss = None
    t = torch.randint(0, V, (N,), device="cuda")
    t[::17] = -100
    t32 = t.to(torch.int32)
    ce = CeOpts(-100, 0.0, 0.0, 0.0, 2)
    loss, lse = torch.empty(1, device="cuda"), torch.empty(N, device="cuda")
    dloss = torch.ones(1, device="cuda")
    TG, L, E, D = dl(t32), dl(loss), dl(lse), dl(dloss)

    # cross_entropy
    x0 = torch.randn(N, V, device="cuda", dtype=dt) * 2
    x = x0.clone()
    X = dl(x)

    def kfn():
        kite.call("kite_cross_entropy", X, TG, C.byref(ce), L, E)
        kite.call("kite_cross_entropy_backward", X, TG, E, D, C.byref(ce), X)
    kfn()
    xr = x0.float().requires_grad_(True)
    lr = F.cross_entropy(xr, t)
    lr.backward()
    err = max(rel_err(loss, lr.detach().reshape(1)), rel_err(x.float(), xr.grad))
    xw = x0.clone()
    XW = dl(xw)

    def kwith_grad():
        kite.call("kite_cross_entropy_with_grad", XW, TG, C.byref(ce), L, E, XW)
    kwith_grad()
    err = max(err, rel_err(loss, lr.detach().reshape(1)), rel_err(xw.float(), xr.grad))
    del xr, lr
    xe = x0.clone().requires_grad_(True)

    def eager():
        xe.grad = None
        F.cross_entropy(xe, t).backward()
    fns, names = [kfn, kwith_grad, eager], ["kite_us", "with_grad_us", "eager_us"]
    if compile_peers:
        try:
            comp = torch.compile(lambda a: F.cross_entropy(a, t), dynamic=False)
            comp(xe).backward()

            def compiled():
                xe.grad = None
                comp(xe).backward()
            fns.append(compiled)
            names.append("compile_us")
        except Exception as ex:
            print(f"cross_entropy: torch.compile failed: {ex}", file=sys.stderr)
    if LigerCrossEntropyLoss:
        lce, xl = LigerCrossEntropyLoss(), x0.clone().requires_grad_(True)

        def liger():
            xl.grad = None
            lce(xl, t).backward()
        fns.append(liger)
        names.append("liger_us")
    nbytes = 2 * N * V * 2
    row = {"op": "cross_entropy fwd+bwd", "shape": f"N{N} V{V} bf16", "bytes": nbytes,
           "rel_err": err}
    for name, us in zip(names, time_many(fns, reps=10, warmup=2)):
        row[name] = us
        row[name.replace("_us", "_gbs")] = nbytes / (us * 1e-6) / 1e9
    row["sm_mhz"] = sm_clock_mhz()
    rows.append(row)
    print(json.dumps(row), flush=True)
    del x0, x, X, xw, XW, xe, fns
    torch.cuda.empty_cache()

    # fused_linear_cross_entropy
    h = torch.randn(N, H, device="cuda", dtype=dt)
    w = torch.randn(V, H, device="cuda", dtype=dt) * 0.02
    grads = {}

    def kflce():
        dh, dw = torch.empty_like(h), torch.empty_like(w)
        kite.call("kite_fused_linear_cross_entropy", dl(h), dl(w), None, TG,
                  C.byref(FlceOpts(ce, 0)), L, dl(dh), dl(dw), None)
        grads["kite"] = (dh, dw)
    # the drop in the device's free memory: the returned gradients and kite's scratch
    torch.cuda.synchronize()
    free0 = torch.cuda.mem_get_info()[0]
    kflce()
    torch.cuda.synchronize()
    kite_mem = free0 - torch.cuda.mem_get_info()[0]
    kloss = loss.clone()
    hr, wr = h.float().requires_grad_(True), w.float().requires_grad_(True)
    lr = F.cross_entropy(hr @ wr.T, t)
    lr.backward()
    err = max(rel_err(kloss, lr.detach().reshape(1)), rel_err(grads["kite"][0].float(), hr.grad),
              rel_err(grads["kite"][1].float(), wr.grad))
    del hr, wr, lr
    grads.clear()
    torch.cuda.empty_cache()
    he, we = h.clone().requires_grad_(True), w.clone().requires_grad_(True)

    def torch_flce():
        he.grad = we.grad = None
        F.cross_entropy(he @ we.T, t).backward()
    fns, names = [kflce, torch_flce], ["kite_us", "eager_us"]
    mems = {"kite_gib": kite_mem / 2**30, "eager_gib": _peak_extra_bytes(torch_flce) / 2**30}
    if LigerFusedLinearCrossEntropyLoss:
        lf = LigerFusedLinearCrossEntropyLoss()

        def liger_flce():
            he.grad = we.grad = None
            lf(we, he, t).backward()
        he.grad = we.grad = None
        mems["liger_gib"] = _peak_extra_bytes(liger_flce) / 2**30
        fns.append(liger_flce)
        names.append("liger_us")
    flop = 6.0 * N * V * H
    row = {"op": "fused_linear_ce fwd+bwd", "shape": f"N{N} H{H} V{V} bf16", "rel_err": err,
           **mems}
    for name, us in zip(names, time_many(fns, reps=5, warmup=2, flush=False)):
        row[name] = us
        row[name.replace("_us", "_tflops")] = flop / us / 1e6
    row["sm_mhz"] = sm_clock_mhz()
    rows.append(row)
    print(json.dumps(row), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/lib/libkite.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--kite-bench", default=None, help="kite bench --json output to cross-check")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--only", default="core,compute,attn_bwd,sampling,loss",
                    help="sections to run, comma-separated: core,compute,attn_bwd,sampling,loss")
    args = ap.parse_args()
    sections = set(args.only.split(","))
    unknown = sections - {"core", "compute", "attn_bwd", "sampling", "loss"}
    if unknown:
        ap.error(f"--only: unknown sections {sorted(unknown)}")
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    kite = Kite(args.lib)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    copy = copy_gbs()
    print(f"device-to-device copy: {copy:.0f} GB/s (read + write)", flush=True)
    ok, msg = rope_edge_checks(kite)
    print(f"rope edge cases: {'ok' if ok else 'FAIL'} ({msg})", flush=True)

    rows, failures = [], 0 if ok else 1
    bench_gbs = kite_bench_gbs(args.kite_bench)
    ops = ["rms_norm", "add_rms_norm", "silu_and_mul", "rope", "softmax", "embedding",
           "rms_norm_backward"]
    for op in ops if "core" in sections else []:
        # backward graphs are not replayed as CUDA graphs: the training size only
        for T in (8192,) if op.endswith("_backward") else (8192, 16, 1):
            shape, nbytes, kfn, eager, ref_fn, ref_args, check = make_case(kite, op, T)
            got, want = check()
            torch.cuda.synchronize()
            err = rel_err(got, want)
            bad = not (err < 1e-2)
            failures += bad
            row = {"op": op, "shape": shape, "T": T, "bytes": nbytes, "rel_err": err}
            if T == 8192:
                fns, names = [kfn, eager], ["kite_us", "eager_us"]
                if not args.no_compile:
                    try:
                        fns.append(compiled(ref_fn, ref_args))
                        names.append("compile_us")
                    except Exception as ex:  # a peer that fails to compile is reported, not fatal
                        print(f"{op}: torch.compile failed: {ex}", file=sys.stderr)
                for name, us in zip(names, time_many(fns)):
                    row[name] = us
            else:  # alternated too: kite, eager, eager, kite
                k1, e1 = graph_us(kfn), graph_us(eager)
                e2, k2 = graph_us(eager), graph_us(kfn)
                row["kite_us"], row["eager_us"] = (k1 + k2) / 2, (e1 + e2) / 2
            row["sm_mhz"] = sm_clock_mhz()
            for side in ("kite", "eager", "compile"):
                if f"{side}_us" in row:
                    row[f"{side}_gbs"] = nbytes / (row[f"{side}_us"] * 1e-6) / 1e9
            row["pct_copy"] = 100.0 * row["kite_gbs"] / copy
            row["kite_bench_gbs"] = bench_gbs.get((op, shape))
            rows.append(row)
            print(json.dumps(row), flush=True)
            del kfn, eager, check
            torch.cuda.empty_cache()

    try:
        crows = compute_rows(kite) if "compute" in sections else []
    except Exception as ex:  # reported in the table's place, not fatal to the rows above
        print(f"compute rows failed: {ex}", flush=True)
        crows, failures = [], failures + 1
    for r in crows:
        print(json.dumps(r), flush=True)
        failures += not (r["rel_err"] < 2e-2)
    try:
        brows = sdpa_backward_rows(kite) if "attn_bwd" in sections else []
    except Exception as ex:  # reported, not fatal to the rows above
        print(f"sdpa_backward rows failed: {ex}", flush=True)
        brows, failures = [], failures + 1
    failures += sum(not (r["rel_err"] < 2e-2) for r in brows)
    crows += brows
    try:
        srows = sampling_rows(kite) if "sampling" in sections else []
    except Exception as ex:  # reported, not fatal to the rows above
        print(f"sampling rows failed: {ex}", flush=True)
        srows, failures = [], failures + 1
    failures += sum(not r["in_kept_set"] for r in srows)
    try:
        lrows = loss_rows(kite, not args.no_compile) if "loss" in sections else []
    except Exception as ex:  # reported, not fatal to the rows above
        print(f"loss rows failed: {ex}", flush=True)
        lrows, failures = [], failures + 1
    failures += sum(not (r["rel_err"] < 2e-2) for r in lrows)
    # a section asked for that produced no row failed somewhere: loudly, not as an empty table
    for name, got_rows in (("core", rows), ("compute", crows), ("attn_bwd", brows),
                           ("sampling", srows), ("loss", lrows)):
        if name in sections and not got_rows:
            print(f"section {name}: FAILED, no rows", flush=True)
            failures += 1

    with open(os.path.join(args.out, "peers.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "copy_gbs": copy, "rows": rows,
                   "compute_rows": crows, "sampling_rows": srows, "loss_rows": lrows}, f,
                  indent=1)
    cols = ["op", "shape", "kite_us", "kite_gbs", "eager_gbs", "compile_gbs", "pct_copy",
            "kite_bench_gbs", "rel_err", "sm_mhz"]
    with open(os.path.join(args.out, "peers.csv"), "w") as f:
        f.write(",".join(cols) + "\n")
        for r in rows:
            f.write(",".join("" if r.get(c) is None else str(r.get(c)) for c in cols) + "\n")

    fmt = lambda v, p=0: "-" if v is None else f"{v:.{p}f}"
    print("\n---- kite vs PyTorch")
    print(f"{torch.cuda.get_device_name()}: copy {copy:.0f} GB/s; bf16; T=8192 rows: events, "
          f"L2 flushed by writing, contestants alternated; T=1/16 rows: CUDA-graph replay (GPU us "
          f"per call); SM MHz read after each row")
    print(f"{'op':<13} {'shape':<16} {'kite us':>8} {'kite GB/s':>9} {'eager GB/s':>10} "
          f"{'compile GB/s':>12} {'% copy':>6} {'bench GB/s':>10} {'err':>7} {'SM MHz':>6}")
    for r in rows:
        print(f"{r['op']:<13} {r['shape']:<16} {fmt(r['kite_us'], 1):>8} {fmt(r['kite_gbs']):>9} "
              f"{fmt(r.get('eager_gbs')):>10} {fmt(r.get('compile_gbs')):>12} "
              f"{fmt(r['pct_copy']):>6} {fmt(r.get('kite_bench_gbs')):>10} {r['rel_err']:>7.1e} "
              f"{fmt(r.get('sm_mhz')):>6}")
    print(f"\n{'op':<13} {'shape':<28} {'kite us':>9} {'kite':>14} {'peer':>24} {'err':>7} "
          f"{'SM MHz':>6}")
    for r in crows:
        kv = (f"{r['kite_gbs']:.0f} GB/s" if "kite_gbs" in r else f"{r['kite_tflops']:.0f} TFLOP/s")
        pv = f"{r['peer']} {r['peer_tflops']:.0f}" if "peer" in r else "-"
        print(f"{r['op']:<13} {r['shape']:<28} {r['kite_us']:>9.1f} {kv:>14} {pv:>24} "
              f"{r['rel_err']:>7.1e} {fmt(r.get('sm_mhz')):>6}")
    print(f"\n{'op':<8} {'shape':<26} {'kite us':>8} {'graph us':>8} {'torch sort':>10} "
          f"{'flashinfer':>10} {'fi int k':>8} {'kept':>5}")
    for r in srows:
        print(f"{r['op']:<8} {r['shape']:<26} {r['kite_us']:>8.1f} {r['kite_graph_us']:>8.1f} "
              f"{fmt(r.get('torch_sort_us'), 1):>10} {fmt(r.get('flashinfer_us'), 1):>10} "
              f"{fmt(r.get('flashinfer_int_us'), 1):>8} {str(r['in_kept_set']):>5}")
    print(f"\n{'op':<24} {'shape':<24} {'kite us':>9} {'one pass':>9} {'eager us':>9} "
          f"{'compile us':>10} {'liger us':>9} {'kite GiB':>8} {'eager GiB':>9} {'liger GiB':>9} "
          f"{'err':>7}")
    for r in lrows:
        print(f"{r['op']:<24} {r['shape']:<24} {fmt(r.get('kite_us'), 1):>9} "
              f"{fmt(r.get('with_grad_us'), 1):>9} "
              f"{fmt(r.get('eager_us'), 1):>9} {fmt(r.get('compile_us'), 1):>10} "
              f"{fmt(r.get('liger_us'), 1):>9} {fmt(r.get('kite_gib'), 2):>8} "
              f"{fmt(r.get('eager_gib'), 2):>9} {fmt(r.get('liger_gib'), 2):>9} "
              f"{r['rel_err']:>7.1e}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
