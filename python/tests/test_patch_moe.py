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
# bf16: kite's ops round where torch's do, not always alike (one rounding in rms_norm, the f32
# accumulation of fused_moe_ex), so per token the patched bf16 model's error against the f32 model
# is held to the unpatched bf16 model's (median and 90th percentile within BF16_MARGIN). A bf16
# rounding can also flip a near-tie expert choice of a token (the unpatched bf16 model flips some
# too): that token's logits then differ by a different expert, not by rounding; at most
# EXTRA_FLIPS more such tokens (error above FLIP x torch's median) than torch's bf16 model has.
BF16_MARGIN, FLIP, EXTRA_FLIPS = 1.25, 4.0, 1

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
        **dict(COMMON, num_key_value_heads=4), intermediate_size=128, moe_intermediate_size=48,
        n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2, first_k_dense_replace=1,
        n_shared_experts=1, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16,
        qk_rope_head_dim=8, v_head_dim=16, routed_scaling_factor=2.5, rope_parameters=ROPE),
}
# what the default patch reports per family, in eval mode
EVAL_REPORT = {
    "qwen3_moe": ["-> moe_route (k=2, score=softmax", "-> fused_moe (act=silu)",
                  "-> GatedMLP", "-> RMSNorm", "apply_rotary_pos_emb -> rope", "kite sdpa"],
    "gpt_oss": ["-> moe_route (k=2, score=softmax_topk", "GptOssExperts -> fused_moe_ex (act="
                "swiglu_oai, interleaved, alpha=1.702, limit=7, biases, transposed)",
                "-> RMSNorm (result in the input's dtype)", "apply_rotary_pos_emb -> rope",
                "kite sdpa"],
    "deepseek_v3": ["-> moe_route (k=2, score=sigmoid, n_group=4, topk_group=2, renormalize=1, "
                    "scaling=2.5)", "-> fused_moe (act=silu)", "shared_experts: DeepseekV3MLP "
                    "-> GatedMLP", "mlp: DeepseekV3MLP -> GatedMLP", "kv_a_layernorm: "
                    "DeepseekV3RMSNorm -> RMSNorm", "apply_rotary_pos_emb_interleave -> rope",
                    "kite sdpa"],
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


def _token_err(got, want, mask):
    """Per valid token: the max error of its logits relative to the largest magnitude."""
    valid = mask.bool()
    return (got - want).abs()[valid].amax(-1) / want.abs()[valid].max()


def _err(got, want, mask):
    return _token_err(got, want, mask).max().item()


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


@pytest.mark.parametrize("patch_first", [False, True], ids=["after_a_call", "before_any_call"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_router_logits_recorded(family, patch_first):
    """output_router_logits (and Qwen3-MoE's / gpt-oss's aux loss) of an eval model: kite's
    router records its logits as the model's router does, patched before or after the model's
    first call (transformers puts its recording hooks in place at the first call)."""
    m = _model(family)
    ids, mask = _inputs()
    kw = dict(attention_mask=mask, output_router_logits=True, labels=ids)
    if patch_first:
        with torch.no_grad():
            want = _model(family)(ids, **kw)
        kite.torch.patch(m)
    with torch.no_grad():
        if not patch_first:
            want = m(ids, **kw)
            kite.torch.patch(m)
        got = m(ids, **kw)
    assert len(got.router_logits) == len(want.router_logits) > 0
    valid = mask.reshape(-1).bool()  # padding rows: kite's sdpa gives zeros, eager the mean
    for a, b in zip(got.router_logits, want.router_logits):
        assert _rel(a[valid], b[valid]) <= F32_TOL
    if getattr(want, "aux_loss", None) is not None:
        assert abs(got.aux_loss.item() - want.aux_loss.item()) <= F32_TOL * want.aux_loss.item()
    kite.torch.unpatch(m)  # the model's own router records them again
    with torch.no_grad():
        again = m(ids, **kw)
    assert len(again.router_logits) == len(want.router_logits)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_patched_logits_bf16_within_torch_bf16_error(family):
    ids, mask = _inputs()
    ref = _logits(_model(family), ids, mask)
    m = _model(family, torch.bfloat16)
    plain = _token_err(_logits(m, ids, mask), ref, mask)
    kite.torch.patch(m)
    err = _token_err(_logits(m, ids, mask), ref, mask)
    for q in (0.5, 0.9):
        e, p = err.quantile(q).item(), plain.quantile(q).item()
        print(f"{family} bf16: quantile {q} of the token errors {e:.3g} (kite) vs {p:.3g} (torch)")
        assert e <= BF16_MARGIN * p, f"{family} bf16: quantile {q}: {e:.3g} vs torch's {p:.3g}"
    flips = [int((x > FLIP * plain.median()).sum()) for x in (err, plain)]
    assert flips[0] <= flips[1] + EXTRA_FLIPS, f"{family} bf16: {flips} tokens off (kite, torch)"


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
    # gpt-oss's sinks train through kite's sdpa_backward (dsinks), DeepSeek's MLA through it
    # with v padded to the key width
    assert "kite sdpa" in done
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
