"""What kite.torch.patch knows about each transformers model family, one entry per
config.model_type, and the report patch returns.

An entry says where the family's modeling code lives, which norm class it uses and in which form
(RMSNorm, Gemma's RMSNorm with +1, LayerNorm), how its MLP is laid out (separate gate / up / down
projections, one fused gate_up projection, a plain up -> act -> down, or MoE experts), the rotary
variant (all go through the family's apply_rotary_pos_emb, which reads the cos / sin the model's
rotary module computed: per-layer-type bases, partial rotary and NoPE layers need nothing else),
where the causal LM scales its logits, and the quirks that stay in the model's own code (which
patch leaves alone and the report names). Adding a family is adding an entry.
"""
import collections
import dataclasses
import importlib

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
