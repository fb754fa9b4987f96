"""kite's collectives over a torch.distributed process group.

Importing kite.torch registers:

- ``kite::all_reduce(Tensor(a!) x, str group_name) -> ()``: x <- the sum of x over the group's
  ranks, in place (kite_all_reduce).
- ``kite::all_reduce_add_rms_norm(Tensor x, Tensor(a!) residual, Tensor? w, float eps,
  float offset, int pos, str group_name) -> Tensor``: kite_all_reduce_add_rms_norm; x is left
  unchanged, residual is updated in place, y is returned (pos: 0 PRE, 1 POST, as kite.h's
  kite_norm_pos).

group_name is the group's ``group_name`` (torch.distributed's own name for it, a constant under
torch.compile). The first call on a (group, device) makes a kite communicator of the group's
ranks on that device, every rank at once: rank 0 makes the id, which the group broadcasts
(broadcast_object_list), and each rank joins with its rank in the group. It is kept for the
process's life (comm_for makes it ahead; comms() lists them). On CUDA that communicator is NCCL's
with kite's peer-memory kernels at small and medium sizes (kite.h "Communication between
ranks"); on the CPU it is the ref backend's, whose ranks are threads of one process, so a CPU
group must have a single process (world size 1).

Both ops run on torch's current stream, bump the version counters of what they write, and
declare what they write in their schemas, so torch.compile functionalizes them and CUDA graphs
capture them (the kernels keep their state on the device). Make the communicator before a
capture (a first call, or comm_for): its creation talks to the other ranks and allocates.
"""
import torch
import torch.distributed as dist

from .. import _C

__all__ = ["all_reduce", "all_reduce_add_rms_norm", "comm_for", "comms"]

_DL_CPU, _DL_CUDA = 1, 2
_PRE, _POST = 0, 1
_comms = {}


def _group(group):
    return group if group is not None else dist.group.WORLD


def _resolve(group_name):
    return dist.distributed_c10d._resolve_process_group(group_name)


def _device_key(device):
    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return _DL_CUDA, index
    if device.type == "cpu":
        return _DL_CPU, 0
    raise _C.InvalidArgument(f"kite.torch.comm: no kite communicators on {device.type}")


def comm_for(group=None, device=None):
    """The kite communicator of group (default: the world group) on device (default: the
    current CUDA device when CUDA is available, else the CPU); made on first use by every rank
    of the group together."""
    group = _group(group)
    if device is None:
        device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    key = (group.group_name,) + _device_key(device)
    comm = _comms.get(key)
    if comm is not None:
        return comm
    rank, nranks = dist.get_rank(group), dist.get_world_size(group)
    dev_type, dev_id = key[1], key[2]
    box = [_C.comm_unique_id(dev_type, dev_id) if rank == 0 else None]
    # NCCL groups broadcast from a CUDA tensor of this rank's device, others from the CPU
    nccl = dist.get_backend(group) == "nccl"
    bdev = torch.device("cuda", dev_id) if nccl and dev_type == _DL_CUDA else None
    dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0), group=group, device=bdev)
    comm = _C.comm_create(box[0], nranks, rank, dev_type, dev_id)
    _comms[key] = comm
    return comm


def comms():
    """{(group_name, device_type, device_id): (nranks, rank)} of the communicators made."""
    return {k: _C.comm_info(c) for k, c in _comms.items()}


def _tensor(x, op, arg):
    if not isinstance(x, torch.Tensor):
        raise _C.ArgumentTypeError(f"{op}: {arg}: expected a torch.Tensor, got {type(x).__name__}")
    return x


def _all_reduce_impl(x, group_name):
    comm = comm_for(_resolve(group_name), x.device)
    _C.comm_call("all_reduce", comm, x, x)


def _all_reduce_add_rms_norm_impl(x, residual, w, eps, offset, pos, group_name):
    comm = comm_for(_resolve(group_name), x.device)
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    _C.comm_call("all_reduce_add_rms_norm", comm, x, residual, w, eps, offset, pos, y)
    return y


def _register(lib):
    lib.define("all_reduce(Tensor(a!) x, str group_name) -> ()")
    lib.define("all_reduce_add_rms_norm(Tensor x, Tensor(a!) residual, Tensor? w, float eps, "
               "float offset, int pos, str group_name) -> Tensor")
    for key in ("CPU", "CUDA"):
        lib.impl("all_reduce", _all_reduce_impl, key)
        lib.impl("all_reduce_add_rms_norm", _all_reduce_add_rms_norm_impl, key)
    torch.library.register_fake("kite::all_reduce", lambda x, group_name: None, lib=lib)
    torch.library.register_fake(
        "kite::all_reduce_add_rms_norm",
        lambda x, residual, w, eps, offset, pos, group_name: torch.empty_like(
            x, memory_format=torch.contiguous_format), lib=lib)


def all_reduce(x, group=None):
    """x <- the sum of x over the ranks of group (default: the world group), in place; returns
    x. Every rank calls it with the same shape and dtype (f32, f16 or bf16, contiguous)."""
    _tensor(x, "all_reduce", "x")
    torch.ops.kite.all_reduce(x, _group(group).group_name)
    return x


def all_reduce_add_rms_norm(x, residual, w, eps, offset=0.0, pos="pre", group=None):
    """kite_all_reduce_add_rms_norm: a = the sum of x over the group's ranks; then add_rms_norm
    of a with residual (updated in place), weight w (or None), eps, offset; pos "pre" or "post"
    (kite.h). Returns y."""
    _tensor(x, "all_reduce_add_rms_norm", "x")
    _tensor(residual, "all_reduce_add_rms_norm", "residual")
    if pos not in ("pre", "post"):
        raise _C.InvalidArgument(f"all_reduce_add_rms_norm: pos: \"pre\" or \"post\", got {pos!r}")
    return torch.ops.kite.all_reduce_add_rms_norm(x, residual, w, float(eps), float(offset),
                                                  _PRE if pos == "pre" else _POST,
                                                  _group(group).group_name)
