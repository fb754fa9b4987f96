#!/usr/bin/env python3
"""What is live at the peak of one training step (scripts/train_bench.py's model and step, one
contestant per process): torch.cuda.memory._record_memory_history around the third step (two
steps warm the allocator and the optimizer state first), then the allocator's trace replayed to
find the moment of the most allocated bytes and the largest blocks live then, each with the
Python frames that allocated it (torch's own frames left out).

  PYTHONPATH=build/python python3 scripts/train_mem_peak.py --who kite [--top 20]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_bench  # noqa: E402


def frames_of(ev, depth=4):
    out = []
    for f in ev.get("frames", []):
        name = f.get("filename", "")
        # Python frames only (the C++ frames of the allocator say nothing of the model)
        if not name.endswith(".py") or "/site-packages/torch/" in name:
            continue
        out.append(f"{os.path.basename(name)}:{f.get('line')} {f.get('name')}")
        if len(out) == depth:
            break
    return " < ".join(out) or "(no Python frame)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--who", choices=train_bench.CONTESTANTS, default="kite")
    ap.add_argument("--top", type=int, default=20)
    for k, v in (("hidden", 2048), ("intermediate", 8192), ("layers", 16), ("heads", 32),
                 ("kv-heads", 8), ("vocab", 128256), ("seq", 4096), ("batch", 2)):
        ap.add_argument(f"--{k}", type=int, default=v)
    args = ap.parse_args()
    args.device = "cuda"
    import torch
    if args.who == "liger":
        from liger_kernel.transformers import apply_liger_kernel_to_llama
        apply_liger_kernel_to_llama()
    model = train_bench.build_model(args)
    if args.who.startswith("kite"):
        import kite.torch
        kite.torch.patch(model, attention="kite" if args.who == "kite-sdpa" else True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    g = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), device="cuda", generator=g)

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()

    step()
    step()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=1000000)
    base = torch.cuda.memory_allocated()
    step()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    peak = torch.cuda.max_memory_allocated()

    # replay: bytes allocated (less freed) since the step began, and the blocks it allocated
    live, cur, best, best_live, best_i = {}, 0, -1, {}, -1
    trace = snap["device_traces"][torch.cuda.current_device()]
    for i, ev in enumerate(trace):
        if ev["action"] == "alloc":
            live[ev["addr"]] = ev
            cur += ev["size"]
            if cur > best:
                best, best_live, best_i = cur, dict(live), i
        elif ev["action"] == "free_completed":  # blocks from before the step too
            live.pop(ev["addr"], None)
            cur -= ev["size"]
    print(f"{args.who}: peak {peak / 2**30:.3f} GiB = {base / 2**30:.3f} GiB live before the step "
          f"(weights, grads, optimizer state) + {best / 2**30:.3f} GiB allocated in the step at "
          f"its peak (event {best_i} of {len(trace)})")
    blocks = sorted(best_live.values(), key=lambda e: -e["size"])
    print(f"largest of the {len(blocks)} blocks the step holds at its peak:")
    for ev in blocks[:args.top]:
        print(f"  {ev['size'] / 2**20:9.1f} MiB  {frames_of(ev)}")
    # the step's blocks grouped by where they came from
    groups = {}
    for ev in blocks:
        key = frames_of(ev, 2)
        n, s = groups.get(key, (0, 0))
        groups[key] = (n + 1, s + ev["size"])
    print("by allocating site (2 frames):")
    for key, (n, s) in sorted(groups.items(), key=lambda kv: -kv[1][1])[:args.top]:
        print(f"  {s / 2**20:9.1f} MiB in {n:4d} blocks  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
