"""Gradients through kite's ops: torch.library.register_autograd for the functional forward ops
that have a kite backward, and autograd Functions for the forms that update in place (rope,
the residual add of add_rms_norm / add_layer_norm), which register_autograd does not take.

Registered (imported by kite.torch): every activation of kite's table (silu, gelu, ...)
-> activation_backward; the gated activations -> gated_backward; rms_norm -> rms_norm_backward;
layer_norm -> layer_norm_backward; softmax -> softmax_backward (from the saved output);
embedding -> embedding_backward (the table's gradient); cross_entropy -> cross_entropy_backward
(the loss's gradient; lse is a by-product and gets none); moe_aux_loss -> moe_aux_loss_backward
(the router logits' gradient; ids and mask are constants); sdpa -> sdpa_backward and
sdpa_varlen -> sdpa_varlen_backward (gradients of q, k, v and of the sinks, f32 [Hq], when they
are given and require grad: the forward computes its lse when a gradient is wanted and saves it;
the mask gets no gradient, and a mask that requires grad raises kite.Unsupported rather than
getting a silent zero).

Functions: rope(q, k, positions, cos_sin, rot_dim, style) returns rotated copies (the backward
is rope_backward); add_rms_norm / add_layer_norm(x, residual, ...) return (y, s) with s = x +
residual a new tensor (the backward: the norm's backward at s plus the gradient reaching s).

No double backward: kite's backward ops are not differentiable themselves, so every backward here
runs once (under no_grad); with create_graph=True its results carry a node that raises an error
naming kite when differentiated, instead of a second-order gradient silently missing terms.

The functional ops with no kite backward (the paged attention ops, linear, group_gemm,
topk_gating, fused_moe, moe_route, fused_moe_ex, the quantized and sampling ops, the backward ops
themselves, and the
in-place ops called directly), and the .out forms of every op (as torch's out= ops), raise
kite.Unsupported when called on tensors that require grad with grad mode on, rather than
returning results cut off from the graph; under no_grad, inference mode or on tensors that need
no gradient they run as before (no Python frame on that path).
"""
import functools

import torch
from torch._C import _functions as _torch_functions

from .. import Unsupported

from .. import _C

_ops = torch.ops.kite
_ID = {n: i for i, n in enumerate(_C.op_names())}


def _c(t):
    return t.contiguous()


def _double_backward_error(name):
    return (f"kite.torch: the backward of {name} runs kite's backward ops, which have no backward "
            "themselves: a second derivative (create_graph=True, then differentiating the "
            "gradients) is not supported through it").encode()


def _once(name):
    """A backward(ctx, *grads) that runs once: under no_grad; when a graph of the gradients is
    being built (create_graph=True) and anything it read requires grad (or the Function set
    ctx.grads_depend_on_inputs: gradients computed in its forward), its tensor results get a
    node that raises if differentiated (torch's once_differentiable, with the
    saved tensors counted too, so a second derivative never silently drops their terms)."""
    def wrap(fn):
        @functools.wraps(fn)
        def backward(ctx, *grads):
            if not torch.is_grad_enabled():
                return fn(ctx, *grads)
            saved = getattr(ctx, "saved_tensors", ())
            needs = getattr(ctx, "grads_depend_on_inputs", False) or any(
                isinstance(t, torch.Tensor) and t.requires_grad for t in grads + tuple(saved))
            with torch.no_grad():
                out = fn(ctx, *grads)
            if not needs:
                return out
            single = not isinstance(out, tuple)
            outs = (out,) if single else out
            idx = [i for i, t in enumerate(outs) if isinstance(t, torch.Tensor)]
            if not idx:
                return out
            err = _torch_functions.DelayedError(_double_backward_error(name), len(idx))
            marked = err(*[outs[i].detach().requires_grad_(True) for i in idx])
            if isinstance(marked, torch.Tensor):
                marked = (marked,)
            outs = list(outs)
            for i, t in zip(idx, marked):
                outs[i] = t
            return outs[0] if single else tuple(outs)
        return backward
    return wrap


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


# ---- the MoE load-balancing loss ---------------------------------------------------------------
def _aux_setup(ctx, inputs, output):
    logits, ids, mask = inputs
    ctx.has_mask = mask is not None
    ctx.save_for_backward(logits, ids, *((mask,) if ctx.has_mask else ()))


def _aux_backward(ctx, dloss):
    logits, ids, *mask = ctx.saved_tensors
    dl = _ops.moe_aux_loss_backward(logits, ids, mask[0] if ctx.has_mask else None,
                                    _c(dloss.float()))
    return dl, None, None


# ---- attention ---------------------------------------------------------------------------------
def _attn_backward(op, inputs, sinks, want_dsinks):
    """op (kite's sdpa_backward or sdpa_varlen_backward) on inputs (every argument before sinks):
    (dq, dk, dv, dsinks), dsinks None unless wanted (then through the .out form, which computes
    it)."""
    if not want_dsinks:
        return tuple(op(*inputs, sinks)) + (None,)
    q, k, v = inputs[:3]
    dq, dk, dv = (torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))
    dsinks = torch.empty_like(sinks, memory_format=torch.contiguous_format)
    op.out(*inputs, sinks, dq, dk, dv, dsinks)
    return dq, dk, dv, dsinks


class _Sdpa(torch.autograd.Function):
    """sdpa with its lse kept: the forward runs kite's sdpa.out (o and lse), the backward
    kite's sdpa_backward from them (and the sinks' gradient when they require one)."""

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, softcap, window_left, gqa, causal, sinks):
        o = torch.empty_like(q, memory_format=torch.contiguous_format)
        lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
        opts = (scale, softcap, window_left, gqa, causal)
        _ops.sdpa.out(q, k, v, mask, *opts, sinks, o, lse)
        ctx.save_for_backward(q, k, v, mask, o, lse, sinks)
        ctx.opts = opts
        return o

    @staticmethod
    @_once("sdpa")
    def backward(ctx, do):
        q, k, v, mask, o, lse, sinks = ctx.saved_tensors
        dq, dk, dv, dsinks = _attn_backward(_ops.sdpa_backward,
                                            (q, k, v, mask, *ctx.opts, o, lse, _c(do)), sinks,
                                            sinks is not None and ctx.needs_input_grad[9])
        return (dq, dk, dv) + (None,) * 6 + (dsinks,)


class _SdpaVarlen(torch.autograd.Function):
    """sdpa_varlen likewise (lse [Tq, Hq]), backward by sdpa_varlen_backward."""

    @staticmethod
    def forward(ctx, q, k, v, cu_q, cu_k, max_q, max_k, scale, softcap, window_left, gqa, causal,
                sinks):
        o = torch.empty_like(q, memory_format=torch.contiguous_format)
        lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)
        args = (cu_q, cu_k, max_q, max_k, scale, softcap, window_left, gqa, causal)
        _ops.sdpa_varlen.out(q, k, v, *args, sinks, o, lse)
        ctx.save_for_backward(q, k, v, cu_q, cu_k, o, lse, sinks)
        ctx.scalars = args[2:]
        return o

    @staticmethod
    @_once("sdpa_varlen")
    def backward(ctx, do):
        q, k, v, cu_q, cu_k, o, lse, sinks = ctx.saved_tensors
        dq, dk, dv, dsinks = _attn_backward(
            _ops.sdpa_varlen_backward, (q, k, v, cu_q, cu_k, *ctx.scalars, o, lse, _c(do)), sinks,
            sinks is not None and ctx.needs_input_grad[12])
        return (dq, dk, dv) + (None,) * 9 + (dsinks,)


def _function_autograd(op, name, function, no_grad_args=()):
    """The Python half of the Autograd-key kernel of a functional op whose gradient comes from an
    autograd Function (the C kernel in front of it runs the op itself when no gradient is
    wanted): the Function when one is; the arguments at no_grad_args (a mask) get none, and
    requiring one raises kite.Unsupported."""
    C = torch._C
    # the dispatcher leaves out trailing arguments equal to their defaults
    defaults = [a.default_value if a.has_default_value() else None for a in op._schema.arguments]

    def autograd_impl(keyset, *args):
        if C.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                       for a in args):
            args = args + tuple(defaults[len(args):])
            for i in no_grad_args:
                if isinstance(args[i], torch.Tensor) and args[i].requires_grad:
                    raise Unsupported(
                        f"torch.ops.kite.{name}: the mask requires grad, and kite's "
                        f"{name}_backward gives the mask no gradient: detach the mask (or build "
                        "it under torch.no_grad())")
            return function.apply(*args)
        with C._AutoDispatchBelowAutograd():
            return op.redispatch(keyset & C._after_autograd_keyset, *args)
    return autograd_impl


def _register_functions(register):
    """register(name, autograd_impl): the ops differentiated by an autograd Function of this
    module (their lse is an optional result that the functional op does not compute). Returns
    the names registered."""
    register("sdpa", _function_autograd(_ops.sdpa.default, "sdpa", _Sdpa, no_grad_args=(3,)))
    register("sdpa_varlen", _function_autograd(_ops.sdpa_varlen.default, "sdpa_varlen",
                                               _SdpaVarlen))
    return ["sdpa", "sdpa_varlen"]


def _register(register_autograd):
    """register_autograd(name, backward, setup_context): kite.torch's, over its library.
    Returns the names registered."""
    done = []
    # every activation and gated activation of kite's table (its families' own functions)
    family = {n: (f, tuple(k for k, _ in args)) for n, args, _, f in _C.ops()}
    for name in [n for n, fk in family.items() if fk == ("activation", ("T", "W"))]:
        register_autograd(name, _once(name)(_act_backward(name)), _save_x)
        done.append(name)
    for name in [n for n, fk in family.items() if fk == ("gated", ("T", "f", "W"))]:
        register_autograd(name, _once(name)(_gated_backward(name)), _gated_setup)
        done.append(name)
    for name, bw, setup in (("rms_norm", _rms_backward, _rms_setup),
                            ("layer_norm", _ln_backward, _ln_setup),
                            ("softmax", _softmax_backward, _softmax_setup),
                            ("embedding", _embedding_backward, _embedding_setup),
                            ("cross_entropy", _ce_backward, _ce_setup),
                            ("moe_aux_loss", _aux_backward, _aux_setup)):
        register_autograd(name, _once(name)(bw), setup)
        done.append(name)
    return done


def no_backward(op, name):
    """The Python half of the Autograd-key kernel of a functional op with no kite backward (the
    C kernel in front of it runs the op itself when no gradient is wanted): raises when one is,
    otherwise (tracing modes, tensor subclasses) redispatches below autograd."""
    C = torch._C

    def autograd_impl(keyset, *args):
        if C.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                       for a in args):
            raise Unsupported(
                f"torch.ops.kite.{name}: kite has no backward for this op, and an input requires "
                "grad: call it under torch.no_grad() or on tensors that need no gradient "
                "(detach them), or use torch's op where a gradient must flow")
        with C._AutoDispatchBelowAutograd():
            return op.redispatch(keyset & C._after_autograd_keyset, *args)
    return autograd_impl


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
    @_once("rope")
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
    @_once("add_rms_norm / add_layer_norm")
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
