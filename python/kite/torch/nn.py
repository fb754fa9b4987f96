"""torch.nn modules over torch.ops.kite.

Gradients flow through the norms, the gated activations and the losses (kite.torch.autograd);
RotaryEmbedding differentiates through copies; Attention and MoE are for inference (no kite
backward for sdpa or fused_moe).

Weights are stored in the module's dtype; each op needs its tensors in one dtype, so cast the
module with .to(dtype) together with its inputs.
"""
import math

import torch
from torch import nn

import kite

from . import autograd as _autograd

_ops = torch.ops.kite


def _needs_grad(*ts):
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in ts)


def _keep_residual(residual, y, s):
    """The differentiable add-and-norm made s a new tensor: write it back into residual (the
    in-place contract), tracked by autograd; a leaf that requires grad cannot be written, and
    gets the new tensor returned instead."""
    if residual.requires_grad and residual.is_leaf:
        return y, s
    residual.copy_(s)
    return y, residual


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
        if _needs_grad(x, residual, self.weight):
            return _keep_residual(residual, *_autograd.add_rms_norm(x, residual, self.weight,
                                                                    self.eps, self.offset))
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
        if _needs_grad(x, residual, self.weight, self.bias):
            return _keep_residual(residual, *_autograd.add_layer_norm(x, residual, self.weight,
                                                                      self.bias, self.eps))
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
    returns them (when a gradient is wanted: returns rotated copies, differentiable); q/k may
    also be [T, H * D] (viewed as heads).
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
        if _needs_grad(q, k):  # rotated copies, differentiable
            qr, kr = _autograd.rope(qv, kv, positions, self.cos_sin, self.rot_dim, self.style)
            return qr.view(q.shape), None if k is None else kr.view(k.shape)
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


_REDUCTIONS = {"none": 0, "sum": 1, "mean": 2}


def _ce_opts(ignore_index, lse_square_scale, label_smoothing, reduction, softcap):
    if reduction not in _REDUCTIONS:
        raise kite.InvalidArgument(f"cross-entropy: reduction must be 'none', 'sum' or 'mean', "
                                   f"got {reduction!r}")
    return (int(ignore_index), float(label_smoothing), float(lse_square_scale),
            float(softcap or 0.0), _REDUCTIONS[reduction])


def _loss_result(loss, reduction):
    return loss if reduction == "none" else loss.reshape(())


class CrossEntropyLoss(nn.Module):
    """Cross-entropy over logits[..., V] and integer targets[...] on kite's cross_entropy, with
    Liger's arguments: ignore_index, lse_square_scale (the z-loss coefficient on lse^2),
    label_smoothing, reduction ("mean" over the rows not ignored, "sum", "none"), softcap
    (Gemma 2's logit cap; None off). forward(input, target) -> loss (f32: a scalar, or [N] for
    "none"); the gradient runs through kite's cross_entropy_backward."""

    def __init__(self, ignore_index=-100, lse_square_scale=0.0, label_smoothing=0.0,
                 reduction="mean", softcap=None):
        super().__init__()
        self.reduction = reduction
        self.opts = _ce_opts(ignore_index, lse_square_scale, label_smoothing, reduction, softcap)

    def forward(self, input, target):
        logits = input.reshape(-1, input.shape[-1])
        t = target.reshape(-1).to(torch.int32)
        loss, _ = _ops.cross_entropy(logits, t, *self.opts)
        return _loss_result(loss, self.reduction)


class _FusedLinearCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w, bias, targets, opts):
        loss, dh, dw, db = _ops.fused_linear_cross_entropy(h, w, bias, targets, *opts)
        ctx.save_for_backward(dh, dw, db)
        ctx.has_bias = bias is not None
        return loss

    @staticmethod
    def backward(ctx, g):
        dh, dw, db = ctx.saved_tensors
        if g.numel() > 1:  # reduction none: the gradients held are those of sum(loss)
            if not bool((g == g.reshape(-1)[0]).all()):
                raise kite.Unsupported("FusedLinearCrossEntropyLoss(reduction='none'): the "
                                       "backward takes a uniform upstream gradient (loss.sum())")
            g = g.reshape(-1)[0]
        g = g.reshape(()).to(dh.dtype)
        return (dh * g, dw * g, db * g if ctx.has_bias else None, None, None)


class FusedLinearCrossEntropyLoss(nn.Module):
    """The lm head and cross-entropy in one (kite's fused_linear_cross_entropy: the [N, V] logits
    never exist whole), with Liger's arguments (as CrossEntropyLoss's) and its call
    forward(lin_weight[V, H], input[..., H], target[...], bias=None) -> loss. The gradients of
    input, lin_weight and bias are computed in the forward and scaled by the upstream gradient;
    with reduction "none" that gradient must be uniform (loss.sum()). chunk_bytes bounds the
    scratch of the logits pieces (0: kite's default)."""

    def __init__(self, ignore_index=-100, lse_square_scale=0.0, label_smoothing=0.0,
                 reduction="mean", softcap=None, chunk_bytes=0):
        super().__init__()
        self.reduction = reduction
        self.opts = _ce_opts(ignore_index, lse_square_scale, label_smoothing, reduction,
                             softcap) + (int(chunk_bytes),)

    def forward(self, lin_weight, input, target, bias=None):
        h = input.reshape(-1, input.shape[-1])
        t = target.reshape(-1).to(torch.int32)
        loss = _FusedLinearCE.apply(h, lin_weight, bias, t, self.opts)
        return _loss_result(loss, self.reduction)
