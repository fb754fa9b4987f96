"""Docstrings: every kite.ops.<op> and torch.ops.kite.<op> carries its text from kite.h, through
python/kite/_docs.py, which scripts/gen_py_docs.py generates from include/kite/kite.h (the wheel
does not ship kite.h)."""
import importlib.util
import inspect
import os

import torch

import kite

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _generator():
    spec = importlib.util.spec_from_file_location(
        "gen_py_docs", os.path.join(ROOT, "scripts", "gen_py_docs.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_docs_module_is_current():
    gen = _generator()
    with open(gen.KITE_H) as f:
        header = f.read()
    with open(gen.OPS_DEF) as f:
        ops_def = f.read()
    with open(gen.OUT) as f:
        committed = f.read()
    assert committed == gen.generate(header, ops_def), (
        "python/kite/_docs.py is stale (kite.h or ops.def changed): run "
        "python3 scripts/gen_py_docs.py and commit the result")


def test_docs_cover_exactly_the_bound_ops():
    from kite._docs import DOCS
    bound = [n for n, *_ in kite._C.ops()]
    assert sorted(DOCS) == sorted(bound)
    for name in bound:
        assert DOCS[name].strip(), name
        assert f"C: kite_status kite_{name}(" in DOCS[name], name


def test_every_op_has_a_docstring():
    from kite._docs import DOCS
    for name, *_ in kite._C.ops():
        f = getattr(kite.ops, name)
        doc = f.__doc__ or ""
        first = doc.split("\n")[0]
        assert first.startswith(f"{name}{inspect.signature(f)} -> "), (name, first)
        assert DOCS[name] in doc, name
        assert "Returns" in doc or "in place" in doc, name
        for obj in (getattr(torch.ops.kite, name), getattr(torch.ops.kite, name).default):
            assert DOCS[name] in (obj.__doc__ or ""), name
        assert (getattr(torch.ops.kite, name).__doc__.startswith(f"torch.ops.kite.{name}(")), name


def test_docstrings_say_shapes_dtypes_and_semantics():
    doc = kite.ops.rms_norm.__doc__
    assert doc.startswith("rms_norm(x, w=None, eps=1e-06, offset=0.0, *, out=None) -> y")
    assert "Returns y = like(x)" in doc
    assert "x[..., H] -> y[..., H]" in doc and "(offset + w)" in doc
    assert "eps must be >= 0 and finite" in doc
    doc = kite.ops.cross_entropy.__doc__
    assert "KITE_REDUCTION_MEAN = 2" in doc and "ignore_index" in doc
    doc = kite.ops.sample.__doc__
    assert "temperature f32 [B]" in doc and "Gumbel-max" in doc
    assert "top_k: a [B] tensor (int32), None, or an int for every row" in " ".join(doc.split())
    doc = kite.ops.paged_decode.__doc__
    assert "window_left" in doc and "kite_attn_opts" in doc and "lse (optional result)" in doc
    assert "Updates q, k in place; returns None." in kite.ops.rope.__doc__
    assert "KITE_ROPE_GPTJ = 1" in kite.ops.rope.__doc__
    assert "kite._C.op_names()" in kite.ops.activation_backward.__doc__
    assert "KITE_WQ4_MIN" in kite.ops.linear_wq4.__doc__
    assert "Sampling" not in kite.ops.linear_wq4.__doc__
