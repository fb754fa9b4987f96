"""kite.torch.patch(model): swaps the parts of a Hugging Face transformers model that kite has ops
for, in place. For training, patch(model, mlp=False, attention=False): the norms and the rotary
embedding then differentiate through kite's backward ops, while kite's sdpa and the GatedMLP's
fused (frozen) gate_up copy have no backward.

Known families (config.model_type): llama, mistral, qwen2, qwen3, gemma, gemma2, mixtral,
qwen2_moe. What is swapped:

- norms: every <Family>RMSNorm module -> kite.torch.nn.RMSNorm sharing its weight (Gemma's
  1 + w form as offset 1);
- MLP activation: a <Family>MLP (gate_proj, up_proj, down_proj) -> kite.torch.nn.GatedMLP: one
  projection for gate and up, then kite's silu_and_mul / gelu_and_mul / gelu_tanh_and_mul;
- rotary embedding: the family's apply_rotary_pos_emb -> kite's rope, in place, reading the cos
  and sin the model's own rotary module computed (so every HF scaling type is honoured); the
  function is module-wide, so other models of the family in the process take kite's rope too
  (unpatch_rotary(model_type) restores it);
- the attention core: "kite" registered in transformers' AttentionInterface (with sdpa's mask
  function) and selected, running kite's sdpa (GQA, causal, bool masks, sliding window, softcap);
- MoE: the router (<Family>TopKRouter) -> kite's topk_gating, the experts (<Family>Experts,
  gate_up_proj [E, 2I, H], down_proj [E, H, I]) -> kite's fused_moe.

Returns the list of what was replaced ("model.layers.0.input_layernorm: LlamaRMSNorm -> RMSNorm",
...). A model of another family raises kite.Unsupported naming the families it knows.
"""
import importlib
import sys

import torch
from torch import nn

import kite

from . import nn as knn

_ops = torch.ops.kite

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "mixtral", "qwen2_moe")
_GEMMA = ("gemma", "gemma2")
_ACTS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh",
         "gelu_new": "gelu_tanh", "gelu_fast": "gelu_tanh"}


def _modeling(model_type):
    return importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")


# ---- rotary ------------------------------------------------------------------------------------
def _kite_apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1, **kwargs):
    """HF's apply_rotary_pos_emb (neox pairs) on kite's rope. q[B, Hq, S, D], k[B, Hkv, S, D],
    cos/sin[B or 1, S, D] (halves repeated). kite reads one cos/sin row per token, so the rows
    are the model's own cos/sin and the positions index them."""
    if unsqueeze_dim != 1 or q.dim() != 4 or cos.dim() != 3:
        return _orig_apply(q, k, cos, sin, unsqueeze_dim)
    B, Hq, S, D = q.shape
    half = D // 2
    Bc = cos.shape[0]  # 1 when every sequence has the same positions
    cos_sin = torch.cat((cos[..., :half], sin[..., :half]), dim=-1).reshape(Bc * S, D)
    cos_sin = cos_sin.to(torch.float32).contiguous()
    pos = torch.arange(Bc * S, dtype=torch.int32, device=q.device)
    if Bc != B:
        pos = pos.repeat(B)
    qq = q.transpose(1, 2).reshape(B * S, Hq, D)
    kk = k.transpose(1, 2).reshape(B * S, k.shape[1], D)
    if torch.is_grad_enabled() and (qq.requires_grad or kk.requires_grad):
        from .autograd import rope as rope_fn  # rotated copies, differentiable
        qq, kk = rope_fn(qq, kk, pos, cos_sin, D, 0)
    else:
        _ops.rope(qq, kk, pos, cos_sin, D, 0)
    return qq.view(B, S, Hq, D).transpose(1, 2), kk.view(B, S, k.shape[1], D).transpose(1, 2)


def _orig_apply(q, k, cos, sin, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)

    def rot(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)
    return q * cos + rot(q) * sin, k * cos + rot(k) * sin


# ---- attention ---------------------------------------------------------------------------------
def kite_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                           softcap=None, sliding_window=None, is_causal=None, **kwargs):
    """transformers attention function on kite's sdpa: query[B, Hq, Sq, D], key/value
    [B, Hkv, Sk, D], attention_mask None / bool (True = attend) / additive float
    [B|1, 1, Sq, >= Sk]. Returns (o[B, Sq, Hq, D], None)."""
    mask = attention_mask
    if mask is not None and mask.dim() == 4 and mask.shape[-1] != key.shape[-2]:
        mask = mask[..., : key.shape[-2]]
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    window = int(sliding_window) - 1 if sliding_window else -1
    o = _ops.sdpa(query, key, value, mask, float(scaling or 0.0), float(softcap or 0.0), window, 0,
                  int(bool(causal) and mask is None))
    return o.transpose(1, 2), None


def _register_attention():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    AttentionInterface.register("kite", kite_attention_forward)
    AttentionMaskInterface.register("kite", sdpa_mask)


# ---- MoE ---------------------------------------------------------------------------------------
class KiteRouter(nn.Module):
    """A TopKRouter on kite's topk_gating: (router_logits, weights f32, ids int32)."""

    def __init__(self, weight, top_k, renormalize):
        super().__init__()
        self.weight = weight
        self.top_k, self.renormalize = int(top_k), int(bool(renormalize))

    def forward(self, hidden_states):
        h = hidden_states.reshape(-1, self.weight.shape[-1])
        logits = nn.functional.linear(h, self.weight)
        weights, ids = _ops.topk_gating(logits, self.top_k, self.renormalize)
        return logits, weights, ids


class KiteExperts(nn.Module):
    """Experts (gate_up_proj [E, 2I, H], down_proj [E, H, I]) on kite's fused_moe."""

    def __init__(self, gate_up_proj, down_proj, act):
        super().__init__()
        self.gate_up_proj, self.down_proj, self.act = gate_up_proj, down_proj, act

    def forward(self, hidden_states, top_k_index, top_k_weights):
        w = top_k_weights if top_k_weights.dtype == torch.float32 else top_k_weights.float()
        ids = top_k_index if top_k_index.dtype == torch.int32 else top_k_index.to(torch.int32)
        return _ops.fused_moe(hidden_states, self.gate_up_proj, self.down_proj, w, ids, self.act)


# ---- the walk ----------------------------------------------------------------------------------
def _set(model, name, new):
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, new)


def patch(model, norms=True, mlp=True, rope=True, attention=True, moe=True):
    """Swaps, in place, the parts of a transformers model that kite runs (see the module doc);
    returns the list of replacements. Raises kite.Unsupported for a model family it does not
    know, and kite.InvalidArgument for a model that is not a transformers model."""
    cfg = getattr(model, "config", None)
    mt = getattr(cfg, "model_type", None)
    if mt is None:
        raise kite.InvalidArgument(f"kite.torch.patch: {type(model).__name__} is not a transformers "
                                   "model (it has no config.model_type)")
    if mt not in FAMILIES:
        raise kite.Unsupported(f"kite.torch.patch: model type {mt!r} is not one kite knows; known: "
                               + ", ".join(FAMILIES))
    mod = _modeling(mt)
    done = []
    act_name = getattr(cfg, "hidden_activation", None) or getattr(cfg, "hidden_act", "silu")
    act = _ACTS.get(act_name)
    for name, m in list(model.named_modules()):
        cls = type(m).__name__
        if norms and cls.endswith("RMSNorm") and hasattr(m, "weight"):
            eps = getattr(m, "variance_epsilon", getattr(m, "eps", 1e-6))
            new = knn.RMSNorm(m.weight.shape[0], eps=eps, offset=1.0 if mt in _GEMMA else 0.0,
                              weight=False)
            new.weight = m.weight
            _set(model, name, new)
            done.append(f"{name}: {cls} -> RMSNorm")
        elif mlp and cls.endswith("MLP") and all(hasattr(m, a) for a in ("gate_proj", "up_proj", "down_proj")):
            if act is None:
                continue
            with torch.no_grad():
                gu = torch.cat((m.gate_proj.weight, m.up_proj.weight), dim=0)
                gub = None
                if m.gate_proj.bias is not None:
                    gub = torch.cat((m.gate_proj.bias, m.up_proj.bias), dim=0)
            _set(model, name, knn.GatedMLP(gu, m.down_proj, act, gub))
            done.append(f"{name}: {cls} -> GatedMLP({act}_and_mul)")
        elif moe and cls.endswith("TopKRouter") and hasattr(m, "weight"):
            renorm = getattr(m, "norm_topk_prob", mt == "mixtral")
            _set(model, name, KiteRouter(m.weight, m.top_k, renorm))
            done.append(f"{name}: {cls} -> topk_gating")
        elif moe and cls.endswith("Experts") and hasattr(m, "gate_up_proj") and hasattr(m, "down_proj"):
            e_act = _ACTS.get(getattr(cfg, "hidden_act", "silu"))
            if e_act not in ("silu", "gelu"):
                continue
            _set(model, name, KiteExperts(m.gate_up_proj, m.down_proj, 0 if e_act == "silu" else 1))
            done.append(f"{name}: {cls} -> fused_moe")
    if rope and hasattr(mod, "apply_rotary_pos_emb"):
        if mod.apply_rotary_pos_emb is not _kite_apply_rotary_pos_emb:
            _saved[mt] = mod.apply_rotary_pos_emb
            mod.apply_rotary_pos_emb = _kite_apply_rotary_pos_emb
        done.append(f"{mod.__name__}.apply_rotary_pos_emb -> rope")
    if attention:
        _register_attention()
        if hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation("kite")
        else:
            cfg._attn_implementation = "kite"
        done.append("attention: -> kite sdpa (attn_implementation='kite')")
    return done


def unpatch_rotary(model_type):
    """Restores a family's apply_rotary_pos_emb (patch replaces it module-wide)."""
    mod = _modeling(model_type)
    if mod.apply_rotary_pos_emb is _kite_apply_rotary_pos_emb:
        mod.apply_rotary_pos_emb = _saved.get(model_type, _orig_apply)


_saved = {}
