"""kite's MoE routing, gpt-oss experts and load-balancing loss against the modules and functions
of transformers' modeling code (deepseek_v3, gpt_oss, qwen3_moe): the same weights and inputs,
the same routes and outputs; gpt-oss's experts read as stored (transposed) against float64 math;
the loss's backward against torch autograd of transformers' function."""
import pytest
import torch
from conftest import DEVICES

import kite

transformers = pytest.importorskip("transformers")
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter  # noqa
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts, GptOssTopKRouter  # noqa
from transformers.models.qwen3_moe.modeling_qwen3_moe import (  # noqa
    Qwen3MoeTopKRouter, load_balancing_loss_func)

SIGMOID, SOFTMAX, SOFTMAX_TOPK = 1, 0, 2


def _same_route(w, ids, hw, hids, tol):
    """Routes as sets per token (transformers' topk(sorted=False) gives any order)."""
    ids, hids = ids.long().cpu(), hids.long().cpu()
    so, ho = ids.sort(-1), hids.sort(-1)
    assert torch.equal(so.values, ho.values)
    ws = w.float().cpu().gather(1, so.indices)
    hws = hw.float().cpu().gather(1, ho.indices)
    assert (ws - hws).abs().max().item() <= tol * max(hws.abs().max().item(), 1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tokens", [1, 37])
def test_deepseek_v3_router(device, tokens):
    torch.manual_seed(tokens)
    cfg = transformers.DeepseekV3Config(hidden_size=64, n_routed_experts=256,
                                        num_experts_per_tok=8, n_group=8, topk_group=4,
                                        norm_topk_prob=True, routed_scaling_factor=2.5)
    r = DeepseekV3TopkRouter(cfg).to(device)
    with torch.no_grad():
        r.weight.normal_(0, 0.2)
        r.e_score_correction_bias.uniform_(-0.1, 0.1)
    h = torch.randn(tokens, 64, device=device)
    with torch.no_grad():
        logits, hw, hids = r(h)
    w, ids = kite.ops.moe_route(logits.float(), r.e_score_correction_bias.float(), 8,
                                score=SIGMOID, n_group=8, topk_group=4, renormalize=1,
                                scaling=2.5)
    _same_route(w, ids, hw, hids, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_gpt_oss_router(device):
    torch.manual_seed(1)
    cfg = transformers.GptOssConfig(hidden_size=64, intermediate_size=48, num_local_experts=32,
                                    num_experts_per_tok=4)
    r = GptOssTopKRouter(cfg).to(device)
    with torch.no_grad():
        r.weight.normal_(0, 0.2)
        r.bias.normal_(0, 0.5)
    h = torch.randn(29, 64, device=device)
    with torch.no_grad():
        _, hw, hids = r(h)
        raw = h @ r.weight.T  # the logits without the router's bias: kite adds it
    w, ids = kite.ops.moe_route(raw, r.bias.detach(), 4, score=SOFTMAX_TOPK)
    _same_route(w, ids, hw, hids, 1e-5)
    # the bias already inside the logits: bias None gives the same route
    w2, ids2 = kite.ops.moe_route(raw + r.bias.detach(), None, 4, score=SOFTMAX_TOPK)
    _same_route(w2, ids2, hw, hids, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("norm", [0, 1])
def test_qwen3_moe_router(device, norm):
    torch.manual_seed(2)
    cfg = transformers.Qwen3MoeConfig(hidden_size=64, num_experts=60, num_experts_per_tok=4,
                                      norm_topk_prob=bool(norm))
    r = Qwen3MoeTopKRouter(cfg).to(device)
    with torch.no_grad():
        r.weight.normal_(0, 0.2)
    h = torch.randn(21, 64, device=device)
    with torch.no_grad():
        logits, hw, hids = r(h)
    w, ids = kite.ops.moe_route(logits, None, 4, score=SOFTMAX, renormalize=norm)
    _same_route(w, ids, hw, hids, 1e-5)
    assert torch.equal(ids.long().cpu(), hids.long().cpu())  # both in descending order


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("transposed", [0, 1], ids=["copied", "in_place"])
def test_gpt_oss_experts(device, transposed):
    torch.manual_seed(3)
    E, H, I, T, k = 8, 64, 48, 13, 4
    cfg = transformers.GptOssConfig(hidden_size=H, intermediate_size=I, num_local_experts=E,
                                    num_experts_per_tok=k)
    ex = GptOssExperts(cfg).to(device)
    with torch.no_grad():
        ex.gate_up_proj.normal_(0, 0.3)
        ex.gate_up_proj_bias.normal_(0, 1.0)
        ex.down_proj.normal_(0, 0.2)
        ex.down_proj_bias.normal_(0, 0.5)
    x = torch.randn(T, H, device=device) * 2  # large enough that the clamp at 7 acts
    ids = torch.stack([torch.randperm(E, device=device)[:k] for _ in range(T)])
    wts = torch.softmax(torch.randn(T, k, device=device), -1)
    with torch.no_grad():
        want = ex(x, router_indices=ids, routing_weights=wts)
        # gpt-oss stores [E, H, 2I] with gate/up interleaved and [E, I, H]: read as stored
        # (transposed 1), or as transposed copies in the [E, 2I, H] / [E, H, I] orientation
        w13, w2 = ex.gate_up_proj, ex.down_proj
        if not transposed:
            w13, w2 = w13.transpose(1, 2).contiguous(), w2.transpose(1, 2).contiguous()
        got = kite.ops.fused_moe_ex(x, w13, ex.gate_up_proj_bias, w2, ex.down_proj_bias, wts,
                                    ids.to(torch.int32), act=2, layout=1, alpha=ex.alpha,
                                    limit=ex.limit, transposed=transposed)
    err = (got - want).abs().max().item() / want.abs().max().item()
    assert err < 1e-5


def _gpt_oss_experts_f64(x, gate_up, gate_up_b, down, down_b, wts, ids, alpha, limit, dt):
    """gpt-oss's expert math in float64 on the stored weights (gate_up [E, H, 2I] interleaved,
    down [E, I, H]), the intermediate rounded to dt as fused_moe_ex stores it."""
    x, gate_up, gate_up_b, down, down_b, wts = (t.double().cpu() for t in
                                                (x, gate_up, gate_up_b, down, down_b, wts))
    ids = ids.long().cpu()
    y = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            gu = x[t] @ gate_up[e] + gate_up_b[e]
            gate, up = gu[0::2].clamp(max=limit), gu[1::2].clamp(-limit, limit)
            a = ((up + 1) * gate * torch.sigmoid(alpha * gate)).to(dt).double()
            y[t] += wts[t, j] * (a @ down[e] + down_b[e])
    return y


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_gpt_oss_experts_transposed_f64(device, dtype):
    """fused_moe_ex with transposed = 1 on gpt-oss's stored weights against the float64 math;
    H != 2I and I != H, so a swapped stride would read other elements."""
    torch.manual_seed(5)
    E, H, I, T, k, alpha, limit = 6, 40, 28, 11, 3, 1.702, 2.0  # the clamp acts often
    x = torch.randn(T, H, device=device).to(dtype)
    gate_up = (torch.randn(E, H, 2 * I, device=device) * H ** -0.5 * 2).to(dtype)
    gate_up_b = (torch.randn(E, 2 * I, device=device) * 0.5).to(dtype)
    down = (torch.randn(E, I, H, device=device) * I ** -0.5).to(dtype)
    down_b = (torch.randn(E, H, device=device) * 0.5).to(dtype)
    ids = torch.stack([torch.randperm(E, device=device)[:k] for _ in range(T)]).to(torch.int32)
    wts = torch.softmax(torch.randn(T, k, device=device), -1)
    got = kite.ops.fused_moe_ex(x, gate_up, gate_up_b, down, down_b, wts, ids, act=2, layout=1,
                                alpha=alpha, limit=limit, transposed=1)
    want = _gpt_oss_experts_f64(x, gate_up, gate_up_b, down, down_b, wts, ids, alpha, limit, dtype)
    err = (got.double().cpu() - want).abs().max().item() / want.abs().max().item()
    assert err < (1e-6 if dtype == torch.float32 else 2e-2), err
    kw = dict(act=2, layout=1, alpha=alpha, limit=limit, transposed=1)
    with pytest.raises(Exception, match="fused_moe_ex: transposed: .* w13"):  # [E, 2I, H]
        kite.ops.fused_moe_ex(x, gate_up.transpose(1, 2).contiguous(), gate_up_b, down, down_b,
                              wts, ids, **kw)
    with pytest.raises(Exception, match=r"fused_moe_ex: w2: .*\[E, I, H\]"):  # [E, H, I]
        kite.ops.fused_moe_ex(x, gate_up, gate_up_b, down.transpose(1, 2).contiguous(), down_b,
                              wts, ids, **kw)


def _hf_loss(logits, k, mask):
    # transformers' function takes a tuple of layers' logits and a [batch, seq] mask
    return load_balancing_loss_func((logits,), logits.shape[-1], k,
                                    None if mask is None else mask.reshape(1, -1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("masked", [False, True])
def test_load_balancing_loss(device, masked):
    torch.manual_seed(4)
    T, E, k = 50, 8, 2
    logits = torch.randn(T, E, device=device, dtype=torch.float64).requires_grad_()
    mask = (torch.rand(T, device=device) > 0.3).long() if masked else None
    want = _hf_loss(logits, k, mask)
    want.backward()
    ids = torch.topk(torch.softmax(logits.detach(), -1), k, -1)[1].to(torch.int32)
    z = logits.detach().float()
    m = None if mask is None else mask.float()
    loss = kite.ops.moe_aux_loss(z, ids, m)
    assert abs(loss.item() - want.item()) <= 1e-5 * abs(want.item())
    dloss = torch.full((1,), 1.0, device=device)
    dz = kite.ops.moe_aux_loss_backward(z, ids, m, dloss)
    g = logits.grad
    assert (dz.double() - g).abs().max().item() <= 1e-5 * g.abs().max().item()


@pytest.mark.parametrize("device", DEVICES)
def test_load_balancing_loss_layers_stacked(device):
    """Several layers' logits: transformers takes a tuple, kite their rows stacked."""
    torch.manual_seed(5)
    layers = [torch.randn(16, 6, device=device) for _ in range(3)]
    want = load_balancing_loss_func(tuple(layers), 6, 2)
    z = torch.cat(layers)
    ids = torch.topk(torch.softmax(z, -1), 2, -1)[1].to(torch.int32)
    assert abs(kite.ops.moe_aux_loss(z, ids).item() - want.item()) <= 1e-5 * want.item()


@pytest.mark.parametrize("device", DEVICES)
def test_load_balancing_loss_autograd(device):
    """torch.ops.kite.moe_aux_loss is differentiable (moe_aux_loss_backward): the same gradient
    as autograd through transformers' function, f32 logits."""
    import kite.torch  # noqa: F401  (registers the autograd rules)
    torch.manual_seed(6)
    logits = torch.randn(40, 16, device=device, requires_grad=True)
    mask = (torch.rand(40, device=device) > 0.2).long()
    want = _hf_loss(logits, 4, mask)
    (g_want,) = torch.autograd.grad(want * 3.0, logits)
    ids = torch.topk(torch.softmax(logits.detach(), -1), 4, -1)[1].to(torch.int32)
    got = torch.ops.kite.moe_aux_loss(logits, ids, mask.float())
    (g_got,) = torch.autograd.grad(got.sum() * 3.0, logits)
    assert abs(got.item() - want.item()) <= 1e-5 * abs(want.item())
    assert (g_got - g_want).abs().max().item() <= 1e-5 * g_want.abs().max().item()
