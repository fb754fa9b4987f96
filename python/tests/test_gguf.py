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
              Q.IQ4_NL: [0]}
KERNELS = ["ref", "cpu.scalar", "cpu"]


def blocks(t, rows, nblocks, seed=0):
    """uint8 [rows, nblocks * block bytes] of type t with random finite f16 scales."""
    g = np.random.default_rng(seed + int(t))
    bv, bb = gguf.GGML_QUANT_SIZES[t]
    raw = g.integers(0, 256, (rows, nblocks, bb), dtype=np.uint8)
    for off in F16_FIELDS[t]:
        h = (g.standard_normal((rows, nblocks)) * 0.05).astype(np.float16)
        raw[:, :, off:off + 2] = h.view(np.uint8).reshape(rows, nblocks, 2)
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
    raw = blocks(t, 13, 2, seed=7)
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
