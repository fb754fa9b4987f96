"""torch.ops.kite.<op>: every op of kite.h as a PyTorch custom op.

Importing this module registers, through torch.library.Library directly (no @custom_op wrapper
on the call path):

- ``kite::<op>(args...) -> results``: allocates its results (an attention op's optional lse is
  not computed: use the .out form); arguments that kite updates in place are declared mutable
  (``Tensor(a!)``): rope's q and k, add_*_norm's residual, store_kv's caches.
- ``kite::<op>.out(args..., results...) -> ()`` for ops with results: writes them.

The forward ops that have a kite backward (activations, gated activations, rms_norm,
layer_norm, softmax, embedding, cross_entropy) get autograd formulas (kite.torch.autograd, which
also holds differentiable forms of rope and the add-and-norm ops).

Both have CPU and CUDA implementations (CUDA on torch's current stream, one kite ctx per device
and stream, created on first use and kept) and a fake implementation, so they pass
torch.library.opcheck and trace under torch.compile(fullgraph=True) without graph breaks.
A tensor argument whose last dim is not unit-stride is made contiguous before the call (a copy);
a result given to .out must have a unit-stride last dim (kite refuses it otherwise).

CUDA graphs: the calls allocate their results with torch (its graph pool under capture) and do
not synchronize; kite's ctx for a (device, stream) pair is made on the first call on that stream,
with 64 MiB of workspace reserved. Run each op once on the capture stream before capturing
(torch's usual warm-up), so that ctx, its workspace and cuBLASLt's handle exist beforehand.
"""
import torch

from .. import _C
from .._spec import (compile_source, schema_functional, schema_out, source_torch,
                     source_torch_out, specs)

__all__ = ["lib", "patch", "nn", "autograd"]

_DTYPES = {n: getattr(torch, n) for n in ("float32", "float16", "bfloat16", "int32", "int8",
                                            "float8_e4m3fn") if hasattr(torch, n)}


def _new(x, shape, dtype=None):
    return torch.empty(shape, dtype=_DTYPES[dtype] if dtype else x.dtype, device=x.device)


_CONTIGUOUS = torch.contiguous_format


def _like(x):
    return torch.empty_like(x, memory_format=_CONTIGUOUS)


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream(x):
    return _raw_stream(x.get_device()) if x.is_cuda else 0


lib = torch.library.Library("kite", "DEF")
_ns = {"_call": _C.call, "_stream": _stream, "new": _new, "like": _like}

for _s in specs():
    lib.define(schema_functional(_s))
    compile_source(source_torch(_s), _ns)
    compile_source(source_torch(_s, fake=True), _ns)
    for _key in ("CPU", "CUDA"):
        lib.impl(_s.name, _ns[_s.name], _key)
    torch.library.register_fake(f"kite::{_s.name}", _ns[_s.name + "_fake"], lib=lib)
    if _s.results or _s.optional_results:
        lib.define(schema_out(_s))
        compile_source(source_torch_out(_s), _ns)
        for _key in ("CPU", "CUDA"):
            lib.impl(f"{_s.name}.out", _ns[_s.name + "_out"], _key)
        torch.library.register_fake(f"kite::{_s.name}.out", lambda *a, **k: None, lib=lib)
del _s, _key

from . import autograd  # noqa: E402

autograd._register(lib)

from . import nn  # noqa: E402
from . import patch as patch_module  # noqa: E402
from .patch import patch  # noqa: E402
