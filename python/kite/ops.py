"""kite.ops.<op>: every op of kite.h over torch tensors, numpy arrays or any DLPack producer.

Each function takes the op's arguments in kite.h's order (results excluded), allocates its
results like its first tensor (torch.empty / numpy.empty; other producers must pass out=) or
writes `out=` (a tensor, or a tuple for ops with several results), and returns them. Optional
results (the attention ops' lse) are computed when passed a tensor or True. Ops that update in
place (rope, store_kv, add_*_norm's residual) write their arguments.

Per-row parameters of sample (temperature, top_k, top_p, min_p) and apply_penalties
(repetition, presence, frequency) also take a Python number, the same for every row: it becomes a
[B] tensor (float32, or int32 for top_k) on the logits' device (the op row's ``scalars`` in
_table.py).

An argument of the wrong type (a list, a str, None where a tensor is required) raises
kite.ArgumentTypeError (a kite.InvalidArgument and a TypeError) naming the op and the argument;
help(kite.ops.<op>) gives the op's text from kite.h (kite/_docs.py, generated from it).

Torch tensors on CUDA run on torch's current stream. A torch input whose last dim is not
unit-stride is copied to a contiguous tensor first; kite refuses such outputs with its message.
Under torch.compile use torch.ops.kite.<op> (kite.torch): a kite.ops call is a graph break.
"""
import numbers
import operator

from . import _C
from ._docs import DOCS
from ._spec import bad_arguments, compile_source, doc_ops, source_ops, specs

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


def scalar(x, v, dtype, where):
    """v, or a number v made into a [x.shape[0]] tensor of dtype on x's device."""
    if v is None or hasattr(v, "__dlpack__"):
        return v
    if not isinstance(v, numbers.Real):
        raise _C.ArgumentTypeError(f"{where}: expected a number, a tensor (torch, numpy or another "
                                   f"DLPack producer) or None, got {type(v).__name__}")
    if dtype == "int32":
        try:
            v = operator.index(v)
        except TypeError:
            raise _C.ArgumentTypeError(f"{where}: expected an integer, an int32 tensor or None, "
                                       f"got {type(v).__name__}") from None
        if not -2**31 <= v < 2**31:
            raise _C.InvalidArgument(f"{where}: {v} is out of the range of int32")
    else:
        v = float(v)
    n = x.shape[0]
    if type(x).__module__.startswith("torch"):
        import torch
        return torch.full((n,), v, dtype=_torch_dtype(dtype), device=x.device)
    import numpy
    return numpy.full((n,), v, dtype=numpy.dtype(dtype))


_SPECS = specs()


def _bad(index, exc, out, *values):
    """Raises, for a failure while kite.ops.<op> prepared its call, kite's exception naming the
    op and the argument (see _spec.bad_arguments)."""
    e = bad_arguments(_SPECS[index], exc, out, values, _C.ArgumentTypeError, _C.InvalidArgument)
    if e is exc:
        raise exc
    if isinstance(e, _C.ArgumentTypeError):
        raise e from None
    raise e from exc


def _stream(x):
    if getattr(x, "is_cuda", False):
        import torch
        return torch._C._cuda_getCurrentRawStream(x.get_device())
    return 0


_ns = {"_call": _C.call, "_stream": _stream, "new": new, "like": like, "scalar": scalar,
       "_bad": _bad, "_Error": _C.Error}
for _s in _SPECS:
    compile_source(source_ops(_s), _ns)
    _f = _ns[_s.name]
    _f.__module__ = __name__
    _f.__qualname__ = _s.name
    _f.__doc__ = doc_ops(_s, DOCS.get(_s.name, ""))
    globals()[_s.name] = _f
    __all__.append(_s.name)
del _s, _f
