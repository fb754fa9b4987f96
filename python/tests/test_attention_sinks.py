"""Attention sinks (gpt-oss): kite's sdpa / sdpa_varlen / paged_decode / paged_prefill with sinks,
and the gradients of q, k, v and the sinks through sdpa_backward / sdpa_varlen_backward, against
transformers' gpt-oss eager attention (eager_attention_forward of modeling_gpt_oss) run in
float64 on the same inputs: the sink as one more logit per head in the softmax, dropped before
the values. f32 within 1e-5 of the largest magnitude, bf16 within 3e-2."""
import pytest
import torch
from conftest import DEVICES
from torch import nn

import kite
import kite.torch  # noqa: F401

gpt_oss = pytest.importorskip("transformers.models.gpt_oss.modeling_gpt_oss")

ops = torch.ops.kite
TOL = {torch.float32: 1e-5, torch.bfloat16: 3e-2}


def _rel(got, want):
    return ((got.double().cpu() - want.double().cpu()).abs().max()
            / want.double().abs().max().clamp(min=1e-30).cpu()).item()


def _visible(sq, sk, causal, window):
    """bool [Sq, Sk]: kite's rule (query i at position i + Sk - Sq; causal: keys up to it;
    window: keys [p - window, p])."""
    i = torch.arange(sq)[:, None] + (sk - sq)
    j = torch.arange(sk)[None, :]
    ok = torch.ones(sq, sk, dtype=torch.bool)
    if causal:
        ok &= j <= i
    if window >= 0:
        ok &= (j >= i - window) & (j <= i)
    return ok


class _Module(nn.Module):
    """What eager_attention_forward reads of GptOssAttention: its sinks and GQA group."""

    def __init__(self, sinks, groups):
        super().__init__()
        self.sinks = sinks
        self.num_key_value_groups = groups
        self.training = False


def _eager(q, k, v, sinks, scale, causal, window, hide=None):
    """transformers' gpt-oss attention in float64: q[B, Hq, Sq, D], k/v[B, Hkv, Sk, D], sinks
    [Hq]; hide: bool [B, Hq, Sq, Sk] of keys a mask hides. -> o[B, Hq, Sq, D]."""
    ok = _visible(q.shape[2], k.shape[2], causal, window).to(q.device).expand(
        q.shape[0], q.shape[1], -1, -1)
    if hide is not None:
        ok = ok & ~hide
    mask = torch.zeros(ok.shape, dtype=q.dtype, device=q.device).masked_fill(~ok, float("-inf"))
    o, _ = gpt_oss.eager_attention_forward(_Module(sinks, q.shape[1] // k.shape[1]), q, k, v,
                                           mask, scale)
    return o.transpose(1, 2)


def _eager_lse(q, k, sinks, scale, causal, window):
    """log(exp(sink) + sum_j exp(s_j)) of every query, in float64 ([B, Hq, Sq])."""
    g = q.shape[1] // k.shape[1]
    s = q @ k.repeat_interleave(g, 1).transpose(-1, -2) * scale
    s = s.masked_fill(~_visible(q.shape[2], k.shape[2], causal, window).to(q.device),
                      float("-inf"))
    sk = sinks.reshape(1, -1, 1, 1).expand(q.shape[0], -1, q.shape[2], 1)
    return torch.logsumexp(torch.cat([s, sk], -1), -1)


def _grads(fn, xs, do):
    xs = [x.detach().requires_grad_() for x in xs]
    o = fn(*xs)
    return [o] + list(torch.autograd.grad(o, xs, do))


CASES = {  # name: (Hq, Hkv, Sq, Sk, causal, window, a row hidden by a bool mask)
    "gqa_causal": (8, 2, 9, 13, 1, -1, False),
    "mha_not_causal_sq_gt_sk": (4, 4, 11, 6, 0, -1, False),
    "window_causal": (4, 1, 10, 10, 1, 3, False),
    "gqa_row_unseen": (6, 2, 7, 9, 0, -1, True),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("device", DEVICES)
def test_sdpa_sinks_matches_gpt_oss(name, dtype, device):
    """o, lse and the gradients of q, k, v and the sinks."""
    hq, hkv, sq, sk, causal, window, unseen = CASES[name]
    torch.manual_seed(0)
    B, D = 2, 32
    scale = D ** -0.5
    q = torch.randn(B, hq, sq, D, device=device).to(dtype)
    k, v = (torch.randn(B, hkv, sk, D, device=device).to(dtype) for _ in range(2))
    do = torch.randn(B, hq, sq, D, device=device).to(dtype)
    sinks = torch.randn(hq, device=device) * 2.0
    hide = None
    if unseen:  # query row 1 sees no key: o = 0 and lse = the sink
        hide = torch.zeros(B, hq, sq, sk, dtype=torch.bool, device=device)
        hide[:, :, 1] = True
    mask = None if hide is None else ~hide
    opts = (scale, 0.0, window, 0, causal)
    got = _grads(lambda q, k, v, s: ops.sdpa(q, k, v, mask, *opts, s), [q, k, v, sinks], do)
    want = _grads(lambda q, k, v, s: _eager(q, k, v, s, scale, causal, window, hide),
                  [t.double() for t in (q, k, v, sinks)], do.double())
    for what, g, w in zip(("o", "dq", "dk", "dv", "dsinks"), got, want):
        assert g.shape == w.shape and g.dtype == (torch.float32 if what == "dsinks" else dtype)
        assert _rel(g, w) <= TOL[dtype], f"{name} {what}: {_rel(g, w):.3g}"
    if unseen:
        assert torch.count_nonzero(got[0][:, :, 1]) == 0
    if not unseen:
        o, lse = kite.ops.sdpa(q, k, v, None, *opts, sinks, lse=True)
        want_lse = _eager_lse(q.double(), k.double(), sinks.double(), scale, causal, window)
        assert _rel(lse, want_lse) <= 1e-5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("device", DEVICES)
def test_sdpa_varlen_sinks_matches_gpt_oss(dtype, device):
    """Packed sequences (one without queries, one without keys, unequal lengths), causal, GQA:
    per sequence the eager attention; the sinks' gradient sums over every sequence."""
    torch.manual_seed(1)
    ql, kl, hq, hkv, D = [5, 0, 3, 4, 2], [7, 3, 3, 0, 6], 4, 2, 16
    q = torch.randn(sum(ql), hq, D, device=device).to(dtype)
    k, v = (torch.randn(sum(kl), hkv, D, device=device).to(dtype) for _ in range(2))
    do = torch.randn_like(q)
    sinks = torch.randn(hq, device=device)
    cu_q = torch.tensor([0] + torch.tensor(ql).cumsum(0).tolist(), dtype=torch.int32, device=device)
    cu_k = torch.tensor([0] + torch.tensor(kl).cumsum(0).tolist(), dtype=torch.int32, device=device)
    got = _grads(lambda q, k, v, s: ops.sdpa_varlen(q, k, v, cu_q, cu_k, max(ql), max(kl), 0.0,
                                                    0.0, -1, 0, 1, s), [q, k, v, sinks], do)

    def ref(q, k, v, s):
        out, t, j = [], 0, 0
        for a, b in zip(ql, kl):
            if b == 0:  # no key: only the sink, o = 0
                out.append(q[t:t + a] * 0)
            else:
                qb, kb, vb = (x[r:r + n].transpose(0, 1)[None]
                              for x, r, n in ((q, t, a), (k, j, b), (v, j, b)))
                out.append(_eager(qb, kb, vb, s, D ** -0.5, 1, -1)[0].transpose(0, 1))
            t, j = t + a, j + b
        return torch.cat(out)
    want = _grads(ref, [t.double() for t in (q, k, v, sinks)], do.double())
    for what, g, w in zip(("o", "dq", "dk", "dv", "dsinks"), got, want):
        assert _rel(g, w) <= TOL[dtype], f"varlen {what}: {_rel(g, w):.3g}"


def _paged(k, v, bs, device):
    """k/v [B, Hkv, L, D] into caches of block_size bs with shuffled blocks: (caches, table)."""
    B, H, L, D = k.shape
    nb = (L + bs - 1) // bs
    perm = torch.randperm(B * nb, generator=torch.Generator().manual_seed(5))
    kc = torch.zeros(B * nb, H, bs, D, dtype=k.dtype)
    vc = torch.zeros_like(kc)
    for b in range(B):
        for n in range(nb):
            blk, j = perm[b * nb + n], n * bs
            w = min(bs, L - j)
            kc[blk, :, :w] = k[b, :, j:j + w].cpu()
            vc[blk, :, :w] = v[b, :, j:j + w].cpu()
    table = perm.view(B, nb).to(torch.int32)
    return kc.to(device), vc.to(device), table.to(device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("window", [-1, 4], ids=["full", "window"])
@pytest.mark.parametrize("device", DEVICES)
def test_paged_sinks_match_gpt_oss(window, dtype, device):
    """paged_decode (the last position of each sequence) and paged_prefill (the last 5 positions,
    causal) with sinks and GQA, o and lse, against the eager attention over the same keys."""
    torch.manual_seed(2)
    B, hq, hkv, L, D, bs, nq = 2, 8, 2, 11, 32, 4, 5
    k, v = (torch.randn(B, hkv, L, D, device=device).to(dtype) for _ in range(2))
    kc, vc, table = _paged(k, v, bs, device)
    seq = torch.full((B,), L, dtype=torch.int32, device=device)
    sinks = torch.randn(hq, device=device) * 2.0
    q = torch.randn(B, hq, nq, D, device=device).to(dtype)
    scale = D ** -0.5
    want = _eager(q.double(), k.double(), v.double(), sinks.double(), scale, 1, window)
    want_lse = _eager_lse(q.double(), k.double(), sinks.double(), scale, 1, window)
    o, lse = kite.ops.paged_decode(q[:, :, -1].contiguous(), kc, vc, table, seq, scale, 0.0,
                                   window, 0, 1, sinks, lse=True)
    assert _rel(o, want[:, :, -1]) <= TOL[dtype]
    assert _rel(lse, want_lse[:, :, -1]) <= 1e-5
    cu = torch.tensor([0, nq, 2 * nq], dtype=torch.int32, device=device)
    qp = q.transpose(1, 2).reshape(B * nq, hq, D).contiguous()
    o, lse = kite.ops.paged_prefill(qp, kc, vc, table, cu, seq, scale, 0.0, window, 0, 1, sinks,
                                    lse=True)
    assert _rel(o, want.transpose(1, 2).reshape(B * nq, hq, D)) <= TOL[dtype]
    assert _rel(lse, want_lse.transpose(1, 2).reshape(B * nq, hq)) <= 1e-5


@pytest.mark.parametrize("device", DEVICES)
def test_sinks_bad_arguments(device):
    """Sinks of the wrong length, dtype or rank, and dsinks without sinks, are refused with the
    op and the argument named."""
    q = torch.randn(1, 4, 3, 16, device=device)
    k = torch.randn(1, 2, 5, 16, device=device)
    for bad, what in ((torch.zeros(3, device=device), "length"),
                      (torch.zeros(4, device=device, dtype=torch.bfloat16), "dtype"),
                      (torch.zeros(1, 4, device=device), "rank")):
        with pytest.raises(kite.InvalidArgument, match="sdpa: sinks"):
            ops.sdpa(q, k, k, None, 0.0, 0.0, -1, 0, 1, bad)
    o, lse = kite.ops.sdpa(q, k, k, lse=True)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(k)
    with pytest.raises(kite.InvalidArgument, match="sdpa_backward: sinks: tensor is NULL"):
        ops.sdpa_backward.out(q, k, k, None, 0.0, 0.0, -1, 0, 1, o, lse, torch.ones_like(q), None,
                              dq, dk, dv, torch.empty(4, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_sinks_of_minus_inf_are_no_sinks(device):
    """A sink of -inf adds exp(-inf) = 0 to every denominator: the outputs, lse and gradients of
    q, k, v are those of the call without sinks, and the sinks' gradient is 0."""
    torch.manual_seed(3)
    q = torch.randn(2, 4, 6, 16, device=device)
    k, v = (torch.randn(2, 2, 9, 16, device=device) for _ in range(2))
    do = torch.randn_like(q)
    sinks = torch.full((4,), float("-inf"), device=device)
    got = _grads(lambda q, k, v, s: ops.sdpa(q, k, v, None, 0.0, 0.0, -1, 0, 1, s),
                 [q, k, v, sinks], do)
    want = _grads(lambda q, k, v: ops.sdpa(q, k, v, None, 0.0, 0.0, -1, 0, 1), [q, k, v], do)
    for g, w in zip(got[:4], want):
        assert torch.equal(g, w)
    assert torch.count_nonzero(got[4]) == 0
    _, lse = kite.ops.sdpa(q, k, v, None, 0.0, 0.0, -1, 0, 1, sinks, lse=True)
    _, want_lse = kite.ops.sdpa(q, k, v, lse=True)
    assert torch.equal(lse, want_lse)
