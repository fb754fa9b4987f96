"""torch.ops.kite's collectives from a torch.distributed NCCL process group, one process per GPU:

    torchrun --nproc-per-node N python/tests/dist_comm_check.py

(scripts/gpu-check.sh comm runs it; pytest does not collect it). Each rank checks:
all_reduce over f32 / f16 / bf16 and sizes from 1 element to past the peer kernels' limit
against the float64 sum of every rank's input (all-gathered through NCCL), and that every rank
got the same bits; all_reduce_add_rms_norm at tokens 1 - 64 x hidden 4096 / 8192 against the
float64 reference; a CUDA graph that captured all_reduce, replayed on new inputs; and
torch.compile(fullgraph=True). Exit 1 when a check fails on this rank.
"""
import os
import sys

import torch
import torch.distributed as dist

import kite.torch  # noqa: F401  (registers torch.ops.kite)
import kite.torch.comm as kc

FAILED = []


def check(ok, what):
    if not ok:
        FAILED.append(what)
        print(f"rank {dist.get_rank()}: FAIL {what}", flush=True)


def gather(x):
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return parts


def unit(dtype):
    return {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}[dtype]


def all_reduce_sums(rank, n):
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        # 5M elements: past the peer kernels' 8 MB in f32 / bf16 (NCCL runs those)
        for count in (1, 7, 1000, 37 * 4099, 600_000, 5_000_000):
            g = torch.Generator(device="cuda").manual_seed(1000 * count + rank)
            x = torch.randn(count, device="cuda", generator=g).to(dtype)
            parts = torch.stack([p.double() for p in gather(x)])
            exact, mag = parts.sum(0), parts.abs().sum(0)
            kc.all_reduce(x)
            err = (x.double() - exact).abs()
            ok = bool((err <= n * unit(dtype) * (mag + exact.abs()) + 1e-30).all())
            check(ok, f"all_reduce {dtype} {count}: max error {err.max().item():.3g}")
            same = all(torch.equal(p, x) for p in gather(x))
            check(same, f"all_reduce {dtype} {count}: ranks got different results")


def fused_norm(rank, n):
    for hidden in (4096, 8192):
        for tokens in (1, 7, 64):
            for pos in ("pre", "post"):
                g = torch.Generator(device="cuda").manual_seed(tokens * hidden + rank)
                x = torch.randn(tokens, hidden, device="cuda", generator=g).to(torch.bfloat16)
                res0 = torch.randn(tokens, hidden, device="cuda", generator=g).bfloat16()
                g.manual_seed(hidden)  # w is the same on every rank
                w = (torch.rand(hidden, device="cuda", generator=g) + 0.5).bfloat16()
                a = torch.stack([p.double() for p in gather(x)]).sum(0).bfloat16().double()
                s = a + res0.double()
                if pos == "pre":
                    s = s.bfloat16().double()
                ey = s * torch.rsqrt((s * s).mean(-1, keepdim=True) + 1e-5) * w.double()
                er = s if pos == "pre" else ey
                res = res0.clone()
                y = kc.all_reduce_add_rms_norm(x, res, w, 1e-5, 0.0, pos)
                tol = (2 * n + 4) * unit(torch.bfloat16)
                ok = bool(((y.double() - ey).abs() <= tol * (ey.abs() + 1)).all()) and bool(
                    ((res.double() - er).abs() <= n * tol * (er.abs() + 1)).all())
                check(ok, f"all_reduce_add_rms_norm {tokens}x{hidden} {pos}")


def graph_replay(rank, n):
    x = torch.zeros(4096, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        kc.all_reduce(x)  # warm-up on the capture stream: its kite ctx exists before capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        kc.all_reduce(x)
    for step in range(3):
        x.copy_(torch.full_like(x, float(rank + 1 + step)))
        graph.replay()
        want = sum(q + 1 + step for q in range(n))
        check(bool((x.float() == want).all()), f"CUDA graph replay {step}: {x[0].item()} != {want}")


def compiled(rank, n):
    def f(x):
        y = x * 2
        kc.all_reduce(y)
        return y + 1

    x = torch.full((3, 256), float(rank), device="cuda")
    got = torch.compile(f, fullgraph=True)(x)
    want = 2 * sum(range(n)) + 1
    check(bool((got == want).all()), f"torch.compile: {got[0, 0].item()} != {want}")


def main():
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, n = dist.get_rank(), dist.get_world_size()
    for step in (all_reduce_sums, fused_norm, graph_replay, compiled):
        step(rank, n)
    torch.cuda.synchronize()
    print(f"rank {rank}: comms {kc.comms()}; {len(FAILED)} failed", flush=True)
    dist.barrier()  # every rank's collectives are done before any comm goes (kite.h)
    dist.destroy_process_group()
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
