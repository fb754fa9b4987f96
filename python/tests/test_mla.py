"""MLA (DeepSeek-V2/V3) and yarn RoPE against transformers' DeepSeek-V3.

- yarn: kite.rope_inv_freq / kite.rope_cache equal transformers' _compute_yarn_parameters
  (inverse frequencies and attention factor) for DeepSeek-V3's, DeepSeek-V2-Lite's, Qwen's and
  gpt-oss's rope_parameters.
- decode: the absorbed kite.ops.mla_decode over a latent cache written by kite.ops.mla_store_kv
  equals attention over the decompressed keys and values (float64), and a whole
  DeepseekV3Attention layer (eager, float64) rebuilt from kite ops gives the module's output.
"""
import math

import pytest
import torch

import kite
from cases import mla_expanded_attention
from conftest import DEVICES

transformers = pytest.importorskip("transformers")
from transformers import DeepseekV3Config  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds  # noqa: E402

YARN = {
    "deepseek_v3": dict(rope_theta=10000.0, factor=40.0, original_max_position_embeddings=4096,
                        beta_fast=32, beta_slow=1, mscale=1.0, mscale_all_dim=1.0),
    "deepseek_v2_lite": dict(rope_theta=10000.0, factor=40.0,
                             original_max_position_embeddings=4096, beta_fast=32, beta_slow=1,
                             mscale=0.707, mscale_all_dim=0.707),
    "mscale_only": dict(rope_theta=10000.0, factor=40.0, original_max_position_embeddings=4096,
                        mscale=0.707),
    "qwen": dict(rope_theta=1000000.0, factor=4.0, original_max_position_embeddings=32768),
    "gpt_oss": dict(rope_theta=150000.0, factor=32.0, original_max_position_embeddings=4096,
                    beta_fast=32.0, beta_slow=1.0, truncate=False),
    "given_factor": dict(rope_theta=10000.0, factor=8.0, original_max_position_embeddings=2048,
                         attention_factor=1.25, beta_fast=16, beta_slow=2),
}


def _yarn_config(params, rope_dim=64):
    rp = dict(params, rope_type="yarn")
    return DeepseekV3Config(qk_rope_head_dim=rope_dim, max_position_embeddings=163840,
                            rope_parameters=rp)


def _kite_scaling(params):
    extra = {k: params[k] for k in ("beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                                    "attention_factor", "truncate") if k in params}
    return ("yarn", params["factor"], params["original_max_position_embeddings"], extra)


@pytest.mark.parametrize("name", list(YARN))
def test_yarn_inv_freq_and_attention_factor_match_transformers(name):
    params = YARN[name]
    cfg = _yarn_config(params)
    inv_t, att_t = ROPE_INIT_FUNCTIONS["yarn"](cfg, "cpu")
    inv_k, att_k = kite.rope_inv_freq(64, params["rope_theta"], _kite_scaling(params))
    # transformers computes in float32: agreement to f32 rounding of each frequency
    torch.testing.assert_close(torch.from_numpy(inv_k), inv_t.double(), rtol=1e-6, atol=0)
    assert att_k == pytest.approx(att_t, rel=1e-12)
    assert 0 < inv_k[-1] < inv_k[0] == 1.0


@pytest.mark.parametrize("name", ["deepseek_v3", "qwen", "gpt_oss"])
def test_yarn_rope_cache_matches_transformers_rotary_embedding(name):
    params = YARN[name]
    cfg = _yarn_config(params)
    rot = ds.DeepseekV3RotaryEmbedding(cfg)
    pos = torch.arange(64)[None]
    cos, sin = rot(torch.zeros(1, 64, 1), pos)  # [1, 64, 64]: cat(freqs, freqs), times the factor
    cache = kite.rope_cache(64, 64, params["rope_theta"], _kite_scaling(params), like="torch")
    torch.testing.assert_close(cache[:, :32], cos[0, :, :32], rtol=0, atol=2e-5)
    torch.testing.assert_close(cache[:, 32:], sin[0, :, :32], rtol=0, atol=2e-5)


def test_deepseek_scale_from_yarn_mscale():
    cfg = _yarn_config(YARN["deepseek_v3"])
    cfg.qk_nope_head_dim, cfg.qk_rope_head_dim = 128, 64
    attn = ds.DeepseekV3Attention(cfg, 0)
    scale = (128 + 64) ** -0.5 * kite.rope_yarn_mscale(40.0, 1.0) ** 2
    assert scale == pytest.approx(attn.scaling, rel=1e-15)


def _shuffled_table(batch, blocks_each, extra=3):
    perm = torch.randperm(batch * blocks_each + extra)[: batch * blocks_each]
    return perm.reshape(batch, blocks_each).to(torch.int32), batch * blocks_each + extra


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_absorbed_decode_equals_expanded_attention_deepseek_v3_dims(device, dtype):
    """DeepSeek-V3's sizes (128 + 64 query/key dims, v 128, kv_lora 512, rope 64) with 16 heads;
    the cache is written by mla_store_kv from kv_a_proj_with_mqa-shaped rows."""
    torch.manual_seed(0)
    H, R, P, Dn, Dv, bs = 16, 512, 64, 128, 128, 64
    lens = [1, 130, 300]
    nb = max(math.ceil(n / bs) for n in lens)
    table, num_blocks = _shuffled_table(len(lens), nb)
    ckv = torch.zeros(num_blocks, bs, R, dtype=dtype, device=device)
    kpe = torch.zeros(num_blocks, bs, P, dtype=dtype, device=device)
    rows = []  # per sequence: [n, R + P] as kv_a_proj_with_mqa (after the norm and rope) gives
    for b, n in enumerate(lens):
        kv_a = torch.randn(n, R + P).to(dtype).to(device)
        slots = (table[b].long()[torch.arange(n) // bs] * bs + torch.arange(n) % bs).to(torch.int32)
        kite.ops.mla_store_kv(kv_a[:, :R], kv_a[:, R:], ckv, kpe, slots.to(device))
        rows.append(kv_a)
    w_uk = torch.randn(H, Dn, R, dtype=torch.float64) / math.sqrt(R)
    w_uv = torch.randn(H, Dv, R, dtype=torch.float64) / math.sqrt(R)
    q_nope = torch.randn(len(lens), H, Dn, dtype=torch.float64)
    q_pe = torch.randn(len(lens), H, P).to(dtype)
    q_lat = torch.einsum("bhd,hdr->bhr", q_nope, w_uk).to(dtype)
    scale = (Dn + P) ** -0.5 * kite.rope_yarn_mscale(40.0, 1.0) ** 2
    o, lse = kite.ops.mla_decode(q_lat.to(device), q_pe.to(device), ckv, kpe, table.to(device),
                                 torch.tensor(lens, dtype=torch.int32, device=device), scale,
                                 lse=True)
    got = torch.einsum("bhr,hvr->bhv", o.double().cpu(), w_uv)
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    for b, n in enumerate(lens):
        exp = mla_expanded_attention(q_nope[b], q_pe[b], rows[b][:, :R], rows[b][:, R:], w_uk,
                                     w_uv, scale)
        err = (got[b] - exp).abs().max() / exp.abs().max()
        assert err < tol, f"sequence {b}: relative error {err:.3g}"
        # lse: the log-sum-exp of the absorbed scores, which equal the expanded ones
        s = (q_lat[b].double() @ rows[b][:, :R].double().cpu().T
             + q_pe[b].double() @ rows[b][:, R:].double().cpu().T) * scale
        torch.testing.assert_close(lse[b].cpu().double(), torch.logsumexp(s, -1),
                                   rtol=1e-4, atol=1e-4)


def test_mla_decode_refuses_bad_input():
    q, qp = torch.zeros(2, 4, 32), torch.zeros(2, 4, 8)
    ckv, kpe = torch.zeros(3, 4, 32), torch.zeros(3, 4, 8)
    table, lens = torch.zeros(2, 2, dtype=torch.int32), torch.tensor([3, 9], dtype=torch.int32)
    with pytest.raises(kite.InvalidArgument, match="mla_decode: scale"):
        kite.ops.mla_decode(q, qp, ckv, kpe, table, torch.tensor([1, 1], dtype=torch.int32), 0.0)
    with pytest.raises(kite.InvalidArgument, match="mla_decode: seq_lens: sequence 1"):
        kite.ops.mla_decode(q, qp, ckv, kpe, table, lens, 0.1)
    with pytest.raises(kite.InvalidArgument, match="mla_decode: kpe_cache"):
        kite.ops.mla_decode(q, qp, ckv, torch.zeros(3, 4, 16), table, lens, 0.1)
    with pytest.raises(kite.InvalidArgument, match="mla_store_kv: slots"):
        kite.ops.mla_store_kv(torch.zeros(1, 32), torch.zeros(1, 8), ckv, kpe,
                              torch.tensor([12], dtype=torch.int32))


@pytest.mark.parametrize("device", DEVICES)
def test_deepseek_v3_attention_layer_from_kite_ops(device):
    """A DeepseekV3Attention layer (eager, float64, yarn, interleaved rope) against the same
    weights run as kite's decode path: projections in torch, rope by kite (gptj pairs, the
    cache from kite.rope_cache with yarn), the latents stored by mla_store_kv, one mla_decode
    per position (sequence t holds the first t + 1 tokens, so every query is causal), W_UV and
    o_proj in torch."""
    torch.manual_seed(1)
    T, H, Dn, P, Dv, R = 12, 4, 16, 8, 16, 32
    rp = dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
              original_max_position_embeddings=16, beta_fast=32, beta_slow=1, mscale=0.9,
              mscale_all_dim=0.8)
    cfg = DeepseekV3Config(hidden_size=64, num_attention_heads=H, num_key_value_heads=H,
                           q_lora_rank=24, kv_lora_rank=R, qk_nope_head_dim=Dn,
                           qk_rope_head_dim=P, v_head_dim=Dv, max_position_embeddings=64,
                           rope_parameters=rp, rope_interleave=True)
    cfg._attn_implementation = "eager"
    attn = ds.DeepseekV3Attention(cfg, 0).double().eval()
    rotary = ds.DeepseekV3RotaryEmbedding(cfg)
    x = torch.randn(1, T, 64, dtype=torch.float64)
    cos, sin = rotary(x, torch.arange(T)[None])
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    with torch.no_grad():
        expected, _ = attn(x, (cos.double(), sin.double()), mask)

        # the caller's projections (float32 on the device)
        f = lambda t: t.float().to(device)  # noqa: E731
        q = attn.q_b_proj(attn.q_a_layernorm(attn.q_a_proj(x)))[0].view(T, H, Dn + P)
        kv = attn.kv_a_proj_with_mqa(x)[0]
        c_kv = attn.kv_a_layernorm(kv[:, :R])
        q_nope, q_pe = f(q[..., :Dn]), f(q[..., Dn:]).contiguous()
        k_pe = f(kv[:, R:]).contiguous().view(T, 1, P)
        cache = kite.rope_cache(64, P, 10000.0, ("yarn", 4.0, 16, rp), like="torch").to(device)
        positions = torch.arange(T, dtype=torch.int32, device=device)
        kite.ops.rope(q_pe, k_pe, positions, cache, P, 1)  # gptj: DeepSeek's interleaved pairs

        w_kv = attn.kv_b_proj.weight.view(H, Dn + Dv, R)
        w_uk, w_uv = f(w_kv[:, :Dn]), f(w_kv[:, Dn:])
        bs = 4
        table, num_blocks = _shuffled_table(1, math.ceil(T / bs))
        ckv = torch.zeros(num_blocks, bs, R, device=device)
        kpe = torch.zeros(num_blocks, bs, P, device=device)
        slots = (table[0].long()[torch.arange(T) // bs] * bs + torch.arange(T) % bs).to(torch.int32)
        kite.ops.mla_store_kv(f(c_kv), k_pe.view(T, P), ckv, kpe, slots.to(device))

        scale = (Dn + P) ** -0.5 * kite.rope_yarn_mscale(4.0, 0.8) ** 2
        assert scale == pytest.approx(attn.scaling, rel=1e-12)
        q_lat = torch.einsum("thd,hdr->thr", q_nope, w_uk)
        o = kite.ops.mla_decode(q_lat, q_pe, ckv, kpe, table.expand(T, -1).contiguous().to(device),
                                torch.arange(1, T + 1, dtype=torch.int32, device=device), scale)
        v = torch.einsum("thr,hvr->thv", o, w_uv).reshape(1, T, H * Dv)
        got = attn.o_proj(v.double().cpu())
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
