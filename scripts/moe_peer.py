"""The routed MoE block of gpt-oss-20b and DeepSeek-V3 on kite beside PyTorch, bf16, same GPU.

The router is left out: ids / weights come from a fixed random top-k (k distinct experts per
token, weights a softmax of random logits), the same for every contestant.
  gpt-oss-20b  E 32, k 4, hidden 2880, intermediate 2880, biases, clamped SwiGLU (alpha 1.702,
               limit 7), gate / up interleaved, experts as the checkpoint stores them (transposed:
               gate_up_proj [E, H, 2I], down_proj [E, I, H]).
  DeepSeek-V3  E 256, k 8, hidden 7168, moe_intermediate 2048, silu, no biases, experts [E, 2I, H]
               and [E, H, I], plus one shared expert (intermediate 2048): on kite it runs as
               kite_linear -> kite_silu_and_mul -> kite_linear, added to the routed sum by torch's
               add; on torch as F.linear / silu * up / F.linear.
Contestants, each computing the whole block from x, ids, weights:
  kite     kite_fused_moe_ex (kite's choice of kernel; "kite pairs" / "kite grouped" pin
           fused_moe_ex=cuda.pairs / cuda.grouped, the pairs kernel only at decode sizes)
  grouped  torch._grouped_mm: pairs sorted by expert (argsort), offs = cumulative counts (int32
           group ends), two grouped products, biases gathered per row, the weighted sum of the k
           rows of each token
  loop     a python loop over the experts that have tokens (transformers' way: torch.where on the
           ids, F.linear / the activation / F.linear, index_add_ of the weighted rows)
Timing: CUDA events around one call, the L2 flushed before each, contestants alternated, median
(scripts/torch_peers.py's time_many). Decode rows (T 1 - 64) report TB/s of the touched experts'
weights (each read once; biases and the shared expert included); the prefill row (T 4096) reports
TFLOP/s (2 T k 3 I H, plus 2 T 3 I H for the shared expert). rel err: kite's y against the
torch._grouped_mm result (the loop's where _grouped_mm is missing).

First, group_gemm (bf16, 8 groups, N = K = 4096): 8 x 512 equal rows beside torch.bmm, ragged
rows beside torch._grouped_mm (--gemm 0 leaves them out).

usage: python3 scripts/moe_peer.py [--lib build/lib/libkite.so] [--tokens 1,4,16,64,4096]
                                   [--models gpt-oss-20b,deepseek-v3] [--json FILE] [--gemm 0|1]
"""
import argparse
import ctypes as C
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peers import Kite, dl, rel_err, sm_clock_mhz, time_many  # noqa: E402

KITE_MOE_SILU, KITE_MOE_SWIGLU_OAI = 0, 2
KITE_MOE_SPLIT, KITE_MOE_INTERLEAVED = 0, 1


class MoeOpts(C.Structure):
    _fields_ = [("act", C.c_int), ("layout", C.c_int), ("alpha", C.c_float),
                ("limit", C.c_float), ("transposed", C.c_int32)]


MODELS = {
    "gpt-oss-20b": dict(E=32, k=4, H=2880, I=2880, bias=True, act="swiglu_oai", transposed=True,
                        shared=0),
    "deepseek-v3": dict(E=256, k=8, H=7168, I=2048, bias=False, act="silu", transposed=False,
                        shared=2048),
}
ALPHA, LIMIT = 1.702, 7.0


class Block:
    """One model's weights (random, scaled so that activations stay of order 1)."""

    def __init__(self, name, cfg):
        self.name, self.cfg = name, cfg
        E, H, I = cfg["E"], cfg["H"], cfg["I"]
        g = torch.Generator(device="cuda").manual_seed(0)
        bf = dict(device="cuda", dtype=torch.bfloat16)

        def rand(*shape, scale):  # filled in place: DeepSeek-V3's experts are 22.5 GB
            return torch.empty(*shape, **bf).uniform_(-scale, scale, generator=g)

        if cfg["transposed"]:  # gpt-oss: gate_up_proj [E, H, 2I] (interleaved), down_proj [E, I, H]
            self.w13 = rand(E, H, 2 * I, scale=2 / H ** 0.5)
            self.w2 = rand(E, I, H, scale=1 / I ** 0.5)
        else:
            self.w13 = rand(E, 2 * I, H, scale=2 / H ** 0.5)
            self.w2 = rand(E, H, I, scale=1 / I ** 0.5)
        self.b13 = rand(E, 2 * I, scale=0.5) if cfg["bias"] else None
        self.b2 = rand(E, H, scale=0.5) if cfg["bias"] else None
        S = cfg["shared"]
        if S:
            self.ws_gu = rand(2 * S, H, scale=2 / H ** 0.5)
            self.ws_down = rand(H, S, scale=1 / S ** 0.5)
        # torch._grouped_mm's operands [E, K, N]: views of the stored weights, no copy
        self.g13 = self.w13 if cfg["transposed"] else self.w13.transpose(1, 2)
        self.g2 = self.w2 if cfg["transposed"] else self.w2.transpose(1, 2)

    def inputs(self, T):
        cfg = self.cfg
        g = torch.Generator(device="cuda").manual_seed(T)
        x = torch.randn(T, cfg["H"], device="cuda", dtype=torch.bfloat16, generator=g)
        logits = torch.randn(T, cfg["E"], device="cuda", generator=g)
        w, ids = torch.topk(torch.softmax(logits, -1), cfg["k"], dim=-1)
        return x, (w / w.sum(-1, keepdim=True)).contiguous(), ids.to(torch.int32).contiguous()

    # ---- torch ----------------------------------------------------------------------------------
    def act(self, h, b):
        """h [rows, 2I] (+ b) -> [rows, I]: the block's activation, in f32, rounded to bf16."""
        h = h.float() + (b.float() if b is not None else 0)
        if self.cfg["act"] == "swiglu_oai":
            gate, up = h[:, 0::2].clamp(max=LIMIT), h[:, 1::2].clamp(-LIMIT, LIMIT)
            return (gate * torch.sigmoid(ALPHA * gate) * (up + 1)).to(torch.bfloat16)
        I = h.shape[1] // 2
        return (F.silu(h[:, :I]) * h[:, I:]).to(torch.bfloat16)

    def shared_torch(self, x):
        gu = F.linear(x, self.ws_gu)
        S = gu.shape[1] // 2
        return F.linear(F.silu(gu[:, :S]) * gu[:, S:], self.ws_down)

    def torch_grouped(self, x, w, ids):
        E, k = self.cfg["E"], self.cfg["k"]
        flat = ids.flatten().long()
        order = torch.argsort(flat, stable=True)
        eid = flat[order]
        offs = torch.cumsum(torch.bincount(flat, minlength=E), 0).to(torch.int32)
        xs = x[order // k]
        h = torch._grouped_mm(xs, self.g13, offs=offs)
        a = self.act(h, self.b13[eid] if self.b13 is not None else None)
        o = torch._grouped_mm(a, self.g2, offs=offs).float()
        if self.b2 is not None:
            o = o + self.b2[eid].float()
        rows = torch.empty_like(o)
        rows[order] = o
        y = (rows.view(-1, k, o.shape[1]) * w.unsqueeze(-1)).sum(1)
        if self.cfg["shared"]:
            y = y + self.shared_torch(x).float()
        return y.to(torch.bfloat16)

    def torch_loop(self, x, w, ids):
        y = torch.zeros(x.shape[0], x.shape[1], device="cuda", dtype=torch.float32)
        for e in torch.unique(ids).tolist():  # the experts hit (a host sync, as transformers')
            tok, slot = torch.where(ids == e)
            if self.cfg["transposed"]:
                h = x[tok] @ self.w13[e]
            else:
                h = F.linear(x[tok], self.w13[e])
            a = self.act(h, self.b13[e] if self.b13 is not None else None)
            o = a @ self.w2[e] if self.cfg["transposed"] else F.linear(a, self.w2[e])
            o = o.float() + (self.b2[e].float() if self.b2 is not None else 0)
            y.index_add_(0, tok, o * w[tok, slot, None])
        if self.cfg["shared"]:
            y = y + self.shared_torch(x).float()
        return y.to(torch.bfloat16)

    # ---- kite -----------------------------------------------------------------------------------
    def kite_fn(self, kite, x, w, ids, pin=None):
        cfg = self.cfg
        o = MoeOpts(KITE_MOE_SWIGLU_OAI if cfg["act"] == "swiglu_oai" else KITE_MOE_SILU,
                    KITE_MOE_INTERLEAVED if cfg["act"] == "swiglu_oai" else KITE_MOE_SPLIT,
                    ALPHA, LIMIT if cfg["act"] == "swiglu_oai" else 0.0, int(cfg["transposed"]))
        y = torch.empty_like(x)
        none = None
        args = [dl(x), dl(self.w13), dl(self.b13) if self.b13 is not None else none,
                dl(self.w2), dl(self.b2) if self.b2 is not None else none, dl(w), dl(ids),
                C.byref(o), dl(y)]
        S = cfg["shared"]
        if S:
            gu = torch.empty(x.shape[0], 2 * S, device="cuda", dtype=torch.bfloat16)
            a = torch.empty(x.shape[0], S, device="cuda", dtype=torch.bfloat16)
            ys = torch.empty_like(x)
            sargs = (dl(x), dl(self.ws_gu), dl(gu), dl(a), dl(self.ws_down), dl(ys))
        cfg_str = (f"fused_moe_ex={pin}" if pin else "").encode()

        def run():
            kite.check(kite.lib.kite_config_set_thread(cfg_str), "kite_config_set_thread")
            kite.call("kite_fused_moe_ex", *args)
            run.kernel = kite.lib.kite_last_dispatch()  # fused_moe_ex's, not the shared expert's
            if S:
                kite.call("kite_linear", sargs[0], sargs[1], None, sargs[2])
                kite.call("kite_silu_and_mul", sargs[2], 0.0, sargs[3])
                kite.call("kite_linear", sargs[3], sargs[4], None, sargs[5])
                y.add_(ys)
            return y

        return run

    def touched_bytes(self, ids):
        E, H, I = self.cfg["E"], self.cfg["H"], self.cfg["I"]
        per = 3 * I * H + ((2 * I + H) if self.cfg["bias"] else 0)
        shared = 3 * self.cfg["shared"] * H
        return 2 * (torch.unique(ids).numel() * per + shared)

    def flops(self, T):
        c = self.cfg
        return 2 * T * (c["k"] * 3 * c["I"] * c["H"] + 3 * c["shared"] * c["H"])


def gemm_rows(kite):
    """group_gemm bf16, 8 groups, N = K = 4096: equal groups of 512 rows beside torch.bmm, and
    ragged groups (4096 rows in all) beside torch._grouped_mm."""
    G, N, K = 8, 4096, 4096
    out = []
    for label, sizes in (("uniform 8x512", [512] * G),
                         ("ragged 300..896", [300, 700, 512, 128, 896, 512, 400, 648])):
        M = sum(sizes)
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(G, N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
        gs = torch.tensor(sizes, device="cuda", dtype=torch.int32)
        offs = torch.cumsum(gs, 0).to(torch.int32)
        y = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        args = (dl(x), dl(w), dl(gs), dl(y))

        def kfn():
            kite.call("kite_group_gemm", *args)
            return y

        if label.startswith("uniform"):
            peer_name, peer = "bmm", lambda: torch.bmm(x.view(G, -1, K), w.transpose(1, 2)).view(M, N)
        else:
            peer_name = "grouped_mm"
            peer = lambda: torch._grouped_mm(x, w.transpose(1, 2), offs=offs)
        row = {"op": "group_gemm", "shape": f"{label} x {N} x {K}", "peer": peer_name}
        try:
            got = kfn().clone()
            row["kernel"] = kite.lib.kite_last_dispatch().decode()
            row["rel_err"] = rel_err(got, peer())
            kus, pus = time_many([kfn, peer], reps=20, warmup=3)
        except Exception as ex:
            print(f"group_gemm {label}: failed: {ex}", flush=True)
            continue
        flops = 2 * M * N * K
        row.update(kite_us=kus, peer_us=pus, kite_tflops=flops / kus / 1e6,
                   peer_tflops=flops / pus / 1e6, ratio=pus / kus, sm_mhz=sm_clock_mhz())
        print(json.dumps(row), flush=True)
        out.append(row)
        del x, w, y
        torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/lib/libkite.so")
    ap.add_argument("--tokens", default="1,4,16,64,4096")
    ap.add_argument("--models", default="gpt-oss-20b,deepseek-v3")
    ap.add_argument("--json", default=None)
    ap.add_argument("--gemm", type=int, default=1, help="1: the group_gemm rows first")
    args = ap.parse_args()
    kite = Kite(args.lib)
    T_, f = C.c_void_p, C.c_float
    kite.lib.kite_fused_moe_ex.argtypes, kite.lib.kite_fused_moe_ex.restype = [T_] * 10, C.c_int
    kite.lib.kite_config_set_thread.argtypes = [C.c_char_p]
    kite.lib.kite_config_set_thread.restype = C.c_int
    kite.lib.kite_last_dispatch.restype = C.c_char_p
    has_gmm = hasattr(torch, "_grouped_mm")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"torch._grouped_mm {'present' if has_gmm else 'missing'}", flush=True)
    rows, failures = [], 0
    kite.lib.kite_group_gemm.argtypes, kite.lib.kite_group_gemm.restype = [T_] * 5, C.c_int
    grows = gemm_rows(kite) if args.gemm else []
    failures += sum(not (r["rel_err"] < 2e-2) for r in grows)
    for name in (m for m in args.models.split(",") if m):
        blk = Block(name, MODELS[name])
        for T in (int(t) for t in args.tokens.split(",")):
            x, w, ids = blk.inputs(T)
            decode = T <= 64
            contest = {"kite": blk.kite_fn(kite, x, w, ids)}
            kite_choice = None
            if decode:
                contest["kite pairs"] = blk.kite_fn(kite, x, w, ids, "cuda.pairs")
            contest["kite grouped"] = blk.kite_fn(kite, x, w, ids, "cuda.grouped")
            if has_gmm:
                contest["grouped_mm"] = lambda: blk.torch_grouped(x, w, ids)
            contest["loop"] = lambda: blk.torch_loop(x, w, ids)
            row = {"model": name, "T": T}
            try:  # correctness first: kite (its own choice) against torch
                got = contest["kite"]().clone()
                kite_choice = contest["kite"].kernel.decode()
                want = contest["grouped_mm" if has_gmm else "loop"]()
                row["rel_err"] = rel_err(got, want)
                if has_gmm:
                    row["rel_err_loop"] = rel_err(contest["loop"](), want)
            except Exception as ex:  # reported, the row still timed
                print(f"{name} T{T}: check failed: {ex}", flush=True)
                row["rel_err"], want = float("nan"), None
            for pin in ("kite pairs", "kite grouped"):  # a kernel may decline this T: left out
                try:
                    got = contest[pin]().clone() if pin in contest else None
                    if got is not None and want is not None:
                        row[f"rel_err_{pin.split()[1]}"] = rel_err(got, want)
                except Exception as ex:
                    print(f"{name} T{T}: {pin}: {ex}", flush=True)
                    del contest[pin]
            kite.check(kite.lib.kite_config_set_thread(b""), "kite_config_set_thread")
            row["kernel"] = kite_choice
            names = list(contest)
            reps = 5 if T >= 4096 or name == "deepseek-v3" else 20
            try:
                times = time_many([contest[n] for n in names], reps=reps, warmup=2)
            except Exception as ex:
                print(f"{name} T{T}: timing failed: {ex}", flush=True)
                failures += 1
                continue
            kite.check(kite.lib.kite_config_set_thread(b""), "kite_config_set_thread")
            nbytes, flops = blk.touched_bytes(ids), blk.flops(T)
            for n, us in zip(names, times):
                key = n.replace(" ", "_")
                row[f"{key}_us"] = us
                row[f"{key}_tbs" if decode else f"{key}_tflops"] = (
                    (nbytes if decode else flops) / (us * 1e-6) / 1e12)
            row["bytes"], row["flops"], row["sm_mhz"] = nbytes, flops, sm_clock_mhz()
            bad = not (row["rel_err"] < 2e-2)
            failures += bad
            rows.append(row)
            print(json.dumps(row), flush=True)
            del contest, x, w, ids
            torch.cuda.empty_cache()
        del blk
        torch.cuda.empty_cache()

    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "rows": rows, "group_gemm_rows": grows}, fh, indent=1)
    fmt = lambda r, k, p=1: "-" if r.get(k) is None else f"{r[k]:.{p}f}"
    print("\n---- MoE block: kite vs torch (bf16; router excluded; us per call, events, L2 "
          "flushed; decode TB/s of touched weights, prefill TFLOP/s)")
    print(f"{'model':<12} {'T':>5} {'kite us':>9} {'pairs us':>9} {'grouped us':>10} "
          f"{'_grouped_mm us':>14} {'loop us':>9} {'kite':>7} {'_g_mm':>7} {'loop':>7} "
          f"{'unit':>7} {'err':>8} kernel")
    for r in rows:
        u = "tb" if r["T"] <= 64 else "tflop"
        print(f"{r['model']:<12} {r['T']:>5} {fmt(r, 'kite_us'):>9} {fmt(r, 'kite_pairs_us'):>9} "
              f"{fmt(r, 'kite_grouped_us'):>10} {fmt(r, 'grouped_mm_us'):>14} "
              f"{fmt(r, 'loop_us'):>9} {fmt(r, 'kite_' + u + 's', 2):>7} "
              f"{fmt(r, 'grouped_mm_' + u + 's', 2):>7} {fmt(r, 'loop_' + u + 's', 2):>7} "
              f"{'TB/s' if u == 'tb' else 'TFLOP/s':>7} {r['rel_err']:>8.1e} {r.get('kernel')}")
    for r in grows:
        print(f"group_gemm {r['shape']:<30} kite {r['kite_us']:8.1f} us {r['kite_tflops']:6.1f} "
              f"TFLOP/s ({r['kernel']}), {r['peer']} {r['peer_us']:8.1f} us "
              f"{r['peer_tflops']:6.1f} TFLOP/s, kite/peer speed {r['ratio']:.2f}, err "
              f"{r['rel_err']:.1e}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
