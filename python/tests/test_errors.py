"""Bad input from Python: the right exception class, kite's message naming the op and the
argument, outputs left as they were, the process intact."""
import os
import re

import pytest
import torch

import kite

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_exception_hierarchy():
    assert issubclass(kite.InvalidArgument, kite.Error) and issubclass(kite.InvalidArgument, ValueError)
    assert issubclass(kite.ArgumentTypeError, kite.InvalidArgument)
    assert issubclass(kite.ArgumentTypeError, TypeError)
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


# A wrong type anywhere (a list, a str, None where a tensor is required, an object): a
# kite.ArgumentTypeError (an InvalidArgument and a TypeError) naming the op and the argument,
# whether it is found while kite.ops allocates the results or by the extension.
x8, w8 = torch.randn(2, 8), torch.randn(4, 8)
WRONG_TYPES = [
    (lambda: kite.ops.silu([1, 2]), r"^silu: x: expected a tensor .*got list$"),
    (lambda: kite.ops.silu(None), r"^silu: x: a tensor is required, got None$"),
    (lambda: kite.ops.silu(object()), r"^silu: x: expected a tensor .*got object$"),
    (lambda: kite.ops.silu("x"), r"^silu: x: expected a tensor .*got str$"),
    (lambda: kite.ops.rms_norm(x8, "w"), r"^rms_norm: w: expected a tensor .* or None, got str$"),
    (lambda: kite.ops.rms_norm([[1.0]], None), r"^rms_norm: x: expected a tensor"),
    (lambda: kite.ops.rms_norm(x8, None, None), r"^rms_norm: eps: expected a number, got NoneType"),
    (lambda: kite.ops.linear(x8, w8, bias=3), r"^linear: bias: expected a tensor .*got int$"),
    (lambda: kite.ops.linear(x8, [1]), r"^linear: w: expected a tensor .*got list$"),
    (lambda: kite.ops.linear(x8, None), r"^linear: w: a tensor is required, got None$"),
    (lambda: kite.ops.embedding(torch.zeros(3, dtype=torch.int32), "table"), r"^embedding: table:"),
    (lambda: kite.ops.topk_gating(x8, "2"), r"^topk_gating: k: expected an integer, got str$"),
    (lambda: kite.ops.topk_gating(x8, 2.0), r"^topk_gating: k: expected an integer, got float$"),
    (lambda: kite.ops.quant(x8, qdtype=8), r"^quant: qdtype: expected a dtype name"),
    (lambda: kite.ops.quant(x8, out=torch.empty(2, 8)), r"^quant: out: expected a tuple of 2"),
    (lambda: kite.ops.embedding_backward(torch.zeros(2, dtype=torch.int32), x8, "4"),
     r"^embedding_backward: num_rows: expected an integer"),
    (lambda: kite.ops.sample(x8, temperature=[0.7, 0.7]),
     r"^sample: temperature: expected a number, a tensor .* or None, got list$"),
    (lambda: kite.ops.sample(x8, top_k=5.5), r"^sample: top_k: expected an integer"),
    (lambda: kite.ops.sample(x8, seed="1"), r"^sample: seed: expected an integer, got str$"),
    (lambda: kite.ops.apply_penalties(x8, None, None, "1.2"),
     r"^apply_penalties: repetition: expected a number, a tensor .* or None, got str$"),
    (lambda: kite.ops.rope(torch.randn(2, 1, 8), None, [0, 1], torch.randn(4, 8), 8),
     r"^rope: positions: expected a tensor"),
]


@pytest.mark.parametrize("call,message", WRONG_TYPES, ids=[m[1:30] for _, m in WRONG_TYPES])
def test_wrong_argument_types_name_op_and_argument(call, message):
    with pytest.raises(kite.ArgumentTypeError, match=message) as e:
        call()
    assert isinstance(e.value, TypeError) and isinstance(e.value, kite.InvalidArgument)


def test_wrong_values_found_while_allocating():
    x = torch.randn(2, 8)
    for name in ("int4", "nosuch"):  # torch.int4 exists (and exports as 8-bit integers)
        with pytest.raises(kite.InvalidArgument, match=f"^quant: qdtype: '{name}' is not a dtype "
                                                       "kite takes"):
            kite.ops.quant(x, qdtype=name)
    with pytest.raises(kite.InvalidArgument, match=r"^dequant: dtype: 'float' is not a dtype"):
        kite.ops.dequant(*kite.ops.quant(x), dtype="float")
    with pytest.raises(kite.InvalidArgument, match=r"^embedding: cannot allocate the results "
                                                   r"\(y = .*\) from ids \[3\], table \[8\]"):
        kite.ops.embedding(torch.zeros(3, dtype=torch.int32), torch.randn(8))
    with pytest.raises(kite.InvalidArgument, match=r"^logprobs: n: -1 is negative"):
        kite.ops.logprobs(torch.randn(2, 8), torch.zeros(2, dtype=torch.int32), -1)
    with pytest.raises(kite.InvalidArgument, match=r"^sample: top_k: 4294967296 is out of the "
                                                   r"range of int32"):
        kite.ops.sample(x, top_k=2**32)
    with pytest.raises(kite.InvalidArgument, match=r"^embedding_backward: num_rows: -2 is "
                                                   r"negative"):
        kite.ops.embedding_backward(torch.zeros(2, dtype=torch.int32), x, -2)


def test_integer_ranges():
    """An INT argument outside int32 is refused by the library, int64 / uint64 by the binding,
    each naming the argument; the whole uint64 range of a seed is taken."""
    logits, targets = torch.randn(4, 16), torch.zeros(4, dtype=torch.int32)
    with pytest.raises(kite.InvalidArgument, match=r"cross_entropy: reduction"):
        kite.ops.cross_entropy(logits, targets, reduction=2**32 + 2)
    with pytest.raises(kite.InvalidArgument, match=r"cross_entropy: ignore_index"):
        kite.ops.cross_entropy(logits, targets, ignore_index=-2**31 - 1)
    with pytest.raises(kite.InvalidArgument, match=r"cross_entropy: reduction: out of the range "
                                                   r"of int64"):
        kite.ops.cross_entropy(logits, targets, reduction=2**63)
    top = kite.ops.sample(logits, seed=2**64 - 1, step=2**64 - 1)
    assert top.dtype == torch.int32 and top.shape == (4,)
    assert torch.equal(kite.ops.sample(logits, seed=2**64 - 1, step=2**64 - 1), top)
    for bad in (-1, 2**64):
        with pytest.raises(kite.InvalidArgument, match=r"sample: seed: out of the range of "
                                                       r"uint64"):
            kite.ops.sample(logits, seed=bad)
    with pytest.raises(kite.InvalidArgument, match=r"sample: step"):
        kite.ops.sample(logits, step=-1)
    with pytest.raises(kite.InvalidArgument, match=r"rms_norm: eps: out of the range of a double"):
        kite.ops.rms_norm(logits, None, 10**400)


def test_negative_views():
    """torch's negative-bit views (x._neg_view(), what conj() gives for real tensors) share x's
    memory with a flag DLPack does not carry: read as -x, refused as an output."""
    x = torch.randn(4, 16)
    torch.testing.assert_close(kite.ops.relu(x._neg_view()), torch.relu(-x))
    torch.testing.assert_close(torch.ops.kite.relu(x._neg_view()), torch.relu(-x))
    torch.testing.assert_close(kite.ops.rms_norm(x._neg_view()), kite.ops.rms_norm(-x))
    y = torch.full((4, 16), 7.0)
    with pytest.raises(kite.InvalidArgument, match=r"relu: y: a negative view"):
        kite.ops.relu(x, out=y._neg_view())
    assert (y == 7).all()


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


def test_readme_error_example_is_the_library_message():
    """README's C example quotes the message of a w one value short: kite's text today."""
    with open(os.path.join(ROOT, "README.md")) as f:
        quoted = re.search(r'"(rms_norm: w: [^"]*)"', f.read()).group(1)
    x = torch.randn(8, 4096, dtype=torch.bfloat16)
    with pytest.raises(kite.InvalidArgument) as e:
        kite.ops.rms_norm(x, torch.ones(4095, dtype=torch.bfloat16), eps=1e-6)
    assert str(e.value) == quoted
