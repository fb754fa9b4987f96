"""CUDA-graph capture of torch.ops.kite calls (CUDA only; skipped without a GPU).

A decode step built from kite ops (rms_norm, rope in place, silu_and_mul, paged_decode, sample)
is captured into a torch.cuda.CUDAGraph after one warm-up call on the capture stream (kite makes
its ctx per device and stream on the first call), then replayed with new values copied into the
static inputs: each replay must equal the eager step on the same values. The same step under
torch.compile(mode="reduce-overhead") (cudagraph trees) must equal eager too. A first kite call
on a stream that is capturing is refused with kite's message and leaves the capture intact.
"""
import pytest
import torch

import kite
import kite.torch  # noqa: F401  (registers torch.ops.kite)

ops = torch.ops.kite

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

B, HQ, HKV, D, BS, NBLK, H, V, ROT = 4, 8, 2, 64, 16, 64, 256, 512, 64


def _static(dev):
    """The step's inputs, every one a tensor (so that a replay reads new values from them)."""
    dt = torch.bfloat16
    return {
        "x": torch.empty(B, H, dtype=dt, device=dev),
        "w": torch.empty(H, dtype=dt, device=dev),
        "gate_up": torch.empty(B, 2 * H, dtype=dt, device=dev),
        "q": torch.empty(B, HQ, D, dtype=dt, device=dev),
        "k": torch.empty(B, HKV, D, dtype=dt, device=dev),
        "cos_sin": kite.rope_cache(512, ROT, 10000.0, like="torch").to(dev),
        "kc": torch.empty(NBLK, HKV, BS, D, dtype=dt, device=dev),
        "vc": torch.empty(NBLK, HKV, BS, D, dtype=dt, device=dev),
        "table": torch.empty(B, NBLK // B, dtype=torch.int32, device=dev),
        "seq_lens": torch.empty(B, dtype=torch.int32, device=dev),
        "logits": torch.empty(B, V, dtype=torch.float32, device=dev),
        "temperature": torch.empty(B, dtype=torch.float32, device=dev),
        "top_k": torch.empty(B, dtype=torch.int32, device=dev),
        "seeds": torch.empty(B, dtype=torch.int64, device=dev),
        "steps": torch.empty(B, dtype=torch.int64, device=dev),
    }


def _fill(t, seed):
    """New values for the inputs, in place: new activations, cache, lengths and sampling rows."""
    g = torch.Generator().manual_seed(seed)
    for name in ("x", "w", "gate_up", "q", "k", "kc", "vc", "logits"):
        t[name].copy_(torch.randn(t[name].shape, generator=g))
    t["table"].copy_(torch.randperm(NBLK, generator=g)[: t["table"].numel()].reshape(t["table"].shape))
    t["seq_lens"].copy_(torch.randint(1, (NBLK // B) * BS + 1, (B,), generator=g))
    t["temperature"].copy_(torch.tensor([0.0, 1.0, 0.8, 1.2]))
    t["top_k"].copy_(torch.tensor([0, 0, 20, 50]))
    t["seeds"].copy_(torch.randint(0, 2**31, (B,), generator=g))
    t["steps"].copy_(torch.randint(0, 1000, (B,), generator=g))


def _step(t):
    """One decode step over the inputs; rope rotates copies of q and k in place (the inputs
    stay as given, so that torch.compile's cudagraphs need not copy mutated inputs back)."""
    h = ops.rms_norm(t["x"], t["w"], 1e-6, 0.0)
    a = ops.silu_and_mul(t["gate_up"])
    q, k = t["q"].clone(), t["k"].clone()
    ops.rope(q, k, t["seq_lens"] - 1, t["cos_sin"], ROT, 0)
    o = ops.paged_decode(q, t["kc"], t["vc"], t["table"], t["seq_lens"])
    tok = ops.sample(t["logits"], t["temperature"], t["top_k"], None, None, t["seeds"],
                     t["steps"], 0, 0)
    return h, a, q, k, o, tok


def _eager(seed, dev):
    t = _static(dev)
    _fill(t, seed)
    return _step(t)


def _same(got, want):
    for g, w in zip(got, want):
        if w.is_floating_point():
            torch.testing.assert_close(g, w, atol=0, rtol=0)  # the same kernels on the same values
        else:
            assert torch.equal(g, w)


def test_cuda_graph_replay_matches_eager():
    dev = torch.device("cuda")
    t = _static(dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up on the capture stream: kite's ctx for it is made here
        _fill(t, 0)
        _step(t)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        out = _step(t)
    for seed in (1, 2, 3):
        _fill(t, seed)
        g.replay()
        torch.cuda.synchronize()
        _same(out, _eager(seed, dev))


def test_first_call_under_capture_is_refused():
    dev = torch.device("cuda")
    x = torch.randn(2, H, device=dev)
    ops.rms_norm(x)  # a ctx on the default stream exists; the capture stream is new to kite
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with pytest.raises(kite.DeviceError, match="during CUDA-graph capture"):
        with torch.cuda.graph(g, stream=s):
            ops.rms_norm(x)
    torch.cuda.synchronize()
    torch.testing.assert_close(ops.rms_norm(x), torch.nn.functional.rms_norm(x, (H,), eps=1e-6))


def test_compile_reduce_overhead_matches_eager():
    torch._dynamo.reset()
    dev = torch.device("cuda")
    step = torch.compile(_step, mode="reduce-overhead", fullgraph=True)
    t = _static(dev)
    for seed in (1, 2, 3, 4):  # the first calls warm up and record, the later ones replay
        _fill(t, seed)
        got = [x.clone() for x in step(t)]
        _same(got, _eager(seed, dev))
