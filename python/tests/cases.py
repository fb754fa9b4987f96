"""Sample arguments and plain-torch references for every op (small LLM-like shapes).

CASES[op](dtype, device) -> Case: args for torch.ops.kite.<op> (functional form), a reference
computed with plain torch in float32 or better, and what to compare (the results, and the
arguments an op updates in place).
"""
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

import kite

FLOATS = [torch.float32, torch.float16, torch.bfloat16]


@dataclass
class Case:
    args: list
    ref: object  # callable(args) -> list of expected tensors
    observe: object = None  # callable(result, args) -> list of tensors (default: the results)
    mutated: list = field(default_factory=list)  # indices of args updated in place

    def outputs(self, result, args):
        if self.observe:
            return self.observe(result, args)
        if isinstance(result, (tuple, list)):
            return list(result)
        return [result]


def _r(*shape, dtype=torch.float32, device="cpu", scale=1.0):
    return (torch.randn(*shape, device=device) * scale).to(dtype)


def _act(fn):
    def make(dt, dev):
        x = _r(3, 5, 40, dtype=dt, device=dev, scale=2.0)
        return Case([x], lambda a: [fn(a[0].double())])
    return make


def _gated(fn):
    def make(dt, dev):
        x = _r(4, 2 * 48, dtype=dt, device=dev, scale=2.0)
        return Case([x, 0.0], lambda a: [fn(a[0].double()[..., :48]) * a[0].double()[..., 48:]])
    return make


def _rms(x, w, eps, offset):
    x = x.double()
    y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    return y * (offset + w.double()) if w is not None else y


def _ln(x, w, b, eps):
    return F.layer_norm(x.double(), x.shape[-1:], None if w is None else w.double(),
                        None if b is None else b.double(), eps)


def rms_norm(dt, dev):
    x, w = _r(6, 256, dtype=dt, device=dev), _r(256, dtype=dt, device=dev)
    return Case([x, w, 1e-6, 0.0], lambda a: [_rms(a[0], a[1], a[2], a[3])])


def layer_norm(dt, dev):
    x, w, b = _r(6, 256, dtype=dt, device=dev), _r(256, dtype=dt, device=dev), _r(256, dtype=dt, device=dev)
    return Case([x, w, b, 1e-5], lambda a: [_ln(a[0], a[1], a[2], a[3])])


def add_rms_norm(dt, dev):
    x, r, w = _r(6, 256, dtype=dt, device=dev), _r(6, 256, dtype=dt, device=dev), _r(256, dtype=dt, device=dev)

    def ref(a):
        s = (a[0].double() + a[1].double()).to(dt)  # kite norms the rounded residual
        return [_rms(s, a[2], a[3], a[4]), s.double()]
    return Case([x, r, w, 1e-6, 1.0, 0], ref, lambda out, a: [out, a[1]], mutated=[1])


def add_layer_norm(dt, dev):
    x, r = _r(6, 256, dtype=dt, device=dev), _r(6, 256, dtype=dt, device=dev)
    w, b = _r(256, dtype=dt, device=dev), _r(256, dtype=dt, device=dev)

    def ref(a):
        s = (a[0].double() + a[1].double()).to(dt)
        return [_ln(s, a[2], a[3], a[4]), s.double()]
    return Case([x, r, w, b, 1e-5, 0], ref, lambda out, a: [out, a[1]], mutated=[1])


def _rope_ref(x, pos, cs, rot, style):
    x = x.double().clone()
    c, s = cs.to(x.device).double()[pos.to(x.device).long()].chunk(2, dim=-1)  # [T, rot/2]
    c, s = c[:, None, :], s[:, None, :]
    if style == 0:
        a, b = x[..., : rot // 2].clone(), x[..., rot // 2: rot].clone()
        x[..., : rot // 2], x[..., rot // 2: rot] = a * c - b * s, b * c + a * s
    else:
        a, b = x[..., 0:rot:2].clone(), x[..., 1:rot:2].clone()
        x[..., 0:rot:2], x[..., 1:rot:2] = a * c - b * s, b * c + a * s
    return x


def rope(dt, dev, style=0):
    T, D, rot = 5, 64, 48
    q, k = _r(T, 4, D, dtype=dt, device=dev), _r(T, 2, D, dtype=dt, device=dev)
    pos = torch.tensor([0, 3, 7, 1, 30], dtype=torch.int32, device=dev)
    cs = kite.rope_cache(32, rot, 10000.0, like="torch").to(dev)

    def ref(a):
        return [_rope_ref(a[0], a[2].cpu(), a[3].cpu(), rot, style),
                _rope_ref(a[1], a[2].cpu(), a[3].cpu(), rot, style)]
    return Case([q, k, pos, cs, rot, style], ref, lambda out, a: [a[0], a[1]], mutated=[0, 1])


def softmax(dt, dev):
    x = _r(4, 3, 100, dtype=dt, device=dev, scale=3.0)
    return Case([x, 0.5], lambda a: [torch.softmax(a[0].double() * a[1], -1)])


def embedding(dt, dev):
    table = _r(50, 32, dtype=dt, device=dev)
    ids = torch.tensor([0, 49, 7, 7, 3], dtype=torch.int32, device=dev)
    return Case([ids, table], lambda a: [a[1].double()[a[0].long()]])


def _paged(dt, dev, lens, bs=4, Hkv=2, D=32):
    """A shuffled paged cache holding random keys/values for sequences of the given lengths."""
    maxb = max(math.ceil(n / bs) for n in lens) or 1
    nblocks = len(lens) * maxb + 3
    perm = torch.randperm(nblocks)[: len(lens) * maxb].reshape(len(lens), maxb)
    kc = _r(nblocks, Hkv, bs, D, dtype=dt, device=dev)
    vc = _r(nblocks, Hkv, bs, D, dtype=dt, device=dev)
    table = perm.to(torch.int32).to(dev)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
    return kc, vc, table, seq_lens


def _gather(cache, table, b, n, bs):
    """[Hkv, n, D] keys of sequence b, in position order."""
    idx = torch.arange(n)
    blocks = table[b].long().cpu()[idx // bs]
    return cache.double().cpu()[blocks, :, idx % bs].transpose(0, 1)


def _attn_ref(q, k, v, scale, causal_offset=None, mask=None, sinks=None):
    """q[Hq, Sq, D], k/v[Hkv, Sk, D]; grouped GQA; causal_offset: query i sees j <= i + off;
    sinks[Hq]: one more logit per head in the softmax, with no value (gpt-oss)."""
    Hq, Hkv = q.shape[0], k.shape[0]
    k = k.repeat_interleave(Hq // Hkv, 0)
    v = v.repeat_interleave(Hq // Hkv, 0)
    s = q.double() @ k.double().transpose(-1, -2) * scale
    if causal_offset is not None:
        i = torch.arange(s.shape[-2])[:, None]
        j = torch.arange(s.shape[-1])[None, :]
        s = s.masked_fill(j > i + causal_offset, float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    if sinks is not None:
        sk = sinks.double().cpu().reshape(-1, 1, 1).expand(-1, s.shape[-2], 1)
        return torch.softmax(torch.cat([s, sk], -1), -1)[..., :-1] @ v.double()
    return torch.softmax(s, -1) @ v.double()


def paged_decode(dt, dev):
    lens, bs, D = [5, 9, 1], 4, 32
    kc, vc, table, seq = _paged(dt, dev, lens, bs)
    q = _r(3, 4, D, dtype=dt, device=dev)

    def ref(a):
        out = []
        for b, n in enumerate(lens):
            k, v = _gather(a[1], a[3], b, n, bs), _gather(a[2], a[3], b, n, bs)
            out.append(_attn_ref(a[0][b].cpu()[:, None, :], k, v, D ** -0.5)[:, 0])
        return [torch.stack(out)]
    return Case([q, kc, vc, table, seq], ref)


def paged_prefill(dt, dev):
    lens, qlens, bs, D = [6, 9], [6, 3], 4, 32
    kc, vc, table, seq = _paged(dt, dev, lens, bs)
    q = _r(sum(qlens), 4, D, dtype=dt, device=dev)
    cu = torch.tensor([0, qlens[0], sum(qlens)], dtype=torch.int32, device=dev)

    def ref(a):
        out = []
        for b, n in enumerate(lens):
            k, v = _gather(a[1], a[3], b, n, bs), _gather(a[2], a[3], b, n, bs)
            qb = a[0].cpu()[int(cu[b]):int(cu[b + 1])].transpose(0, 1)  # [Hq, qlen, D]
            out.append(_attn_ref(qb, k, v, D ** -0.5, causal_offset=n - qlens[b]).transpose(0, 1))
        return [torch.cat(out)]
    return Case([q, kc, vc, table, cu, seq], ref)


def sdpa(dt, dev):
    q = _r(2, 4, 5, 32, dtype=dt, device=dev)
    k, v = _r(2, 2, 7, 32, dtype=dt, device=dev), _r(2, 2, 7, 32, dtype=dt, device=dev)

    def ref(a):
        return [torch.stack([_attn_ref(a[0][b].cpu(), a[1][b].cpu(), a[2][b].cpu(), 32 ** -0.5,
                                       causal_offset=7 - 5) for b in range(2)])]
    return Case([q, k, v], ref)


def sdpa_mask(dt, dev):
    q = _r(1, 2, 4, 16, dtype=dt, device=dev)
    k, v = _r(1, 2, 6, 16, dtype=dt, device=dev), _r(1, 2, 6, 16, dtype=dt, device=dev)
    mask = torch.rand(4, 6, device=dev) > 0.3
    mask[:, 0] = True

    def ref(a):
        return [_attn_ref(a[0][0].cpu(), a[1][0].cpu(), a[2][0].cpu(), 16 ** -0.5,
                          mask=a[3].cpu())[None]]
    return Case([q, k, v, mask, 0.0, 0.0, -1, 0, 0], ref)


def sdpa_sinks(dt, dev):
    q = _r(2, 4, 5, 32, dtype=dt, device=dev)
    k, v = _r(2, 2, 7, 32, dtype=dt, device=dev), _r(2, 2, 7, 32, dtype=dt, device=dev)
    sinks = _r(4, device=dev, scale=2.0)

    def ref(a):
        return [torch.stack([_attn_ref(a[0][b].cpu(), a[1][b].cpu(), a[2][b].cpu(), 32 ** -0.5,
                                       causal_offset=2, sinks=a[9]) for b in range(2)])]
    return Case([q, k, v, None, 0.0, 0.0, -1, 0, 1, sinks], ref)


def paged_decode_sinks(dt, dev):
    lens, bs, D = [5, 9, 0], 4, 32
    kc, vc, table, seq = _paged(dt, dev, [5, 9, 1], bs)
    seq[2] = 0  # no key: o = 0 (only the sink)
    q = _r(3, 4, D, dtype=dt, device=dev)
    sinks = _r(4, device=dev, scale=2.0)

    def ref(a):
        out = []
        for b, n in enumerate(lens):
            if n == 0:
                out.append(torch.zeros(4, D, dtype=torch.float64))
                continue
            k, v = _gather(a[1], a[3], b, n, bs), _gather(a[2], a[3], b, n, bs)
            out.append(_attn_ref(a[0][b].cpu()[:, None, :], k, v, D ** -0.5, sinks=a[10])[:, 0])
        return [torch.stack(out)]
    return Case([q, kc, vc, table, seq, 0.0, 0.0, -1, 0, 1, sinks], ref)


# ---- attention training: packed sequences and the backwards ----------------------------------
_VL_Q, _VL_K = [3, 0, 4, 2], [5, 2, 4, 0]  # an empty query side, an empty key side, Sq > Sk


def _cu(lens, dev):
    return torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device=dev)


def _varlen_ref(q, k, v, scale):
    """o[Tq, Hq, D] in double of causal grouped attention per sequence of _VL_Q / _VL_K (a query
    that sees no key: zeros)."""
    out, t, s = [], 0, 0
    for lq, lk in zip(_VL_Q, _VL_K):
        qb = q[t:t + lq].transpose(0, 1)
        if lk == 0:
            out.append(torch.zeros_like(qb.transpose(0, 1), dtype=torch.float64))
        else:
            kb, vb = k[s:s + lk].transpose(0, 1), v[s:s + lk].transpose(0, 1)
            out.append(_attn_ref(qb, kb, vb, scale, causal_offset=lk - lq).transpose(0, 1))
        t, s = t + lq, s + lk
    return torch.cat(out)


def sdpa_varlen(dt, dev):
    D = 16
    q = _r(sum(_VL_Q), 4, D, dtype=dt, device=dev)
    k, v = _r(sum(_VL_K), 2, D, dtype=dt, device=dev), _r(sum(_VL_K), 2, D, dtype=dt, device=dev)
    args = [q, k, v, _cu(_VL_Q, dev), _cu(_VL_K, dev), max(_VL_Q), max(_VL_K)]
    return Case(args, lambda a: [_varlen_ref(*(t.cpu() for t in a[:3]), D ** -0.5)])


def _grads(fn, inputs, dout):
    """The gradients of sum(fn(*inputs) * dout) by torch's autograd, in double."""
    xs = [t.detach().cpu().double().requires_grad_() for t in inputs]
    o = fn(*xs)
    return list(torch.autograd.grad(o, xs, dout.cpu().double()))


def sdpa_backward(dt, dev):
    D = 16
    q = _r(2, 4, 5, D, dtype=dt, device=dev)
    k, v = _r(2, 2, 7, D, dtype=dt, device=dev), _r(2, 2, 7, D, dtype=dt, device=dev)
    opts = [0.0, 0.0, -1, 0, 1]
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=dev)
    torch.ops.kite.sdpa.out(q, k, v, None, *opts, None, o, lse)
    dout = _r(*q.shape, dtype=dt, device=dev)

    def fwd(q, k, v):
        return torch.stack([_attn_ref(q[b], k[b], v[b], D ** -0.5, causal_offset=2)
                            for b in range(2)])
    return Case([q, k, v, None, *opts, o, lse, dout], lambda a: _grads(fwd, a[:3], a[11]))


def sdpa_varlen_backward(dt, dev):
    D = 16
    q = _r(sum(_VL_Q), 4, D, dtype=dt, device=dev)
    k, v = _r(sum(_VL_K), 2, D, dtype=dt, device=dev), _r(sum(_VL_K), 2, D, dtype=dt, device=dev)
    cu = [_cu(_VL_Q, dev), _cu(_VL_K, dev), max(_VL_Q), max(_VL_K)]
    opts = [0.0, 0.0, -1, 0, 1]
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:2], dtype=torch.float32, device=dev)
    torch.ops.kite.sdpa_varlen.out(q, k, v, *cu, *opts, None, o, lse)
    dout = _r(*q.shape, dtype=dt, device=dev)
    return Case([q, k, v, *cu, *opts, o, lse, dout],
                lambda a: _grads(lambda q, k, v: _varlen_ref(q, k, v, D ** -0.5), a[:3], a[14]))


def store_kv(dt, dev):
    kc, vc, _, _ = _paged(dt, dev, [8], bs=4)
    kc.zero_(), vc.zero_()
    k, v = _r(3, 2, 32, dtype=dt, device=dev), _r(3, 2, 32, dtype=dt, device=dev)
    slots = torch.tensor([5, -1, 12], dtype=torch.int32, device=dev)

    def ref(a):
        ek, ev = a[2].double().cpu().clone(), a[3].double().cpu().clone()
        for t, s in enumerate(slots.tolist()):
            if s >= 0:
                ek[s // 4, :, s % 4] = a[0][t].double().cpu()
                ev[s // 4, :, s % 4] = a[1][t].double().cpu()
        return [ek, ev]
    return Case([k, v, kc, vc, slots], ref, lambda out, a: [a[2], a[3]], mutated=[2, 3])


def mla_expanded_attention(q_nope, q_pe, c_kv, k_pe, w_uk, w_uv, scale):
    """DeepSeek-V3's eager attention on the decompressed keys and values, in float64, for one
    sequence's query token: q_nope[H, Dn], q_pe[H, P], c_kv[n, R], k_pe[n, P] (the cache rows in
    position order), w_uk[H, Dn, R] and w_uv[H, Dv, R] (kv_b_proj's two halves per head).
    Keys [W_UK c_kv, k_pe] (k_pe shared by every head), values W_UV c_kv -> o[H, Dv]."""
    q_nope, q_pe, c_kv, k_pe = (t.double().cpu() for t in (q_nope, q_pe, c_kv, k_pe))
    w_uk, w_uv = w_uk.double().cpu(), w_uv.double().cpu()
    H = q_nope.shape[0]
    k_nope = torch.einsum("nr,hdr->hnd", c_kv, w_uk)              # [H, n, Dn]
    keys = torch.cat([k_nope, k_pe.expand(H, -1, -1)], dim=-1)     # [H, n, Dn + P]
    values = torch.einsum("nr,hvr->hnv", c_kv, w_uv)               # [H, n, Dv]
    query = torch.cat([q_nope, q_pe], dim=-1)[:, None, :]          # [H, 1, Dn + P]
    p = torch.softmax(query @ keys.transpose(-1, -2) * scale, -1)  # [H, 1, n]
    return (p @ values)[:, 0]


def _mla_cache(dt, dev, lens, bs, R, P):
    """Shuffled latent caches ckv[nblocks, bs, R], kpe[nblocks, bs, P], table, seq_lens."""
    maxb = max(math.ceil(n / bs) for n in lens) or 1
    nblocks = len(lens) * maxb + 3
    perm = torch.randperm(nblocks)[: len(lens) * maxb].reshape(len(lens), maxb)
    ckv, kpe = _r(nblocks, bs, R, dtype=dt, device=dev), _r(nblocks, bs, P, dtype=dt, device=dev)
    return ckv, kpe, perm.to(torch.int32).to(dev), torch.tensor(lens, dtype=torch.int32, device=dev)


def _mla_rows(cache, table, b, n, bs):
    """[n, width] rows of sequence b's latent cache, in position order."""
    idx = torch.arange(n)
    return cache.double().cpu()[table[b].long().cpu()[idx // bs], idx % bs]


def mla_decode(dt, dev):
    """Absorbed decode against the expanded form: kite gets q_nope W_UK and returns o[B, H, R];
    o W_UV^T must equal attention over the decompressed keys and values."""
    lens, bs, H, R, P, Dn, Dv = [5, 9, 1], 4, 4, 64, 16, 32, 24
    ckv, kpe, table, seq = _mla_cache(dt, dev, lens, bs, R, P)
    w_uk, w_uv = _r(H, Dn, R, scale=R ** -0.5), _r(H, Dv, R, scale=R ** -0.5)
    q_nope, q_pe = _r(3, H, Dn), _r(3, H, P, dtype=dt, device=dev)
    q_lat = torch.einsum("bhd,hdr->bhr", q_nope.double(), w_uk.double()).to(dt).to(dev)
    scale = (Dn + P) ** -0.5

    def ref(a):
        return [torch.stack([mla_expanded_attention(q_nope[b], a[1][b], _mla_rows(a[2], a[4], b, n, bs),
                                                    _mla_rows(a[3], a[4], b, n, bs), w_uk, w_uv, scale)
                             for b, n in enumerate(lens)])]

    def observe(res, a):
        o = res[0] if isinstance(res, (tuple, list)) else res
        return [torch.einsum("bhr,hvr->bhv", o.double().cpu(), w_uv.double())]
    return Case([q_lat, q_pe, ckv, kpe, table, seq, scale], ref, observe)


def mla_store_kv(dt, dev):
    ckv, kpe, _, _ = _mla_cache(dt, dev, [8], 4, 64, 16)
    ckv.zero_(), kpe.zero_()
    kv_a = _r(3, 64 + 16, dtype=dt, device=dev)  # kv_a_proj_with_mqa's output: [c_kv | k_pe]
    slots = torch.tensor([5, -1, 12], dtype=torch.int32, device=dev)

    def ref(a):
        ec, ep = a[2].double().cpu().clone(), a[3].double().cpu().clone()
        for t, s in enumerate(slots.tolist()):
            if s >= 0:
                ec[s // 4, s % 4], ep[s // 4, s % 4] = a[0][t].double().cpu(), a[1][t].double().cpu()
        return [ec, ep]
    return Case([kv_a[:, :64], kv_a[:, 64:], ckv, kpe, slots], ref, lambda out, a: [a[2], a[3]],
                mutated=[2, 3])

def linear(dt, dev):
    x, w, b = _r(5, 64, dtype=dt, device=dev), _r(24, 64, dtype=dt, device=dev), _r(24, dtype=dt, device=dev)
    return Case([x, w, b], lambda a: [F.linear(a[0].double(), a[1].double(), a[2].double())])


def group_gemm(dt, dev):
    x, w = _r(7, 32, dtype=dt, device=dev), _r(3, 16, 32, dtype=dt, device=dev)
    sizes = torch.tensor([2, 0, 5], dtype=torch.int32, device=dev)

    def ref(a):
        outs, r = [], 0
        for g, n in enumerate(sizes.tolist()):
            outs.append(a[0].double()[r:r + n] @ a[1].double()[g].T)
            r += n
        return [torch.cat(outs)]
    return Case([x, w, sizes], ref)


def topk_gating(dt, dev):
    logits = _r(6, 8, dtype=dt, device=dev, scale=2.0)

    def ref(a):
        p = torch.softmax(a[0].double(), -1)
        wv, ids = torch.topk(p, 2, -1)
        return [wv / wv.sum(-1, keepdim=True), ids]
    return Case([logits, 2, 1], ref)


def fused_moe(dt, dev):
    T, H, I, E, k = 5, 32, 24, 4, 2
    x = _r(T, H, dtype=dt, device=dev)
    w13 = _r(E, 2 * I, H, dtype=dt, device=dev, scale=H ** -0.5)
    w2 = _r(E, H, I, dtype=dt, device=dev, scale=I ** -0.5)
    wts = torch.rand(T, k, device=dev)
    ids = torch.randint(0, E, (T, k), dtype=torch.int32, device=dev)

    def ref(a):
        x, w13, w2, wts, ids = (t.double().cpu() for t in a[:5])
        y = torch.zeros(T, H, dtype=torch.float64)
        for t in range(T):
            for j in range(k):
                e = int(ids[t, j])
                gu = w13[e] @ x[t]
                h = (F.silu(gu[:I]) * gu[I:]).to(dt).double()
                y[t] += wts[t, j] * (w2[e] @ h)
        return [y]
    return Case([x, w13, w2, wts, ids, 0], ref)


def quant(dt, dev):
    x = _r(4, 64, dtype=dt, device=dev)

    def ref(a):
        xd = a[0].double()
        sc = xd.abs().amax(-1) / 127
        return [torch.round(xd / sc[:, None]).clamp(-127, 127), sc]
    return Case([x], ref)


def dequant(dt, dev):
    q = torch.randint(-127, 128, (4, 64), dtype=torch.int8, device=dev)
    sc = torch.rand(4, device=dev)
    return Case([q, sc, {torch.float32: "float32", torch.float16: "float16",
                         torch.bfloat16: "bfloat16"}[dt]],
                lambda a: [a[0].double() * a[1].double()[:, None]])


def linear_quant(dt, dev):
    xq = torch.randint(-127, 128, (5, 64), dtype=torch.int8, device=dev)
    wq = torch.randint(-127, 128, (12, 64), dtype=torch.int8, device=dev)
    xs, ws = torch.rand(5, device=dev) / 100, torch.rand(12, device=dev) / 100
    b = _r(12, dtype=dt, device=dev)
    name = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}[dt]

    def ref(a):
        return [(a[0].double() @ a[2].double().T) * a[1].double()[:, None] * a[3].double()[None]
                + a[4].double()]
    return Case([xq, xs, wq, ws, b, name], ref)



def _fp8_blocks(x, block=128):
    """x[B, H, S, D] float -> (e4m3 codes, f32 scales [B, H, ceil(S / block)]): amax / 448 per
    block of rows (1 for a zero block), codes by torch's rounding to float8_e4m3fn."""
    B, H, S, D = x.shape
    nb = -(-S // block)
    pad = torch.zeros(B, H, nb * block - S, D, device=x.device)
    xb = torch.cat([x.float(), pad], 2).reshape(B, H, nb, block * D)
    sc = xb.abs().amax(-1) / 448
    sc = torch.where(sc > 0, sc, torch.ones_like(sc))
    rows = sc.repeat_interleave(block, -1)[..., :S, None]
    return (x.float() / rows).to(torch.float8_e4m3fn), sc


def _fp8_dequant(q, sc, block=128):
    return q.double() * sc.double().repeat_interleave(block, -1)[..., :q.shape[2], None]


def sdpa_fp8(dt, dev):
    """Sq 130 and Sk 200: two scale blocks each, the last partial; GQA 4 / 2; causal."""
    B, Hq, Hkv, Sq, Sk, D = 2, 4, 2, 130, 200, 32
    q, qs = _fp8_blocks(_r(B, Hq, Sq, D, device=dev) * 3, 128)
    k, ks = _fp8_blocks(_r(B, Hkv, Sk, D, device=dev), 128)
    v, vs = _fp8_blocks(_r(B, Hkv, Sk, D, device=dev) * 0.5, 128)
    name = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}[dt]

    def ref(a):
        qf, kf, vf = (_fp8_dequant(a[i].cpu(), a[i + 3].cpu()) for i in range(3))
        return [torch.stack([_attn_ref(qf[b], kf[b], vf[b], D ** -0.5, causal_offset=Sk - Sq)
                             for b in range(B)])]
    return Case([q, k, v, qs, ks, vs, 0.0, 0.0, -1, 0, 1, name], ref)


def quant_fp8_blocks(dt, dev):
    """x[2, 3, 200, 16]: two blocks per head, the last partial; head 1 of batch 0 all zeros in its
    first block (scale 1, codes 0). The codes are compared as values, the scales exactly."""
    x = _r(2, 3, 200, 16, dtype=dt, device=dev, scale=4.0)
    x[0, 1, :128] = 0

    def ref(a):
        xf = a[0].float().cpu()
        blocks = torch.cat([xf, torch.zeros(2, 3, 56, 16)], 2).reshape(2, 3, 2, 128 * 16)
        sc = blocks.abs().amax(-1) / 448
        sc = torch.where(sc > 0, sc, torch.ones_like(sc))
        q = (xf / sc.repeat_interleave(128, -1)[..., :200, None]).to(torch.float8_e4m3fn)
        return [q.float(), sc]
    return Case([x], ref, observe=lambda res, args: [res[0].float(), res[1]])


# ---- training ops -----------------------------------------------------------------------------
def _op_id(name):
    return kite._C.op_names().index(name)


def _grad(fn, inputs, dy):
    """Gradients of sum(fn(*inputs) * dy) w.r.t. inputs, in float64."""
    xs = [t.detach().double().cpu().requires_grad_(True) for t in inputs]
    y = fn(*xs)
    return list(torch.autograd.grad(y, xs, dy.double().cpu()))


def activation_backward(dt, dev):
    x, dy = _r(3, 40, dtype=dt, device=dev, scale=2.0), _r(3, 40, dtype=dt, device=dev)
    return Case([x, dy, _op_id("gelu")], lambda a: _grad(F.gelu, [a[0]], a[1]))


def activation_backward_silu(dt, dev):
    x, dy = _r(3, 40, dtype=dt, device=dev, scale=2.0), _r(3, 40, dtype=dt, device=dev)
    return Case([x, dy, _op_id("silu")], lambda a: _grad(F.silu, [a[0]], a[1]))


def gated_backward(dt, dev):
    x, dy = _r(4, 2 * 48, dtype=dt, device=dev, scale=2.0), _r(4, 48, dtype=dt, device=dev)
    return Case([x, dy, _op_id("silu_and_mul"), 0.0],
                lambda a: _grad(lambda x: F.silu(x[..., :48]) * x[..., 48:], [a[0]], a[1]))


def rms_norm_backward(dt, dev):
    x, w = _r(6, 64, dtype=dt, device=dev), _r(64, dtype=dt, device=dev)
    dy = _r(6, 64, dtype=dt, device=dev)
    return Case([x, w, dy, 1e-6, 1.0],
                lambda a: _grad(lambda x, w: _rms(x, w, a[3], a[4]), [a[0], a[1]], a[2]))


def layer_norm_backward(dt, dev):
    x, w = _r(6, 64, dtype=dt, device=dev), _r(64, dtype=dt, device=dev)
    dy = _r(6, 64, dtype=dt, device=dev)
    b = torch.zeros(64, dtype=dt, device=dev)
    return Case([x, w, dy, 1e-5],
                lambda a: _grad(lambda x, w, b: _ln(x, w, b, a[3]), [a[0], a[1], b], a[2]))


def add_rms_norm_backward(dt, dev):
    s, w = _r(6, 64, dtype=dt, device=dev), _r(64, dtype=dt, device=dev)
    dy, dres = _r(6, 64, dtype=dt, device=dev), _r(6, 64, dtype=dt, device=dev)

    def ref(a):
        ds, dw = _grad(lambda s, w: _rms(s, w, a[4], a[5]), [a[0], a[1]], a[2])
        return [ds + a[3].double().cpu(), dw]
    return Case([s, w, dy, dres, 1e-6, 1.0], ref)


def add_layer_norm_backward(dt, dev):
    s, w = _r(6, 64, dtype=dt, device=dev), _r(64, dtype=dt, device=dev)
    dy, dres = _r(6, 64, dtype=dt, device=dev), _r(6, 64, dtype=dt, device=dev)
    b = torch.zeros(64, dtype=dt, device=dev)

    def ref(a):
        g = _grad(lambda s, w, b: _ln(s, w, b, a[4]), [a[0], a[1], b], a[2])
        return [g[0] + a[3].double().cpu()] + g[1:]
    return Case([s, w, dy, dres, 1e-5], ref)


def rope_backward(dt, dev):
    T, D, rot = 5, 64, 48
    dq, dk = _r(T, 4, D, dtype=dt, device=dev), _r(T, 2, D, dtype=dt, device=dev)
    pos = torch.tensor([0, 3, 7, 1, 30], dtype=torch.int32, device=dev)
    cs = kite.rope_cache(32, rot, 10000.0, like="torch").to(dev)

    def ref(a):  # dq, dk are the gradients of the rotated q, k; the result those of q, k
        p, c = a[2].cpu(), a[3].cpu()
        return (_grad(lambda q: _rope_ref(q, p, c, rot, 0), [a[0]], a[0])
                + _grad(lambda k: _rope_ref(k, p, c, rot, 0), [a[1]], a[1]))
    return Case([dq, dk, pos, cs, rot, 0], ref, lambda out, a: [a[0], a[1]], mutated=[0, 1])


def softmax_backward(dt, dev):
    x, dy = _r(4, 100, dtype=dt, device=dev, scale=3.0), _r(4, 100, dtype=dt, device=dev)
    y = torch.softmax(x.double() * 0.5, -1).to(dt)
    return Case([y, dy, 0.5], lambda a: [0.5 * a[0].double() * (a[1].double() - (
        a[1].double() * a[0].double()).sum(-1, keepdim=True))])


def embedding_backward(dt, dev):
    ids = torch.tensor([0, 9, 3, 3, 5, 3], dtype=torch.int32, device=dev)
    dy = _r(6, 32, dtype=dt, device=dev)

    def ref(a):
        out = torch.zeros(10, 32, dtype=torch.float64)
        out.index_add_(0, a[0].long().cpu(), a[1].double().cpu())
        return [out]
    return Case([ids, dy, 10], ref)


def _ce_ref(logits, t, ignore_index=-100, ls=0.0, z_loss=0.0, softcap=0.0, reduction=2):
    z = logits.double()
    if softcap > 0:
        z = softcap * torch.tanh(z / softcap)
    lse = torch.logsumexp(z, -1)
    keep = t != ignore_index
    zt = z.gather(-1, t.long().clamp(0, z.shape[-1] - 1)[:, None])[:, 0]
    loss = lse - (1 - ls) * zt - ls / z.shape[-1] * z.sum(-1) + z_loss * lse * lse
    loss = torch.where(keep, loss, torch.zeros_like(loss))
    if reduction == 0:
        return loss, lse
    s = loss.sum()[None]
    return (s / max(int(keep.sum()), 1) if reduction == 2 else s), lse


_CE_TARGETS = [3, -100, 0, 99, 42, 7]


def cross_entropy(dt, dev):
    logits = _r(6, 100, dtype=dt, device=dev, scale=3.0)
    t = torch.tensor(_CE_TARGETS, dtype=torch.int32, device=dev)
    opts = [-100, 0.1, 1e-3, 20.0, 2]
    return Case([logits, t] + opts,
                lambda a: list(_ce_ref(a[0].cpu(), a[1].cpu(), *a[2:])))


def cross_entropy_none(dt, dev):
    logits = _r(6, 100, dtype=dt, device=dev, scale=3.0)
    t = torch.tensor(_CE_TARGETS, dtype=torch.int32, device=dev)
    return Case([logits, t, -100, 0.0, 0.0, 0.0, 0],
                lambda a: list(_ce_ref(a[0].cpu(), a[1].cpu(), *a[2:])))


def cross_entropy_backward(dt, dev):
    logits = _r(6, 100, dtype=dt, device=dev, scale=3.0)
    t = torch.tensor(_CE_TARGETS, dtype=torch.int32, device=dev)
    opts = [-100, 0.1, 1e-3, 20.0, 2]
    _, lse = _ce_ref(logits.cpu(), t.cpu(), *opts)
    lse = lse.float().to(dev)
    dloss = torch.tensor([1.5], device=dev)
    return Case([logits, t, lse, dloss] + opts,
                lambda a: _grad(lambda x: _ce_ref(x, a[1].cpu(), *opts)[0], [a[0]], a[3]))


def _ce_with_grad(dt, dev, opts):
    logits = _r(6, 100, dtype=dt, device=dev, scale=3.0)
    t = torch.tensor(_CE_TARGETS, dtype=torch.int32, device=dev)

    def ref(a):
        loss, lse = _ce_ref(a[0].cpu(), a[1].cpu(), *opts)
        dlogits = _grad(lambda x: _ce_ref(x, a[1].cpu(), *opts)[0], [a[0]],
                        torch.ones(loss.shape))
        return [loss, lse] + dlogits
    return Case([logits, t] + opts, ref)


def cross_entropy_with_grad(dt, dev):
    return _ce_with_grad(dt, dev, [-100, 0.1, 1e-3, 20.0, 2])


def cross_entropy_with_grad_none(dt, dev):
    return _ce_with_grad(dt, dev, [-100, 0.0, 0.0, 0.0, 0])


def fused_linear_cross_entropy(dt, dev):
    h, w = _r(6, 32, dtype=dt, device=dev), _r(100, 32, dtype=dt, device=dev)
    b = _r(100, dtype=dt, device=dev)
    t = torch.tensor(_CE_TARGETS, dtype=torch.int32, device=dev)
    opts = [-100, 0.1, 0.0, 0.0, 2, 4096]  # a small chunk budget: several pieces

    def loss(h, w, b):
        return _ce_ref(h @ w.T + b, t.cpu(), *opts[:5])[0]

    def ref(a):
        return [loss(a[0].double().cpu(), a[1].double().cpu(), a[2].double().cpu())] + _grad(
            loss, [a[0], a[1], a[2]], torch.ones(1))
    return Case([h, w, b, t] + opts, ref)


# ---- sampling ---------------------------------------------------------------------------------
def _distinct_logits(B, V, dt, dev):
    """Rows of distinct values exactly representable in every float dtype (no ties)."""
    return torch.stack([(torch.randperm(V) - V // 2) * 0.125 for _ in range(B)]).to(dt).to(dev)


def argmax(dt, dev):
    logits = _distinct_logits(5, 64, dt, dev)
    return Case([logits], lambda a: [a[0].double().argmax(-1)])


def sample(dt, dev):
    """Greedy rows (t = 0, top_k = 1) against argmax; sampled rows against kite's ref."""
    logits = _distinct_logits(4, 64, dt, dev)
    temp = torch.tensor([0.0, 1.0, 0.7, 1.0], device=dev)
    top_k = torch.tensor([0, 0, 5, 1], dtype=torch.int32, device=dev)
    top_p = torch.tensor([1.0, 0.9, 1.0, 1.0], device=dev)
    min_p = torch.tensor([0.0, 0.0, 0.05, 0.0], device=dev)

    def ref(a):
        on_cpu = [x.cpu() if isinstance(x, torch.Tensor) else x for x in a]
        with kite.kernels("sample=ref"):  # ref runs on the host: the same draws on every device
            tok = torch.ops.kite.sample(*on_cpu)
        best = a[0].double().argmax(-1).cpu()
        assert tok[0] == best[0] and tok[3] == best[3], "greedy rows differ from argmax"
        kept = a[0].double().cpu().topk(5, -1).indices[2]
        assert tok[2] in kept, "a top-k = 5 row drew a token outside its top 5"
        return [tok.to(a[0].device)]
    return Case([logits, temp, top_k, top_p, min_p, None, None, 1234, 7], ref)


def apply_penalties(dt, dev):
    logits = _r(3, 50, dtype=dt, device=dev, scale=2.0)
    prompt = torch.tensor([[1, 2, 2, -1], [0, 49, 3, 3], [-1, -1, -1, -1]], dtype=torch.int32,
                          device=dev)
    output = torch.tensor([[2, 5, 5, 60, 1], [3, 3, 3, 7, -1], [10, 11, 10, 12, 0]],
                          dtype=torch.int32, device=dev)
    rep = torch.tensor([1.2, 1.0, 1.5], device=dev)
    pres = torch.tensor([0.5, 0.0, 0.1], device=dev)
    freq = torch.tensor([0.1, 0.2, 0.0], device=dev)

    def ref(a):
        l = a[0].double().cpu().clone()
        V = l.shape[1]
        for b in range(l.shape[0]):
            seen = {int(i) for i in a[1][b].tolist() + a[2][b].tolist() if 0 <= i < V}
            counts = {}
            for i in a[2][b].tolist():
                if 0 <= i < V:
                    counts[i] = counts.get(i, 0) + 1
            r, p, f = float(a[3][b]), float(a[4][b]), float(a[5][b])
            for v in seen:
                l[b, v] = l[b, v] / r if l[b, v] > 0 else l[b, v] * r
                c = counts.get(v, 0)
                l[b, v] -= f * c + p * (c > 0)
        return [l]
    return Case([logits, prompt, output, rep, pres, freq], ref, lambda out, a: [a[0]],
                mutated=[0])


def softcap(dt, dev):
    logits = _r(3, 50, dtype=dt, device=dev, scale=8.0)
    logits[1, 4] = float("-inf")
    logits[2, 7] = float("inf")
    return Case([logits, 4.0], lambda a: [4.0 * torch.tanh(a[0].double().cpu() / 4.0)],
                lambda out, a: [a[0]], mutated=[0])


def logprobs(dt, dev):
    logits = _distinct_logits(3, 64, dt, dev)
    tokens = torch.tensor([5, 0, 63], dtype=torch.int32, device=dev)

    def ref(a):
        lp = torch.log_softmax(a[0].double().cpu(), -1)
        top = lp.topk(4, -1)
        return [lp.gather(-1, a[1].long().cpu()[:, None])[:, 0], top.indices, top.values]
    return Case([logits, tokens, 4], ref)


def _wq4(N, K, fmt, dev):
    """Random 4-bit weights: (packed uint8 [N, K / 32 * bytes], decoded float64 [N, K])."""
    nb = K // 32
    d = (torch.rand(N, nb, 1) * 0.1 + 0.01).half()
    m = (torch.randn(N, nb, 1) * 0.1).half()
    qs = torch.randint(0, 256, (N, nb, 16), dtype=torch.uint8)
    q = torch.cat([qs & 15, qs >> 4], -1).double()
    if fmt == 0:
        packed = torch.cat([d.view(torch.uint8), qs], -1)
        val = (q - 8) * d.double()
    else:
        packed = torch.cat([d.view(torch.uint8), m.view(torch.uint8), qs], -1)
        val = q * d.double() + m.double()
    return packed.reshape(N, -1).to(dev), val.reshape(N, K)


def linear_wq4(dt, dev, fmt=0):
    x, b = _r(5, 64, dtype=dt, device=dev), _r(12, dtype=dt, device=dev)
    w, wd = _wq4(12, 64, fmt, dev)
    return Case([x, w, fmt, b], lambda a: [a[0].double().cpu() @ wd.T + a[3].double().cpu()])

# --- MoE routing of today's models, gpt-oss experts, load-balancing loss ----------------------

def _route_ref(z, bias, k, score, n_group, topk_group, renorm, scaling):
    """kite_moe_route's definition in float64 (no ties in the cases: torch.topk's order)."""
    z = z.double()
    b = torch.zeros(z.shape[-1], dtype=torch.float64) if bias is None else bias.double().cpu()
    s = torch.softmax(z, -1) if score == 0 else torch.sigmoid(z) if score == 1 else z + b
    c = s if score == 2 else s + b
    if n_group > 1:
        T, E = c.shape
        gk = c.view(T, n_group, E // n_group).topk(2, -1)[0].sum(-1)
        keep = torch.zeros_like(gk).scatter_(1, gk.topk(topk_group, -1)[1], 1)
        c = c.masked_fill(keep.repeat_interleave(E // n_group, 1) == 0, float("-inf"))
    ids = c.topk(k, -1)[1]
    w = s.gather(1, ids)
    if score == 2:
        w = torch.softmax(w, -1)
    if renorm:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    return [w * scaling, ids]


def moe_route(dt, dev):
    """DeepSeek-V3's form: sigmoid, correction bias, 4 groups keep 2, renormalized, scaled."""
    logits = _r(6, 16, dtype=dt, device=dev, scale=2.0)
    bias = torch.rand(16, device=dev) * 0.5
    args = [logits, bias, 4, 1, 4, 2, 1, 2.5]
    return Case(args, lambda a: _route_ref(a[0].cpu(), a[1], *a[2:8]))


def moe_route_gpt_oss(dt, dev):
    logits = _r(7, 32, dtype=dt, device=dev, scale=2.0)
    bias = torch.randn(32, device=dev)
    args = [logits, bias, 4, 2, 1, 1, 0, 1.0]
    return Case(args, lambda a: _route_ref(a[0].cpu(), a[1], *a[2:8]))


def _swiglu_oai(gate, up, alpha, limit):
    gate = gate.clamp(max=limit)
    up = up.clamp(-limit, limit)
    return (up + 1) * gate * torch.sigmoid(alpha * gate)


def fused_moe_ex(dt, dev, transposed=0):
    """gpt-oss's experts: interleaved gate/up, biases, clamped SwiGLU (limit 1 clamps often);
    transposed: the weights as gpt-oss stores them, w13 [E, H, 2I] and w2 [E, I, H]."""
    T, H, I, E, k = 5, 32, 24, 4, 2
    x = _r(T, H, dtype=dt, device=dev)
    w13 = _r(E, 2 * I, H, dtype=dt, device=dev, scale=H ** -0.5)
    b13 = _r(E, 2 * I, dtype=dt, device=dev, scale=0.5)
    w2 = _r(E, H, I, dtype=dt, device=dev, scale=I ** -0.5)
    if transposed:  # the same matrices, stored transposed
        w13, w2 = w13.transpose(1, 2).contiguous(), w2.transpose(1, 2).contiguous()
    b2 = _r(E, H, dtype=dt, device=dev, scale=0.5)
    wts = torch.rand(T, k, device=dev)
    ids = torch.randint(0, E, (T, k), dtype=torch.int32, device=dev)

    def ref(a):
        x, w13, b13, w2, b2, wts, ids = (t.double().cpu() for t in a[:7])
        if transposed:
            w13, w2 = w13.transpose(1, 2), w2.transpose(1, 2)
        y = torch.zeros(T, H, dtype=torch.float64)
        for t in range(T):
            for j in range(k):
                e = int(ids[t, j])
                gu = w13[e] @ x[t] + b13[e]
                h = _swiglu_oai(gu[0::2], gu[1::2], 1.702, 1.0).to(dt).double()
                y[t] += wts[t, j] * (w2[e] @ h + b2[e])
        return [y]
    return Case([x, w13, b13, w2, b2, wts, ids, 2, 1, 1.702, 1.0, transposed], ref)


def _aux_ref(z, ids, mask):
    """The Switch / Mixtral load-balancing loss (kite_moe_aux_loss) in float64."""
    T, E = z.shape
    p = torch.softmax(z.double(), -1)
    m = torch.ones(T, dtype=torch.float64) if mask is None else mask.double().cpu()
    hot = F.one_hot(ids.long().cpu(), E).double().sum(1)  # [T, E]
    M = m.sum()
    return E * ((m[:, None] * hot).sum(0) / M * (m[:, None] * p.cpu()).sum(0) / M).sum()


def _aux_args(dt, dev):
    logits = _r(12, 8, dtype=dt, device=dev, scale=2.0)
    ids = torch.topk(logits.float(), 2, -1)[1].to(torch.int32)
    mask = (torch.rand(12, device=dev) > 0.25).float()
    return logits, ids, mask


def moe_aux_loss(dt, dev):
    logits, ids, mask = _aux_args(dt, dev)
    return Case([logits, ids, mask], lambda a: [_aux_ref(a[0].cpu(), a[1], a[2]).reshape(1)])


def moe_aux_loss_backward(dt, dev):
    logits, ids, mask = _aux_args(dt, dev)
    dloss = torch.full((1,), 0.75, device=dev)

    def ref(a):
        z = a[0].double().cpu().requires_grad_()
        (_aux_ref(z, a[1], a[2]) * float(a[3])).backward()
        return [z.grad]
    return Case([logits, ids, mask, dloss], ref)


# GGUF blocks: Q4_0 (type 2) is linear_wq4's sym layout; every type against gguf-py: test_gguf.py
def linear_gguf(dt, dev):
    x, b = _r(5, 64, dtype=dt, device=dev), _r(12, dtype=dt, device=dev)
    w, wd = _wq4(12, 64, 0, dev)
    return Case([x, w, 2, b], lambda a: [a[0].double().cpu() @ wd.T + a[3].double().cpu()])


def _q8_blocks(x, V):
    """x's rows quantized per block of V values as kite.h's linear_gguf_q8 says, as float64."""
    xb = x.float().cpu().reshape(x.shape[0], -1, V)
    s = xb.abs().amax(-1, keepdim=True) / 127.0
    q = torch.where(s > 0, xb / torch.where(s > 0, s, 1), 0).round().clamp(-127, 127)
    return (q.double() * s.double()).reshape(x.shape)


def linear_gguf_q8(dt, dev):
    x, b = _r(5, 64, dtype=dt, device=dev), _r(12, dtype=dt, device=dev)
    w, wd = _wq4(12, 64, 0, dev)
    return Case([x, w, 2, b], lambda a: [_q8_blocks(a[0], 32) @ wd.T + a[3].double().cpu()])


def dequant_gguf(dt, dev):
    w, wd = _wq4(12, 64, 0, dev)
    y = torch.empty(12, 64, dtype=dt, device=dev)
    return Case([w, 2, y], lambda a: [wd], lambda out, a: [a[2]], mutated=[2])


# grouped GGUF blocks: three experts of Q4_0 (type 2) blocks, sizes with an empty group, biases
def group_gemm_gguf(dt, dev):
    x, b = _r(7, 64, dtype=dt, device=dev), _r(3, 12, dtype=dt, device=dev)
    packed = [_wq4(12, 64, 0, dev) for _ in range(3)]
    w = torch.stack([p[0] for p in packed])
    sizes = torch.tensor([2, 0, 5], dtype=torch.int32, device=dev)

    def ref(a):
        outs, r = [], 0
        for g, n in enumerate(sizes.tolist()):
            xg = a[0].double().cpu()[r:r + n]
            outs.append(xg @ packed[g][1].T + a[4].double().cpu()[g])
            r += n
        return [torch.cat(outs)]
    return Case([x, w, 2, sizes, b], ref)

CASES = {
    "silu": _act(F.silu),
    "gelu": _act(F.gelu),
    "gelu_tanh": _act(lambda x: F.gelu(x, approximate="tanh")),
    "gelu_quick": _act(lambda x: x * torch.sigmoid(1.702 * x)),
    "relu": _act(F.relu),
    "silu_and_mul": _gated(F.silu),
    "gelu_and_mul": _gated(F.gelu),
    "gelu_tanh_and_mul": _gated(lambda x: F.gelu(x, approximate="tanh")),
    "rms_norm": rms_norm,
    "layer_norm": layer_norm,
    "add_rms_norm": add_rms_norm,
    "add_layer_norm": add_layer_norm,
    "rope": rope,
    "softmax": softmax,
    "embedding": embedding,
    "store_kv": store_kv,
    "paged_decode": paged_decode,
    "paged_prefill": paged_prefill,
    "sdpa": sdpa,
    "sdpa_varlen": sdpa_varlen,
    "sdpa_backward": sdpa_backward,
    "sdpa_varlen_backward": sdpa_varlen_backward,
    "sdpa_fp8": sdpa_fp8,
    "quant_fp8_blocks": quant_fp8_blocks,
    "linear": linear,
    "group_gemm": group_gemm,
    "topk_gating": topk_gating,
    "fused_moe": fused_moe,
    "quant": quant,
    "dequant": dequant,
    "linear_quant": linear_quant,
    "activation_backward": activation_backward,
    "gated_backward": gated_backward,
    "rms_norm_backward": rms_norm_backward,
    "layer_norm_backward": layer_norm_backward,
    "add_rms_norm_backward": add_rms_norm_backward,
    "add_layer_norm_backward": add_layer_norm_backward,
    "rope_backward": rope_backward,
    "softmax_backward": softmax_backward,
    "embedding_backward": embedding_backward,
    "cross_entropy": cross_entropy,
    "cross_entropy_backward": cross_entropy_backward,
    "cross_entropy_with_grad": cross_entropy_with_grad,
    "fused_linear_cross_entropy": fused_linear_cross_entropy,
    "argmax": argmax,
    "sample": sample,
    "apply_penalties": apply_penalties,
    "softcap": softcap,
    "logprobs": logprobs,
    "linear_wq4": linear_wq4,
    "moe_route": moe_route,
    "fused_moe_ex": fused_moe_ex,
    "moe_aux_loss": moe_aux_loss,
    "moe_aux_loss_backward": moe_aux_loss_backward,
    "linear_gguf": linear_gguf,
    "linear_gguf_q8": linear_gguf_q8,
    "dequant_gguf": dequant_gguf,
    "mla_store_kv": mla_store_kv,
    "mla_decode": mla_decode,
    "group_gemm_gguf": group_gemm_gguf,
}
# more than one case for some ops
EXTRA = {"rope_gptj": ("rope", lambda dt, dev: rope(dt, dev, style=1)),
         "sdpa_mask": ("sdpa", sdpa_mask),
         "sdpa_sinks": ("sdpa", sdpa_sinks),
         "paged_decode_sinks": ("paged_decode", paged_decode_sinks),
         "activation_backward_silu": ("activation_backward", activation_backward_silu),
         "cross_entropy_none": ("cross_entropy", cross_entropy_none),
         "cross_entropy_with_grad_none": ("cross_entropy_with_grad",
                                          cross_entropy_with_grad_none),
         "linear_wq4_min": ("linear_wq4", lambda dt, dev: linear_wq4(dt, dev, fmt=1)),
         "moe_route_gpt_oss": ("moe_route", moe_route_gpt_oss),
         "fused_moe_ex_transposed": ("fused_moe_ex", lambda dt, dev: fused_moe_ex(dt, dev, 1))}

TOL = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def close(got, exp, dtype, what=""):
    """Max error relative to the largest expected magnitude, within the dtype's bound."""
    g, e = got.double().cpu(), exp.double().cpu()
    assert g.shape == e.shape, f"{what}: shape {tuple(g.shape)} != {tuple(e.shape)}"
    assert torch.isfinite(g).all(), f"{what}: non-finite values"
    err = (g - e).abs().max().item() / max(e.abs().max().item(), 1e-6)
    assert err <= TOL[dtype], f"{what}: relative error {err:.3g} > {TOL[dtype]}"
