"""torch.compile(fullgraph=True) of a decoder block built from kite ops: no graph break, the
same results as eager."""
import pytest
import torch
from conftest import DEVICES

import kite.torch.nn as knn

ops = torch.ops.kite


class Block(torch.nn.Module):
    def __init__(self, H=64, heads=4, kv_heads=2, inter=96, E=4):
        super().__init__()
        self.h, self.kv, self.d = heads, kv_heads, H // heads
        self.norm1 = knn.RMSNorm(H)
        self.norm2 = knn.RMSNorm(H, offset=1.0)
        self.wqkv = torch.nn.Parameter(torch.randn((heads + 2 * kv_heads) * self.d, H) / H ** 0.5)
        self.wo = torch.nn.Parameter(torch.randn(H, H) / H ** 0.5)
        self.w13 = torch.nn.Parameter(torch.randn(2 * inter, H) / H ** 0.5)
        self.w2 = torch.nn.Parameter(torch.randn(H, inter) / inter ** 0.5)
        self.rope = knn.RotaryEmbedding(self.d, max_pos=64)
        self.attn = knn.Attention()
        self.act = knn.SiluAndMul()
        self.moe = knn.MoE(H, 32, E, 2)

    def forward(self, x, positions):
        T, H = x.shape
        residual = x.clone()
        h = self.norm1(x)
        qkv = ops.linear(h, self.wqkv, None)
        q, k, v = qkv.split([self.h * self.d, self.kv * self.d, self.kv * self.d], dim=-1)
        q = q.reshape(T, self.h, self.d).clone()
        k = k.reshape(T, self.kv, self.d).clone()
        self.rope(positions, q, k)
        v = v.reshape(T, self.kv, self.d)
        o = self.attn(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None])
        o = ops.linear(o[0].transpose(0, 1).reshape(T, H), self.wo, None)
        h, residual = self.norm2(o, residual)
        h = ops.linear(self.act(ops.linear(h, self.w13, None)), self.w2, None)
        return h + self.moe(h) + residual


@pytest.mark.parametrize("device", DEVICES)
def test_decoder_block_compiles_fullgraph(device):
    torch._dynamo.reset()
    torch.manual_seed(0)
    blk = Block().to(device)
    x = torch.randn(7, 64, device=device)
    pos = torch.arange(7, dtype=torch.int32, device=device)
    with torch.no_grad():
        eager = blk(x, pos)
        compiled = torch.compile(blk, fullgraph=True)
        got = compiled(x, pos)
        got2 = compiled(x * 0.5, pos)
    torch.testing.assert_close(got, eager, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(got2, blk(x * 0.5, pos), atol=1e-5, rtol=1e-5)
    with torch.no_grad():  # kite's linear and fused_moe have no backward
        expl = torch._dynamo.explain(blk)(x, pos)
    assert expl.graph_break_count == 0, expl.break_reasons
