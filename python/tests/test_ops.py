"""Every op, every float dtype, every device here: torch.ops.kite and kite.ops against plain
torch, against kite's float64 reference backend (the C library's own oracle, pinned through
kite.kernels), and opcheck."""
import pytest
import torch
from cases import CASES, EXTRA, FLOATS, close
from conftest import DEVICES

import kite

ALL = {**{op: (op, make) for op, make in CASES.items()}, **EXTRA}


# The collectives take a kite_comm: they are outside the op table's binding (kite.ops,
# torch.ops.kite's generated ops). all_reduce and all_reduce_add_rms_norm are bound apart, over a
# process group's communicator (kite.torch.comm, test_comm.py); all_gather and reduce_scatter
# are not bound.
UNBOUND = {"all_reduce", "all_gather", "reduce_scatter", "all_reduce_add_rms_norm"}


KERNEL_OP = {name: op for name, _, op, _ in kite._C.ops()}


def test_every_op_of_the_library_is_bound():
    bound = {n for n, *_ in kite._C.ops()}
    assert set(kite._C.unbound()) == UNBOUND
    missing = [n for n in kite._C.op_names() if n not in bound and n not in UNBOUND]
    assert not missing, (f"ops of kite.h without Python bindings: {missing}; add a row to "
                         "python/kite/_table.py and a case to python/tests/cases.py")


def test_every_op_has_a_case():
    names = {n for n, *_ in kite._C.ops()}
    assert names == set(CASES), f"ops without a test case: {names - set(CASES)}"
    assert all(hasattr(torch.ops.kite, n) for n in names)
    assert all(hasattr(kite.ops, n) for n in names)


# Ops with no CUDA kernel: on a CUDA tensor they must refuse with kite's message, never fall back
# to another device. linear_gguf_q8 is a CPU path by design (int8 activations for the CPU's
# integer dot products); CUDA runs the same files through linear_gguf.
NO_CUDA_KERNEL = {"linear_gguf_q8"}


def _refused_here(op, case, device):
    """True when op has no kernel on device; then checks that the call is refused."""
    if device != "cuda" or op not in NO_CUDA_KERNEL:
        return False
    with pytest.raises(kite.Unsupported, match=f"{op}: .*no kernel runs"):
        getattr(torch.ops.kite, op)(*_clone(case.args))
    return True


# torch's schema check compares the arguments before and after the call with arithmetic that
# float8 tensors lack on the CPU ("mul" is not implemented for Float8_e4m3fn): a call with a
# float8 argument (sdpa_fp8) runs opcheck's other checks.
OPCHECK_ALL = ("test_schema", "test_autograd_registration", "test_faketensor",
               "test_aot_dispatch_dynamic")


def _opcheck(fn, args):
    fp8 = any(isinstance(a, torch.Tensor) and a.dtype == torch.float8_e4m3fn for a in args)
    torch.library.opcheck(fn, tuple(args), test_utils=OPCHECK_ALL[1:] if fp8 else OPCHECK_ALL)


def _clone(args):
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def _run(op, case, args):
    return case.outputs(getattr(torch.ops.kite, op)(*args), args)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("name", list(ALL))
def test_against_torch_and_ref(name, dtype, device):
    op, make = ALL[name]
    case = make(dtype, device)
    if _refused_here(op, case, device):
        return
    expected = case.ref(_clone(case.args))
    args = _clone(case.args)
    got = _run(op, case, args)
    assert len(got) == len(expected)
    chosen = kite.last_dispatch()
    assert chosen, "no dispatch recorded"
    for i, (g, e) in enumerate(zip(got, expected)):
        close(g, e, dtype, f"{name} result {i} ({chosen}) vs torch")
    # the same call pinned to kite's float64 reference (the kernels of the op the function runs)
    with kite.kernels(f"{KERNEL_OP[op]}=ref"):
        if device == "cpu":
            ref_args = _clone(case.args)
            ref_got = _run(op, case, ref_args)
            assert kite.last_dispatch().startswith("ref.")
            for i, (g, r) in enumerate(zip(got, ref_got)):
                close(g, r, dtype, f"{name} result {i} ({chosen}) vs kite ref")
    # kite.ops gives the same bits as torch.ops.kite
    args2 = _clone(case.args)
    fn = getattr(kite.ops, op)
    res = fn(*[a for a in args2])
    got2 = case.outputs(res, args2)
    for g, g2 in zip(got, got2):
        assert torch.equal(g, g2), f"{name}: kite.ops and torch.ops.kite differ"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(ALL))
def test_opcheck(name, device):
    op, make = ALL[name]
    case = make(torch.float32, device)
    if _refused_here(op, case, device):
        return
    _opcheck(getattr(torch.ops.kite, op).default, case.args)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", [n for n, (op, _) in ALL.items()
                                  if hasattr(getattr(torch.ops.kite, op), "out")])
def test_out_variant(name, device):
    """The .out form writes the caller's tensors, equal to the functional form's results."""
    op, make = ALL[name]
    case = make(torch.float32, device)
    if _refused_here(op, case, device):
        return
    args = _clone(case.args)
    res = getattr(torch.ops.kite, op)(*args)
    res = list(res) if isinstance(res, (tuple, list)) else [res]
    outs = [torch.full_like(r, float("nan")) if r.is_floating_point() else torch.full_like(r, -7)
            for r in res]
    spec = next(s for s in kite._spec.specs() if s.name == op)
    full, it = [], iter(outs)
    args2 = _clone(case.args)
    given = dict(zip([n for _, n in spec.params], args2))
    for kind, n in spec.args:
        if n in spec.results:
            full.append(next(it))
        elif n in spec.optional_results:
            full.append(None)
        else:
            full.append(given[n] if n in given else spec.defaults[n])
    getattr(torch.ops.kite, op).out(*full)
    for r, o in zip(res, outs):
        assert torch.equal(r, o)
    _opcheck(getattr(torch.ops.kite, op).out, full)


def test_sdpa_lse_through_kite_ops():
    q, k, v = torch.randn(1, 2, 3, 16), torch.randn(1, 2, 5, 16), torch.randn(1, 2, 5, 16)
    o, lse = kite.ops.sdpa(q, k, v, lse=True)
    s = (q.double() @ k.double().transpose(-1, -2)) / 4.0
    s = s.masked_fill(torch.arange(5)[None] > torch.arange(3)[:, None] + 2, float("-inf"))
    torch.testing.assert_close(lse.double(), torch.logsumexp(s, -1), atol=1e-5, rtol=1e-5)
    assert torch.equal(o, kite.ops.sdpa(q, k, v))


def test_numpy_arrays():
    np = pytest.importorskip("numpy")
    x = np.random.randn(3, 40).astype(np.float32)
    y = kite.ops.silu(x)
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y, x / (1 + np.exp(-x)), rtol=1e-5, atol=1e-6)
    out = np.empty_like(x)
    assert kite.ops.softmax(x, 1.0, out=out) is out
    np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-5)


def test_strided_input_is_made_contiguous():
    """A last dim that is not unit-stride is copied by the wrapper, never read wrongly."""
    x = torch.randn(64, 6).t()  # [6, 64], last-dim stride 6
    w = torch.randn(64)
    y = torch.ops.kite.rms_norm(x, w, 1e-6, 0.0)
    close(y, torch.nn.functional.rms_norm(x.double(), (64,), w.double(), 1e-6), torch.float32)
    # row-strided views go through as views
    big = torch.randn(4, 3 * 64)
    q = big[:, 64:128]
    close(kite.ops.silu(q), torch.nn.functional.silu(q.double()), torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_results_are_contiguous_whatever_the_input_layout(device):
    """torch.ops.kite's results are new contiguous tensors for every layout of the argument they
    are shaped like: row-major (torch.empty_like's default), size-1 dims with odd strides, a
    transposed view, a row-strided view (the other allocation path)."""
    w = torch.randn(64, device=device)
    base = torch.randn(4, 3 * 64, device=device)
    inputs = {
        "row-major": torch.randn(4, 64, device=device),
        "size-1 dim, odd stride": torch.randn(1, 64, device=device).as_strided((1, 64), (7, 1)),
        "transposed": torch.randn(64, 4, device=device).t(),
        "row-strided": base[:, 64:128],
    }
    for name, x in inputs.items():
        y = torch.ops.kite.rms_norm(x, w, 1e-6, 0.0)
        assert y.shape == x.shape and y.is_contiguous(), name
        assert y.data_ptr() not in (x.data_ptr(), w.data_ptr(), base.data_ptr()), name
        close(y, torch.nn.functional.rms_norm(x.double(), (64,), w.double(), 1e-6),
              torch.float32, name)


def test_rope_module_matches_reference():
    from cases import _rope_ref
    import kite.torch.nn as knn
    for style in ("neox", "gptj"):
        m = knn.RotaryEmbedding(64, max_pos=128, theta=10000.0, rot_dim=32, style=style,
                                scaling=("llama3", 8.0, 1.0, 4.0, 64))
        q, k = torch.randn(5, 4, 64), torch.randn(5, 2, 64)
        pos = torch.tensor([0, 1, 2, 100, 127])
        eq = _rope_ref(q, pos, m.cos_sin, 32, 0 if style == "neox" else 1)
        ek = _rope_ref(k, pos, m.cos_sin, 32, 0 if style == "neox" else 1)
        m(pos, q, k)
        close(q, eq, torch.float32, f"rope {style} q")
        close(k, ek, torch.float32, f"rope {style} k")


@pytest.mark.parametrize("device", DEVICES)
def test_sampling_parameters_as_numbers(device):
    """kite.ops.sample and apply_penalties take a Python number for a per-row parameter: the
    same as a [B] tensor of that value (float32; int32 for top_k) on the logits' device."""
    np = pytest.importorskip("numpy")
    B = 4
    logits = torch.randn(B, 64, device=device)

    def full(v, dt=torch.float32):
        return torch.full((B,), v, dtype=dt, device=device)

    as_tensors = kite.ops.sample(logits, full(0.7), full(50, torch.int32), full(0.9), full(0.05),
                                 seed=3, step=1)
    as_numbers = kite.ops.sample(logits, temperature=0.7, top_k=50, top_p=0.9, min_p=0.05,
                                 seed=3, step=1)
    assert torch.equal(as_tensors, as_numbers)
    mixed = kite.ops.sample(logits, np.float64(0.7), full(50, torch.int32), np.float32(0.9),
                            0.05, seed=3, step=1)
    assert torch.equal(as_tensors, mixed)
    assert torch.equal(kite.ops.sample(logits, temperature=0, top_k=np.int64(50)),
                       kite.ops.argmax(logits))
    assert torch.equal(kite.ops.sample(logits, temperature=1, top_k=1), kite.ops.argmax(logits))
    if device == "cpu":
        with pytest.raises(kite.InvalidArgument, match=r"sample: .*temperature"):
            kite.ops.sample(logits, temperature=-1.0)
        got = kite.ops.sample(logits.numpy(), temperature=0.7, top_k=50, top_p=0.9, min_p=0.05,
                              seed=3, step=1)
        assert isinstance(got, np.ndarray) and (got == as_numbers.numpy()).all()

    ids = torch.randint(0, 64, (B, 6), dtype=torch.int32, device=device)
    a, b = logits.clone(), logits.clone()
    kite.ops.apply_penalties(a, ids, ids, full(1.2), full(0.5), full(0.1))
    kite.ops.apply_penalties(b, ids, ids, 1.2, presence=0.5, frequency=0.1)
    assert torch.equal(a, b) and not torch.equal(a, logits)
    c = logits.clone()
    kite.ops.apply_penalties(c, ids, None, repetition=2)
    d = logits.clone()
    kite.ops.apply_penalties(d, ids, None, full(2.0))
    assert torch.equal(c, d)
    if device == "cpu":
        with pytest.raises(kite.InvalidArgument, match=r"apply_penalties: .*repetition"):
            kite.ops.apply_penalties(logits.clone(), ids, None, 0)
