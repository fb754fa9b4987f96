"""kite: LLM operators behind one kernel registry.

    import kite
    y = kite.ops.rms_norm(x, w, eps=1e-6)          # torch tensors, numpy arrays, any DLPack producer
    kite.config("rms_norm=cpu.avx2")                # pin kernels, as KITE_KERNELS does
    with kite.kernels("softmax=ref"): ...           # a config for a block only
    kite.list()                                     # every kernel, whether it runs here, which is chosen

torch.ops.kite.<op> (registered by ``import kite.torch``) and kite.torch.nn / kite.torch.patch
bring the ops to PyTorch models. Errors are kite.Error subclasses carrying kite's message:
kite.InvalidArgument (a ValueError) for a bad argument, and kite.ArgumentTypeError (an
InvalidArgument and a TypeError) for an argument of the wrong type, both naming the op and the
argument. help(kite.ops.<op>) gives the op's shapes, dtypes and semantics from kite.h.
"""
import contextlib as _contextlib
from dataclasses import dataclass as _dataclass

from . import _C
from ._C import (ArgumentTypeError, ConfigError, DeviceError, Error, InternalError,
                 InvalidArgument, OutOfMemory, PluginError, Unsupported)

__version__ = _C.version

__all__ = ["ops", "config", "kernels", "list", "last_dispatch", "backends", "plugin_failures",
           "load_backend", "rope_cache", "Error", "InvalidArgument", "ArgumentTypeError",
           "Unsupported", "OutOfMemory", "DeviceError", "PluginError", "ConfigError",
           "InternalError", "KernelRecord"]


def config(spec=None):
    """Replaces the kernel-selection config (KITE_KERNELS grammar); None or "" restores the
    defaults. Returns the config that was in force before. Raises ConfigError on a bad item."""
    before = _C.config_get()
    _C.config_set(spec or None)
    return before


@_contextlib.contextmanager
def kernels(spec):
    """with kite.kernels("rms_norm=ref"): ... — kernel choices for the calling thread only, inside
    the block (other threads keep theirs; kite.config() is process-wide). Items apply after the
    global config and any enclosing kite.kernels block ("reset,..." sets the global config aside
    for this thread)."""
    before = _C.config_get_thread()
    _C.config_set_thread(f"{before},{spec}" if before else spec)
    try:
        yield
    finally:
        _C.config_set_thread(before or None)


@_dataclass(frozen=True)
class KernelRecord:
    op: str
    backend: str
    variant: str
    device: str
    priority: int
    features: str
    description: str
    runs_here: bool
    why_not: str
    chosen: bool  # the one kite would pick for this op on its device (before supports() checks)

    @property
    def name(self):
        return f"{self.backend}.{self.variant}"


def list(op=None):  # noqa: A001 - mirrors `kite list`
    """Every registered kernel (of one op when op is given) as KernelRecord, best first per op
    and device. `chosen` marks, per (op, device), the highest-priority kernel that runs here:
    the one a call takes unless its arguments are refused by that kernel's supports()."""
    recs = [r for r in _C.kernels() if op is None or r["op"] == op]
    best = {}
    for r in recs:
        if r["runs_here"]:
            key = (r["op"], r["device"])
            if key not in best or r["priority"] > best[key]["priority"]:
                best[key] = r
    chosen = {id(r) for r in best.values()}
    out = [KernelRecord(chosen=id(r) in chosen, **r) for r in recs]
    out.sort(key=lambda r: (r.op, r.device, -r.priority))
    return out


def last_dispatch():
    """The kernel ("backend.variant") this thread's last op ran on: what KITE_LOG=dispatch
    prints, without printing."""
    return _C.last_dispatch()


def backends():
    """Registered backends: name, device, device_count, num_kernels, path."""
    return _C.backends()


def plugin_failures():
    """[(path, reason)] for plugins that failed to load."""
    return _C.plugin_failures()


def load_backend(path):
    """Loads a plugin (libkite-<name>.so) by path; raises PluginError with the reason."""
    _C.backend_load(str(path))


_YARN_KEYS = ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor")


def _rope_scaling_fields(scaling):
    """kite_rope_scaling's fields (type, factor, low_freq_factor, high_freq_factor,
    original_max_pos, beta_fast, beta_slow, mscale, mscale_all_dim, attention_factor, no_truncate)
    from None, ("linear", factor), ("llama3", factor, low_freq_factor, high_freq_factor,
    original_max_pos) or ("yarn", factor, original_max_pos, {optional keys of a Hugging Face
    rope_parameters dict: beta_fast, beta_slow, mscale, mscale_all_dim, attention_factor,
    truncate})."""
    if not scaling:
        return (0, 1.0, 1.0, 4.0, 8192, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
    if scaling[0] == "linear":
        return (1, float(scaling[1]), 1.0, 4.0, 8192, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
    if scaling[0] == "llama3":
        f, lo, hi, orig = scaling[1:5]
        return (2, float(f), float(lo), float(hi), int(orig), 0.0, 0.0, 0.0, 0.0, 0.0, 0)
    if scaling[0] == "yarn":
        extra = dict(scaling[3]) if len(scaling) > 3 and scaling[3] else {}
        yarn = tuple(float(extra.get(k) or 0.0) for k in _YARN_KEYS)
        no_truncate = 0 if extra.get("truncate", True) else 1
        return (3, float(scaling[1]), 1.0, 4.0, int(scaling[2])) + yarn + (no_truncate,)
    raise InvalidArgument(f"rope scaling: unknown type {scaling[0]!r}")


def rope_cache(max_pos, rot_dim, theta=10000.0, scaling=None, like=None):
    """The cos/sin cache kite.ops.rope reads: [max_pos, rot_dim] float32 (cosines then sines per
    row, times yarn's attention factor). scaling: None, ("linear", factor), ("llama3", factor,
    low_freq_factor, high_freq_factor, original_max_pos) or ("yarn", factor, original_max_pos,
    rope_parameters) where rope_parameters may hold beta_fast, beta_slow, mscale, mscale_all_dim,
    attention_factor and truncate. A torch tensor on like's device when like is a torch tensor
    (or like is "torch"), else a numpy array."""
    raw = _C.rope_cache_build(int(max_pos), int(rot_dim), float(theta),
                              *_rope_scaling_fields(scaling))
    if like is not None and (like == "torch" or type(like).__module__.startswith("torch")):
        import torch
        t = torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(max_pos, rot_dim)
        return t if like == "torch" else t.to(like.device)
    import numpy
    return numpy.frombuffer(raw, dtype=numpy.float32).reshape(max_pos, rot_dim).copy()


def rope_inv_freq(rot_dim, theta=10000.0, scaling=None):
    """(inv_freq, attention_factor): the scaled inverse frequencies [rot_dim / 2] (numpy float64)
    and the attention factor that rope_cache uses (scaling as for rope_cache)."""
    import numpy
    raw, att = _C.rope_inv_freq(int(rot_dim), float(theta), *_rope_scaling_fields(scaling))
    return numpy.frombuffer(raw, dtype=numpy.float64).copy(), att


def rope_yarn_mscale(factor, mscale=1.0):
    """YaRN's magnitude scale: 1 for factor <= 1, else 0.1 mscale ln(factor) + 1. DeepSeek-V2/V3
    multiply the softmax scale by rope_yarn_mscale(factor, mscale_all_dim) ** 2."""
    import math
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


from . import ops  # noqa: E402
