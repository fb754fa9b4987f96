"""Bad input from Python: the right exception class, kite's message naming the op and the
argument, outputs left as they were, the process intact."""
import pytest
import torch

import kite


def test_exception_hierarchy():
    assert issubclass(kite.InvalidArgument, kite.Error) and issubclass(kite.InvalidArgument, ValueError)
    assert issubclass(kite.Unsupported, kite.Error) and issubclass(kite.Unsupported, NotImplementedError)
    assert issubclass(kite.OutOfMemory, kite.Error) and issubclass(kite.OutOfMemory, MemoryError)
    assert issubclass(kite.DeviceError, kite.Error) and issubclass(kite.DeviceError, RuntimeError)


def test_wrong_shape_names_op_and_argument():
    x, w = torch.randn(4, 64), torch.randn(63)
    with pytest.raises(kite.InvalidArgument, match=r"rms_norm: w"):
        torch.ops.kite.rms_norm(x, w, 1e-6, 0.0)
    with pytest.raises(ValueError, match=r"rms_norm: w"):
        kite.ops.rms_norm(x, w)


def test_wrong_dtype_leaves_output_intact():
    x = torch.randn(4, 64)
    y = torch.full((4, 64), 7.0, dtype=torch.float16)
    with pytest.raises(kite.InvalidArgument, match=r"rms_norm"):
        kite.ops.rms_norm(x, None, out=y)
    assert (y == 7).all()


def test_mixed_dtypes_refused():
    with pytest.raises(kite.InvalidArgument, match=r"linear"):
        kite.ops.linear(torch.randn(2, 8), torch.randn(4, 8, dtype=torch.bfloat16))


def test_non_tensor_arguments():
    with pytest.raises(kite.InvalidArgument, match=r"silu: x: expected a tensor"):
        kite.ops.silu([1.0, 2.0], out=torch.empty(2))
    with pytest.raises(kite.InvalidArgument, match=r"rms_norm: eps: expected a number"):
        kite.ops.rms_norm(torch.randn(2, 8), None, "small")
    with pytest.raises(kite.InvalidArgument, match=r"x: a tensor is required"):
        kite._C.call(0, 0, None, torch.empty(1))
    with pytest.raises(kite.InvalidArgument, match=r"takes 2 arguments"):
        kite._C.call(0, 0, torch.empty(1))


def test_unsupported_dtype_of_torch():
    with pytest.raises(kite.InvalidArgument, match=r"dtype torch.complex64 has no kite equivalent"):
        kite.ops.silu(torch.randn(4, dtype=torch.complex64), out=torch.empty(4))


def test_bad_values():
    with pytest.raises(kite.InvalidArgument, match=r"eps"):
        torch.ops.kite.rms_norm(torch.randn(2, 8), None, -1.0, 0.0)
    with pytest.raises(kite.InvalidArgument, match=r"topk_gating"):
        torch.ops.kite.topk_gating(torch.randn(2, 4), 5, 0)


def test_device_mismatch():
    if not torch.cuda.is_available():
        pytest.skip("needs a second device type")
    with pytest.raises(kite.InvalidArgument, match=r"rms_norm"):
        kite.ops.rms_norm(torch.randn(2, 8, device="cuda"), torch.randn(8))


def test_meta_tensor_refused():
    with pytest.raises(kite.InvalidArgument, match=r"neither cpu nor cuda"):
        kite.ops.silu(torch.empty(4, device="meta"), out=torch.empty(4))


def test_pin_that_cannot_run():
    kite.config("rms_norm=nosuch.kernel")
    with pytest.raises(kite.Unsupported, match=r"rms_norm: pinned to nosuch.kernel"):
        kite.ops.rms_norm(torch.randn(2, 8))


def test_bad_config():
    with pytest.raises(kite.ConfigError, match=r"nosuchop"):
        kite.config("nosuchop=cpu")
    with pytest.raises(ValueError):
        with kite.kernels("=="):
            pass


def test_process_intact_after_errors():
    for _ in range(100):
        with pytest.raises(kite.Error):
            kite.ops.rms_norm(torch.randn(4, 64), torch.randn(3))
    x = torch.randn(4, 64)
    torch.testing.assert_close(kite.ops.relu(x), x.relu())
