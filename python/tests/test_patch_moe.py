"""kite.torch.patch on the MoE families of patch_moe.py (Qwen3-MoE, gpt-oss, DeepSeek-V3): tiny
random-init transformers models built from configs (no downloads), 2 layers (a dense one and a
MoE one where the family has both). Per family: f32 logits within 1e-6 (max error relative to the
largest magnitude) of the unpatched model's; greedy generate() identical for 32 tokens; bf16
logits as close to the f32 model's as the unpatched bf16 model's are (BF16_MARGIN); the default
patch in training mode trains as torch (test_training's check: 20 AdamW steps, losses and step-1
gradients within 1e-4) with the router and experts left to torch; an eval model whose parameters
require grad falls back to torch where a gradient is wanted; unpatch restores."""
import gc

import pytest
import torch
from test_training import TOL, _assert_same_training, _batch, _rel, _train

import kite
import kite.torch

transformers = pytest.importorskip("transformers")

F32_TOL = 1e-6
# kite's ops round bf16 where torch's do, but not always the same way (the f32 accumulation of
# fused_moe_ex, one rounding in rms_norm): the patched bf16 model's error against the f32 model may
# differ a little from the unpatched bf16 model's, either way
BF16_MARGIN = 1.5

COMMON = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
ROPE = dict(rope_type="default", rope_theta=10000.0)
FAMILIES = {
    # layer 0 dense (mlp_only_layers), layer 1 MoE
    "qwen3_moe": lambda: transformers.Qwen3MoeConfig(
        **COMMON, head_dim=16, intermediate_size=128, num_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=48, norm_topk_prob=True, mlp_only_layers=[0]),
    # layer 0 sliding window, layer 1 full; every layer MoE (experts with biases, clamped SwiGLU)
    "gpt_oss": lambda: transformers.GptOssConfig(
        **COMMON, head_dim=16, intermediate_size=48, num_local_experts=8, num_experts_per_tok=2,
        sliding_window=24, rope_parameters=ROPE),
    # layer 0 dense (first_k_dense_replace), layer 1 MoE with a shared expert; sigmoid router with
    # grouped top-k and the correction bias; MLA with interleaved rope
    "deepseek_v3": lambda: transformers.DeepseekV3Config(
        **dict(COMMON, num_key_value_heads=4), intermediate_size=128, moe_intermediate_size=48, n_routed_experts=8,
        num_experts_per_tok=2, n_group=4, topk_group=2, first_k_dense_replace=1,
        n_shared_experts=1, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16,
        qk_rope_head_dim=8, v_head_dim=16, routed_scaling_factor=2.5, rope_parameters=ROPE),
}
# what the default patch reports per family, in eval mode
EVAL_REPORT = {
    "qwen3_moe": ["-> moe_route (k=2, score=softmax", "-> fused_moe_ex (act=silu)",
                  "-> GatedMLP", "-> RMSNorm", "apply_rotary_pos_emb -> rope", "kite sdpa"],
    "gpt_oss": ["-> moe_route (k=2, score=softmax_topk", "GptOssExperts left to torch",
                "-> RMSNorm (result in the input's dtype)", "apply_rotary_pos_emb -> rope",
                "attention: left to transformers: attention sinks"],
    "deepseek_v3": ["-> moe_route (k=2, score=sigmoid, n_group=4, topk_group=2, renormalize=1, "
                    "scaling=2.5)", "-> fused_moe_ex (act=silu)", "shared_experts: DeepseekV3MLP "
                    "-> GatedMLP", "mlp: DeepseekV3MLP -> GatedMLP", "kv_a_layernorm: "
                    "DeepseekV3RMSNorm -> RMSNorm", "apply_rotary_pos_emb_interleave -> rope",
                    "attention: left to transformers: multi-head latent attention"],
}


@pytest.fixture(autouse=True)
def _one_thread_and_restore_rotary():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the host's cores are shared (test_training's reason)
    yield
    torch.set_num_threads(threads)
    for f in FAMILIES:
        kite.torch.patch_module.unpatch_rotary(f)


def _model(family, dtype=torch.float32, train=False):
    torch.manual_seed(0)
    cfg = FAMILIES[family]()
    cfg._attn_implementation = "eager"
    m = transformers.AutoModelForCausalLM.from_config(cfg).to(dtype)
    with torch.no_grad():  # a correction bias that steers (from_config leaves it 0)
        for mod in m.modules():
            if hasattr(mod, "e_score_correction_bias"):
                mod.e_score_correction_bias.uniform_(-0.05, 0.05)
    return m.train(train)


def _inputs():
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 256, (2, 40), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :5] = 0  # left padding in the second sequence
    return ids, mask


def _logits(m, ids, mask):
    with torch.no_grad():
        return m(ids, attention_mask=mask).logits.float()


def _err(got, want, mask):
    valid = mask.bool()
    return ((got - want).abs()[valid].max() / want.abs()[valid].max()).item()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_patched_logits_f32(family):
    m = _model(family)
    ids, mask = _inputs()
    ref = _logits(m, ids, mask)
    done = "\n".join(kite.torch.patch(m))
    for what in EVAL_REPORT[family]:
        assert what in done, f"{family}: {what!r} not in the report:\n{done}"
    err = _err(_logits(m, ids, mask), ref, mask)
    print(f"{family} f32: max rel err {err:.2e}")
    assert err <= F32_TOL, f"{family} f32: {err:.3g}"


@pytest.mark.parametrize("family", list(FAMILIES))
def test_patched_logits_bf16_within_torch_bf16_error(family):
    ids, mask = _inputs()
    ref = _logits(_model(family), ids, mask)
    m = _model(family, torch.bfloat16)
    plain = _err(_logits(m, ids, mask), ref, mask)
    kite.torch.patch(m)
    err = _err(_logits(m, ids, mask), ref, mask)
    print(f"{family} bf16: error against f32 {err:.3g} (kite) vs {plain:.3g} (torch)")
    assert err <= BF16_MARGIN * plain, f"{family} bf16: {err:.3g} vs torch's {plain:.3g}"


@pytest.mark.parametrize("family", list(FAMILIES))
def test_greedy_generate_identical_f32(family):
    m = _model(family)
    ids = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(3))
    kw = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        want = m.generate(ids, **kw)
        kite.torch.patch(m)
        got = m.generate(ids, **kw)
    assert got.shape[1] == 12 + 32
    assert torch.equal(got, want), f"{family}: patched greedy tokens differ"


@pytest.mark.parametrize("family", list(FAMILIES))
def test_default_patch_trains_like_torch(family):
    plain, patched = _model(family, train=True), _model(family, train=True)
    keys = list(patched.state_dict())
    done = "\n".join(kite.torch.patch(patched))
    assert "-> RMSNorm" in done and "-> rope" in done and "fused linear cross-entropy" in done
    assert "-> moe_route" not in done and "-> fused_moe_ex" not in done
    assert "Experts left to torch" in done and "Router left to torch" in done
    if family == "qwen3_moe":
        assert "kite sdpa" in done
    else:
        assert "attention: left to transformers" in done and "kite sdpa" not in done
    if family != "gpt_oss":
        assert "-> GatedMLP" in done
    assert list(patched.state_dict()) == keys  # the model's own parameters, no copies
    a, b = _train(plain), _train(patched)
    assert set(b[1]) == {n for n, p in patched.named_parameters() if p.requires_grad}
    loss_err, grad_err = _assert_same_training(a, b, family)
    print(f"{family}: max loss rel diff {loss_err:.2e}, max step-1 grad rel err {grad_err:.2e}")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_eval_patch_with_grad_falls_back(family):
    """An eval model whose parameters require grad: the kite router and experts are installed, and
    a call that needs a gradient runs the model's own."""
    plain, patched = _model(family), _model(family)
    done = "\n".join(kite.torch.patch(patched))
    assert "-> moe_route" in done
    ids, labels = _batch()
    plain(input_ids=ids, labels=labels).loss.backward()
    patched(input_ids=ids, labels=labels).loss.backward()
    for (n, p), (_, q) in zip(plain.named_parameters(), patched.named_parameters()):
        if p.grad is None:
            assert q.grad is None, f"{n}: a gradient where torch gives none"
            continue
        assert q.grad is not None, f"{n}: no gradient"
        assert _rel(q.grad, p.grad) <= TOL, f"{n}: {_rel(q.grad, p.grad):.3g}"


@pytest.mark.parametrize("family", list(FAMILIES))
def test_unpatch_restores(family):
    gc.collect()  # patched models of earlier tests still hold the family's kite rope
    m = _model(family)
    ml = kite.torch.patch_module._modeling(family)
    rotary = {f: getattr(ml, f) for f in ("apply_rotary_pos_emb", "apply_rotary_pos_emb_interleave")
              if hasattr(ml, f)}
    types = {n: type(x) for n, x in m.named_modules()}
    keys = list(m.state_dict())
    impl = m.config._attn_implementation
    ids, mask = _inputs()
    want = _logits(m, ids, mask)
    kite.torch.patch(m)
    assert {n: type(x) for n, x in m.named_modules()} != types
    assert list(m.state_dict()) == keys
    assert all(getattr(ml, f) is not fn for f, fn in rotary.items())
    assert kite.torch.unpatch(m)
    assert {n: type(x) for n, x in m.named_modules()} == types
    assert m.config._attn_implementation == impl
    assert all(getattr(ml, f) is fn for f, fn in rotary.items())
    assert torch.equal(_logits(m, ids, mask), want)
