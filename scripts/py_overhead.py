"""Host time per call at decode size: [1, 4096] bf16 rms_norm, 10^4 back-to-back calls, one
synchronize at the end, wall clock / calls. kite through torch.ops.kite and kite.ops beside
torch.nn.functional.rms_norm, `x + x` and torch.compile(F.rms_norm), in the same run, in
alternating rounds (the median of the rounds is printed). Liger-Kernel's LigerRMSNorm too where
it is installed (CUDA).

    python scripts/py_overhead.py [--device cpu|cuda] [--calls 10000] [--rounds 5] [--json FILE]
                                  [--compile-calls N]
"""
import argparse
import json
import statistics
import time

import torch

import kite
import kite.torch  # noqa: F401  (registers torch.ops.kite)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--calls", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--compile-calls", type=int, default=0,
                    help="calls per round for torch.compile (default --calls; on a loaded CPU "
                         "host its OpenMP code can take milliseconds a call)")
    ap.add_argument("--json")
    a = ap.parse_args()
    dev = torch.device(a.device)
    x = torch.randn(1, a.hidden, dtype=torch.bfloat16, device=dev)
    w = torch.randn(a.hidden, dtype=torch.bfloat16, device=dev)
    shape = (a.hidden,)
    F = torch.nn.functional
    compiled = torch.compile(lambda x, w: F.rms_norm(x, shape, w, 1e-6))
    kop = torch.ops.kite.rms_norm.default
    contenders = {
        "torch.ops.kite.rms_norm": lambda: kop(x, w, 1e-6, 0.0),
        "kite.ops.rms_norm": lambda: kite.ops.rms_norm(x, w, 1e-6),
        "F.rms_norm": lambda: F.rms_norm(x, shape, w, 1e-6),
        "x + x": lambda: x + x,
        "torch.compile(F.rms_norm)": lambda: compiled(x, w),
    }
    try:
        from liger_kernel.transformers.rms_norm import LigerRMSNorm
        if dev.type == "cuda":
            m = LigerRMSNorm(a.hidden, eps=1e-6).to(dev, torch.bfloat16)
            contenders["LigerRMSNorm"] = lambda: m(x)
    except ImportError:
        pass

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    times = {k: [] for k in contenders}
    for f in contenders.values():  # warm-up: compile, ctx creation, caches
        for _ in range(200):
            f()
    sync()
    for r in range(a.rounds):
        order = list(contenders.items())
        if r % 2:
            order.reverse()
        for name, f in order:
            sync()
            t0 = time.perf_counter()
            n = a.compile_calls if a.compile_calls and name.startswith("torch.compile") else a.calls
            for _ in range(n):
                f()
            sync()
            times[name].append((time.perf_counter() - t0) / n * 1e6)
    base = statistics.median(times["F.rms_norm"])
    print(f"device {dev} ({torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'host'}), "
          f"torch {torch.__version__}, kite {kite.__version__}, [1, {a.hidden}] bf16, "
          f"{a.calls} calls x {a.rounds} rounds")
    rows = []
    for name, ts in times.items():
        med = statistics.median(ts)
        rows.append({"name": name, "us_per_call": med, "min": min(ts), "max": max(ts),
                     "vs_F_rms_norm": med / base})
        print(f"{name:<28} {med:8.2f} us/call  (min {min(ts):.2f}, max {max(ts):.2f})  "
              f"{med / base:5.2f}x F.rms_norm")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"device": str(dev), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
