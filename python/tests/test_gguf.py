"""GGUF block weights (kite.ops.dequant_gguf, kite.ops.linear_gguf) against gguf-py's own
dequantization (gguf.quants.dequantize), every block type kite runs, on ref and the cpu kernels.

Blocks are random bytes with each f16 scale field replaced by a random finite f16, so every bit
pattern of the quantized values, the packed 6-bit scales and the sign bits is exercised.
"""
import numpy as np
import pytest
import torch

import kite

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf.quants import dequantize  # noqa: E402

# type -> byte offsets of its f16 scale fields in a block (GGUF's layouts, kite.h)
F16_FIELDS = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
              Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208],
              Q.IQ4_NL: [0], Q.MXFP4: []}
KERNELS = ["ref", "cpu.scalar", "cpu"]


def blocks(t, rows, nblocks, seed=0, e8m0=None):
    """uint8 [rows, nblocks * block bytes] of type t with random finite f16 scales; MXFP4's e8m0
    scale byte random over all 256 values (e8m0 None: subnormal and infinite weights included)
    or over the range e8m0."""
    g = np.random.default_rng(seed + int(t))
    bv, bb = gguf.GGML_QUANT_SIZES[t]
    raw = g.integers(0, 256, (rows, nblocks, bb), dtype=np.uint8)
    for off in F16_FIELDS[t]:
        h = (g.standard_normal((rows, nblocks)) * 0.05).astype(np.float16)
        raw[:, :, off:off + 2] = h.view(np.uint8).reshape(rows, nblocks, 2)
    if t == Q.MXFP4 and e8m0 is not None:
        raw[:, :, 0] = g.integers(e8m0[0], e8m0[1], (rows, nblocks), dtype=np.uint8)
    return raw.reshape(rows, nblocks * bb)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("t", list(F16_FIELDS), ids=lambda t: t.name)
def test_dequant_matches_gguf_py_bit_for_bit(t, kernel):
    raw = blocks(t, 5, 3)
    want = torch.from_numpy(dequantize(raw, t).astype(np.float32))
    y = torch.empty(want.shape, dtype=torch.float32)
    with kite.kernels(f"dequant_gguf={kernel}"):
        kite.ops.dequant_gguf(torch.from_numpy(raw), int(t), y)
    # the same f32 bits, signed zeros included
    assert torch.equal(y.view(torch.int32), want.view(torch.int32)), \
        f"{t.name} on {kernel}: {(y != want).sum().item()} values differ"


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_dequant_rounds_the_f32_value_once_to_the_dtype(dtype, kernel):
    raw = blocks(Q.Q6_K, 4, 2)
    want = torch.from_numpy(dequantize(raw, Q.Q6_K).astype(np.float32)).to(dtype)
    y = torch.empty(want.shape, dtype=dtype)
    with kite.kernels(f"dequant_gguf={kernel}"):
        kite.ops.dequant_gguf(torch.from_numpy(raw), int(Q.Q6_K), y)
    assert torch.equal(y, want)


@pytest.mark.parametrize("kernel", KERNELS)
def test_q8_k_is_its_f32_scale_times_the_codes(kernel):
    """Q8_K (llama.cpp's activation blocks; gguf-py has no dequantization for it): f32 d,
    256 int8 codes, 16 int16 sums that are not read."""
    g = np.random.default_rng(3)
    raw = g.integers(0, 256, (3, 2, 292), dtype=np.uint8)
    d = (g.standard_normal((3, 2)) * 0.01).astype(np.float32)
    raw[:, :, 0:4] = d.view(np.uint8).reshape(3, 2, 4)
    want = (raw[:, :, 4:260].view(np.int8).astype(np.float32) * d[:, :, None]).reshape(3, 512)
    y = torch.empty(3, 512)
    with kite.kernels(f"dequant_gguf={kernel}"):
        kite.ops.dequant_gguf(torch.from_numpy(raw.reshape(3, -1)), 15, y)
    assert torch.equal(y, torch.from_numpy(want))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("t", list(F16_FIELDS), ids=lambda t: t.name)
def test_linear_against_torch_on_the_dequantized_weight(t, kernel):
    bv = gguf.GGML_QUANT_SIZES[t][0]
    raw = blocks(t, 13, 2, seed=7, e8m0=(118, 130))
    wd = torch.from_numpy(dequantize(raw, t).astype(np.float64))
    x, bias = torch.randn(9, 2 * bv), torch.randn(13)
    want = x.double() @ wd.T + bias.double()
    with kite.kernels(f"linear_gguf={kernel}"):
        y = kite.ops.linear_gguf(x, torch.from_numpy(raw), int(t), bias)
    err = (y.double() - want).abs().max() / want.abs().max()
    assert err < 1e-5, f"{t.name} on {kernel}: relative error {err:.3g}"


def test_q4_0_and_q4_1_agree_with_linear_wq4():
    x = torch.randn(3, 64)
    for t, fmt in ((Q.Q4_0, 0), (Q.Q4_1, 1)):
        w = torch.from_numpy(blocks(t, 7, 2))
        got = kite.ops.linear_gguf(x, w, int(t))
        ref = kite.ops.linear_wq4(x, w, fmt)
        assert torch.allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_block_info_and_errors():
    w = torch.from_numpy(blocks(Q.Q4_K, 2, 1))
    with pytest.raises(kite.InvalidArgument, match="not a multiple of 256"):
        kite.ops.linear_gguf(torch.randn(1, 96), w[:, :54], int(Q.Q4_K))
    with pytest.raises(kite.InvalidArgument, match="type 1 is not a GGUF block type"):
        kite.ops.linear_gguf(torch.randn(1, 32), torch.zeros(2, 18, dtype=torch.uint8), 1)
    with pytest.raises(kite.InvalidArgument, match="expected K/256 blocks of 144"):
        kite.ops.linear_gguf(torch.randn(1, 256), w[:, :100], int(Q.Q4_K))


def checkpoint_to_gguf_mxfp4(blocks_, scales):
    """gpt-oss's checkpoint MXFP4 (`*_blocks` uint8 [..., G, 16], the low nibble of byte j value
    2 j and the high nibble value 2 j + 1; `*_scales` uint8 [..., G]) as GGUF MXFP4 blocks
    [..., G * 17] (kite.h): the scale byte first, then value j < 16 in the low nibble of byte j
    and value j + 16 in its high nibble."""
    codes = np.stack([blocks_ & 15, blocks_ >> 4], axis=-1).reshape(*blocks_.shape[:-1], 32)
    packed = codes[..., :16] | (codes[..., 16:] << 4)
    out = np.concatenate([scales[..., None], packed.astype(np.uint8)], axis=-1)
    return out.reshape(*blocks_.shape[:-2], -1)


@pytest.mark.parametrize("kernel", KERNELS)
def test_mxfp4_checkpoint_layout_matches_transformers(kernel):
    """The gpt-oss checkpoint's experts, repacked to GGUF's block layout, decode to what
    transformers' own MXFP4 dequantization gives (its [E, K, N] result transposed back)."""
    mx = pytest.importorskip("transformers.integrations.mxfp4")
    g = np.random.default_rng(11)
    e, n, nb = 2, 6, 3
    blk = g.integers(0, 256, (e, n, nb, 16), dtype=np.uint8)
    scl = g.integers(110, 140, (e, n, nb), dtype=np.uint8)
    want = mx.convert_moe_packed_tensors(torch.from_numpy(blk), torch.from_numpy(scl),
                                         dtype=torch.float32).transpose(1, 2)
    raw = torch.from_numpy(checkpoint_to_gguf_mxfp4(blk, scl).reshape(e * n, -1))
    y = torch.empty(e * n, nb * 32)
    with kite.kernels(f"dequant_gguf={kernel}"):
        kite.ops.dequant_gguf(raw, int(Q.MXFP4), y)
    # transformers' table has -0.0 for code 8 where GGUF's has +0: equal as numbers
    assert torch.equal(y.reshape(e, n, nb * 32), want)


@pytest.mark.filterwarnings("ignore:overflow encountered in multiply")  # gguf-py's e = 255 row
def test_mxfp4_scale_extremes_follow_gguf():
    """e = 0 and 1 give f32 subnormal scales, e = 255 2^127 (products past f32's range: inf)."""
    raw = np.zeros((1, 3, 17), dtype=np.uint8)
    raw[0, :, 0] = [0, 1, 255]
    raw[0, :, 1] = 0x17  # value 0: code 7 (12 / 2 = 6.0), value 16: code 1 (0.5)
    want = torch.from_numpy(dequantize(raw.reshape(1, -1), Q.MXFP4).astype(np.float32))
    y = torch.empty(1, 96)
    kite.ops.dequant_gguf(torch.from_numpy(raw.reshape(1, -1)), int(Q.MXFP4), y)
    assert torch.equal(y.view(torch.int32), want.view(torch.int32))
    assert y[0, 0] == 12 * 2.0 ** -128 and y[0, 16] == 2.0 ** -128
    assert y[0, 64] == float("inf") and y[0, 80] == 2.0 ** 127


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("t", [Q.MXFP4, Q.Q4_K, Q.Q8_0], ids=lambda t: t.name)
def test_group_gemm_gguf_against_each_group_on_the_dequantized_weight(t, kernel):
    """group_gemm_gguf: each group's rows against its own blocks and bias, empty groups
    included."""
    bv = gguf.GGML_QUANT_SIZES[t][0]
    g, n, k = 4, 10, 2 * bv
    raws = [blocks(t, n, 2, seed=20 + i, e8m0=(118, 130)) for i in range(g)]
    sizes = [3, 0, 5, 1]
    x, bias = torch.randn(sum(sizes), k), torch.randn(g, n)
    want, r = [], 0
    for i, rows in enumerate(sizes):
        wd = torch.from_numpy(dequantize(raws[i], t).astype(np.float64))
        want.append(x[r:r + rows].double() @ wd.T + bias[i].double())
        r += rows
    want = torch.cat(want)
    w = torch.from_numpy(np.stack(raws))
    with kite.kernels(f"group_gemm_gguf={kernel}"):
        y = kite.ops.group_gemm_gguf(x, w, int(t), torch.tensor(sizes, dtype=torch.int32), bias)
    err = (y.double() - want).abs().max() / want.abs().max()
    assert err < 1e-5, f"{t.name} on {kernel}: relative error {err:.3g}"


def test_group_gemm_gguf_runs_gpt_oss_experts_from_the_checkpoint_layout():
    """gpt-oss's MXFP4 experts (gate_up_proj_blocks / _scales as the checkpoint stores them,
    [E, 2I, H / 32, 16] and [E, 2I, H / 32]) repacked to GGUF blocks give the tokens' gate / up
    projections that transformers' dequantized [E, H, 2I] weights give."""
    mx = pytest.importorskip("transformers.integrations.mxfp4")
    g = np.random.default_rng(5)
    e, two_i, h = 3, 8, 64
    blk = g.integers(0, 256, (e, two_i, h // 32, 16), dtype=np.uint8)
    scl = g.integers(118, 130, (e, two_i, h // 32), dtype=np.uint8)
    dense = mx.convert_moe_packed_tensors(torch.from_numpy(blk), torch.from_numpy(scl),
                                          dtype=torch.float32)  # [E, H, 2I]
    sizes = [2, 4, 1]
    x = torch.randn(sum(sizes), h)
    want = torch.cat([x[r:r + n].double() @ dense[i].double()
                      for i, (r, n) in enumerate(zip(np.cumsum([0] + sizes[:-1]), sizes))])
    w = torch.from_numpy(checkpoint_to_gguf_mxfp4(blk, scl))
    y = kite.ops.group_gemm_gguf(x, w, int(Q.MXFP4), torch.tensor(sizes, dtype=torch.int32))
    assert torch.allclose(y.double(), want, rtol=1e-5, atol=1e-5)
