"""torch.nn modules over torch.ops.kite (inference: no autograd through kite's ops yet).

Weights are stored in the module's dtype; each op needs its tensors in one dtype, so cast the
module with .to(dtype) together with its inputs.
"""
import math

import torch
from torch import nn

import kite

_ops = torch.ops.kite


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * (offset + weight) over the last dim; offset=1 is Gemma's
    (weights stored as w - 1). forward(x) -> y; forward(x, residual) -> (y, residual) with the
    residual add fused (residual <- x + residual, y = norm(residual), kite's pre-norm rule)."""

    def __init__(self, hidden_size, eps=1e-6, offset=0.0, weight=True, dtype=None, device=None):
        super().__init__()
        self.eps, self.offset = float(eps), float(offset)
        init = torch.zeros if offset else torch.ones
        self.weight = nn.Parameter(init(hidden_size, dtype=dtype, device=device)) if weight else None

    def forward(self, x, residual=None):
        if residual is None:
            return _ops.rms_norm(x, self.weight, self.eps, self.offset)
        y = _ops.add_rms_norm(x, residual, self.weight, self.eps, self.offset, 0)
        return y, residual

    def extra_repr(self):
        return f"eps={self.eps}, offset={self.offset}"


class LayerNorm(nn.Module):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dim."""

    def __init__(self, hidden_size, eps=1e-5, bias=True, dtype=None, device=None):
        super().__init__()
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.zeros(hidden_size, dtype=dtype, device=device)) if bias else None

    def forward(self, x, residual=None):
        if residual is None:
            return _ops.layer_norm(x, self.weight, self.bias, self.eps)
        return _ops.add_layer_norm(x, residual, self.weight, self.bias, self.eps, 0), residual


class SiluAndMul(nn.Module):
    """x[..., 2I] -> silu(x[..., :I]) * x[..., I:]; limit > 0 clamps as kite.h says."""

    def __init__(self, limit=0.0):
        super().__init__()
        self.limit = float(limit)

    def forward(self, x):
        return _ops.silu_and_mul(x, self.limit)


class GeluAndMul(nn.Module):
    """x[..., 2I] -> gelu(x[..., :I]) * x[..., I:]; approximate "none" (erf) or "tanh"."""

    def __init__(self, approximate="none", limit=0.0):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise kite.InvalidArgument(f"GeluAndMul: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate, self.limit = approximate, float(limit)
        self._op = _ops.gelu_tanh_and_mul if approximate == "tanh" else _ops.gelu_and_mul

    def forward(self, x):
        return self._op(x, self.limit)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding, applied in place by kite's rope.

    head_dim: D; rot_dim: the leading dims of each head that rotate (default D); style "neox"
    (pairs i, i + rot_dim/2) or "gptj" (pairs 2i, 2i + 1); scaling None, ("linear", factor) or
    ("llama3", factor, low_freq_factor, high_freq_factor, original_max_pos).
    forward(positions[T] int32, q[T, Hq, D], k[T, Hkv, D] or None) rotates q and k in place and
    returns them; q/k may also be [T, H * D] (viewed as heads).
    """

    def __init__(self, head_dim, max_pos=4096, theta=10000.0, rot_dim=None, style="neox",
                 scaling=None, device=None):
        super().__init__()
        if style not in ("neox", "gptj"):
            raise kite.InvalidArgument(f"RotaryEmbedding: style must be 'neox' or 'gptj', got {style!r}")
        self.head_dim, self.rot_dim = head_dim, rot_dim or head_dim
        self.style = 0 if style == "neox" else 1
        cache = kite.rope_cache(max_pos, self.rot_dim, theta, scaling, like="torch")
        self.register_buffer("cos_sin", cache.to(device) if device else cache, persistent=False)

    def forward(self, positions, q, k=None):
        qv = q.view(q.shape[0], -1, self.head_dim) if q.dim() == 2 else q
        kv = k.view(k.shape[0], -1, self.head_dim) if k is not None and k.dim() == 2 else k
        if positions.dtype != torch.int32:
            positions = positions.to(torch.int32)
        _ops.rope(qv, kv, positions, self.cos_sin, self.rot_dim, self.style)
        return q, k


class Attention(nn.Module):
    """The attention core: softmax(scale q k^T [+ mask]) v with GQA, kite's sdpa.

    forward(q[B, Hq, Sq, D], k[B, Hkv, Sk, D], v, mask=None) -> o[B, Hq, Sq, D]. causal aligns
    the last query with the last key; mask: bool (True = attend) or additive float,
    [Sq, Sk] or [B|1, Hq|1, Sq, Sk]. window_left = W - 1 for a sliding window of W keys.
    """

    def __init__(self, scale=None, softcap=0.0, window_left=-1, causal=True):
        super().__init__()
        self.scale = float(scale or 0.0)
        self.softcap, self.window_left, self.causal = float(softcap or 0.0), int(window_left), int(causal)

    def forward(self, q, k, v, mask=None):
        return _ops.sdpa(q, k, v, mask, self.scale, self.softcap, self.window_left, 0,
                         self.causal if mask is None else 0)


class MoE(nn.Module):
    """A mixture-of-experts MLP: router (linear + softmax + top-k, kite's topk_gating) and fused
    experts (kite's fused_moe).

    Parameters: gate [E, H] (router), w13 [E, 2I, H] (rows [0, I) gate, [I, 2I) up), w2 [E, H, I].
    forward(x[..., H]) -> y[..., H].
    """

    def __init__(self, hidden_size, intermediate_size, num_experts, top_k, renormalize=True,
                 act="silu", dtype=None, device=None):
        super().__init__()
        if act not in ("silu", "gelu"):
            raise kite.InvalidArgument(f"MoE: act must be 'silu' or 'gelu', got {act!r}")
        self.top_k, self.renormalize, self.act = int(top_k), int(bool(renormalize)), 0 if act == "silu" else 1
        kw = dict(dtype=dtype, device=device)
        self.gate = nn.Parameter(torch.empty(num_experts, hidden_size, **kw))
        self.w13 = nn.Parameter(torch.empty(num_experts, 2 * intermediate_size, hidden_size, **kw))
        self.w2 = nn.Parameter(torch.empty(num_experts, hidden_size, intermediate_size, **kw))
        for p in (self.gate, self.w13, self.w2):
            nn.init.normal_(p, std=1.0 / math.sqrt(p.shape[-1]))

    def forward(self, x):
        shape = x.shape
        h = x.reshape(-1, shape[-1])
        logits = torch.nn.functional.linear(h, self.gate)
        weights, ids = _ops.topk_gating(logits, self.top_k, self.renormalize)
        return _ops.fused_moe(h, self.w13, self.w2, weights, ids, self.act).reshape(shape)


class GatedMLP(nn.Module):
    """down(act(gate(x)) * up(x)) with gate and up as one projection: gate_up [2I, H] then
    kite's fused act-and-mul. Made by kite.torch.patch from a model's gate_proj/up_proj."""

    def __init__(self, gate_up, down, act="silu", gate_up_bias=None):
        super().__init__()
        self.gate_up = nn.Parameter(gate_up, requires_grad=False)
        self.gate_up_bias = None if gate_up_bias is None else nn.Parameter(gate_up_bias, requires_grad=False)
        self.down_proj = down
        self.act_name = act
        self._op = {"silu": _ops.silu_and_mul, "gelu": _ops.gelu_and_mul,
                    "gelu_tanh": _ops.gelu_tanh_and_mul}[act]

    def forward(self, x):
        h = torch.nn.functional.linear(x, self.gate_up, self.gate_up_bias)
        return self.down_proj(self._op(h, 0.0))

    def extra_repr(self):
        return f"act={self.act_name}, gate_up={tuple(self.gate_up.shape)}"
