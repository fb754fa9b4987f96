"""Gradients through kite's ops: torch.library.register_autograd for the functional forward ops
that have a kite backward, and autograd Functions for the forms that update in place (rope,
the residual add of add_rms_norm / add_layer_norm), which register_autograd does not take.

Registered (imported by kite.torch): the activations (silu, gelu, gelu_tanh, gelu_quick, relu)
-> activation_backward; the gated activations -> gated_backward; rms_norm -> rms_norm_backward;
layer_norm -> layer_norm_backward; softmax -> softmax_backward (from the saved output);
embedding -> embedding_backward (the table's gradient); cross_entropy -> cross_entropy_backward
(the loss's gradient; lse is a by-product and gets none).

Functions: rope(q, k, positions, cos_sin, rot_dim, style) returns rotated copies (the backward
is rope_backward); add_rms_norm / add_layer_norm(x, residual, ...) return (y, s) with s = x +
residual a new tensor (the backward: the norm's backward at s plus the gradient reaching s).
"""
import torch

from .. import _C

_ops = torch.ops.kite
_ID = {n: i for i, n in enumerate(_C.op_names())}


def _c(t):
    return t.contiguous()


# ---- activations -------------------------------------------------------------------------------
def _save_x(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _act_backward(name):
    act = _ID[name]

    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return _ops.activation_backward(x, _c(dy), act)
    return backward


def _gated_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.limit = inputs[1]


def _gated_backward(name):
    act = _ID[name]

    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return _ops.gated_backward(x, _c(dy), act, ctx.limit), None
    return backward


# ---- norms -------------------------------------------------------------------------------------
def _rms_setup(ctx, inputs, output):
    x, w, eps, offset = inputs
    ctx.save_for_backward(x, w)
    ctx.eps, ctx.offset = eps, offset


def _rms_backward(ctx, dy):
    x, w = ctx.saved_tensors
    dx, dw = _ops.rms_norm_backward(x, w, _c(dy), ctx.eps, ctx.offset)
    return dx, (dw if w is not None and ctx.needs_input_grad[1] else None), None, None


def _ln_setup(ctx, inputs, output):
    x, w, b, eps = inputs
    ctx.save_for_backward(x, w)
    ctx.eps, ctx.has_b = eps, b is not None


def _ln_backward(ctx, dy):
    x, w = ctx.saved_tensors
    dx, dw, db = _ops.layer_norm_backward(x, w, _c(dy), ctx.eps)
    need = ctx.needs_input_grad
    return (dx, dw if w is not None and need[1] else None,
            db if ctx.has_b and need[2] else None, None)


# ---- softmax, embedding ------------------------------------------------------------------------
def _softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(output)
    ctx.scale = inputs[1]


def _softmax_backward(ctx, dy):
    (y,) = ctx.saved_tensors
    return _ops.softmax_backward(y, _c(dy), ctx.scale), None


def _embedding_setup(ctx, inputs, output):
    ids, table = inputs
    ctx.save_for_backward(ids)
    ctx.rows = table.shape[0]


def _embedding_backward(ctx, dy):
    (ids,) = ctx.saved_tensors
    return None, _ops.embedding_backward(ids, _c(dy), ctx.rows)


# ---- cross-entropy -----------------------------------------------------------------------------
def _ce_setup(ctx, inputs, output):
    logits, targets = inputs[:2]
    ctx.opts = tuple(inputs[2:])
    ctx.save_for_backward(logits, targets, output[1])
    ctx.mark_non_differentiable(output[1])


def _ce_backward(ctx, dloss, dlse):
    logits, targets, lse = ctx.saved_tensors
    if dloss is None:
        return (None,) * 7
    dl = _ops.cross_entropy_backward(logits, targets, lse, _c(dloss.float()), *ctx.opts)
    return (dl,) + (None,) * 6


def _register(register_autograd):
    """register_autograd(name, backward, setup_context): kite.torch's, over its library."""
    for name in ("silu", "gelu", "gelu_tanh", "gelu_quick", "relu"):
        register_autograd(name, _act_backward(name), _save_x)
    for name in ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"):
        register_autograd(name, _gated_backward(name), _gated_setup)
    for name, bw, setup in (("rms_norm", _rms_backward, _rms_setup),
                            ("layer_norm", _ln_backward, _ln_setup),
                            ("softmax", _softmax_backward, _softmax_setup),
                            ("embedding", _embedding_backward, _embedding_setup),
                            ("cross_entropy", _ce_backward, _ce_setup)):
        register_autograd(name, bw, setup)


# ---- in-place forms ----------------------------------------------------------------------------
class _Rope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, positions, cos_sin, rot_dim, style):
        q = q.clone(memory_format=torch.contiguous_format)
        k = None if k is None else k.clone(memory_format=torch.contiguous_format)
        _ops.rope(q, k, positions, cos_sin, rot_dim, style)
        ctx.save_for_backward(positions, cos_sin)
        ctx.rot_dim, ctx.style, ctx.has_k = rot_dim, style, k is not None
        ctx.q_meta = (q.shape, q.dtype, q.device)
        return q, k

    @staticmethod
    def backward(ctx, dq, dk):
        positions, cos_sin = ctx.saved_tensors
        if dq is None:  # the rotated q unused: its gradient is zero, and so is q's
            shape, dtype, device = ctx.q_meta
            dq = torch.zeros(shape, dtype=dtype, device=device)
        else:
            dq = dq.clone(memory_format=torch.contiguous_format)
        if ctx.has_k:
            dk = None if dk is None else dk.clone(memory_format=torch.contiguous_format)
        _ops.rope_backward(dq, dk, positions, cos_sin, ctx.rot_dim, ctx.style)
        return dq, dk, None, None, None, None


def rope(q, k, positions, cos_sin, rot_dim, style=0):
    """Rotated copies (q', k') of q[T, Hq, D] and k[T, Hkv, D] (k may be None), with gradients
    through kite's rope_backward."""
    return _Rope.apply(q, k, positions, cos_sin, rot_dim, style)


class _AddNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, residual, w, b, eps, offset, kind):
        s = residual.clone(memory_format=torch.contiguous_format)
        if kind == "rms":
            y = _ops.add_rms_norm(x, s, w, eps, offset, 0)
        else:
            y = _ops.add_layer_norm(x, s, w, b, eps, 0)
        ctx.save_for_backward(s, w)
        ctx.eps, ctx.offset, ctx.kind, ctx.has_b = eps, offset, kind, b is not None
        return y, s

    @staticmethod
    def backward(ctx, dy, ds):
        s, w = ctx.saved_tensors
        dw = db = None
        if dy is None:
            dx = ds
        else:
            if ctx.kind == "rms":
                dx, dw = _ops.rms_norm_backward(s, w, _c(dy), ctx.eps, ctx.offset)
            else:
                dx, dw, db = _ops.layer_norm_backward(s, w, _c(dy), ctx.eps)
            if ds is not None:
                dx = dx + ds
        need = ctx.needs_input_grad
        return (dx, dx, dw if w is not None and need[2] else None,
                db if ctx.has_b and need[3] else None, None, None, None)


def add_rms_norm(x, residual, w, eps=1e-6, offset=0.0):
    """(y, s): s = x + residual (a new tensor), y = rms_norm(s); differentiable (pre rule)."""
    return _AddNorm.apply(x, residual, w, None, eps, offset, "rms")


def add_layer_norm(x, residual, w, b, eps=1e-5):
    """(y, s): s = x + residual (a new tensor), y = layer_norm(s); differentiable (pre rule)."""
    return _AddNorm.apply(x, residual, w, b, eps, 0.0, "ln")
