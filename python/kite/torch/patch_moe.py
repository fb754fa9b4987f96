"""kite.torch.patch for the MoE families: Mixtral (mixtral) and Qwen2-MoE (qwen2_moe) of
families.TABLE, and Qwen3-MoE (qwen3_moe), gpt-oss (gpt_oss) and DeepSeek-V3 (deepseek_v3).
patch.py's walk asks replace() about every module of a model of these families (handles()) before
its generic rules; what replace() takes it installs, what it leaves goes on to the generic rules
(the dense <Family>MLP -> GatedMLP, including DeepSeek's first dense layers and the shared experts
of Qwen2-MoE and DeepSeek, and the <Family>RMSNorm).

- router (MixtralTopKRouter, Qwen2MoeTopKRouter, Qwen3MoeTopKRouter, GptOssTopKRouter,
  DeepseekV3TopkRouter) -> KiteMoeRouter on kite's moe_route: Mixtral / Qwen2-MoE / Qwen3-MoE
  softmax with norm_topk_prob (Mixtral: always renormalized), the form kite.h names topk_gating
  and the Mixtral / Qwen2-MoE reports call so; gpt-oss top-k of the logits (its linear bias inside
  them) then the softmax of the k chosen; DeepSeek-V3 sigmoid scores, the e_score_correction_bias
  steering the choice, grouped top-k (n_group / topk_group), norm_topk_prob and
  routed_scaling_factor, over logits computed in f32 as the model computes them. It returns what
  the model's router returns: (logits, weights in the logits' dtype (Mixtral's: f32), ids int64),
  and its logits are recorded for output_router_logits (the aux loss) as the router's are;
- experts (MixtralExperts, Qwen2MoeExperts, Qwen3MoeExperts, DeepseekV3Experts: gate_up_proj
  [E, 2I, H], down_proj [E, H, I]) -> KiteMoeExperts on kite's fused_moe (the plain form: split
  layout, silu or erf gelu, no biases), whose kernels group the tokens by expert on every backend
  (on the CPU it is fused_moe_ex's plain case), and the reports name it; gpt-oss's
  (GptOssExperts: gate_up_proj [E, H, 2I] with gate and up interleaved, gate_up_proj_bias
  [E, 2I], down_proj [E, I, H], down_proj_bias [E, H], clamped SwiGLU with swiglu_alpha /
  swiglu_limit) -> KiteMoeExperts on fused_moe_ex with the interleaved layout, the biases, act
  swiglu_oai and transposed = 1, which reads the stored [E, H, 2I] / [E, I, H] in place;
- gpt-oss's norm (GptOssRMSNorm, which rounds (weight * x) to the input's dtype) -> CastRMSNorm:
  kite's RMSNorm, the result in the input's dtype (gpt-oss keeps its norms in f32 in a bf16
  checkpoint);
- rotary: DeepSeek-V3's apply_rotary_pos_emb_interleave (rope_interleave) -> kite's rope on the
  de-interleaved q and k (ROPE_FUNCTIONS, installed and restored with the family's
  apply_rotary_pos_emb); gpt-oss's half-width cos / sin and the plain functions take patch.py's.

Attention: attention_left(model_type) says why a family's attention stays transformers' (none
today), and is the one place to change when kite's attention cannot take one.

Training: kite has no backward for moe_route, fused_moe or fused_moe_ex, so on a model in training
mode the router and experts stay torch's (reported); on an eval model, a call that needs a
gradient runs the original module. Weights are the model's own parameters, read in place.
"""
import torch
from torch import nn

from . import nn as knn
from .families import ACTS, MOE, TABLE

_ops = torch.ops.kite

# the MoE families without a families.TABLE entry (patch.py's FAMILIES adds them to the table's)
FAMILIES = ("qwen3_moe", "gpt_oss", "deepseek_v3")
# the table's MoE families (Mixtral, Qwen2-MoE): the router named topk_gating
_TABLE_MOE = tuple(mt for mt, f in TABLE.items() if f.mlp == MOE)


def handles(model_type):
    """Whether replace() decides the routers, experts (and gpt-oss's norms) of model_type."""
    return model_type in FAMILIES or model_type in _TABLE_MOE

# kite_route_score and kite_moe_act / kite_moe_layout (kite.h)
_SOFTMAX, _SIGMOID, _SOFTMAX_TOPK = 0, 1, 2
_EXPERT_ACTS = {"silu": 0, "gelu": 1}  # of families.ACTS' names
_SWIGLU_OAI = 2
_SPLIT, _INTERLEAVED = 0, 1

# family -> why its attention stays transformers' (none today: gpt-oss's sinks and DeepSeek's
# MLA, v narrower than q / k, both run on kite's sdpa)
_ATTENTION_LEFT = {}


def attention_left(model_type):
    """Why the attention of model_type stays transformers' (None: kite's sdpa runs it)."""
    return _ATTENTION_LEFT.get(model_type)


def _patch():
    from . import patch_module  # the module (kite.torch.patch is its function)
    return patch_module


class _Fallback:
    """Holds the module a kite module replaced, unregistered (its parameters are the kite
    module's own, so they are neither listed twice nor saved twice)."""

    def __init__(self, module):
        self.module = module


class CastRMSNorm(knn.RMSNorm):
    """kite's RMSNorm whose result is in the input's dtype: gpt-oss's (weight * x).to(x.dtype)."""

    def forward(self, x, residual=None):
        if residual is not None:
            return super().forward(x, residual)
        return super().forward(x).to(x.dtype)


class KiteMoeRouter(nn.Module):
    """A router on kite's moe_route. weight [E, H] (and gpt-oss's linear bias [E]) make the logits;
    route_bias (DeepSeek-V3's e_score_correction_bias [E], a buffer) steers the choice; opts are
    moe_route's (k, score, n_group, topk_group, renormalize, scaling); f32_logits computes the
    logits in f32 (DeepSeek-V3's router); f32_weights keeps the weights in f32 (Mixtral's router).
    forward(hidden[..., H]) -> (logits [T, E], weights [T, k] in the logits' dtype or f32, ids
    [T, k] int64), the model's router's results. Where a gradient is wanted (moe_route has no
    backward) the original router runs."""

    def __init__(self, weight, bias, route_bias, opts, f32_logits, original, f32_weights=False):
        super().__init__()
        self.weight = weight
        self.bias = bias
        if route_bias is not None:
            self.register_buffer("e_score_correction_bias", route_bias)
        else:
            self.e_score_correction_bias = None
        self.opts, self.f32_logits, self.f32_weights = opts, f32_logits, f32_weights
        self._original = _Fallback(original)

    def forward(self, hidden_states):
        orig = self._original.module
        if orig is not None and _patch()._needs_grad(hidden_states, self.weight, self.bias):
            return orig(hidden_states)
        h = hidden_states.reshape(-1, self.weight.shape[-1])
        if self.f32_logits:
            logits = nn.functional.linear(h.float(), self.weight.float())
        else:
            logits = nn.functional.linear(h, self.weight, self.bias)
        rb = self.e_score_correction_bias
        if rb is not None and rb.dtype != torch.float32:
            rb = rb.float()  # moe_route takes an f32 bias ([E]: a model cast whole to bf16)
        weights, ids = _ops.moe_route(logits, rb, *self.opts)
        return logits, weights if self.f32_weights else weights.to(logits.dtype), ids.long()

    def extra_repr(self):
        k, score, n_group, topk_group, renorm, scaling = self.opts
        return (f"k={k}, score={('softmax', 'sigmoid', 'softmax_topk')[score]}, n_group={n_group}, "
                f"topk_group={topk_group}, renormalize={renorm}, scaling={scaling:g}")


class KiteMoeExperts(nn.Module):
    """Experts on kite's fused MoE. gate_up_proj and down_proj are the model's: [E, 2I, H] and
    [E, H, I], or with transposed [E, H, 2I] and [E, I, H] (gpt-oss's), read in place;
    gate_up_bias [E, 2I] and down_bias [E, H] or None; opts: fused_moe_ex's (act 0 silu / 1 gelu /
    2 swiglu_oai, layout 0 split / 1 interleaved, alpha, limit, transposed). The plain form (no
    biases, split, silu or gelu, no clamp, [E, 2I, H]) runs fused_moe, whose kernels group the
    tokens by expert on every backend (on the CPU fused_moe is fused_moe_ex's plain case); the
    rest runs fused_moe_ex.
    forward(hidden[T, H], ids[T, k], weights[T, k]) -> [T, H]. Where a gradient is wanted
    (fused_moe_ex has no backward) the original experts run."""

    def __init__(self, gate_up_proj, gate_up_bias, down_proj, down_bias, opts, original):
        super().__init__()
        # the model's names, in its order: the state_dict keeps its keys
        self.gate_up_proj, self.gate_up_proj_bias = gate_up_proj, gate_up_bias
        self.down_proj, self.down_proj_bias = down_proj, down_bias
        self.opts = opts
        act, layout, _, limit, transposed = opts
        self.plain = (gate_up_bias is None and down_bias is None and layout == _SPLIT
                      and act != _SWIGLU_OAI and limit == 0 and not transposed)
        self._original = _Fallback(original)

    def forward(self, hidden_states, top_k_index, top_k_weights):
        orig = self._original.module
        if orig is not None and _patch()._needs_grad(hidden_states, top_k_weights,
                                                     self.gate_up_proj, self.down_proj,
                                                     self.gate_up_proj_bias, self.down_proj_bias):
            return orig(hidden_states, top_k_index, top_k_weights)
        w = top_k_weights if top_k_weights.dtype == torch.float32 else top_k_weights.float()
        ids = top_k_index if top_k_index.dtype == torch.int32 else top_k_index.to(torch.int32)
        if self.plain:
            return _ops.fused_moe(hidden_states, self.gate_up_proj, self.down_proj, w, ids,
                                  self.opts[0])
        return _ops.fused_moe_ex(hidden_states, self.gate_up_proj, self.gate_up_proj_bias,
                                 self.down_proj, self.down_proj_bias, w, ids, *self.opts)

    def extra_repr(self):
        act, layout, alpha, limit, transposed = self.opts
        r = f"act={('silu', 'gelu', 'swiglu_oai')[act]}"
        if layout == _INTERLEAVED:
            r += ", interleaved"
        if act == _SWIGLU_OAI:
            r += f", alpha={alpha:g}"
        if limit > 0:
            r += f", limit={limit:g}"
        if self.gate_up_proj_bias is not None or self.down_proj_bias is not None:
            r += ", biases"
        if transposed:
            r += ", transposed"
        return r


def _route_opts(mt, m, cfg):
    """moe_route's (k, score, n_group, topk_group, renormalize, scaling) for the router m."""
    if mt == "gpt_oss":
        return (int(m.top_k), _SOFTMAX_TOPK, 1, 1, 0, 1.0)
    if mt == "deepseek_v3":
        return (int(m.top_k), _SIGMOID, int(m.num_group), int(m.topk_group),
                int(bool(m.norm_topk_prob)), float(m.routed_scaling_factor))
    # softmax over all experts: norm_topk_prob, or the family's rule (Mixtral's: renormalized)
    fam = TABLE.get(mt)
    renorm = getattr(m, "norm_topk_prob", fam is not None and fam.moe_renormalize)
    return (int(m.top_k), _SOFTMAX, 1, 1, int(bool(renorm)), 1.0)


def _router(mt, name, m, cfg, training, done):
    cls = type(m).__name__
    # the table's families name the router by topk_gating, kite.h's name of moe_route's softmax form
    op = "topk_gating" if mt in _TABLE_MOE else "moe_route"
    if training:
        done.left(name, cls, f"{op}: kite has no backward for it yet and the model is in "
                  "training mode")
        return None
    route_bias = getattr(m, "e_score_correction_bias", None) if mt == "deepseek_v3" else None
    new = KiteMoeRouter(m.weight, getattr(m, "bias", None) if mt == "gpt_oss" else None,
                        route_bias, _route_opts(mt, m, cfg), mt == "deepseek_v3", m,
                        f32_weights=mt == "mixtral")
    _keep_router_logits(m, new)
    form = new.extra_repr()
    if op != "moe_route":
        k, _, _, _, renorm, _ = new.opts
        form = f"moe_route's softmax form, k={k}, renormalize={renorm}"
    done.replaced(name, cls, f"{op} ({form})")
    return new


def _keep_router_logits(m, new):
    """transformers records the router logits (output_router_logits, the aux loss) by a forward
    hook that it puts, once per model, on the modules of the router's class: the hooks already on
    m go onto new too; before the model has put them (it will not find m then), m gets the hook it
    would have put (index 0: the logits), for new and for after unpatch."""
    if not m._forward_hooks:
        try:
            from transformers.utils.output_capturing import install_output_capuring_hook
        except ImportError:  # a transformers that records otherwise
            return
        install_output_capuring_hook(m, "router_logits", 0)
    for hook in m._forward_hooks.values():
        new.register_forward_hook(hook)


def _experts(mt, name, m, cfg, training, done):
    cls = type(m).__name__
    op = "fused_moe_ex"
    if mt == "gpt_oss":
        if not _is_param(m, "gate_up_proj_bias", "down_proj_bias"):
            done.left(name, cls, "no gate_up_proj_bias / down_proj_bias")
            return None
        act = _SWIGLU_OAI
    else:
        act = _EXPERT_ACTS.get(ACTS.get(getattr(cfg, "hidden_act", "silu")))
    if act is None:
        done.left(name, cls, f"{op}: activation {cfg.hidden_act!r} is not one {op} has")
        return None
    if training:
        done.left(name, cls, f"{op}: kite has no backward for it yet and the model is in "
                  "training mode")
        return None
    if mt == "gpt_oss":  # stored [E, H, 2I] / [E, I, H]: fused_moe_ex's transposed orientation
        new = KiteMoeExperts(m.gate_up_proj, m.gate_up_proj_bias, m.down_proj, m.down_proj_bias,
                             (act, _INTERLEAVED, float(m.alpha), float(m.limit), 1), m)
    else:
        new = KiteMoeExperts(m.gate_up_proj, None, m.down_proj, None,
                             (act, _SPLIT, 1.702, 0.0, 0), m)
    done.replaced(name, cls, f"{'fused_moe' if new.plain else op} ({new.extra_repr()})")
    return new


def _is_param(m, *names):
    return all(isinstance(getattr(m, n, None), nn.Parameter) for n in names)


def replace(name, m, mt, cfg, training, done, norms=True, moe=True):
    """patch.py's walk, for a module m (named name) of a model of family mt (handles(mt)): (handled,
    new). handled: this module decides m (new is its replacement, or None to leave m to torch);
    not handled: patch.py's generic rules decide. Reports to done (patch's families.Report) what
    it replaced or left and why."""
    cls = type(m).__name__
    if isinstance(m, (KiteMoeRouter, KiteMoeExperts, CastRMSNorm)):
        return True, None
    if mt == "gpt_oss" and cls == "GptOssRMSNorm":
        if not norms or not _is_param(m, "weight"):
            return True, None
        new = CastRMSNorm(m.weight.shape[0], eps=m.variance_epsilon, weight=False)
        new.weight = m.weight
        done.replaced(name, cls, "RMSNorm (result in the input's dtype)")
        return True, new
    if cls.endswith(("TopKRouter", "TopkRouter")) and _is_param(m, "weight"):
        return True, (_router(mt, name, m, cfg, training, done) if moe else None)
    if cls.endswith("Experts") and _is_param(m, "gate_up_proj", "down_proj"):
        return True, (_experts(mt, name, m, cfg, training, done) if moe else None)
    return False, None


# ---- rotary ------------------------------------------------------------------------------------
def _kite_apply_rotary_pos_emb_interleave(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    """DeepSeek's apply_rotary_pos_emb_interleave on kite's rope: q/k[B, H, S, D] hold their
    rotary pairs interleaved ((x0, x1), (x2, x3), ...) and come out de-interleaved (the evens
    rotated, then the odds), which is kite's neox rope of the de-interleaved q and k with the
    model's cos / sin [B|1, S, D] (halves repeated)."""
    if unsqueeze_dim != 1:
        original = _ROPE_SAVED[("deepseek_v3", "apply_rotary_pos_emb_interleave")]
        return original(q, k, cos, sin, position_ids, unsqueeze_dim)

    def split(x):
        return torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1)
    return _patch()._kite_apply_rotary_pos_emb(split(q), split(k), cos, sin)


def _kite_apply_rotary_pos_emb_half(q, k, cos, sin, unsqueeze_dim=1):
    """gpt-oss's apply_rotary_pos_emb on kite's rope: its cos / sin [B|1, S, D / 2] hold each
    frequency once (not the halves repeated), and its rotation is neox's (the first half of each
    head against the second), so it is patch.py's kite rope with the halves repeated."""
    return _patch()._kite_apply_rotary_pos_emb(q, k, torch.cat((cos, cos), dim=-1),
                                               torch.cat((sin, sin), dim=-1), unsqueeze_dim)


# family -> {function name in its modeling module: kite's replacement}: functions besides
# apply_rotary_pos_emb (patch.py's), or in its place where the family's differs
ROPE_FUNCTIONS = {"deepseek_v3": {"apply_rotary_pos_emb_interleave":
                                  _kite_apply_rotary_pos_emb_interleave},
                  "gpt_oss": {"apply_rotary_pos_emb": _kite_apply_rotary_pos_emb_half}}
_ROPE_SAVED = {}


def patch_rope(mt, mod):
    """Installs ROPE_FUNCTIONS[mt] in the family's modeling module mod (module-wide, as patch.py's
    apply_rotary_pos_emb); returns the names swapped."""
    names = []
    for fname, fn in ROPE_FUNCTIONS.get(mt, {}).items():
        if getattr(mod, fname, None) is not fn and hasattr(mod, fname):
            _ROPE_SAVED[(mt, fname)] = getattr(mod, fname)
            setattr(mod, fname, fn)
        if fname != "apply_rotary_pos_emb":  # that one patch.py reports
            names.append(fname)
    return names


def unpatch_rope_all(mod):
    """Restores what patch_rope swapped in the modeling module mod, whichever family's it is."""
    for mt in ROPE_FUNCTIONS:
        unpatch_rope(mt, mod)


def unpatch_rope(mt, mod):
    """Restores what patch_rope(mt, mod) swapped."""
    for fname, fn in ROPE_FUNCTIONS.get(mt, {}).items():
        if getattr(mod, fname, None) is fn and (mt, fname) in _ROPE_SAVED:
            setattr(mod, fname, _ROPE_SAVED[(mt, fname)])
