"""kite.torch.nn modules against plain torch."""
import pytest
import torch
import torch.nn.functional as F
from cases import close
from conftest import DEVICES

import kite
import kite.torch.nn as knn


@pytest.mark.parametrize("device", DEVICES)
def test_norms(device):
    x, r = torch.randn(5, 96, device=device), torch.randn(5, 96, device=device)
    m = knn.RMSNorm(96, eps=1e-6).to(device)
    torch.nn.init.normal_(m.weight)
    close(m(x), F.rms_norm(x.double(), (96,), m.weight.double(), 1e-6), torch.float32)
    g = knn.RMSNorm(96, eps=1e-6, offset=1.0).to(device)
    close(g(x), F.rms_norm(x.double(), (96,)) * (1 + g.weight.double()), torch.float32)
    res = r.clone()
    y, res2 = m(x, res)
    assert res2 is res
    close(res, x.double() + r.double(), torch.float32)
    close(y, F.rms_norm((x + r).double(), (96,), m.weight.double(), 1e-6), torch.float32)
    ln = knn.LayerNorm(96).to(device)
    torch.nn.init.normal_(ln.weight), torch.nn.init.normal_(ln.bias)
    close(ln(x), F.layer_norm(x.double(), (96,), ln.weight.double(), ln.bias.double(), 1e-5),
          torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_gated_activations(device):
    x = torch.randn(3, 2 * 40, device=device)
    close(knn.SiluAndMul()(x), F.silu(x[:, :40].double()) * x[:, 40:].double(), torch.float32)
    for approx in ("none", "tanh"):
        close(knn.GeluAndMul(approx)(x), F.gelu(x[:, :40].double(), approximate=approx)
              * x[:, 40:].double(), torch.float32)
    with pytest.raises(kite.InvalidArgument, match="approximate"):
        knn.GeluAndMul("erf")


@pytest.mark.parametrize("device", DEVICES)
def test_attention_gqa_causal(device):
    q, k, v = (torch.randn(2, 4, 6, 32, device=device), torch.randn(2, 2, 6, 32, device=device),
               torch.randn(2, 2, 6, 32, device=device))
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True,
                                          enable_gqa=True)
    close(knn.Attention()(q, k, v), want, torch.float32)
    mask = torch.rand(6, 6, device=device) > 0.5
    mask.fill_diagonal_(True)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask,
                                          enable_gqa=True)
    close(knn.Attention()(q, k, v, mask), want, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_moe_block(device):
    m = knn.MoE(32, 24, num_experts=4, top_k=2).to(device)
    x = torch.randn(2, 3, 32, device=device)
    h = x.reshape(-1, 32).double()
    p = torch.softmax(h @ m.gate.double().T, -1)
    wv, ids = torch.topk(p, 2, -1)
    wv = wv / wv.sum(-1, keepdim=True)
    want = torch.zeros_like(h)
    for t in range(h.shape[0]):
        for j in range(2):
            e = int(ids[t, j])
            gu = m.w13[e].double() @ h[t]
            want[t] += wv[t, j] * (m.w2[e].double() @ (F.silu(gu[:24]) * gu[24:]))
    with torch.no_grad():
        close(m(x), want.reshape(2, 3, 32), torch.float32)
    # kite has no backward for topk_gating or fused_moe: a call wanting a gradient is refused
    with pytest.raises(kite.Unsupported, match="no backward"):
        m(x)


@pytest.mark.parametrize("device", DEVICES)
def test_mlps_over_the_models_projections(device):
    """GatedMLP over separate or fused (gate rows first) projections, MLP under the model's own
    names; gradients of every parameter and the input; norms of a transposed view (a per-head q
    norm's input) as of its contiguous copy."""
    torch.manual_seed(0)
    lin = lambda i, o: torch.nn.Linear(i, o, device=device)  # noqa: E731
    x = torch.randn(3, 5, 16, device=device, requires_grad=True)
    gate_up, down = lin(16, 2 * 24), lin(24, 16)
    fused = knn.GatedMLP(None, None, down, "silu", gate_up_proj=gate_up)
    g, u = gate_up(x).chunk(2, dim=-1)
    want = down(F.silu(g) * u)
    got = fused(x)
    close(got, want.double(), torch.float32)
    assert list(dict(fused.named_parameters())) == ["gate_up_proj.weight", "gate_up_proj.bias",
                                                     "down_proj.weight", "down_proj.bias"]
    gw = torch.autograd.grad(want.square().sum(), (x, gate_up.weight, down.weight))
    gk = torch.autograd.grad(got.square().sum(), (x, gate_up.weight, down.weight))
    for a, b in zip(gk, gw):
        close(a, b.double(), torch.float32)
    with pytest.raises(kite.InvalidArgument, match="gate_up_proj"):
        knn.GatedMLP(lin(16, 24), lin(16, 24), down, "silu", gate_up_proj=gate_up)
    up, dn = lin(16, 24), lin(24, 16)
    plain = knn.MLP(up, dn, "gelu", names=("dense_h_to_4h", "dense_4h_to_h"))
    assert [n for n, _ in plain.named_children()] == ["dense_h_to_4h", "dense_4h_to_h"]
    want, got = dn(F.gelu(up(x))), plain(x)
    close(got, want.double(), torch.float32)
    gw = torch.autograd.grad(want.sum(), (x, up.weight))
    gk = torch.autograd.grad(got.sum(), (x, up.weight))
    for a, b in zip(gk, gw):
        close(a, b.double(), torch.float32)
    with pytest.raises(kite.InvalidArgument, match="act"):
        knn.MLP(up, dn, "tanh")
    q = torch.randn(2, 7, 4, 16, device=device).transpose(1, 2)  # [B, H, S, D], not collapsible
    norm = knn.RMSNorm(16).to(device)
    close(norm(q), F.rms_norm(q.double(), (16,), norm.weight.double(), 1e-6), torch.float32)
