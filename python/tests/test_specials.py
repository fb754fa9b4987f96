"""Non-finite inputs that kite.h defines exactly, on every kernel that runs here."""
import math

import pytest
import torch

import kite

ACTS = ["silu", "gelu", "gelu_tanh", "gelu_quick", "relu"]


def _kernels(op):
    return [f"{r.backend}.{r.variant}" for r in kite.list(op) if r.runs_here
            and r.device == "cpu"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("op", ACTS)
def test_activation_limits(op, dtype):
    # long enough for the vector bodies and the 16-bit tables (2^17 elements)
    x = torch.tensor([-math.inf, math.inf, -1e30, -200.0] * (1 << 15)).to(dtype)
    for k in _kernels(op):
        try:
            with kite.kernels(f"{op}={k}"):
                y = getattr(kite.ops, op)(x)
        except kite.Unsupported:  # a kernel of other dtypes (cpu.avx512bf16)
            continue
        lo = y[0::4].float()
        assert torch.all(lo == 0) and torch.all(torch.signbit(lo)) == (op != "relu"), \
            f"{k}: {op}(-inf) = {lo[0].item()}, kite.h says {'0' if op == 'relu' else '-0'}"
        assert torch.all(y[1::4].float() == math.inf), f"{k}: {op}(+inf) = {y[1].item()}"
        assert torch.all(y[2::4].float() == 0), f"{k}: {op}(-1e30) = {y[2].item()}"
