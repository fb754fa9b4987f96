"""Gradients through kite's ops (kite.torch.autograd, kite.torch.nn's losses) against torch
autograd of the plain formula.

torch.autograd.gradcheck wants float64 inputs, which kite's ops do not take (f32/f16/bf16), so
each test runs kite in f32 and compares with torch autograd of the same formula in float64 on
the same inputs, with f32-tight tolerances. The backward ops run on every device of DEVICES (the
CUDA kernels where a GPU is present)."""
import pytest
import torch
import torch.nn.functional as F
from cases import _ce_ref, _rope_ref, close
from conftest import DEVICES

import kite
import kite.torch  # noqa: F401
import kite.torch.nn as knn
from kite.torch import autograd as kag

ops = torch.ops.kite


def _both(fn_kite, fn_ref, *shapes_or_tensors, dy=None, device="cpu"):
    """(kite grads f32, float64 reference grads) of sum(fn(*xs) * dy), inputs on device."""
    xs = [t if isinstance(t, torch.Tensor) else torch.randn(*t) for t in shapes_or_tensors]
    xs = [x.to(device) for x in xs]
    xk = [x.clone().requires_grad_(True) for x in xs]
    xr = [x.double().requires_grad_(True) for x in xs]
    yk, yr = fn_kite(*xk), fn_ref(*xr)
    dy = torch.randn(yk.shape, device=device) if dy is None else dy
    gk = torch.autograd.grad(yk, xk, dy)
    gr = torch.autograd.grad(yr, xr, dy.double())
    close(yk, yr, torch.float32, "forward")
    return gk, gr


def _check(gk, gr, what):
    for i, (a, b) in enumerate(zip(gk, gr)):
        close(a, b, torch.float32, f"{what} grad {i}")


@pytest.mark.parametrize("name,ref", [
    ("silu", F.silu), ("gelu", F.gelu), ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
    ("gelu_quick", lambda x: x * torch.sigmoid(1.702 * x)), ("relu", F.relu)])
@pytest.mark.parametrize("device", DEVICES)
def test_activations(name, ref, device):
    _check(*_both(getattr(ops, name), ref, (4, 64), device=device), name)


@pytest.mark.parametrize("name,ref", [
    ("silu_and_mul", F.silu), ("gelu_and_mul", F.gelu),
    ("gelu_tanh_and_mul", lambda x: F.gelu(x, approximate="tanh"))])
@pytest.mark.parametrize("device", DEVICES)
def test_gated(name, ref, device):
    _check(*_both(lambda x: getattr(ops, name)(x, 0.0),
                  lambda x: ref(x[..., :32]) * x[..., 32:], (5, 64), device=device), name)


@pytest.mark.parametrize("offset", [0.0, 1.0])
@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm(offset, device):
    def ref(x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * (offset + w)
    _check(*_both(lambda x, w: ops.rms_norm(x, w, 1e-6, offset), ref, (6, 96), (96,),
                  device=device), "rms_norm")


@pytest.mark.parametrize("device", DEVICES)
def test_layer_norm(device):
    _check(*_both(lambda x, w, b: ops.layer_norm(x, w, b, 1e-5),
                  lambda x, w, b: F.layer_norm(x, (96,), w, b, 1e-5), (6, 96), (96,), (96,),
                  device=device),
           "layer_norm")


@pytest.mark.parametrize("device", DEVICES)
def test_add_norms_pre_rule(device):
    """(y, s) = add_norm(x, r): gradients through both outputs reach x, r and w."""
    def ref(x, r, w):
        s = x + r
        return F.rms_norm(s, (64,), w, 1e-6) * 2 + s

    def kt(x, r, w):
        y, s = kag.add_rms_norm(x, r, w, 1e-6)
        return y * 2 + s
    _check(*_both(kt, ref, (5, 64), (5, 64), (64,), device=device), "add_rms_norm")

    def ref_ln(x, r, w, b):
        s = x + r
        return F.layer_norm(s, (64,), w, b, 1e-5) - 3 * s

    def kt_ln(x, r, w, b):
        y, s = kag.add_layer_norm(x, r, w, b, 1e-5)
        return y - 3 * s
    _check(*_both(kt_ln, ref_ln, (5, 64), (5, 64), (64,), (64,), device=device),
           "add_layer_norm")
    m = knn.RMSNorm(64).to(device)
    x = torch.randn(3, 64, device=device, requires_grad=True)
    r = torch.randn(3, 64, device=device)
    y, s = m(x, r)
    (y.sum() + s.sum()).backward()
    assert x.grad is not None and m.weight.grad is not None


@pytest.mark.parametrize("device", DEVICES)
def test_softmax(device):
    _check(*_both(lambda x: ops.softmax(x, 0.7), lambda x: torch.softmax(x * 0.7, -1),
                  (4, 3, 50), device=device), "softmax")


@pytest.mark.parametrize("device", DEVICES)
def test_embedding(device):
    ids = torch.tensor([1, 4, 4, 0, 9], dtype=torch.int32, device=device)
    _check(*_both(lambda t: ops.embedding(ids, t), lambda t: t[ids.long()], (10, 16),
                  device=device), "embedding")


@pytest.mark.parametrize("style", [0, 1])
@pytest.mark.parametrize("device", DEVICES)
def test_rope(style, device):
    pos = torch.tensor([0, 5, 2, 9], dtype=torch.int32, device=device)
    cs = kite.rope_cache(16, 24, 10000.0, like="torch").to(device)

    def kt(q, k):
        qr, kr = kag.rope(q, k, pos, cs, 24, style)
        return torch.cat([qr.flatten(), 2 * kr.flatten()])

    def ref(q, k):
        return torch.cat([_rope_ref(q, pos, cs, 24, style).flatten(),
                          2 * _rope_ref(k, pos, cs, 24, style).flatten()])
    _check(*_both(kt, ref, (4, 3, 32), (4, 1, 32), device=device), "rope")


TARGETS = torch.tensor([3, -100, 0, 99, 42, 7, 5, 5])


# The losses run on every device here: on CUDA tensors through the CUDA kernels.
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("opts", [dict(), dict(label_smoothing=0.1, lse_square_scale=1e-3,
                                               softcap=30.0)])
def test_cross_entropy_loss(reduction, opts, device):
    ls, z, cap = opts.get("label_smoothing", 0.0), opts.get("lse_square_scale", 0.0), \
        opts.get("softcap", 0.0)
    red = {"none": 0, "sum": 1, "mean": 2}[reduction]
    loss_fn = knn.CrossEntropyLoss(reduction=reduction, **opts)
    t = TARGETS.to(device)

    def ref(x):
        out = _ce_ref(x, t, -100, ls, z, cap, red)[0]
        return out if reduction == "none" else out.reshape(())
    dy = torch.randn(8) if reduction == "none" else torch.tensor(1.7)
    _check(*_both(lambda x: loss_fn(x, t), ref, (torch.randn(8, 100) * 3).to(device),
                  dy=dy.to(device), device=device), "ce")
    if not ls and not z and not cap:  # plain CE equals torch's own
        x = torch.randn(8, 100, device=device)
        torch.testing.assert_close(loss_fn(x, t), F.cross_entropy(x, t.long(), reduction=reduction),
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_fused_linear_cross_entropy_loss(bias, reduction, device):
    loss_fn = knn.FusedLinearCrossEntropyLoss(reduction=reduction, label_smoothing=0.05,
                                              lse_square_scale=1e-4, chunk_bytes=2048)
    red = {"none": 0, "sum": 1, "mean": 2}[reduction]
    h, w, b = (x.to(device) for x in (torch.randn(8, 32), torch.randn(100, 32) / 4,
                                      torch.randn(100)))
    t = TARGETS.to(device)

    def kt(h, w, b=None):
        return loss_fn(w, h, t, b)

    def ref(h, w, b=None):
        return _ce_ref(h @ w.T + (0 if b is None else b), t, -100, 0.05, 1e-4, 0.0,
                       red)[0].reshape(())
    _check(*_both(kt, ref, *((h, w, b) if bias else (h, w)),
                  dy=torch.tensor(0.6, device=device), device=device), "flce")


def test_fused_linear_cross_entropy_none_takes_sum_only():
    loss_fn = knn.FusedLinearCrossEntropyLoss(reduction="none")
    h = torch.randn(4, 16, requires_grad=True)
    w = torch.randn(50, 16, requires_grad=True)
    t = torch.tensor([1, 2, 3, 4])
    loss = loss_fn(w, h, t)
    assert loss.shape == (4,)
    (loss.sum() * 2).backward()
    ref = F.cross_entropy(h.detach().double() @ w.detach().double().T, t, reduction="sum") * 2
    hd = h.detach().double().requires_grad_(True)
    (F.cross_entropy(hd @ w.detach().double().T, t, reduction="sum") * 2).backward()
    close(h.grad, hd.grad, torch.float32, "flce none dh")
    assert torch.isfinite(ref)
    with pytest.raises(kite.Unsupported, match="uniform"):
        loss_fn(w, h, t).backward(torch.tensor([1.0, 2.0, 3.0, 4.0]))
