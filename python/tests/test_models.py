"""Tiny random-init transformers models built from configs (no downloads): kite.torch.patch'ed
logits against the unpatched model's (f32 tight, bf16 loose; today's dense families: f32 within
1e-6, bf16 within the unpatched bf16 model's own error against f32), and greedy generate()
identical in f32 for 32 tokens, per family; the partial mode for a family patch has no entry for,
and the report per module type."""
import pytest
import torch
from conftest import DEVICES

import kite
import kite.torch

transformers = pytest.importorskip("transformers")

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              tie_word_embeddings=False)
FAMILIES = {
    "llama": lambda: transformers.LlamaConfig(**COMMON),
    "mistral": lambda: transformers.MistralConfig(**COMMON, sliding_window=24),
    "qwen2": lambda: transformers.Qwen2Config(**COMMON),
    "qwen3": lambda: transformers.Qwen3Config(**COMMON, head_dim=16),
    "gemma": lambda: transformers.GemmaConfig(**COMMON, head_dim=16),
    "gemma2": lambda: transformers.Gemma2Config(**COMMON, head_dim=16, sliding_window=24,
                                                attn_logit_softcapping=50.0,
                                                final_logit_softcapping=30.0),
    "mixtral": lambda: transformers.MixtralConfig(**COMMON, num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": lambda: transformers.Qwen2MoeConfig(**COMMON, num_experts=4, num_experts_per_tok=2,
                                                     moe_intermediate_size=48,
                                                     shared_expert_intermediate_size=64,
                                                     norm_topk_prob=True),
}
# today's dense families: each one's quirks switched on at a tiny size
_NO_SPECIAL = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)
DENSE = {
    # local layers (sliding window, rope base 10k) and a global one (base 1M), QK-norm, Gemma norms
    "gemma3_text": lambda: transformers.Gemma3TextConfig(
        **{**COMMON, "num_hidden_layers": 3}, **_NO_SPECIAL, head_dim=16, sliding_window=8,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"]),
    # fused qkv_proj and gate_up_proj, partial rotary
    "phi3": lambda: transformers.Phi3Config(
        **COMMON, **_NO_SPECIAL,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.5}),
    "olmo2": lambda: transformers.Olmo2Config(**COMMON, **_NO_SPECIAL),
    "granite": lambda: transformers.GraniteConfig(
        **COMMON, **_NO_SPECIAL, embedding_multiplier=6.0, residual_multiplier=0.5,
        attention_multiplier=0.1, logits_scaling=4.0),
    # the second layer is NoPE
    "smollm3": lambda: transformers.SmolLM3Config(**COMMON, **_NO_SPECIAL, no_rope_layers=[1, 0]),
    # LayerNorm, partial rotary (rotary_pct 0.25), parallel residual, fused qkv, plain gelu MLP
    "gpt_neox": lambda: transformers.GPTNeoXConfig(
        **{k: v for k, v in COMMON.items() if k != "num_key_value_heads"}, **_NO_SPECIAL,
        use_parallel_residual=True),
}
FAMILIES.update(DENSE)


def _model(family, dtype, device):
    torch.manual_seed(0)
    cfg = FAMILIES[family]()
    cfg._attn_implementation = "eager"
    m = transformers.AutoModelForCausalLM.from_config(cfg).to(device, dtype).eval()
    return m


@pytest.fixture(autouse=True)
def _restore_rotary():
    # one thread: torch's 2-thread kernels on these tiny shapes slow down many times over when
    # the host's other core is busy (as test_training does)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    for f in list(FAMILIES) + ["arcee"]:  # arcee: the partial mode's family
        kite.torch.patch_module.unpatch_rotary(f)


def _rel_err(got, ref, valid):
    return ((got - ref).abs()[valid].max() / ref.abs()[valid].max()).item()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_patched_logits(family, dtype, device):
    m = _model(family, dtype, device)
    ids = torch.randint(0, 256, (2, 40), device=device)
    mask = torch.ones_like(ids)
    mask[1, :5] = 0  # left padding in the second sequence
    with torch.no_grad():
        ref = m(ids, attention_mask=mask).logits.float()
        done = kite.torch.patch(m)
        got = m(ids, attention_mask=mask).logits.float()
    kinds = " ".join(done)
    assert ("-> LayerNorm" if family == "gpt_neox" else "-> RMSNorm") in kinds
    assert "rope" in kinds and "kite sdpa" in kinds
    if family in ("mixtral", "qwen2_moe"):
        assert "-> fused_moe (act=" in kinds and "topk_gating" in kinds
    else:
        assert ("-> MLP(gelu)" if family == "gpt_neox" else "GatedMLP") in kinds
    valid = mask.bool()
    err = _rel_err(got, ref, valid)
    if dtype == torch.float32:
        # today's dense families: within 1e-6 of the unpatched model
        assert err < (1e-6 if family in DENSE else 1e-4), f"{family} f32: {err:.3g}"
    elif family not in DENSE:
        assert err < 6e-2, f"{family} {dtype}: {err:.3g}"
    else:
        # bf16 against the f32 model: kite's error no larger than the unpatched bf16 model's own
        # (with a margin for the two roundings meeting differently)
        with torch.no_grad():
            exact = _model(family, torch.float32, device)(ids, attention_mask=mask).logits
        own, kites = _rel_err(ref, exact, valid), _rel_err(got, exact, valid)
        assert kites <= 1.5 * own + 1e-3, f"{family} bf16: {kites:.3g} vs torch's {own:.3g}"


@pytest.mark.parametrize("device", DEVICES)
def test_rope_table_made_once_per_forward(device):
    """The layers of one forward share one rope table (each layer's rope keeps it for the
    backward), and a forward with other positions gets a fresh one."""
    m = _model("llama", torch.float32, device)
    ref = _model("llama", torch.float32, device)
    kite.torch.patch(m, mlp=False, attention=False)
    ids = torch.randint(0, 256, (2, 24), device=device)
    for start in (0, 7):
        pos = torch.arange(start, start + 24, device=device).expand(2, 24)
        got = m(ids, position_ids=pos).logits
        want = ref(ids, position_ids=pos).logits
        assert _rel_err(got.detach(), want.detach(), torch.ones_like(got, dtype=torch.bool)) < 1e-6
        tables, seen, todo = set(), set(), [got.grad_fn]
        while todo:
            node = todo.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            if type(node).__name__ == "_RopeBackward":
                tables.add(node.saved_tensors[1].data_ptr())
            todo.extend(f for f, _ in node.next_functions)
        assert len(tables) == 1, f"{len(tables)} rope tables in one forward"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_greedy_generate_identical_f32(family, device):
    m = _model(family, torch.float32, device)
    ids = torch.randint(0, 256, (1, 12), device=device)
    kw = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        want = m.generate(ids, **kw)
        kite.torch.patch(m)
        got = m.generate(ids, **kw)
    assert got.shape[1] == 12 + 32
    assert torch.equal(got, want), f"{family}: patched greedy tokens differ"


def test_unknown_model_refused():
    class Cfg:
        model_type = "gpt2"

    class M(torch.nn.Module):
        config = Cfg()
    with pytest.raises(kite.Unsupported, match=r"model type 'gpt2' is not one kite knows"):
        kite.torch.patch(M())
    with pytest.raises(kite.InvalidArgument, match=r"not a transformers model"):
        kite.torch.patch(torch.nn.Linear(2, 2))


def _arcee():
    """A llama-like family kite.torch.patch has no entry for (a plain relu^2 MLP)."""
    torch.manual_seed(0)
    cfg = transformers.ArceeConfig(**COMMON, **_NO_SPECIAL)
    cfg._attn_implementation = "eager"
    return transformers.AutoModelForCausalLM.from_config(cfg).float().eval()


class _NotAnRMSNorm(torch.nn.Module):
    """Named like a norm, computes no norm: the partial mode's probe must leave it."""

    def __init__(self, h):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(h))

    def forward(self, x):
        return x * self.weight


def test_partial_mode_for_an_unknown_llama_like_family():
    m = _arcee()
    m.model.norm = _NotAnRMSNorm(COMMON["hidden_size"])
    ids = torch.randint(0, 256, (2, 40))
    types = {n: type(x) for n, x in m.named_modules()}
    kw = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        ref, want = m(ids).logits, m.generate(ids[:1, :12], **kw)
        report = kite.torch.patch(m)
        got, tokens = m(ids).logits, m.generate(ids[:1, :12], **kw)
    assert report.partial and report.family == "arcee"
    by = report.by_type
    assert by["ArceeRMSNorm"]["replaced"] == {"RMSNorm": 4} and not by["ArceeRMSNorm"]["left"]
    assert list(by["_NotAnRMSNorm"]["left"]) == [
        "its output is not kite's rms_norm (offset 0 or 1) on a probe input"]
    assert sum(by["apply_rotary_pos_emb"]["replaced"].values()) == 1
    for kind, n in (("ArceeMLP", 2), ("attention", 1), ("lm_head + loss", 1)):
        assert not by[kind]["replaced"]
        (why, count), = by[kind]["left"].items()
        assert count == n and "partial mode" in why
    assert "arcee (partial mode)" in report.summary()
    assert "ArceeRMSNorm: 4 -> RMSNorm" in report.summary()
    assert m.config._attn_implementation == "eager" and "forward" not in m.__dict__
    assert _rel_err(got, ref, torch.ones_like(ids, dtype=torch.bool)) < 1e-6
    assert torch.equal(tokens, want)
    assert kite.torch.unpatch(m)
    assert {n: type(x) for n, x in m.named_modules()} == types
    with torch.no_grad():
        assert torch.equal(m(ids).logits, ref)


def test_report_by_module_type():
    m = _model("gpt_neox", torch.float32, "cpu")
    report = kite.torch.patch(m)
    assert isinstance(report, list) and not report.partial  # the list patch always returned
    assert any(line.endswith(": LayerNorm -> LayerNorm") for line in report)
    by = report.by_type
    assert by["LayerNorm"] == {"replaced": {"LayerNorm": 5}, "left": {}}
    assert by["GPTNeoXMLP"] == {"replaced": {"MLP(gelu)": 2}, "left": {}}
    assert by["attention"]["replaced"] == {"kite sdpa": 1}
    assert any("parallel residual" in line for line in report)  # the family's quirks, named
    s = report.summary().splitlines()
    assert s[0] == "kite.torch.patch: gpt_neox" and "  GPTNeoXMLP: 2 -> MLP(gelu)" in s


def test_fused_gate_up_read_in_place():
    """Phi-3's fused gate_up_proj (and qkv_proj) stay the model's own parameters: no copy, no
    split, the same storage."""
    m = _model("phi3", torch.float32, "cpu")
    before = {n: (p, p.data_ptr()) for n, p in m.named_parameters()}
    report = kite.torch.patch(m)
    assert _replaced(report, "Phi3MLP") == {"GatedMLP(silu_and_mul over the fused gate_up_proj)": 2}
    after = dict(m.named_parameters())
    assert list(after) == list(before)
    for n, p in after.items():
        assert p is before[n][0] and p.data_ptr() == before[n][1], n
    mlp = m.model.layers[0].mlp
    assert isinstance(mlp, kite.torch.nn.GatedMLP) and mlp.gate_up_proj is not None
    assert not hasattr(mlp, "gate_proj") and not hasattr(mlp, "up_proj")


def _replaced(report, kind):
    return dict(report.by_type[kind]["replaced"])


def test_a_part_kite_lacks_is_left_and_reported():
    """A known family with an MLP activation kite has no gated form of (relu): that MLP is left to
    torch and reported, the rest is patched, the logits unchanged; a training-mode MoE model's
    router and experts are reported left (kite has no backward for them)."""
    torch.manual_seed(0)
    cfg = FAMILIES["llama"]()
    cfg.hidden_act = "relu"
    cfg._attn_implementation = "eager"
    m = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    ids = torch.randint(0, 256, (2, 24))
    with torch.no_grad():
        ref = m(ids).logits
        report = kite.torch.patch(m)
        got = m(ids).logits
    assert report.by_type["LlamaMLP"] == {
        "replaced": {}, "left": {"activation 'relu' has no kite gated form": 2}}
    assert report.by_type["LlamaRMSNorm"]["replaced"] == {"RMSNorm": 5}
    assert "model.layers.0.mlp: LlamaMLP left to torch: activation 'relu'" in "\n".join(report)
    assert _rel_err(got, ref, torch.ones_like(ids, dtype=torch.bool)) < 1e-6
    moe = _model("mixtral", torch.float32, "cpu").train()
    by = kite.torch.patch(moe).by_type
    for kind, op in (("MixtralTopKRouter", "topk_gating"), ("MixtralExperts", "fused_moe")):
        (why, n), = by[kind]["left"].items()
        assert n == 2 and why.startswith(op) and "training mode" in why and not by[kind]["replaced"]
