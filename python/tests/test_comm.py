"""torch.ops.kite.all_reduce / all_reduce_add_rms_norm from a torch.distributed group (CPU: a
gloo group of one process over the ref backend's communicator): results, schemas, version
counters, torch.compile, and bad inputs. The two-GPU run is dist_comm_check.py (torchrun, from
scripts/gpu-check.sh comm)."""
import os
import socket

import pytest
import torch
import torch.distributed as dist

import kite
import kite.torch.comm as kc


@pytest.fixture(scope="module")
def group():
    if dist.is_initialized():
        yield dist.group.WORLD
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


def rms_ref(a, res, w, eps, offset, pos):
    s = (a.double() + res.double())
    if pos == "pre":
        s = s.to(a.dtype).double()
    y = s * torch.rsqrt((s * s).mean(-1, keepdim=True) + eps) * (offset + w.double())
    return y, (s if pos == "pre" else y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_all_reduce_one_rank_is_identity(group, dtype):
    x = torch.randn(5, 33).to(dtype)
    want = x.clone()
    v = x._version
    assert kc.all_reduce(x) is x
    assert torch.equal(x, want)
    assert x._version > v  # written in place: the version counter moved
    assert kc.comms()[(group.group_name, 1, 0)] == (1, 0)


@pytest.mark.parametrize("pos", ["pre", "post"])
def test_all_reduce_add_rms_norm(group, pos):
    x, res, w = torch.randn(4, 64), torch.randn(4, 64), torch.rand(64) + 0.5
    x0, res0 = x.clone(), res.clone()
    y = kc.all_reduce_add_rms_norm(x, res, w, 1e-5, 0.0, pos, group=group)
    ey, er = rms_ref(x0, res0, w, 1e-5, 0.0, pos)
    assert torch.equal(x, x0)
    torch.testing.assert_close(y.double(), ey, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(res.double(), er, rtol=1e-5, atol=1e-5)


def test_schemas_declare_the_writes():
    ar = torch.ops.kite.all_reduce.default._schema
    assert ar.arguments[0].alias_info is not None and ar.arguments[0].alias_info.is_write
    fused = torch.ops.kite.all_reduce_add_rms_norm.default._schema
    writes = [a.name for a in fused.arguments if a.alias_info is not None and a.alias_info.is_write]
    assert writes == ["residual"]


def test_compiles_without_graph_breaks(group):
    def f(x, res, w):
        y = x * 2
        kc.all_reduce(y)
        return kc.all_reduce_add_rms_norm(y, res, w, 1e-6, 1.0, "post") + 1

    x, res, w = torch.randn(3, 16), torch.randn(3, 16), torch.randn(16)
    r1, r2 = res.clone(), res.clone()
    want = f(x, r1, w)
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(x, r2, w)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(r2, r1)  # the residual's in-place update survives compile


def test_bad_inputs(group):
    with pytest.raises(kite.ArgumentTypeError, match="all_reduce: x"):
        kc.all_reduce([1.0, 2.0])
    with pytest.raises(kite.Unsupported, match="all_reduce: x: dtype"):
        kc.all_reduce(torch.arange(6, dtype=torch.int32))
    with pytest.raises(kite.InvalidArgument, match="all_reduce"):
        kc.all_reduce(torch.randn(4, 6).t())  # not compact: kite refuses it, x unchanged
    with pytest.raises(kite.InvalidArgument, match="pos"):
        kc.all_reduce_add_rms_norm(torch.randn(2, 8), torch.randn(2, 8), None, 1e-5, 0.0, "mid")
    with pytest.raises(kite.InvalidArgument, match="all_reduce_add_rms_norm"):
        kc.all_reduce_add_rms_norm(torch.randn(2, 8), torch.randn(2, 4), None, 1e-5, 0.0, "pre")
    with pytest.raises(kite.ArgumentTypeError, match="comm"):
        kite._C.comm_call("all_reduce", "not a comm", torch.randn(2), torch.randn(2))
    with pytest.raises(kite.InvalidArgument, match="not a collective"):
        kite._C.comm_call("softmax", kc.comm_for(group, "cpu"), torch.randn(2), torch.randn(2))
    with pytest.raises(kite.InvalidArgument, match="bytes"):
        kite._C.comm_create(b"short", 1, 0, 1, 0)
    with pytest.raises(kite.InvalidArgument, match="rank"):
        kite._C.comm_create(bytes(128), 2, 5, 1, 0)
    with pytest.raises(kite.InvalidArgument, match="no kite communicators"):
        kc.comm_for(group, "meta")


@pytest.mark.skipif(not torch.cuda.is_available() or "RANK" in os.environ,
                    reason="a CUDA device in a single process")
def test_cuda_one_rank(group):
    x = torch.randn(3, 40, device="cuda", dtype=torch.bfloat16)
    want = x.clone()
    kc.all_reduce(x)
    assert torch.equal(x, want)
