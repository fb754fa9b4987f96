"""Gradients of kite's attention (torch.ops.kite.sdpa / sdpa_varlen through sdpa_backward /
sdpa_varlen_backward) against torch's: torch.autograd of F.scaled_dot_product_attention (GQA by
enable_gqa, masks as torch defines them: bool True = attend, float added) where torch has the
feature, and of the explicit formula (softcap, window, interleaved GQA) where it has not, in
float64 on the same inputs. f32 within 1e-5 of the largest magnitude, bf16 within 3e-2. kite
takes no float64, so torch.autograd.gradcheck runs in f32 with matching tolerances."""
import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICES

import kite
import kite.torch  # noqa: F401

ops = torch.ops.kite
TOL = {torch.float32: 1e-5, torch.bfloat16: 3e-2}


def _rel(got, want):
    return ((got.double().cpu() - want.double().cpu()).abs().max()
            / want.double().abs().max().clamp(min=1e-30).cpu()).item()


def _visible(sq, sk, causal, window, device):
    """bool [Sq, Sk]: kite's rule (query i at position i + Sk - Sq; causal: keys up to it;
    window: keys [p - window, p])."""
    i = torch.arange(sq, device=device)[:, None] + (sk - sq)
    j = torch.arange(sk, device=device)[None, :]
    ok = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if causal:
        ok &= j <= i
    if window >= 0:
        ok &= (j >= i - window) & (j <= i)
    return ok


def _explicit(q, k, v, mask, scale, softcap, window, gqa, causal):
    """The formula in torch ops: scores, softcap, masks, softmax (a row that sees no key: 0)."""
    g = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(g, 1) if gqa == 0 else k.repeat(1, g, 1, 1)
    v = v.repeat_interleave(g, 1) if gqa == 0 else v.repeat(1, g, 1, 1)
    s = q @ k.transpose(-1, -2) * (scale or q.shape[-1] ** -0.5)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    ok = _visible(q.shape[2], k.shape[2], causal, window, q.device).expand(s.shape)
    if mask is not None and mask.dtype == torch.bool:
        ok = ok & mask
    elif mask is not None:
        s = s + mask
    s = s.masked_fill(~ok, float("-inf"))
    seen = torch.isfinite(s).any(-1, keepdim=True)
    p = torch.softmax(s.masked_fill(~seen, 0.0), -1) * seen
    return p @ v


def _torch_sdpa(q, k, v, mask, scale, softcap, window, gqa, causal):
    """torch's own SDPA (grouped GQA, no softcap / window): kite's causal rule as a bool mask."""
    ok = _visible(q.shape[2], k.shape[2], causal, -1, q.device)
    if mask is not None and mask.dtype == torch.bool:
        attn = ok & mask
    else:
        attn = torch.zeros(ok.shape, dtype=q.dtype, device=q.device).masked_fill(~ok, float("-inf"))
        if mask is not None:
            attn = attn + mask
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn, scale=scale or None,
                                          enable_gqa=q.shape[1] != k.shape[1])


def _grads(fn, xs, do):
    xs = [x.detach().requires_grad_() for x in xs]
    o = fn(*xs)
    return [o] + list(torch.autograd.grad(o, xs, do))


CASES = {  # name: (Hq, Hkv, Sq, Sk, mask kind, scale, softcap, window, gqa, causal, torch's SDPA)
    "gqa_causal": (8, 2, 9, 13, None, 0.0, 0.0, -1, 0, 1, True),
    "mha_not_causal_sq_gt_sk": (4, 4, 11, 6, None, 0.0, 0.0, -1, 0, 0, True),
    "bool_mask": (4, 2, 7, 10, "bool", 0.3, 0.0, -1, 0, 0, True),
    "float_mask_causal": (6, 3, 8, 8, "float", 0.0, 0.0, -1, 0, 1, True),
    "interleaved": (8, 2, 5, 9, None, 0.0, 0.0, -1, 1, 1, False),
    "softcap": (4, 2, 6, 12, None, 0.0, 5.0, -1, 0, 1, False),
    "window": (4, 1, 10, 10, None, 0.0, 0.0, 3, 0, 1, False),
    "window_not_causal_mask": (4, 2, 6, 9, "float", 0.0, 2.0, 4, 1, 0, False),
}


def _mask(kind, b, hq, sq, sk, device):
    g = torch.Generator().manual_seed(3)
    if kind == "bool":
        m = torch.rand(b, hq, sq, sk, generator=g) > 0.3
        m[:, :, 1] = False  # a row that sees no key: o = 0, lse = -inf, no gradient
        return m.to(device)
    if kind == "float":
        m = torch.randn(b, 1, sq, sk, generator=g)
        m[..., 0, 2] = float("-inf")
        return m.to(device)
    return None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("device", DEVICES)
def test_sdpa_backward_matches_torch(name, dtype, device):
    hq, hkv, sq, sk, mk, scale, cap, window, gqa, causal, native = CASES[name]
    torch.manual_seed(0)
    B, D = 2, 32
    q = torch.randn(B, hq, sq, D, device=device).to(dtype)
    k, v = (torch.randn(B, hkv, sk, D, device=device).to(dtype) for _ in range(2))
    do = torch.randn(B, hq, sq, D, device=device).to(dtype)
    mask = _mask(mk, B, hq, sq, sk, device)
    opts = (scale, cap, window, gqa, causal)
    got = _grads(lambda q, k, v: ops.sdpa(q, k, v, mask, *opts), [q, k, v], do)
    m64 = mask if mask is None or mask.dtype == torch.bool else mask.double()
    ref = _torch_sdpa if native else _explicit
    want = _grads(lambda q, k, v: ref(q, k, v, m64, *opts), [t.double() for t in (q, k, v)],
                  do.double())
    if mk == "bool":  # torch's SDPA gives NaN rows where no key is seen; kite gives 0
        want = [w.nan_to_num(0.0) for w in want]
    for what, g, w in zip(("o", "dq", "dk", "dv"), got, want):
        assert g.dtype == dtype and g.shape == w.shape
        assert _rel(g, w) <= TOL[dtype], f"{name} {what}: {_rel(g, w):.3g}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("causal", [1, 0], ids=["causal", "not_causal"])
@pytest.mark.parametrize("device", DEVICES)
def test_sdpa_varlen_backward_matches_torch(causal, dtype, device):
    """Packed sequences (one without queries, one without keys, unequal lengths) against torch's
    SDPA per sequence."""
    torch.manual_seed(1)
    ql, kl, hq, hkv, D = [5, 0, 3, 4, 2], [7, 3, 3, 0, 6], 4, 2, 16
    q = torch.randn(sum(ql), hq, D, device=device).to(dtype)
    k, v = (torch.randn(sum(kl), hkv, D, device=device).to(dtype) for _ in range(2))
    do = torch.randn_like(q)
    cu_q = torch.tensor([0] + torch.tensor(ql).cumsum(0).tolist(), dtype=torch.int32, device=device)
    cu_k = torch.tensor([0] + torch.tensor(kl).cumsum(0).tolist(), dtype=torch.int32, device=device)
    got = _grads(lambda q, k, v: ops.sdpa_varlen(q, k, v, cu_q, cu_k, max(ql), max(kl), 0.0, 0.0,
                                                 -1, 0, causal), [q, k, v], do)

    def ref(q, k, v):
        out, t, s = [], 0, 0
        for a, b in zip(ql, kl):
            qb = q[t:t + a].transpose(0, 1)[None]
            if b == 0:
                out.append(q[t:t + a] * 0)
            else:
                kb, vb = (x[s:s + b].transpose(0, 1)[None] for x in (k, v))
                out.append(_torch_sdpa(qb, kb, vb, None, 0.0, 0.0, -1, 0, causal)[0]
                           .transpose(0, 1))
            t, s = t + a, s + b
        return torch.cat(out)
    want = _grads(ref, [t.double() for t in (q, k, v)], do.double())
    for what, g, w in zip(("o", "dq", "dk", "dv"), got, want):
        assert _rel(g, w) <= TOL[dtype], f"varlen {what}: {_rel(g, w):.3g}"


def test_gradcheck_f32():
    """torch.autograd.gradcheck of sdpa (softcap, window, GQA, a float mask) in f32: central
    differences with eps 1e-2 hold to ~1e-3 there."""
    torch.manual_seed(2)
    q = torch.randn(1, 4, 3, 8, requires_grad=True)
    k, v = (torch.randn(1, 2, 5, 8, requires_grad=True) for _ in range(2))
    mask = torch.randn(3, 5)
    fn = lambda q, k, v: ops.sdpa(q, k, v, mask, 0.0, 3.0, 3, 1, 1)  # noqa: E731
    with pytest.warns(UserWarning):  # gradcheck's note that f32 is not float64
        assert torch.autograd.gradcheck(fn, (q, k, v), eps=1e-2, atol=2e-3, rtol=2e-2,
                                        fast_mode=False)


def test_mask_gets_no_gradient_and_bf16_results_keep_dtype():
    q = torch.randn(1, 2, 4, 8, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(1, 2, 4, 8, dtype=torch.bfloat16, requires_grad=True)
    mask = torch.ones(4, 4, dtype=torch.bool)
    o = ops.sdpa(q, k, k, mask, 0.0, 0.0, -1, 0, 1)
    o.float().sum().backward()
    assert q.grad.dtype == torch.bfloat16 and k.grad.dtype == torch.bfloat16
    with pytest.raises(kite.Unsupported, match="mask requires grad"):
        ops.sdpa(q, k, k, torch.zeros(4, 4, requires_grad=True), 0.0, 0.0, -1, 0, 1)
