"""torch.nn modules over torch.ops.kite.

Gradients flow through the norms, the gated activations, GatedMLP, MLP, Attention (sdpa_backward)
and the losses (kite.torch.autograd); RotaryEmbedding differentiates through copies; MoE is for
inference (kite has no backward for topk_gating or fused_moe): called where a gradient is wanted
it raises kite.Unsupported.

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


def _promote(x, *ws):
    """x and the parameters in one dtype (kite takes one per call), torch's promotion of theirs:
    a bf16 activation (autocast) into a norm with f32 weights runs in f32 and gives f32, as
    transformers' Llama norm does; the casts are differentiable."""
    dts = {t.dtype for t in (x,) + ws if t is not None}
    if len(dts) == 1:
        return (x,) + ws
    dt = x.dtype
    for d in dts:
        dt = torch.promote_types(dt, d)
    return tuple(None if t is None else t.to(dt) for t in (x,) + ws)


def _rows(x):
    """x itself where its leading dims collapse into one row stride (kite's norms take rows with
    a stride), else a contiguous copy (a transposed view, as Gemma 3's per-head q / k norms get;
    the copy is differentiable)."""
    for i in range(x.dim() - 2):
        if x.shape[i] != 1 and x.stride(i) != x.stride(i + 1) * x.shape[i + 1]:
            return x.contiguous()
    return x


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
    residual add fused (residual <- x + residual, y = norm(residual), kite's pre-norm rule).
    Without a residual, an x whose dtype differs from the weight's is promoted with it (a bf16 x
    under autocast and f32 weights: f32)."""

    def __init__(self, hidden_size, eps=1e-6, offset=0.0, weight=True, dtype=None, device=None):
        super().__init__()
        self.eps, self.offset = float(eps), float(offset)
        init = torch.zeros if offset else torch.ones
        self.weight = nn.Parameter(init(hidden_size, dtype=dtype, device=device)) if weight else None

    def forward(self, x, residual=None):
        if residual is None:
            x, w = _promote(_rows(x), self.weight)
            return _ops.rms_norm(x, w, self.eps, self.offset)
        if _needs_grad(x, residual, self.weight):
            return _keep_residual(residual, *_autograd.add_rms_norm(x, residual, self.weight,
                                                                    self.eps, self.offset))
        y = _ops.add_rms_norm(x, residual, self.weight, self.eps, self.offset, 0)
        return y, residual

    def extra_repr(self):
        return f"eps={self.eps}, offset={self.offset}"


class LayerNorm(nn.Module):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dim (x promoted with the
    parameters where their dtypes differ, as RMSNorm's)."""

    def __init__(self, hidden_size, eps=1e-5, bias=True, dtype=None, device=None):
        super().__init__()
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.zeros(hidden_size, dtype=dtype, device=device)) if bias else None

    def forward(self, x, residual=None):
        if residual is None:
            return _ops.layer_norm(*_promote(_rows(x), self.weight, self.bias), self.eps)
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
    ("llama3", factor, low_freq_factor, high_freq_factor, original_max_pos) or ("yarn", factor,
    original_max_pos, rope_parameters) (kite.rope_cache).
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
    Differentiable in q, k and v (kite's sdpa_backward); the mask gets no gradient.
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


class _FirstHalf(torch.autograd.Function):
    """g[.., I] -> h[.., 2I], g in its first half (the second is filled by _SecondHalf): the gate
    and up projections' outputs meet in one buffer without a third [.., 2I] copy (torch.cat
    holds gate, up and their concatenation at once)."""

    @staticmethod
    def forward(ctx, g):
        h = g.new_empty(g.shape[:-1] + (2 * g.shape[-1],))
        h[..., :g.shape[-1]].copy_(g)
        ctx.half = g.shape[-1]
        return h

    @staticmethod
    def backward(ctx, dh):
        return dh[..., :ctx.half]


class _SecondHalf(torch.autograd.Function):
    """u[.., I] written into the second half of h[.., 2I] in place (_FirstHalf's result)."""

    @staticmethod
    def forward(ctx, h, u):
        h[..., u.shape[-1]:].copy_(u)
        ctx.mark_dirty(h)
        ctx.half = u.shape[-1]
        return h

    @staticmethod
    def backward(ctx, dh):
        # dh passes whole to _FirstHalf, which reads only the first half
        return dh, dh[..., ctx.half:]


class _GatedPrivate(torch.autograd.Function):
    """act_and_mul(h) for an h no one else holds (GatedMLP's concatenation of gate_proj's and
    up_proj's outputs): the backward writes the gradient over h (kite's gated_backward in place),
    so a layer's backward holds one [.., 2I] buffer instead of two, as Liger's SwiGLU does with
    its saved gate and up."""

    @staticmethod
    def forward(ctx, h, name):
        ctx.save_for_backward(h)
        ctx.act = _autograd._ID[name]
        return getattr(_ops, name)(h, 0.0)

    @staticmethod
    @_autograd._once("gated activation")
    def backward(ctx, dy):
        (h,) = ctx.saved_tensors
        _ops.gated_backward.out(h, dy.contiguous(), ctx.act, 0.0, h)
        return h, None


class GatedMLP(nn.Module):
    """down_proj(act(gate_proj(x)) * up_proj(x)) with kite's fused act-and-mul (silu_and_mul,
    gelu_and_mul, gelu_tanh_and_mul) between the projections; with gate_up_proj (one fused
    projection to [..., 2I], gate half first, as Phi-3's) instead of gate_proj and up_proj:
    down_proj(act_and_mul(gate_up_proj(x))), the fused output going to kite as it is.

    The projections are the model's own modules: they are called (so a PEFT/LoRA adapter
    wrapping one of them still applies) and their weights are read in place, never copied (nor
    split, for the fused one), so state_dict() keys (gate_proj.weight or gate_up_proj.weight,
    ...), checkpoints, optimizers, torch.compile and gradient checkpointing see the model's own
    parameters. Every parameter and the input get their gradients (the act-and-mul through kite's
    gated_backward). Made by kite.torch.patch from a transformers <Family>MLP; act is "silu",
    "gelu" or "gelu_tanh"."""

    def __init__(self, gate_proj, up_proj, down_proj, act="silu", gate_up_proj=None):
        super().__init__()
        if act not in _GATED:
            raise kite.InvalidArgument(f"GatedMLP: act must be one of {sorted(_GATED)}, got {act!r}")
        if (gate_up_proj is None) == (gate_proj is None or up_proj is None):
            raise kite.InvalidArgument("GatedMLP: give gate_proj and up_proj, or gate_up_proj")
        if gate_up_proj is None:
            self.gate_proj, self.up_proj = gate_proj, up_proj
        else:
            self.gate_up_proj = gate_up_proj
        self.down_proj = down_proj
        self.act_name = act
        self._op = _GATED[act]
        self._name = f"{act}_and_mul"

    def forward(self, x):
        if "gate_up_proj" in self._modules:  # its output may be held elsewhere (hooks, adapters)
            return self.down_proj(self._op(self.gate_up_proj(x), 0.0))
        g = self.gate_proj(x)
        if not (torch.is_grad_enabled() and g.requires_grad):
            return self.down_proj(self._op(torch.cat((g, self.up_proj(x)), dim=-1), 0.0))
        # training: gate, then up, copied into one [.., 2I] as each is made (at most three [.., I]
        # live, as with Liger's SwiGLU), whose gradient the backward writes over it
        h = _FirstHalf.apply(g)
        del g
        h = _SecondHalf.apply(h, self.up_proj(x))
        return self.down_proj(_GatedPrivate.apply(h, self._name))

    def extra_repr(self):
        return f"act={self.act_name}_and_mul"


class MLP(nn.Module):
    """down(act(up(x))): a plain (not gated) MLP with kite's activation between the model's own
    projections, held under the model's attribute names (names=(up, down), e.g. GPT-NeoX's
    ("dense_h_to_4h", "dense_4h_to_h")) so state_dict() keys stay the model's. The projections
    are called and read in place, as GatedMLP's; the activation differentiates through kite's
    activation_backward. act: "silu", "gelu", "gelu_tanh", "gelu_quick" or "relu"."""

    def __init__(self, up, down, act="gelu", names=("up_proj", "down_proj")):
        super().__init__()
        if act not in _ACTS:
            raise kite.InvalidArgument(f"MLP: act must be one of {sorted(_ACTS)}, got {act!r}")
        self.names, self.act_name = tuple(names), act
        self.add_module(self.names[0], up)
        self.add_module(self.names[1], down)

    def forward(self, x):
        up, down = self._modules[self.names[0]], self._modules[self.names[1]]
        return down(getattr(_ops, self.act_name)(up(x)))

    def extra_repr(self):
        return f"act={self.act_name}"


_GATED = {"silu": _ops.silu_and_mul, "gelu": _ops.gelu_and_mul,
          "gelu_tanh": _ops.gelu_tanh_and_mul}
_ACTS = ("silu", "gelu", "gelu_tanh", "gelu_quick", "relu")
_REDUCTIONS = {"none": 0, "sum": 1, "mean": 2}


def _ce_opts(ignore_index, lse_square_scale, label_smoothing, reduction, softcap):
    if reduction not in _REDUCTIONS:
        raise kite.InvalidArgument(f"cross-entropy: reduction must be 'none', 'sum' or 'mean', "
                                   f"got {reduction!r}")
    if not 0.0 <= float(label_smoothing) <= 1.0:
        raise kite.InvalidArgument(f"cross-entropy: label_smoothing must be in [0, 1], got "
                                   f"{label_smoothing!r}")
    if softcap is not None and not float(softcap) > 0.0:
        raise kite.InvalidArgument(f"cross-entropy: softcap must be > 0 or None, got {softcap!r}")
    return (int(ignore_index), float(label_smoothing), float(lse_square_scale),
            float(softcap or 0.0), _REDUCTIONS[reduction])


def _refuse(cls, what, why):
    raise kite.Unsupported(f"{cls}: {what} is not supported by kite ({why})")


def _loss_result(loss, reduction):
    return loss if reduction == "none" else loss.reshape(())


def _z_loss(lse, t, ignore_index, z, reduction):
    """Liger's z_loss (the lse_square_scale * lse^2 part of the loss, reduced like it), detached:
    it is already inside the loss, returned for logging."""
    valid = t != ignore_index
    per_row = torch.where(valid, z * lse.detach().float() ** 2, 0.0)
    if reduction == "none":
        return per_row
    total = per_row.sum()
    return total if reduction == "sum" else total / valid.sum().clamp(min=1)


class _CrossEntropyWithGrad(torch.autograd.Function):
    """Loss and dlogits in one pass over the logits (kite's cross_entropy_with_grad); the
    backward only scales the held dlogits. Only dlogits is kept, not the logits: the same memory
    as the forward / backward pair, and the logits can be freed after the forward."""

    @staticmethod
    def forward(ctx, logits, targets, opts):
        loss, lse, dl = _ops.cross_entropy_with_grad(logits, targets, *opts)
        ctx.save_for_backward(dl)
        ctx.grads_depend_on_inputs = True  # dl is a function of the logits
        ctx.mark_non_differentiable(lse)
        return loss, lse

    @staticmethod
    @_autograd._once("cross_entropy")
    def backward(ctx, g, _glse):
        (dl,) = ctx.saved_tensors
        if g is None:
            return None, None, None
        if g.numel() > 1:  # reduction none: dl is the gradient of sum(loss); g [N] per row
            return dl * g.reshape(-1, 1).to(dl.dtype), None, None
        # Scaled in place: dl is this node's own (backward runs once).
        return dl.mul_(g.reshape(()).to(dl.dtype)), None, None


class CrossEntropyLoss(nn.Module):
    """Cross-entropy over logits[..., V] and integer targets[...] on kite's cross_entropy, with
    Liger's LigerCrossEntropyLoss arguments in its order: weight (class weights: not supported,
    must be None), ignore_index, lse_square_scale (the z-loss coefficient on lse^2),
    label_smoothing, reduction ("mean" over the rows not ignored, "sum", "none"), softcap (Gemma
    2's logit cap; None off), return_z_loss (forward returns (loss, z_loss), z_loss detached),
    return_token_accuracy (not supported). forward(input, target) -> loss (f32: a scalar, or [N]
    for "none"). When a gradient is wanted the forward runs kite's cross_entropy_with_grad (loss
    and dlogits in one pass over the logits) and the backward scales dlogits by the upstream
    gradient; otherwise only the loss is computed."""

    def __init__(self, weight=None, ignore_index=-100, lse_square_scale=0.0, label_smoothing=0.0,
                 reduction="mean", softcap=None, return_z_loss=False,
                 return_token_accuracy=False):
        super().__init__()
        if weight is not None:
            _refuse("CrossEntropyLoss", "weight (class weights)",
                    "kite's cross_entropy weighs every class alike; pass weight=None")
        if return_token_accuracy:
            _refuse("CrossEntropyLoss", "return_token_accuracy=True", "no accuracy output")
        self.reduction, self.return_z_loss = reduction, bool(return_z_loss)
        self.opts = _ce_opts(ignore_index, lse_square_scale, label_smoothing, reduction, softcap)

    def forward(self, input, target):
        logits = input.reshape(-1, input.shape[-1])
        t = target.reshape(-1).to(torch.int32)
        if torch.is_grad_enabled() and logits.requires_grad:
            loss, lse = _CrossEntropyWithGrad.apply(logits, t, self.opts)
        else:
            loss, lse = _ops.cross_entropy(logits, t, *self.opts)
        loss = _loss_result(loss, self.reduction)
        if not self.return_z_loss:
            return loss
        return loss, _z_loss(lse, t, self.opts[0], self.opts[2], self.reduction)


class _FusedLinearCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w, bias, targets, opts):
        loss, dh, dw, db = _ops.fused_linear_cross_entropy(h, w, bias, targets, *opts)
        ctx.save_for_backward(dh, dw, db)
        ctx.has_bias = bias is not None
        ctx.grads_depend_on_inputs = True  # dh, dw, db are functions of h, w, bias
        return loss

    @staticmethod
    @_autograd._once("fused_linear_cross_entropy")
    def backward(ctx, g):
        dh, dw, db = ctx.saved_tensors
        if g.numel() > 1:  # reduction none: the gradients held are those of sum(loss)
            if not bool((g == g.reshape(-1)[0]).all()):
                raise kite.Unsupported("FusedLinearCrossEntropyLoss(reduction='none'): the "
                                       "backward takes a uniform upstream gradient (loss.sum())")
            g = g.reshape(-1)[0]
        g = g.reshape(()).to(dh.dtype)
        need = ctx.needs_input_grad
        # Scaled in place: the held gradients are this node's own (backward runs once), and a
        # new dw * g would be a second [V, H] tensor beside dw at the backward's memory peak.
        return (dh.mul_(g) if need[0] else None, dw.mul_(g) if need[1] else None,
                db.mul_(g) if ctx.has_bias and need[2] else None, None, None)


_FLCE_CHUNK = 256 << 20  # kite_flce_opts' default chunk_bytes


def _flce_forward_only(h, w, bias, t, opts):
    """The loss alone (no gradient is wanted): logits a block of rows at a time (kite's linear,
    at most chunk_bytes of them), kite's cross_entropy per block, reduced as the fused op
    reduces. The [N, V] logits never exist whole and no gradient is computed."""
    ignore_index, ls, z, cap, red, chunk_bytes = opts
    n, v = h.shape[0], w.shape[0]
    rows = max(1, (chunk_bytes or _FLCE_CHUNK) // max(1, v * h.element_size()))
    parts = []
    for r in range(0, n, rows):
        logits = _ops.linear(h[r:r + rows], w, bias)
        parts.append(_ops.cross_entropy(logits, t[r:r + rows], ignore_index, ls, z, cap, 0)[0])
    per_row = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float32, device=h.device)
    if red == 0:
        return per_row
    total = per_row.sum().reshape(1)
    if red == 1:
        return total
    return total / (t != ignore_index).sum().clamp(min=1)


class FusedLinearCrossEntropyLoss(nn.Module):
    """The lm head and cross-entropy in one (kite's fused_linear_cross_entropy: the [N, V] logits
    never exist whole), with Liger's LigerFusedLinearCrossEntropyLoss arguments in its order:
    ce_weight (class weights: not supported, must be None), ignore_index, lse_square_scale,
    label_smoothing, reduction, softcap, return_z_loss (not supported: the fused op keeps no
    lse), accum_dtype (None or torch.float32: kite accumulates dh and dw in f32 whatever the
    dtype), use_token_scaling and return_token_accuracy (not supported); then kite's own
    chunk_bytes (keyword; the scratch bound of the logits pieces, 0: kite's default).

    forward(lin_weight[V, H], input[..., H], target[...], bias=None) -> loss. When a gradient is
    wanted, the gradients of input, lin_weight and bias are computed in the forward and scaled by
    the upstream gradient (with reduction "none" that gradient must be uniform: loss.sum()); under
    no_grad / inference mode, or when nothing requires grad, only the loss is computed. Under
    torch.autocast the products run in the autocast dtype, as torch's linear would."""

    def __init__(self, ce_weight=None, ignore_index=-100, lse_square_scale=0.0,
                 label_smoothing=0.0, reduction="mean", softcap=None, return_z_loss=False,
                 accum_dtype=None, use_token_scaling=False, return_token_accuracy=False, *,
                 chunk_bytes=0):
        super().__init__()
        cls = "FusedLinearCrossEntropyLoss"
        if ce_weight is not None:
            _refuse(cls, "ce_weight (class weights)",
                    "kite's fused_linear_cross_entropy weighs every class alike; pass None")
        if return_z_loss:
            _refuse(cls, "return_z_loss=True",
                    "the fused op returns no lse; the z-loss is inside the loss")
        if accum_dtype not in (None, torch.float32):
            _refuse(cls, f"accum_dtype={accum_dtype}", "kite accumulates in float32")
        if use_token_scaling:
            _refuse(cls, "use_token_scaling=True", "no per-token scaling")
        if return_token_accuracy:
            _refuse(cls, "return_token_accuracy=True", "no accuracy output")
        self.reduction = reduction
        self.opts = _ce_opts(ignore_index, lse_square_scale, label_smoothing, reduction,
                             softcap) + (int(chunk_bytes),)

    def forward(self, lin_weight, input, target, bias=None):
        h = input.reshape(-1, input.shape[-1])
        t = target.reshape(-1).to(torch.int32)
        w = lin_weight
        dev = h.device.type
        if torch.is_autocast_enabled(dev):
            dtype = torch.get_autocast_dtype(dev)
            h, w = h.to(dtype), w.to(dtype)
            bias = None if bias is None else bias.to(dtype)
        if torch.is_grad_enabled() and any(x is not None and x.requires_grad
                                           for x in (h, w, bias)):
            loss = _FusedLinearCE.apply(h, w, bias, t, self.opts)
        else:
            loss = _flce_forward_only(h, w, bias, t, self.opts)
        return _loss_result(loss, self.reduction)
