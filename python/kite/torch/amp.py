"""Autocast for torch.ops.kite: inside torch.autocast(device_type, dtype), the kite ops follow the
policy PyTorch's own ops of the same kind have, through AutocastCPU / AutocastCUDA kernels that
cast the op's floating-point tensor arguments and run it with autocast off:

- LOWER (the autocast dtype, as torch's linear, matmul and scaled_dot_product_attention):
  linear, group_gemm, fused_moe, fused_moe_ex, sdpa, fused_linear_cross_entropy (its products
  are a linear's);
- FP32 (as torch's cross_entropy, on every device): cross_entropy, moe_aux_loss;
- FP32 on CUDA only (torch's CUDA list; on the CPU torch runs them in their input dtype):
  softmax, layer_norm.

Every other op runs in the dtype of its arguments (kite takes one float dtype per call). An
attention op's sinks stay f32 (kite.h takes them in f32 only).
Float64 tensors and tensors of another device type are left as they are, as torch does.
"""
import torch

LOWER = ("linear", "group_gemm", "fused_moe", "fused_moe_ex", "sdpa",
         "fused_linear_cross_entropy")
FP32 = ("cross_entropy", "moe_aux_loss")
FP32_CUDA = ("softmax", "layer_norm")


def _cast(a, device_type, dtype):
    if (isinstance(a, torch.Tensor) and a.is_floating_point() and a.dtype != torch.float64
            and a.dtype != dtype and a.device.type == device_type):
        return a.to(dtype)
    return a


def _kernel(op, device_type, key, lower):
    exclude = torch._C.DispatchKeySet(key)
    f32 = {i for i, a in enumerate(op._schema.arguments) if a.name == "sinks"}

    def autocast_impl(keyset, *args):
        dtype = torch.get_autocast_dtype(device_type) if lower else torch.float32
        args = tuple(a if i in f32 else _cast(a, device_type, dtype) for i, a in enumerate(args))
        with torch._C._ExcludeDispatchKeyGuard(exclude):
            return op(*args)
    return autocast_impl


def _register(lib):
    """Registers the autocast kernels on kite.torch's library (at import)."""
    kite_ops = torch.ops.kite
    for device_type in ("cpu", "cuda"):
        if not torch._C._is_autocast_available(device_type):
            continue
        name_of_key = "Autocast" + torch._C._dispatch_key_for_device(device_type)
        key = getattr(torch._C.DispatchKey, name_of_key)
        names = [(n, True) for n in LOWER] + [(n, False) for n in FP32]
        if device_type == "cuda":
            names += [(n, False) for n in FP32_CUDA]
        for name, lower in names:
            if not hasattr(kite_ops, name):
                continue
            op = getattr(kite_ops, name).default
            lib.impl(name, _kernel(op, device_type, key, lower), name_of_key, with_keyset=True)
