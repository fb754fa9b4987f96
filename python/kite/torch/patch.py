"""kite.torch.patch(model) swaps, in place, the parts of a Hugging Face transformers model that kite
has ops for; kite.torch.unpatch(model) puts the originals back.

Known families (config.model_type): the entries of kite.torch.families.TABLE (llama, mistral,
qwen2, qwen3, gemma, gemma2, gemma3_text, phi3, olmo2, granite, smollm3, gpt_neox, mixtral,
qwen2_moe), each saying its norm form, MLP layout, rotary variant and quirks, and qwen3_moe, gpt_oss,
deepseek_v3 (their routers, experts, gpt-oss's norm, DeepSeek's interleaved rope and which
attention stays transformers': patch_moe.py). What is swapped:

- norms: every <Family>RMSNorm module -> kite.torch.nn.RMSNorm sharing its weight (Gemma's
  1 + w form as offset 1), and for a LayerNorm family every nn.LayerNorm ->
  kite.torch.nn.LayerNorm sharing its weight and bias; differentiable (kite's rms_norm_backward /
  layer_norm_backward); QK-norms and post-norms are such modules too;
- MLP: a <Family>MLP (gate_proj, up_proj, down_proj, or Phi-3's fused gate_up_proj and down_proj)
  -> kite.torch.nn.GatedMLP holding the same modules: they are called (a LoRA adapter on them
  applies) and read in place (the fused weight is neither copied nor split), then kite's
  silu_and_mul / gelu_and_mul / gelu_tanh_and_mul, differentiable (kite's gated_backward); a plain
  MLP (GPT-NeoX's up -> act -> down) -> kite.torch.nn.MLP with kite's activation
  (activation_backward);
- rotary embedding: the family's apply_rotary_pos_emb -> kite's rope, reading the cos and sin
  the model's own rotary module computed (so every HF scaling type, per-layer-type bases and
  partial rotary (kite's rot_dim) are honoured; NoPE layers never call it); rotated copies
  with kite's rope_backward when a gradient is wanted, in place otherwise. The function is
  module-wide, so other models of the family in the process take kite's rope too, until the last
  patched model of the family is unpatched;
- loss (patch_loss.py): on a <Family>ForCausalLM, model.forward(labels=...) in training mode
  computes the loss with kite's fused linear cross-entropy from the last hidden states and
  lm_head's weight (the [tokens, vocab] logits never exist; outputs.logits is None), as
  transformers' ForCausalLMLoss would (labels shifted, ignore_index, num_items_in_batch,
  shift_labels; the final logit softcap; Granite's logits_scaling; Mixtral / Qwen2-MoE's router
  aux loss added as the model adds it); in eval mode, without labels, with a custom
  loss_function or a wrapped lm_head, the model's own forward runs;
- the attention core: "kite" registered in transformers' AttentionInterface (with sdpa's mask
  function) and selected, running kite's sdpa (GQA, causal, bool masks, sliding window, softcap,
  the family's scale), differentiable (kite's sdpa_backward); a call with attention dropout runs
  the same attention in torch ops (kite's sdpa has no dropout);
- MoE (patch_moe.py, for every MoE family): the router (<Family>TopKRouter) -> kite's moe_route
  (Mixtral / Qwen2-MoE: its softmax form, which kite.h names topk_gating), the experts
  (<Family>Experts, gate_up_proj [E, 2I, H], down_proj [E, H, I]) -> kite's fused_moe (gpt-oss's
  biased, clamped, transposed experts: fused_moe_ex).

A model of another family is patched in partial mode: its <X>RMSNorm modules whose output is
kite's rms_norm (offset 0 or 1) on a probe input, and its modeling module's
apply_rotary_pos_emb where it computes transformers' rotation on probe inputs; its MLPs,
attention and loss stay torch's and the report says so. One with neither raises
kite.Unsupported naming the families kite knows.

Training: every module installed has a correct backward for every parameter and input, or is not
installed. Attention trains on kite (sdpa_backward) in both modes (on CUDA only with
attention="kite": by default a call there that needs a gradient runs torch's SDPA, whose flash /
cuDNN backward is faster than kite's today, and patch says so); with attention dropout > 0 (a
model in training mode whose config has attention_dropout) its calls run the same attention in
torch ops (scaled_dot_product_attention, or the explicit softmax with a softcap), which patch
reports. kite has no backward for moe_route, fused_moe or fused_moe_ex, so on a model in training
mode (model.training) patch leaves the MoE router and experts to torch and says so in the report.
On a model in eval mode whose parameters require grad (as from_pretrained leaves them),
they are installed, and a call that needs a gradient (grad mode on and an input or parameter
requiring grad) runs the model's original router and experts. No weight is copied: state_dict() keys,
save_pretrained / from_pretrained, PEFT adapters, optimizers, torch.compile and gradient
checkpointing see the model's own parameters.

Returns a kite.torch.families.Report: the list of what was replaced
("model.layers.0.input_layernorm: LlamaRMSNorm -> RMSNorm", ...), of what was left to torch and
why, and the family's quirks, with per module type counts (report.by_type, report.summary()).
"""
import sys

import torch
from torch import nn

import kite

from . import families as _fam
from . import nn as knn
from . import patch_moe
from . import patch_rope as _rope
from .families import TABLE, Report, mlp_module, norm_module
# names other patch modules (patch_moe) import from here
from .patch_loss import _causal_lm, _make_lm_forward  # noqa: F401
from .patch_rope import _kite_apply_rotary_pos_emb, _orig_apply  # noqa: F401

_ops = torch.ops.kite

# the model types patch knows in full: families.TABLE, and the MoE families of patch_moe.py
FAMILIES = tuple(TABLE) + patch_moe.FAMILIES


def _modeling(model_type):
    return _fam.modeling(model_type)


def _needs_grad(*ts):
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                           for t in ts)


# ---- attention ---------------------------------------------------------------------------------
def _torch_attention(query, key, value, mask, scaling, softcap, window, causal, dropout,
                     sinks=None):
    """kite's sdpa semantics (GQA grouped, causal aligning the last query with the last key,
    bool mask True = attend / additive float mask, softcap, window_left) in torch ops, which
    differentiate: the attention of a patched model where a gradient is wanted. Masked scores are
    the dtype's lowest finite value (no NaN), and a query row that may see no key at all (a
    padding row under a boolean mask) gives zeros, as kite's sdpa gives."""
    sq, sk = query.shape[-2], key.shape[-2]
    low = torch.finfo(query.dtype).min
    ok = None  # bool [.., Sq, Sk]: the keys each query may see
    if mask is not None and not mask.is_floating_point():
        ok = mask
    if (causal and mask is None) or window >= 0:
        i = torch.arange(sq, device=query.device)[:, None] + (sk - sq)
        j = torch.arange(sk, device=query.device)[None, :]
        shape_ok = torch.ones(sq, sk, dtype=torch.bool, device=query.device)
        if causal and mask is None:
            shape_ok &= j <= i
        if window >= 0:  # keys [p - window_left, p], kite's rule (causal within the window)
            shape_ok &= (j >= i - window) & (j <= i)
        ok = shape_ok if ok is None else ok & shape_ok
    bias = None
    if ok is not None:
        bias = torch.zeros(ok.shape, dtype=query.dtype, device=query.device).masked_fill(~ok, low)
    if mask is not None and mask.is_floating_point():
        bias = mask.to(query.dtype) if bias is None else torch.maximum(
            bias + mask.to(query.dtype), torch.full_like(bias, low))
    group = query.shape[1] // key.shape[1]
    if not softcap and sinks is None:
        o = nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=bias, dropout_p=dropout, scale=scaling,
            enable_gqa=group > 1)
    else:
        k = key.repeat_interleave(group, dim=1) if group > 1 else key
        v = value.repeat_interleave(group, dim=1) if group > 1 else value
        scores = torch.matmul(query, k.transpose(-1, -2)) * (scaling or query.shape[-1] ** -0.5)
        if softcap:
            scores = softcap * torch.tanh(scores / softcap)
        if bias is not None:
            scores = scores + bias
        scores = scores.float()
        if sinks is not None:  # a logit per head that joins the softmax and takes no value
            sink = sinks.float().view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
            p = torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1].to(query.dtype)
        else:
            p = torch.softmax(scores, dim=-1).to(query.dtype)
        if dropout:
            p = nn.functional.dropout(p, p=dropout)
        o = torch.matmul(p, v)
    if ok is not None:
        o = o * ok.any(dim=-1, keepdim=True).to(o.dtype)
    return o


def _torch_backward(module, query, key, value):
    """patch(attention="auto"): a call on CUDA that needs a gradient runs torch's attention, whose
    flash / cuDNN backward is faster than kite's sdpa_backward on Hopper today."""
    return (getattr(module, "_kite_attention", "auto") == "auto" and query.is_cuda
            and _needs_grad(query, key, value))


def kite_attention_forward(module, query, key, value, attention_mask, **kwargs):
    """transformers attention function on kite's sdpa (see _attention). A value narrower than the
    query and key heads (MLA: DeepSeek's v 128 beside q / k 192) is padded with zero columns,
    which add nothing to the weighted sum, and the output is cut back to the value's width."""
    dv, dqk = value.shape[-1], query.shape[-1]
    if dv >= dqk:
        return _attention(module, query, key, value, attention_mask, **kwargs)
    o, w = _attention(module, query, key, nn.functional.pad(value, (0, dqk - dv)),
                      attention_mask, **kwargs)
    return o[..., :dv], w


def _attention(module, query, key, value, attention_mask, **kwargs):
    """transformers attention function on kite's sdpa: query[B, Hq, Sq, D], key/value
    [B, Hkv, Sk, D], attention_mask None / bool (True = attend) / additive float
    [B|1, 1, Sq, >= Sk]; kwargs scaling, dropout, softcap, sliding_window, is_causal.
    Returns (o[B, Sq, Hq, D], None), differentiable through kite's sdpa_backward. Packed
    sequences (batch 1 with transformers' cu_seq_lens_q / cu_seq_lens_k / max_length_q /
    max_length_k kwargs, as its flattening collator gives them) run kite's sdpa_varlen. A call with
    dropout (kite's sdpa has none), or one on CUDA that needs a gradient under patch's
    attention="auto", runs the same attention in torch ops instead (_torch_attention)."""
    scaling, softcap = kwargs.get("scaling"), kwargs.get("softcap")
    sliding_window, is_causal = kwargs.get("sliding_window"), kwargs.get("is_causal")
    mask = attention_mask
    if mask is not None and mask.dim() == 4 and mask.shape[-1] != key.shape[-2]:
        mask = mask[..., : key.shape[-2]]
    causal = bool(getattr(module, "is_causal", True) if is_causal is None else is_causal)
    window = int(sliding_window) - 1 if sliding_window else -1
    dropout = float(kwargs.get("dropout") or 0.0)
    s_aux = kwargs.get("s_aux")  # gpt-oss's attention sinks [Hq]: kite's sinks, in f32
    sinks = s_aux.float() if s_aux is not None else None
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is not None and cu_k is not None and query.shape[0] == 1 and not dropout:
        # packed sequences (FlashAttention's varlen kwargs): kite's sdpa_varlen over [T, H, D]
        q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))
        o = _ops.sdpa_varlen(q, k, v, cu_q.to(torch.int32), cu_k.to(torch.int32),
                             int(kwargs.get("max_length_q") or q.shape[0]),
                             int(kwargs.get("max_length_k") or k.shape[0]),
                             float(scaling or 0.0), float(softcap or 0.0), window, 0, int(causal),
                             sinks)
        return o[None], None
    # torch's SDPA has no sinks: with them, kite's sdpa_backward trains (dsinks included)
    torch_backward = _torch_backward(module, query, key, value) and sinks is None
    if torch_backward and not softcap and not dropout:
        # the model's own SDPA attention, as attn_implementation="sdpa" runs it (the mask kite's
        # mask function made is sdpa's): torch picks its flash / cuDNN / efficient backward
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    if dropout or torch_backward:
        o = _torch_attention(query, key, value, mask, scaling, float(softcap or 0.0), window,
                             causal, dropout, sinks)
        return o.transpose(1, 2).contiguous(), None
    o = _ops.sdpa(query, key, value, mask, float(scaling or 0.0), float(softcap or 0.0), window, 0,
                  int(causal and mask is None), sinks)
    return o.transpose(1, 2), None


def _register_attention():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    AttentionInterface.register("kite", kite_attention_forward)
    AttentionMaskInterface.register("kite", sdpa_mask)


# ---- the walk ----------------------------------------------------------------------------------
def _set(model, name, new):
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, new)


_KITE_MODULES = (knn.RMSNorm, knn.LayerNorm, knn.GatedMLP, knn.MLP)


class _PatchState:
    """What patch changed on one model, for unpatch: (name, original, replacement) modules, the
    attention implementation before, the instance forward before, the modeling module whose
    apply_rotary_pos_emb is kite's."""

    def __init__(self):
        self.modules, self.attn, self.forward, self.rope = [], None, None, None


def _model_module(model):
    """The modeling module of a model of an unknown family (the module of its class, or of its
    PEFT base model's class)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return sys.modules.get(type(base).__module__)


def patch(model, norms=True, mlp=True, rope=True, attention=True, moe=True, loss=True):
    """Swaps, in place, the parts of a transformers model that kite runs (see the module doc);
    attention: True / "auto" (kite's sdpa, except calls on CUDA that need a gradient, which run
    torch's SDPA while its backward is the faster one), "kite" (kite's sdpa for every call) or
    False (the model's own attention). A model of a family patch does not know
    (families.TABLE) is patched in partial mode: its <X>RMSNorm modules whose output is kite's
    rms_norm on a probe input, and its apply_rotary_pos_emb where it computes transformers'
    rotation on probe inputs; its MLPs, attention and loss are left to torch.
    Returns a families.Report: the list of replacements and of the parts left to torch (with the
    reason), with per module type counts (report.by_type, report.summary()). Raises
    kite.Unsupported for a model of an unknown family that has neither (nothing changed), and
    kite.InvalidArgument for a model that is not a transformers model or a bad attention mode.
    kite.torch.unpatch(model) undoes it."""
    cfg = getattr(model, "config", None)
    mt = getattr(cfg, "model_type", None)
    if mt is None:
        raise kite.InvalidArgument(f"kite.torch.patch: {type(model).__name__} is not a transformers "
                                   "model (it has no config.model_type)")
    if attention not in (True, False, "auto", "kite"):
        raise kite.InvalidArgument(f"kite.torch.patch: attention={attention!r}: expected True / "
                                   "'auto', 'kite' or False")
    fam = TABLE.get(mt)
    if fam is None and mt in FAMILIES:  # a model type added to FAMILIES without a table entry
        fam = _fam.Family(mt)
    partial = fam is None
    unknown = f"model type {mt!r} is not one kite knows (partial mode: norms and rotary only)"
    mod = _model_module(model) if partial else _modeling(mt)
    fam = fam or _fam.Family(mt)
    report = Report(mt, partial)
    training = model.training
    act_name = getattr(cfg, "hidden_activation", None) or getattr(cfg, "hidden_act", "silu")
    plan = []  # (name, original, replacement, kind, form)
    for name, m in list(model.named_modules()):
        cls = type(m).__name__
        if isinstance(m, _KITE_MODULES):
            continue
        if patch_moe.handles(mt):  # its routers, experts (and gpt-oss's norms): patch_moe.py
            handled, new = patch_moe.replace(name, m, mt, cfg, training, report, norms, moe)
            if handled:
                if new is not None:
                    plan.append((name, m, new, cls, None))  # reported by patch_moe
                continue
        got = norm_module(m, cls, fam.norm, partial) if norms else None
        if got is None and mlp and cls.endswith("MLP"):
            got = (None, unknown) if partial else mlp_module(m, cls, fam, act_name)
        if got is None:
            continue
        if got[0] is None:
            report.left(name, cls, got[1])
            continue
        plan.append((name, m, got[0], cls, got[1]))
    rope_fn = getattr(mod, "apply_rotary_pos_emb", None)
    use_rope = rope and rope_fn is not None and (
        rope_fn is _rope._kite_apply_rotary_pos_emb or not partial or _rope.rope_ok(rope_fn))
    if partial and not plan and not use_rope:
        raise kite.Unsupported(f"kite.torch.patch: model type {mt!r} is not one kite knows, and "
                               "it has no RMSNorm nor rotary embedding kite's ops compute; "
                               "known: " + ", ".join(FAMILIES))
    state = model.__dict__.get("_kite_patch") or _PatchState()
    for name, m, new, cls, form in plan:
        new.train(m.training)
        _set(model, name, new)
        state.modules.append((name, m, new))
        if form is not None:
            report.replaced(name, cls, form)
    if use_rope:
        _rope.install(mod, model)
        state.rope = mod
        report.replaced(mod.__name__, "apply_rotary_pos_emb", f"rope ({fam.rope})",
                        line=f"{mod.__name__}.apply_rotary_pos_emb -> rope")
        for fname in patch_moe.patch_rope(mt, mod):
            report.replaced(mod.__name__, fname, "rope", line=f"{mod.__name__}.{fname} -> rope")
    elif rope and partial and rope_fn is not None:
        why = "it is not transformers' rotation on probe inputs"
        report.left(mod.__name__, "apply_rotary_pos_emb", why,
                    line=f"{mod.__name__}.apply_rotary_pos_emb: left to torch: {why}")
    if attention and partial:
        report.left("attention", "attention", unknown,
                    line=f"attention: left to torch: {unknown}")
    elif attention and patch_moe.attention_left(mt):
        why = patch_moe.attention_left(mt)
        report.left("attention", "attention", why, line=f"attention: left to transformers: {why}")
    elif attention:
        _patch_attention(model, cfg, attention, state, report)
    lm = _causal_lm(model) if loss else None
    if lm is not None and partial:
        report.left("lm_head + loss", "lm_head + loss", unknown,
                    line=f"lm_head + loss: left to torch: {unknown}")
    elif lm is not None and not getattr(lm.forward, "_kite_lm_forward", False):
        state.forward = (lm, lm.__dict__.get("forward"))
        lm.forward = _make_lm_forward(lm, lm.forward, mt)
        report.replaced("lm_head", "lm_head + loss", "fused linear cross-entropy",
                        line="lm_head + loss: forward(labels=...) in training -> kite fused linear "
                             "cross-entropy (no [tokens, vocab] logits)")
    for q in fam.quirks:
        report.append(f"{mt}: {q}")
    model.__dict__["_kite_patch"] = state
    return report


def _patch_attention(model, cfg, attention, state, report):
    mode = "kite" if attention == "kite" else "auto"
    for m in model.modules():  # read by kite_attention_forward (module attributes: no state)
        if type(m).__name__.endswith("Attention"):
            m._kite_attention = mode
    before = getattr(cfg, "_attn_implementation", None) or "eager"
    if before == "kite":
        return
    _register_attention()
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("kite")
    else:
        cfg._attn_implementation = "kite"
    state.attn = before
    report.replaced("attention", "attention", "kite sdpa",
                    line="attention: -> kite sdpa (attn_implementation='kite'; differentiable: "
                         "kite's sdpa_backward)")
    if mode == "auto":
        report.append("attention: a call on CUDA that needs a gradient runs torch's "
                      "scaled_dot_product_attention (its flash / cuDNN backward is faster than "
                      "kite's sdpa_backward on Hopper today; attention='kite' keeps kite's)")
    dropout = float(getattr(cfg, "attention_dropout", 0.0) or 0.0)
    if dropout:
        report.append(f"attention: dropout {dropout:g} in training mode runs the same attention "
                      "in torch ops (kite's sdpa has no dropout)")


def unpatch(model):
    """Undoes kite.torch.patch(model): the original modules back in place (holding the
    parameters and submodules the kite modules hold now, so adapters added since stay), the
    attention implementation and forward the model had, and the family's apply_rotary_pos_emb
    once no patched model of the family is left. Returns the list of what was restored; a model
    never patched gives []."""
    state = model.__dict__.pop("_kite_patch", None)
    if state is None:
        base = model.get_base_model() if hasattr(model, "get_base_model") else None
        return unpatch(base) if base is not None and base is not model else []
    done = []
    for name, orig, new in reversed(state.modules):
        try:
            current = model.get_submodule(name)
        except AttributeError:
            continue
        if current is not new:
            continue
        for n, p in new.named_parameters(recurse=False):
            setattr(orig, n, p)
        for n, c in new.named_children():
            setattr(orig, n, c)
        orig.train(new.training)
        _set(model, name, orig)
        done.append(f"{name}: {type(new).__name__} -> {type(orig).__name__}")
    for m in model.modules():
        m.__dict__.pop("_kite_attention", None)
    if state.attn is not None:
        if hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation(state.attn)
        else:
            model.config._attn_implementation = state.attn
        done.append(f"attention: kite -> {state.attn!r}")
    if state.forward is not None:
        lm, before = state.forward
        if before is None:
            lm.__dict__.pop("forward", None)
        else:
            lm.forward = before
        done.append("lm_head + loss: the model's own forward")
    if state.rope is not None:
        if _rope.last_user(state.rope, model):  # the family's own functions first
            patch_moe.unpatch_rope_all(state.rope)
        if _rope.release(state.rope, model):
            done.append(f"{state.rope.__name__}.apply_rotary_pos_emb restored")
    return done


def unpatch_rotary(model_type):
    """Restores a family's apply_rotary_pos_emb (patch replaces it module-wide)."""
    mod = _modeling(model_type)
    patch_moe.unpatch_rope(model_type, mod)
    _rope.restore(mod)
