#!/usr/bin/env python3
"""One training step of a Llama-shaped random-init model, three ways, on one CUDA device:
transformers as it comes ("hf": its sdpa attention, its loss over the full logits), transformers
with Liger-Kernel (`apply_liger_kernel_to_llama`: RMSNorm, RoPE, SwiGLU, fused linear
cross-entropy) and transformers with `kite.torch.patch` (norms, gated MLP, rope,
fused linear cross-entropy; its attention core in training on CUDA runs torch's SDPA, as patch's
default does; `kite-sdpa`, asked for with --only, is patch(attention="kite": kite's sdpa and
sdpa_backward)). Same model, same data, same AdamW.

Each contestant runs in a process of its own (no patch leaks into another, peak memory is its
own), the contestants alternate (hf, liger, kite, hf, liger, kite, ...: a clock or thermal drift
hits them alike), and each run reports tokens/s over its timed steps (after warm-up steps) and the
peak of torch.cuda.max_memory_allocated over those steps, plus the step-1 loss (the three must
agree to bf16 rounding: a wrong patch shows here before it shows in the speed).

Usage (GPU machine; liger-kernel carried as a wheel, kite._C from the build):
  PYTHONPATH=build/python python3 scripts/train_bench.py --rounds 2
  python3 scripts/train_bench.py --one kite     # a single run, what each round starts
"""
import argparse
import json
import os
import subprocess
import sys
import time

CONTESTANTS = ("hf", "liger", "kite", "kite-sdpa")


def build_model(args):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=args.hidden, intermediate_size=args.intermediate,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads,
                      num_key_value_heads=args.kv_heads, vocab_size=args.vocab,
                      max_position_embeddings=args.seq, rope_theta=500000.0,
                      tie_word_embeddings=False, attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(args.device):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.train()
    return model


def one(args, who):
    import torch
    if who == "liger":
        from liger_kernel.transformers import apply_liger_kernel_to_llama
        apply_liger_kernel_to_llama()  # before the model is built: it swaps the module classes
    model = build_model(args)
    report = []
    if who.startswith("kite"):
        import kite.torch
        # kite: the default patch (in training on CUDA its attention core runs torch's SDPA);
        # kite-sdpa: attention="kite", kite's sdpa and sdpa_backward
        report = kite.torch.patch(model, attention="kite" if who == "kite-sdpa" else True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=args.device == "cuda")
    g = torch.Generator(device=args.device).manual_seed(1)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), device=args.device, generator=g)
    cuda = args.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    losses, times = [], []
    sync()
    for step in range(args.warmup + args.steps):
        if step == args.warmup and cuda:
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    timed = times[args.warmup:]
    return {"who": who, "tokens_per_s": args.batch * args.seq * len(timed) / sum(timed),
            "step_ms": 1e3 * sum(timed) / len(timed),
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan"), "loss_step1": losses[0],
            "loss_last": losses[-1], "patched": sum("->" in r for r in report),
            "left": [r for r in report if "left" in r]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=8192)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", default="hf,liger,kite")
    ap.add_argument("--device", default="cuda", help="cuda; cpu only to try the script")
    ap.add_argument("--one", choices=CONTESTANTS, help="run one contestant in this process")
    args = ap.parse_args()
    if args.one:
        print("RESULT " + json.dumps(one(args, args.one)), flush=True)
        return 0
    who_list = args.only.split(",")
    forwarded = []
    for k in ("device", "hidden", "intermediate", "layers", "heads", "kv_heads", "vocab", "seq", "batch",
              "warmup", "steps"):
        forwarded += [f"--{k.replace('_', '-')}", str(getattr(args, k))]
    results, failed = {w: [] for w in who_list}, 0
    for r in range(args.rounds):
        for who in who_list:
            p = subprocess.run([sys.executable, __file__, "--one", who] + forwarded,
                               capture_output=True, text=True, env=os.environ)
            line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
            if p.returncode or not line:
                print(f"{who} round {r}: FAILED rc {p.returncode}\n{p.stderr[-3000:]}", flush=True)
                failed += 1
                continue
            res = json.loads(line[0][7:])
            results[who].append(res)
            print(json.dumps(res), flush=True)
    import torch
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"\n---- training step, {name}, torch {torch.__version__}: "
          f"Llama hidden {args.hidden}, {args.layers} layers, heads {args.heads}/{args.kv_heads}, "
          f"vocab {args.vocab}, batch {args.batch} x seq {args.seq}, bf16, AdamW (fused); "
          f"{args.steps} timed steps after {args.warmup}, best of {args.rounds} alternated runs")
    print(f"{'who':<16} {'tokens/s':>9} {'step ms':>8} {'peak GiB':>9} {'loss step 1':>12}")
    for who in who_list:
        if results[who]:
            b = max(results[who], key=lambda x: x["tokens_per_s"])
            print(f"{who:<16} {b['tokens_per_s']:>9.0f} {b['step_ms']:>8.1f} {b['peak_gib']:>9.2f} "
                  f"{b['loss_step1']:>12.5f}")
            for left in b["left"]:
                print(f"       left: {left}")
    losses = [res[0]["loss_step1"] for res in results.values() if res]
    if len(losses) > 1 and max(losses) - min(losses) > 0.02 * abs(min(losses)):
        print(f"step-1 losses disagree: {losses}")
        failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
