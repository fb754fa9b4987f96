"""torch's autograd rules kept by kite's ops: writes through out= and in-place arguments bump the
version counters (autograd then refuses a backward that needs a tensor kite overwrote); ops with
no kite backward refuse to run where a gradient is wanted instead of cutting the graph; double
backward raises instead of silently missing terms; FusedLinearCrossEntropyLoss computes no
gradient under no_grad; autocast follows torch's policy; the losses take Liger's arguments in
Liger's order."""
import pytest
import torch
import torch.nn.functional as F
from cases import _ce_ref, close
from conftest import DEVICES

import kite
import kite.ops
import kite.torch  # noqa: F401
import kite.torch.nn as knn
from kite.torch import autograd as kag

ops = torch.ops.kite
INPLACE = "modified by an inplace operation"


def _saved_by_mul(t):
    """y = x * t with x requiring grad: autograd saves t for the backward."""
    x = torch.randn(t.shape, device=t.device, requires_grad=True)
    return x * t


# ---- version counters --------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("api", ["torch.ops", "kite.ops"])
def test_out_write_bumps_version(api, device):
    src = torch.randn(4, 8, device=device)
    t = torch.randn(4, 8, device=device)
    y = _saved_by_mul(t)
    v = t._version
    if api == "torch.ops":
        ops.silu.out(src, t)
    else:
        kite.ops.silu(src, out=t)
    assert t._version > v
    torch.testing.assert_close(t, F.silu(src))
    with pytest.raises(RuntimeError, match=INPLACE):
        y.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("api", ["torch.ops", "kite.ops"])
def test_inplace_write_bumps_version(api, device):
    q = torch.randn(3, 2, 16, device=device)
    k = torch.randn(3, 1, 16, device=device)
    pos = torch.arange(3, dtype=torch.int32, device=device)
    cs = kite.rope_cache(8, 16, 10000.0, like="torch").to(device)
    yq, yk = _saved_by_mul(q), _saved_by_mul(k)
    vq, vk = q._version, k._version
    (ops.rope if api == "torch.ops" else kite.ops.rope)(q, k, pos, cs, 16, 0)
    assert q._version > vq and k._version > vk
    for y in (yq, yk):
        with pytest.raises(RuntimeError, match=INPLACE):
            y.sum().backward()
    # add_rms_norm updates its residual in place
    x, r, w = (torch.randn(3, 16, device=device), torch.randn(3, 16, device=device),
               torch.ones(16, device=device))
    yr = _saved_by_mul(r)
    (ops.add_rms_norm if api == "torch.ops" else kite.ops.add_rms_norm)(x, r, w, 1e-6, 0.0, 0)
    with pytest.raises(RuntimeError, match=INPLACE):
        yr.sum().backward()


def test_results_of_a_call_are_fresh():
    """Results allocated by the call are not bumped (nothing can have saved them)."""
    assert ops.silu(torch.randn(5))._version == 0


# ---- ops with no kite backward -----------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_no_backward_ops_refuse_a_gradient(device):
    q = torch.randn(1, 4, 5, 16, device=device, requires_grad=True)
    k, v = torch.randn(1, 2, 5, 16, device=device), torch.randn(1, 2, 5, 16, device=device)
    x, w = torch.randn(3, 8, device=device), torch.randn(6, 8, device=device, requires_grad=True)
    with pytest.raises(kite.Unsupported, match=r"kite.linear: kite has no backward"):
        ops.linear(x, w)
    with pytest.raises(kite.Unsupported, match=r"linear.out"):
        ops.linear.out(x, w, None, torch.empty(3, 6, device=device))
    with pytest.raises(kite.Unsupported, match=r"silu.out"):  # as torch's out= ops refuse
        ops.silu.out(w, torch.empty_like(w))
    with torch.no_grad():
        ops.linear(x, w)
    with torch.inference_mode():
        ops.linear(x, w)
    ops.linear(x, w.detach())
    # sdpa differentiates q, k, v but not its mask: a mask that requires grad is refused
    mask = torch.zeros(5, 5, device=device, requires_grad=True)
    with pytest.raises(kite.Unsupported, match=r"kite.sdpa: the mask requires grad"):
        ops.sdpa(q, k, v, mask, 0.0, 0.0, -1, 0, 0)
    with torch.no_grad():
        ops.sdpa(q, k, v, mask, 0.0, 0.0, -1, 0, 0)
    # the in-place ops called directly on tensors that require grad: the differentiable forms
    # (kite.torch.autograd.rope / add_rms_norm) are the ones to use
    pos = torch.arange(5, dtype=torch.int32, device=device)
    cs = kite.rope_cache(8, 16, 10000.0, like="torch").to(device)
    qq = torch.randn(5, 4, 16, device=device, requires_grad=True)
    with pytest.raises(kite.Unsupported, match=r"kite.rope: kite has no backward"):
        ops.rope(qq, None, pos, cs, 16, 0)


# ---- double backward ---------------------------------------------------------------------------
def _second_order_raises(fn, *xs, dy_requires_grad=False):
    xs = [x.clone().requires_grad_(True) for x in xs]
    y = fn(*xs)
    y = y[0] if isinstance(y, tuple) else y
    dy = torch.randn(y.shape).requires_grad_(dy_requires_grad)
    first = torch.autograd.grad(y, xs, dy, allow_unused=True)
    xs2 = [x.detach().requires_grad_(True) for x in xs]
    y2 = fn(*xs2)
    y2 = y2[0] if isinstance(y2, tuple) else y2
    graphed = torch.autograd.grad(y2, xs2, dy, create_graph=True, allow_unused=True)
    for a, b in zip(first, graphed):  # the first derivative is the same either way
        if a is not None:
            torch.testing.assert_close(b.detach(), a.detach())
    g = sum((b * b).sum() for b in graphed if b is not None)
    with pytest.raises(RuntimeError, match=r"kite.torch: the backward of .* no backward"):
        g.backward()


def test_double_backward_raises():
    pos = torch.tensor([0, 3, 1], dtype=torch.int32)
    cs = kite.rope_cache(8, 16, 10000.0, like="torch")
    t = torch.tensor([1, 4, -100, 2])
    cases = [
        (lambda x: ops.silu(x), (torch.randn(4, 8),)),
        (lambda x: ops.silu_and_mul(x, 0.0), (torch.randn(4, 8),)),
        (lambda x, w: ops.rms_norm(x, w, 1e-6, 0.0), (torch.randn(4, 8), torch.randn(8))),
        (lambda x: ops.softmax(x, 1.0), (torch.randn(4, 8),)),
        (lambda x: knn.CrossEntropyLoss()(x, t), (torch.randn(4, 10),)),
        (lambda x, r, w: kag.add_rms_norm(x, r, w), (torch.randn(3, 8), torch.randn(3, 8),
                                                     torch.randn(8))),
        (lambda h, w: knn.FusedLinearCrossEntropyLoss()(w, h, t),
         (torch.randn(4, 8), torch.randn(10, 8))),
        (lambda q, k, v: ops.sdpa(q, k, v), (torch.randn(1, 4, 3, 8), torch.randn(1, 2, 5, 8),
                                             torch.randn(1, 2, 5, 8))),
        (lambda q, k, v: ops.sdpa_varlen(q, k, v, torch.tensor([0, 1, 3], dtype=torch.int32),
                                         torch.tensor([0, 2, 5], dtype=torch.int32), 2, 3),
         (torch.randn(3, 4, 8), torch.randn(5, 2, 8), torch.randn(5, 2, 8))),
    ]
    for fn, xs in cases:
        _second_order_raises(fn, *xs)
    # rope is linear: its gradient does not depend on q and k (a second derivative through
    # them is zero, and none is built, as for torch's linear ops); through the upstream
    # gradient it would be the rotation again, which kite does not differentiate
    _second_order_raises(lambda q, k: kag.rope(q, k, pos, cs, 16),
                         torch.randn(3, 2, 16), torch.randn(3, 1, 16), dy_requires_grad=True)


# ---- FusedLinearCrossEntropyLoss without gradients ----------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("bias", [False, True])
def test_flce_no_grad_computes_no_gradient(reduction, bias, device, monkeypatch):
    opts = dict(reduction=reduction, label_smoothing=0.05, lse_square_scale=1e-4, softcap=20.0,
                chunk_bytes=2048)
    h = torch.randn(9, 32, device=device, requires_grad=True)
    w = (torch.randn(100, 32, device=device) / 4).requires_grad_(True)
    b = torch.randn(100, device=device, requires_grad=True) if bias else None
    t = torch.tensor([3, -100, 0, 99, 42, 7, 5, 5, -100], device=device)
    want = knn.FusedLinearCrossEntropyLoss(**opts)(w, h, t, b).detach()
    ref = _ce_ref(h.detach() @ w.detach().T + (0 if b is None else b.detach()), t, -100, 0.05,
                  1e-4, 20.0, {"none": 0, "sum": 1, "mean": 2}[reduction])[0]
    close(want, ref.reshape(want.shape), torch.float32, "flce")

    class Refused(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *a):
            raise AssertionError("the gradient-computing fused op ran")

    monkeypatch.setattr(knn, "_FusedLinearCE", Refused)
    loss_fn = knn.FusedLinearCrossEntropyLoss(**opts)
    for ctx in (torch.no_grad, torch.inference_mode):
        with ctx():
            got = loss_fn(w, h, t, b)
        assert not got.requires_grad
        close(got, want, torch.float32, f"flce forward only under {ctx.__name__}")
    got = loss_fn(w.detach(), h.detach(), t, None if b is None else b.detach())  # nothing to grad
    close(got, want, torch.float32, "flce forward only, no input requiring grad")


# ---- autocast ----------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_autocast_policy(device):
    dt = torch.bfloat16
    x, w = torch.randn(5, 16, device=device), torch.randn(12, 16, device=device)
    q = torch.randn(1, 4, 6, 16, device=device)
    kv = torch.randn(1, 2, 6, 16, device=device)
    logits_bf16 = torch.randn(6, 30, device=device).to(dt)
    t = torch.tensor([1, 2, 3, -100, 5, 29], device=device)
    with torch.autocast(device, dtype=dt):
        y = ops.linear(x, w)
        assert y.dtype == dt and F.linear(x, w).dtype == dt  # as torch's own
        close(y, x.to(dt).float() @ w.to(dt).float().T, dt, "autocast linear")
        assert ops.sdpa(q, kv, kv).dtype == dt
        assert ops.silu(x).dtype == torch.float32  # not in any list: the input's dtype
        assert ops.silu(x.to(dt)).dtype == dt
        loss, lse = ops.cross_entropy(logits_bf16, t.to(torch.int32))  # f32, as torch's
        assert loss.dtype == torch.float32 and lse.dtype == torch.float32
        hx = x.clone().requires_grad_(True)
        wx = w.clone().requires_grad_(True)
        fl = knn.FusedLinearCrossEntropyLoss()(wx, hx, t[:5])
        assert fl.dtype == torch.float32
        mlp = knn.GatedMLP(torch.nn.Linear(16, 8).to(device), torch.nn.Linear(16, 8).to(device),
                           torch.nn.Linear(8, 16).to(device))
        assert mlp(x).dtype == dt
    fl.backward()
    assert hx.grad.dtype == torch.float32 and wx.grad.dtype == torch.float32  # the leaves' dtype
    ref = F.cross_entropy((x.to(dt) @ w.to(dt).T).float(), t[:5])
    torch.testing.assert_close(fl.detach(), ref, rtol=2e-2, atol=2e-2)


# ---- Liger's arguments -------------------------------------------------------------------------
def test_losses_take_ligers_arguments_in_ligers_order():
    x = torch.randn(6, 20) * 3
    t = torch.tensor([1, -100, 3, 19, 0, 7])
    # LigerCrossEntropyLoss(weight, ignore_index, lse_square_scale, label_smoothing, reduction,
    #                       softcap, return_z_loss)
    loss, z = knn.CrossEntropyLoss(None, -100, 1e-3, 0.1, "sum", 30.0, True)(x, t)
    want = _ce_ref(x, t, -100, 0.1, 1e-3, 30.0, 1)[0].reshape(())
    close(loss, want, torch.float32, "ce")
    z_cap = 30.0 * torch.tanh(x.double() / 30.0)
    z_ref = (1e-3 * torch.logsumexp(z_cap, -1) ** 2)[t != -100].sum()
    close(z, z_ref, torch.float32, "z_loss")
    assert not z.requires_grad
    with pytest.raises(NotImplementedError, match="class weights"):
        knn.CrossEntropyLoss(torch.ones(20))
    with pytest.raises(NotImplementedError, match="return_token_accuracy"):
        knn.CrossEntropyLoss(return_token_accuracy=True)
    # LigerFusedLinearCrossEntropyLoss(ce_weight, ignore_index, lse_square_scale,
    #                                  label_smoothing, reduction, softcap, return_z_loss,
    #                                  accum_dtype)
    h, w = torch.randn(6, 8), torch.randn(20, 8)
    fl = knn.FusedLinearCrossEntropyLoss(None, -100, 1e-3, 0.1, "sum", 30.0, False,
                                         torch.float32)
    close(fl(w, h, t), _ce_ref(h @ w.T, t, -100, 0.1, 1e-3, 30.0, 1)[0].reshape(()),
          torch.float32, "flce")
    for kw, what in ((dict(ce_weight=torch.ones(20)), "class weights"),
                     (dict(return_z_loss=True), "return_z_loss"),
                     (dict(accum_dtype=torch.bfloat16), "accum_dtype"),
                     (dict(use_token_scaling=True), "use_token_scaling"),
                     (dict(return_token_accuracy=True), "return_token_accuracy")):
        with pytest.raises(NotImplementedError, match=what):
            knn.FusedLinearCrossEntropyLoss(**kw)
    with pytest.raises(kite.InvalidArgument, match="label_smoothing"):
        knn.CrossEntropyLoss(label_smoothing=1.5)
