"""kite's rope standing in for a transformers modeling module's apply_rotary_pos_emb (patched
module-wide by kite.torch.patch, restored when the last patched model using it is unpatched),
and the probe that decides, for a family patch has no entry for, whether its function is the
rotation kite computes."""
import weakref

import torch

from .families import close

_ops = torch.ops.kite
_rope_users = {}  # modeling module name -> WeakSet of the patched models that use kite's rope
_saved = {}       # modeling module name -> its own apply_rotary_pos_emb


def _kite_apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1, **kwargs):
    """HF's apply_rotary_pos_emb (neox pairs) on kite's rope. q[B, Hq, S, D], k[B, Hkv, S, D]
    (views of a fused qkv allowed), cos/sin[B or 1, S, R] (halves repeated), R <= D: the first R
    dims of each head rotate, the rest pass through (partial rotary, kite's rot_dim). kite reads
    one cos/sin row per token, so the rows are the model's own cos/sin (any base, per layer type
    or scaled) and the positions index them."""
    if (unsqueeze_dim != 1 or q.dim() != 4 or cos.dim() != 3 or cos.shape[-1] > q.shape[-1]
            or cos.shape[-1] % 2):
        return _orig_apply(q, k, cos, sin, unsqueeze_dim)
    B, Hq, S, D = q.shape
    rot = cos.shape[-1]
    cos_sin, pos = _table(cos, sin, B)
    qq = q.transpose(1, 2).reshape(B * S, Hq, D)
    kk = k.transpose(1, 2).reshape(B * S, k.shape[1], D)
    if torch.is_grad_enabled() and (qq.requires_grad or kk.requires_grad):
        from .autograd import rope as rope_fn  # rotated copies, differentiable
        qq, kk = rope_fn(qq, kk, pos, cos_sin, rot, 0)
    else:
        _ops.rope(qq, kk, pos, cos_sin, rot, 0)
    return qq.view(B, S, Hq, D).transpose(1, 2), kk.view(B, S, k.shape[1], D).transpose(1, 2)


# The last (cos, sin) turned into kite's table: the decoder layers of one forward share the
# model's cos / sin tensors, so the table is made once per forward instead of once per layer (in
# training each layer's rope keeps its table for the backward: one [S, R] f32 table per layer
# otherwise). Keyed by the tensors themselves (held here, so their memory cannot be reused under
# a stale key) and their version counters (an in-place update misses).
_last_table = None


def _table(cos, sin, B):
    """kite's rope inputs for HF's cos/sin[Bc, S, R]: cos_sin[Bc * S, R] f32 (the halves' first
    copies side by side) and positions[B * S] int32 indexing its rows."""
    global _last_table
    # inference tensors keep no version counter: no reuse for them (nor while compiling)
    cache = not (torch.compiler.is_compiling() or cos.is_inference() or sin.is_inference())
    key = (cos, sin, cos._version, sin._version, B) if cache else None
    hit = _last_table
    if cache and hit is not None and hit[0] is cos and hit[1] is sin and hit[2:5] == key[2:]:
        return hit[5], hit[6]
    Bc, S, rot = cos.shape
    half = rot // 2  # Bc: 1 when every sequence has the same positions
    cos_sin = torch.cat((cos[..., :half], sin[..., :half]), dim=-1).reshape(Bc * S, rot)
    cos_sin = cos_sin.to(torch.float32).contiguous()
    pos = torch.arange(Bc * S, dtype=torch.int32, device=cos.device)
    if Bc != B:
        pos = pos.repeat(B)
    if cache:
        _last_table = key + (cos_sin, pos)
    return cos_sin, pos


def _orig_apply(q, k, cos, sin, unsqueeze_dim=1):
    """transformers' apply_rotary_pos_emb (neox pairs, the first cos.shape[-1] dims rotating)."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    r = cos.shape[-1]

    def rot(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)
    qr, kr = q[..., :r], k[..., :r]
    return (torch.cat((qr * cos + rot(qr) * sin, q[..., r:]), dim=-1),
            torch.cat((kr * cos + rot(kr) * sin, k[..., r:]), dim=-1))


def rope_ok(fn):
    """A modeling module's apply_rotary_pos_emb computes transformers' neox rotation (checked on
    probe inputs: a full rotary and, where the function takes one, a partial one), so kite's rope
    may stand in for it."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 4, 5, 8, generator=g), torch.randn(2, 2, 5, 8, generator=g)
    for r in (8, 4):
        ang = torch.randn(1, 5, r // 2, generator=g)
        cos, sin = torch.cat((ang, ang), -1).cos(), torch.cat((ang, ang), -1).sin()
        try:
            with torch.no_grad():
                got = fn(q.clone(), k.clone(), cos, sin)
        except Exception:  # another signature or layout (or no partial rotary: never given one)
            if r == 8:
                return False
            continue
        want = _orig_apply(q, k, cos, sin)
        if not (isinstance(got, tuple) and len(got) == 2 and all(map(close, got, want))):
            return False
    return True


def install(mod, model):
    """mod.apply_rotary_pos_emb -> kite's, model counted among its users."""
    if mod.apply_rotary_pos_emb is not _kite_apply_rotary_pos_emb:
        _saved[mod.__name__] = mod.apply_rotary_pos_emb
        mod.apply_rotary_pos_emb = _kite_apply_rotary_pos_emb
    _rope_users.setdefault(mod.__name__, weakref.WeakSet()).add(model)


def last_user(mod, model):
    """No patched model but model uses kite's rope in mod."""
    users = _rope_users.get(mod.__name__)
    return not users or all(u is model for u in users)


def release(mod, model):
    """model no longer uses kite's rope in mod; True where mod's own function came back (no
    patched model left using it)."""
    users = _rope_users.get(mod.__name__)
    if users is not None:
        users.discard(model)
    if users:
        return False
    restore(mod)
    return True


def restore(mod):
    global _last_table
    if getattr(mod, "apply_rotary_pos_emb", None) is _kite_apply_rotary_pos_emb:
        mod.apply_rotary_pos_emb = _saved.get(mod.__name__, _orig_apply)
    _last_table = None  # the last cos / sin and their table are not held past an unpatch
