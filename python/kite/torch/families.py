"""What kite.torch.patch knows about each transformers model family, one entry per
config.model_type, and the report patch returns.

An entry says where the family's modeling code lives, which norm class it uses and in which form
(RMSNorm, Gemma's RMSNorm with +1, LayerNorm), how its MLP is laid out (separate gate / up / down
projections, one fused gate_up projection, a plain up -> act -> down, or MoE experts), the rotary
variant (all go through the family's apply_rotary_pos_emb, which reads the cos / sin the model's
rotary module computed: per-layer-type bases, partial rotary and NoPE layers need nothing else),
where the causal LM scales its logits, and the quirks that stay in the model's own code (which
patch leaves alone and the report names). Adding a family is adding an entry. norm_module and
mlp_module make the kite module a model's module becomes under its family's forms.
"""
import collections
import dataclasses
import importlib

import torch
from torch import nn

from . import nn as knn

_ops = torch.ops.kite
# transformers' activation names -> kite's (the gated form is <act>_and_mul)
ACTS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh",
        "gelu_new": "gelu_tanh", "gelu_fast": "gelu_tanh", "quick_gelu": "gelu_quick",
        "relu": "relu"}
_GATED_ACTS = ("silu", "gelu", "gelu_tanh")

# norm forms
RMS, RMS_GEMMA, LAYER = "rms", "rms_gemma", "layer"
# MLP layouts: (gate_proj, up_proj, down_proj); (gate_up_proj [2I, H] gate rows first, down_proj);
# (up, act, down) with the attribute names of the entry's plain_mlp; MoE (router + experts)
GATED, FUSED_GATED, PLAIN, MOE = "gated", "fused_gated", "plain", "moe"


@dataclasses.dataclass(frozen=True)
class Family:
    """module: the transformers.models package holding modeling_<module>.py; norm: RMS,
    RMS_GEMMA (y = norm(x) * (1 + w)) or LAYER; mlp: GATED, FUSED_GATED, PLAIN or MOE;
    plain_mlp: (up attribute, down attribute) of a PLAIN MLP; rope: what the rotary variant is
    (for the report); logits_scaling: the config attribute the causal LM divides its logits by
    (None: none); moe_renormalize: the top-k renormalization of a router without norm_topk_prob;
    quirks: what stays in the model's own code (for the report)."""
    module: str
    norm: str = RMS
    mlp: str = GATED
    plain_mlp: tuple = ("up_proj", "down_proj")
    rope: str = "rotary (cos / sin from the model's rotary module)"
    logits_scaling: str = None
    moe_renormalize: bool = False
    quirks: tuple = ()


_QK_NORM = "QK-norm: the q_norm / k_norm modules are norms kite runs"
TABLE = {
    "llama": Family("llama"),
    "mistral": Family("mistral", quirks=("sliding window: kite's sdpa window",)),
    "qwen2": Family("qwen2"),
    "qwen3": Family("qwen3", quirks=(_QK_NORM + " (per head)",)),
    "gemma": Family("gemma", norm=RMS_GEMMA,
                    quirks=("embedding scaled by sqrt(hidden): the model's own code",)),
    "gemma2": Family("gemma2", norm=RMS_GEMMA,
                     quirks=("attention logit softcap: kite's sdpa softcap",
                             "final logit softcap: kite's fused cross-entropy softcap",
                             "sliding window on alternate layers: kite's sdpa window",
                             "pre / post feedforward norms: norms kite runs")),
    "gemma3_text": Family("gemma3", norm=RMS_GEMMA,
                          rope="rotary with a base per layer type (local 10k, global 1M): the "
                               "cos / sin the model computed per layer type",
                          quirks=("sliding window on the local layers: kite's sdpa window",
                                  _QK_NORM + " (per head, Gemma's 1 + w)",
                                  "pre / post feedforward norms: norms kite runs",
                                  "embedding scaled by sqrt(hidden): the model's own code")),
    "phi3": Family("phi3", mlp=FUSED_GATED,
                   rope="rotary, partial where partial_rotary_factor < 1 (kite's rot_dim)",
                   quirks=("fused qkv_proj: the model's own code slices it; kite rotates the "
                           "q / k views",)),
    "olmo2": Family("olmo2", quirks=(_QK_NORM + " (over the full projected q / k)",
                                     "post-attention / post-feedforward norms: norms kite runs")),
    "granite": Family("granite", logits_scaling="logits_scaling",
                      quirks=("embedding / residual multipliers: the model's own code",
                              "attention multiplier: the scale kite's sdpa is given",
                              "logits divided by logits_scaling: applied to the hidden states "
                              "before kite's fused cross-entropy")),
    "smollm3": Family("smollm3", rope="rotary, skipped on the NoPE layers (no_rope_layers): the "
                                      "model's own code decides"),
    "gpt_neox": Family("gpt_neox", norm=LAYER, mlp=PLAIN,
                       plain_mlp=("dense_h_to_4h", "dense_4h_to_h"),
                       rope="partial rotary (rotary_pct: kite's rot_dim)",
                       quirks=("parallel residual: the model's own code",
                               "fused query_key_value: the model's own code slices it; kite "
                               "rotates the q / k views")),
    "mixtral": Family("mixtral", mlp=MOE, moe_renormalize=True),
    "qwen2_moe": Family("qwen2_moe", mlp=MOE),
}


def modeling(model_type):
    """transformers' modeling module of a known family (or of a model_type named like its
    package)."""
    fam = TABLE.get(model_type)
    pkg = fam.module if fam is not None else model_type
    return importlib.import_module(f"transformers.models.{pkg}.modeling_{pkg}")


# ---- the kite module for a model's module, by the family's forms ---------------------------------
def _probe(shape, like, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(like.device, like.dtype)


def close(a, b):
    tol = 1e-5 if a.dtype == torch.float32 else 2e-2
    return a.shape == b.shape and bool(((a.float() - b.float()).abs()
                                        <= tol * (1 + b.float().abs())).all())


def norm_module(m, cls, form, partial):
    """(kite norm sharing m's parameters, kite form) for a norm module of the family's form;
    (None, why) for one kite cannot take; None for a module that is no norm. In partial mode an
    <X>RMSNorm is taken only where kite's rms_norm (offset 0, or Gemma's 1) gives its output on a
    probe input."""
    w = getattr(m, "weight", None)
    if form == LAYER and not partial and isinstance(m, nn.LayerNorm):
        if not isinstance(w, nn.Parameter) or len(m.normalized_shape) != 1:
            return None, "no affine weight over one dim"
        new = knn.LayerNorm(w.shape[0], eps=m.eps, bias=m.bias is not None)
        new.weight, new.bias = w, m.bias
        return new, "LayerNorm"
    if not (cls.endswith("RMSNorm") and isinstance(w, nn.Parameter) and w.dim() == 1):
        return None
    eps = float(getattr(m, "variance_epsilon", getattr(m, "eps", 1e-6)))
    offsets = (1.0 if form == RMS_GEMMA else 0.0,)
    if partial:
        x = _probe((3, w.shape[0]), w, 0)
        try:
            with torch.no_grad():
                want = m(x)
                offsets = [o for o in (0.0, 1.0) if close(_ops.rms_norm(x, w, eps, o), want)]
        except Exception as e:  # its forward takes other inputs: not a norm kite knows
            return None, f"its forward failed on a probe input ({type(e).__name__})"
        if not offsets:
            return None, "its output is not kite's rms_norm (offset 0 or 1) on a probe input"
    new = knn.RMSNorm(w.shape[0], eps=eps, offset=offsets[0], weight=False)
    new.weight = w
    return new, "RMSNorm"


def mlp_module(m, cls, fam, act_name):
    """(kite MLP over m's own projections, form) / (None, why) / None (not an MLP)."""
    has = {a: isinstance(getattr(m, a, None), nn.Module)
           for a in ("gate_proj", "up_proj", "down_proj", "gate_up_proj") + fam.plain_mlp}
    act = ACTS.get(act_name)
    if has["gate_proj"] and has["up_proj"] and has["down_proj"]:
        layout = GATED
    elif has["gate_up_proj"] and has["down_proj"]:
        layout = FUSED_GATED
    elif fam.mlp == PLAIN and all(has[a] for a in fam.plain_mlp):
        layout = PLAIN
    else:
        return None
    if layout == PLAIN:
        if act is None:
            return None, f"activation {act_name!r} is not one of kite's"
        up, down = (getattr(m, a) for a in fam.plain_mlp)
        return knn.MLP(up, down, act, names=fam.plain_mlp), f"MLP({act})"
    if act not in _GATED_ACTS:
        return None, f"activation {act_name!r} has no kite gated form"
    if layout == FUSED_GATED:
        return (knn.GatedMLP(None, None, m.down_proj, act, gate_up_proj=m.gate_up_proj),
                f"GatedMLP({act}_and_mul over the fused gate_up_proj)")
    return knn.GatedMLP(m.gate_proj, m.up_proj, m.down_proj, act), f"GatedMLP({act}_and_mul)"


class Report(list):
    """What kite.torch.patch did: a list of lines ("model.layers.0.input_layernorm: LlamaRMSNorm
    -> RMSNorm", "...: GPTNeoXMLP left to torch: <why>", "attention: -> kite sdpa ...") as patch
    has always returned, plus by_type: {module type: {"replaced": {kite form: count},
    "left": {reason: count}}} and summary(), one line per module type."""

    def __init__(self, family=None, partial=False):
        super().__init__()
        self.family, self.partial = family, partial
        self.by_type = collections.OrderedDict()

    def _entry(self, kind):
        return self.by_type.setdefault(kind, {"replaced": collections.Counter(),
                                              "left": collections.Counter()})

    def replaced(self, name, kind, to, line=None):
        self._entry(kind)["replaced"][to] += 1
        self.append(line or f"{name}: {kind} -> {to}")

    def left(self, name, kind, why, line=None):
        self._entry(kind)["left"][why] += 1
        self.append(line or f"{name}: {kind} left to torch: {why}")

    def summary(self):
        """One line per module type: "LlamaRMSNorm: 5 -> RMSNorm" / "ArceeMLP: 2 left to torch
        (why)"."""
        head = f"kite.torch.patch: {self.family}" + (" (partial mode)" if self.partial else "")
        lines = [head]
        for kind, e in self.by_type.items():
            parts = [f"{n} -> {to}" for to, n in e["replaced"].items()]
            parts += [f"{n} left to torch ({why})" for why, n in e["left"].items()]
            lines.append(f"  {kind}: " + "; ".join(parts))
        return "\n".join(lines)
