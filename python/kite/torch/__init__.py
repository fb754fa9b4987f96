"""torch.ops.kite.<op>: every op of kite.h as a PyTorch custom op.

Importing this module registers, through torch.library.Library directly (no @custom_op wrapper
on the call path):

- ``kite::<op>(args...) -> results``: allocates its results (an attention op's optional lse is
  not computed: use the .out form); arguments that kite updates in place are declared mutable
  (``Tensor(a!)``): rope's q and k, add_*_norm's residual, store_kv's caches.
- ``kite::<op>.out(args..., results...) -> ()`` for ops with results: writes them.

help(torch.ops.kite.<op>) gives the schemas and the op's text from kite.h.

The forward ops that have a kite backward (activations, gated activations, rms_norm,
layer_norm, softmax, embedding, cross_entropy, sdpa, sdpa_varlen) get autograd formulas
(kite.torch.autograd, which
also holds differentiable forms of rope and the add-and-norm ops); their backward runs once
(double backward raises). Every other functional op, and every .out form, gets an Autograd-key
kernel that raises kite.Unsupported where a gradient is wanted (an input requires grad with grad
mode on) instead of returning results cut off from the graph. A call that writes a torch tensor
the caller passed (.out results, in-place arguments) bumps its version counter, as torch's own
ops do. kite.torch.amp registers autocast kernels (torch's policy: GEMM and attention ops in the
autocast dtype, cross_entropy in f32).

Both have CPU and CUDA implementations (CUDA on torch's current stream, one kite ctx per device
and stream, created on first use and kept) and a fake implementation, so they pass
torch.library.opcheck and trace under torch.compile(fullgraph=True) without graph breaks.
The implementations are C (kite._C.torch_kernel): the dispatcher calls into kite._C directly,
which allocates the results with torch.empty_like (or the op's Python allocation where the
shapes need it) and runs kite; every functional op has a C Autograd-key kernel too, which runs
kite at once when no gradient is wanted and hands over to the op's Python autograd kernel
otherwise (and under tracing modes or tensor subclasses).
A tensor argument whose last dim is not unit-stride is made contiguous before the call (a copy);
a result given to .out must have a unit-stride last dim (kite refuses it otherwise).

CUDA graphs: the calls allocate their results with torch (its graph pool under capture) and
neither synchronize nor allocate device memory themselves; kite's ctx for a (device, stream)
pair is made on the first call on that stream, with 64 MiB of workspace reserved. Run each op
once on the capture stream before capturing (torch's usual warm-up, which torch.compile's
mode="reduce-overhead" does on its capture stream too), so that the ctx, its workspace and
cuBLASLt's handle (made at a device's first linear) exist beforehand: a first call on a stream
that is capturing raises kite.DeviceError and leaves the capture intact.
"""
import torch

from .. import _C
from .._docs import DOCS
from .._spec import (compile_source, doc_torch, kernel_layout, out_layout, schema_functional,
                     schema_out, source_fake, specs)

__all__ = ["lib", "patch", "unpatch", "nn", "autograd", "amp", "comm"]

_DTYPES = {n: getattr(torch, n) for n in ("float32", "float16", "bfloat16", "int32", "int8",
                                            "float8_e4m3fn") if hasattr(torch, n)}


def _new(x, shape, dtype=None):
    return torch.empty(shape, dtype=_DTYPES[dtype] if dtype else x.dtype, device=x.device)


_CONTIGUOUS = torch.contiguous_format


def _like(x):
    return torch.empty_like(x, memory_format=_CONTIGUOUS)


lib = torch.library.Library("kite", "DEF")
_ns = {"new": _new, "like": _like}
_SPECS = {}

_K, _KS = torch._C.DispatchKey, torch._C.DispatchKeySet
# The dispatch keysets an Autograd kernel sees for plain CPU / CUDA tensors: below autograd only
# the dense backend, so it may run kite itself when no gradient is wanted.
_FAST_KEYSETS = tuple((_KS(getattr(_K, d)) | _KS(getattr(_K, "Autograd" + d))).raw_repr()
                      for d in ("CPU", "CUDA"))


def _kernel(name, autograd=None):
    """The functional op's kernel: a kite._C.TorchKernel (C: allocates the results, runs kite on
    torch's current stream). With autograd (the Python autograd kernel of the op) it is the
    op's Autograd-key kernel, which skips autograd when no gradient is wanted."""
    s = _SPECS[name]
    defaults, src, like, alloc = kernel_layout(s)
    if alloc:
        compile_source(alloc, _ns)
        alloc = _ns[name + "_alloc"]
    return _C.torch_kernel(s.index, defaults, src, like, alloc, autograd,
                           _FAST_KEYSETS if autograd else ())


def register_autograd(name, backward, setup_context):
    """torch.library.register_autograd for kite::<name>, with the Autograd-key kernel of
    _kernel in front of torch's: a call that wants no gradient costs no Python frame."""
    try:
        from torch._library.autograd import Info, make_autograd_impl
    except ImportError:  # another torch: its own registration, slower
        torch.library.register_autograd(f"kite::{name}", backward, setup_context=setup_context,
                                        lib=lib)
        return
    slow = make_autograd_impl(getattr(torch.ops.kite, name).default, Info(backward, setup_context))
    lib.impl(name, _kernel(name, autograd=slow), "Autograd", with_keyset=True)


for _s in specs():
    _SPECS[_s.name] = _s
    lib.define(schema_functional(_s))
    compile_source(source_fake(_s), _ns)
    _k = _kernel(_s.name)
    for _key in ("CPU", "CUDA"):
        lib.impl(_s.name, _k, _key)
    torch.library.register_fake(f"kite::{_s.name}", _ns[_s.name + "_fake"], lib=lib)
    if _s.results or _s.optional_results:
        lib.define(schema_out(_s))
        _defaults, _src = out_layout(_s)
        _k = _C.torch_kernel(_s.index, _defaults, _src, -1, None, None, ())
        for _key in ("CPU", "CUDA"):
            lib.impl(f"{_s.name}.out", _k, _key)
        torch.library.register_fake(f"kite::{_s.name}.out", lambda *a, **k: None, lib=lib)
del _s, _key, _k

# help(torch.ops.kite.<op>): the schemas and kite.h's text of the op (torch.library.define takes
# no docstring; the op's packet and overloads are Python objects that keep one).
for _s in _SPECS.values():
    _doc = doc_torch(_s, DOCS.get(_s.name, ""))
    _packet = getattr(torch.ops.kite, _s.name)
    for _obj in [_packet] + [getattr(_packet, _o) for _o in _packet.overloads()]:
        try:
            _obj.__doc__ = _doc
        except (AttributeError, TypeError):
            pass
del _s, _doc, _packet, _obj

from . import autograd  # noqa: E402



def _register_function(name, autograd_impl):
    """The Autograd-key kernel of _kernel in front of autograd_impl (kite.torch.autograd's
    Function-based ops)."""
    lib.impl(name, _kernel(name, autograd=autograd_impl), "Autograd", with_keyset=True)


_differentiable = set(autograd._register(register_autograd)) | set(
    autograd._register_functions(_register_function))


def _register_no_backward():
    """Every functional op without a kite backward, and every .out form: an Autograd-key kernel
    that runs kite at once when no gradient is wanted and raises kite.Unsupported when one is
    (kite.torch.autograd.no_backward), instead of torch's fallback, which only warns and returns
    results cut off from the graph."""
    for name, s in _SPECS.items():
        if name not in _differentiable:
            op = getattr(torch.ops.kite, name).default
            lib.impl(name, _kernel(name, autograd=autograd.no_backward(op, name)), "Autograd",
                     with_keyset=True)
        if s.results or s.optional_results:
            op = getattr(torch.ops.kite, name).out
            k = _C.torch_kernel(s.index, *out_layout(s), -1, None,
                                autograd.no_backward(op, name + ".out"), _FAST_KEYSETS)
            lib.impl(f"{name}.out", k, "Autograd", with_keyset=True)


_register_no_backward()

from . import amp  # noqa: E402

amp._register(lib)

from . import comm  # noqa: E402

comm._register(lib)

from . import nn  # noqa: E402
from . import patch as patch_module  # noqa: E402
from .patch import patch, unpatch  # noqa: E402
