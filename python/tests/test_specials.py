"""Non-finite inputs that kite.h defines exactly, on every kernel that runs here."""
import math

import pytest
import torch

import kite

# every activation of kite's op table
ACTS = [n for n, args, _, fam in kite._C.ops()
        if fam == "activation" and [k for k, _ in args] == ["T", "W"]]


def _kernels(op):
    return [f"{r.backend}.{r.variant}" for r in kite.list(op) if r.runs_here
            and r.device == "cpu"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("op", ACTS)
def test_activation_limits(op, dtype):
    # long enough for the vector bodies and the 16-bit tables (2^17 elements)
    x = torch.tensor([-math.inf, math.inf, -1e30, -200.0] * (1 << 15)).to(dtype)
    for k in _kernels(op):
        try:
            with kite.kernels(f"{op}={k}"):
                y = getattr(kite.ops, op)(x)
        except kite.Unsupported:  # a kernel of other dtypes (cpu.avx512bf16)
            continue
        lo = y[0::4].float()
        assert torch.all(lo == 0) and torch.all(torch.signbit(lo)) == (op != "relu"), \
            f"{k}: {op}(-inf) = {lo[0].item()}, kite.h says {'0' if op == 'relu' else '-0'}"
        assert torch.all(y[1::4].float() == math.inf), f"{k}: {op}(+inf) = {y[1].item()}"
        assert torch.all(y[2::4].float() == 0), f"{k}: {op}(-1e30) = {y[2].item()}"


def _on_each(op, call):
    """(kernel, call()) for every CPU kernel of op that runs here and takes the call."""
    for k in _kernels(op):
        try:
            with kite.kernels(f"{op}={k}"):
                yield k, call()
        except kite.Unsupported:  # a kernel of other dtypes
            continue


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_with_minus_inf_logits(smoothing):
    """A -inf logit (a masked or padded vocabulary) gives torch's loss, never NaN; with label
    smoothing the loss is +inf, as torch gives."""
    import torch.nn.functional as F
    x = torch.tensor([[1.0, -math.inf, 2.0, 0.5], [0.0, 3.0, -math.inf, 1.0]])
    t = torch.tensor([0, 1], dtype=torch.int32)
    want = F.cross_entropy(x, t.long(), label_smoothing=smoothing, reduction="none")
    for k, (loss, _) in _on_each("cross_entropy", lambda: kite.ops.cross_entropy(
            x, t, label_smoothing=smoothing, reduction=0)):
        if smoothing == 0:
            assert torch.allclose(loss, want, rtol=1e-6), f"{k}: {loss} vs torch {want}"
        else:
            assert torch.all(torch.isinf(loss) & (loss > 0)), f"{k}: {loss}, torch gives {want}"
    # the fused linear cross-entropy with a -inf bias: the same logits
    h = torch.eye(4)[:2].contiguous()
    for k, res in _on_each("fused_linear_cross_entropy", lambda: kite.ops.fused_linear_cross_entropy(
            h, torch.zeros(4, 4), x[0], t, label_smoothing=smoothing, reduction=0)):
        loss = res[0]
        want_b = F.cross_entropy(x[0].expand(2, 4), t.long(), label_smoothing=smoothing,
                                 reduction="none")
        if smoothing == 0:
            assert torch.allclose(loss, want_b, rtol=1e-6), f"{k}: {loss} vs torch {want_b}"
        else:
            assert torch.all(torch.isinf(loss)), f"{k}: {loss}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_ref_fused_linear_cross_entropy_is_linear_then_cross_entropy(dtype):
    """ref's fused op is its definition: a linear (logits rounded to the dtype), then
    cross_entropy; its dh / dw are those of the rounded dlogits."""
    g = torch.Generator().manual_seed(3)
    N, H, V = 6, 64, 300
    h = torch.randn(N, H, generator=g).to(dtype)
    w = (torch.randn(V, H, generator=g) * 0.3).to(dtype)
    t = torch.randint(0, V, (N,), generator=g, dtype=torch.int32)
    with kite.kernels("fused_linear_cross_entropy=ref,linear=ref,cross_entropy=ref,"
                      "cross_entropy_backward=ref"):
        loss, dh, dw, _ = kite.ops.fused_linear_cross_entropy(h, w, None, t, reduction=1)
        logits = kite.ops.linear(h, w)
        sep, lse = kite.ops.cross_entropy(logits, t, reduction=1)
        dlogits = kite.ops.cross_entropy_backward(logits, t, lse, torch.ones(1), reduction=1)
    assert abs(loss.item() - sep.item()) <= 1e-5 * abs(sep.item()), (loss.item(), sep.item())
    d = dlogits.double()
    for got, want in [(dh, d @ w.double()), (dw, d.T @ h.double())]:
        err = (got.double() - want).abs().max() / want.abs().max()
        assert err < 1e-2, f"relative error {err:.2e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("op", ACTS)
def test_activation_backward_limits(op, dtype):
    """kite.h: past |x| = 128 and at +-inf, act' is 0 below and 1 above on every backend."""
    ids = {n: i for i, n in enumerate(kite._C.op_names())}
    x = torch.tensor([-math.inf, math.inf, -1e30, 1e30, -200.0, 200.0] * 64).to(dtype)
    dy = torch.full_like(x, 2.0)
    want = torch.tensor([0.0, 2.0] * (x.numel() // 2))
    for k, dx in _on_each("activation_backward",
                          lambda: kite.ops.activation_backward(x, dy, ids[op])):
        assert torch.equal(dx.float(), want), f"{k}: {op}' at the limits: {dx[:6].tolist()}"
    if op == "relu":
        return
    gated = {"silu": "silu_and_mul", "gelu": "gelu_and_mul", "gelu_tanh": "gelu_tanh_and_mul"}
    if op in gated:  # gate at the limits, up = 1: d gate = dy act'(gate), d up = dy act(gate)
        xg = torch.cat([x.view(-1, 6), torch.ones(x.numel() // 6, 6, dtype=dtype)], 1)
        dyg = torch.full((x.numel() // 6, 6), 2.0, dtype=dtype)
        for k, dx in _on_each("gated_backward",
                              lambda: kite.ops.gated_backward(xg, dyg, ids[gated[op]])):
            assert torch.equal(dx[:, :6].float(), want.view(-1, 6)), f"{k}: d gate {dx[0]}"
            up = dx[:, 6:].float()
            assert torch.all(up[:, 0::2] == 0) and torch.all(up[:, 1::2] == 2 * x.view(-1, 6)[:, 1::2].float()), \
                f"{k}: d up {dx[0]}"
