"""kite.ops.<op>: every op of kite.h over torch tensors, numpy arrays or any DLPack producer.

Each function takes the op's arguments in kite.h's order (results excluded), allocates its
results like its first tensor (torch.empty / numpy.empty; other producers must pass out=) or
writes `out=` (a tensor, or a tuple for ops with several results), and returns them. Optional
results (the attention ops' lse) are computed when passed a tensor or True. Ops that update in
place (rope, store_kv, add_*_norm's residual) write their arguments.

Torch tensors on CUDA run on torch's current stream. A torch input whose last dim is not
unit-stride is copied to a contiguous tensor first; kite refuses such outputs with its message.
Under torch.compile use torch.ops.kite.<op> (kite.torch): a kite.ops call is a graph break.
"""
from . import _C
from ._spec import compile_source, source_ops, specs

__all__ = []


def _torch_dtype(name):
    import torch
    return getattr(torch, name)


def new(x, shape, dtype=None):
    mod = type(x).__module__
    if mod.startswith("torch"):
        import torch
        return torch.empty(shape, dtype=_torch_dtype(dtype) if dtype else x.dtype, device=x.device)
    if mod.startswith("numpy"):
        import numpy
        return numpy.empty(shape, dtype=numpy.dtype(dtype) if dtype else x.dtype)
    raise _C.InvalidArgument(f"kite.ops: cannot allocate a result like a {type(x).__name__}; "
                             "pass out=")


def like(x):
    return new(x, tuple(x.shape))


def _stream(x):
    if getattr(x, "is_cuda", False):
        import torch
        return torch._C._cuda_getCurrentRawStream(x.get_device())
    return 0


_ns = {"_call": _C.call, "_stream": _stream, "new": new, "like": like}
for _s in specs():
    compile_source(source_ops(_s), _ns)
    globals()[_s.name] = _ns[_s.name]
    _ns[_s.name].__module__ = __name__
    __all__.append(_s.name)
del _s
