#!/usr/bin/env python3
"""kite run against llama.cpp (llama-cpp-python) on the tiny random-init models of every
architecture kite runs (python/tests/tiny_gguf.py's CONFIGS, seed 0): the same GGUF file in
both, f32 weights and f32 KV cache in llama.cpp, `--weights f32` in kite.
  tokenize: `kite run --tokenize PROMPT` must give llama.cpp's ids;
  greedy:   N_NEW ids from kite's prompt ids; llama.cpp's are its logits' argmax step by step,
            with each step's top-1 / top-2 gap. They must agree up to the first step whose gap
            is below GAP (a random-init model has near-ties, where two f32 forwards with other
            summation orders may pick either token and part legitimately); how many agree in
            all is printed.
A file llama.cpp refuses to load fails, with its message.
Run with a Python that imports llama_cpp; the files are written by the writer Python
($TINY_GGUF_PYTHON, default python3: torch, transformers, gguf), or taken from --files DIR
(DIR/<name>.gguf, as `python3 python/tests/tiny_gguf.py NAME DIR/NAME.gguf` writes them).
Usage: check_tiny_llama.py [--device cpu|cuda] [--files DIR] KITE_BINARY
Exit: 0 all agree, 1 a disagreement or a refusal, 77 llama_cpp or the writer is missing."""
import json
import os
import subprocess
import sys
import tempfile

N_NEW = 32
# f32 weights and cache on both sides: the logits differ by ~1e-5 (summation orders, exp and
# tanh); 1e-3 leaves a wide margin
GAP = 1e-3
PROMPTS = ["hello world, hello kite", "The quick brown fox jumps over", "Once upon a time,"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import numpy as np
    from llama_cpp import Llama
except ImportError as e:
    print(f"llama_cpp not importable ({e}): skipped")
    sys.exit(77)

args = sys.argv[1:]
device = "cpu"
if "--device" in args:
    device = args[args.index("--device") + 1]
    del args[args.index("--device"):args.index("--device") + 2]
files = None
if "--files" in args:
    files = args[args.index("--files") + 1]
    del args[args.index("--files"):args.index("--files") + 2]
kite = args[0]
writer = os.environ.get("TINY_GGUF_PYTHON", "python3")

WRITE = """import sys
sys.path.insert(0, sys.argv[1])
import tiny_gguf
for name in sorted(tiny_gguf.CONFIGS):
    tiny_gguf.write(name, f"{sys.argv[2]}/{name}.gguf", seed=0)
    print(name)
"""


def llama_greedy(llm, ids, n):
    """llama.cpp's greedy ids from ids, and each step's top-1 / top-2 logit gap."""
    llm.reset()
    llm.eval(ids)
    out, gaps = [], []
    for _ in range(n):
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)  # needs logits_all
        top = np.sort(logits)[-2:]
        out.append(int(np.argmax(logits)))
        gaps.append(float(top[1] - top[0]))
        llm.eval([out[-1]])
    return out, gaps


def kite_run(path, *extra):
    r = subprocess.run([kite, "run", "--model", path, "--device", device, *extra],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed")
    return [int(x) for x in r.stdout.split()]


with tempfile.TemporaryDirectory() as tmp:
    if files:
        tmp, names = files, sorted(f[:-5] for f in os.listdir(files) if f.endswith(".gguf"))
    else:
        w = subprocess.run([writer, "-c", WRITE, os.path.join(ROOT, "python", "tests"), tmp],
                           capture_output=True, text=True)
        if w.returncode != 0:
            print(f"{writer} could not write the tiny files: skipped\n{w.stderr[-400:]}")
            sys.exit(77)
        names = w.stdout.split()
    fails = 0
    for name in names:
        path = os.path.join(tmp, name + ".gguf")
        try:
            # type_k / type_v 0: GGML_TYPE_F32 (llama.cpp's cache is f16 by default)
            llm = Llama(model_path=path, n_ctx=256, n_threads=2, verbose=False, seed=0,
                        logits_all=True, type_k=0, type_v=0)
        except Exception as e:  # llama-cpp-python raises ValueError with llama.cpp's reason
            print(f"FAIL {name}: llama.cpp refuses the file: {e}")
            fails += 1
            continue
        for prompt in PROMPTS:
            label = f"{name} {json.dumps(prompt)}"
            want_ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
            try:
                ids = kite_run(path, "--tokenize", prompt)
                got = kite_run(path, "--prompt", prompt, "-n", str(N_NEW), "--tokens",
                               "--ignore-eos", "--weights", "f32")
            except RuntimeError as e:
                print(f"FAIL {label}: kite run: {e}")
                fails += 1
                continue
            if ids != want_ids:
                print(f"FAIL {label} tokenize: kite {ids} llama.cpp {want_ids}")
                fails += 1
            want, gaps = llama_greedy(llm, ids, N_NEW)
            clear = next((i for i, g in enumerate(gaps) if g < GAP), N_NEW)
            agree = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), N_NEW)
            ok = len(got) == N_NEW and agree >= clear
            fails += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {label}: {agree}/{N_NEW} greedy ids agree"
                  + (f" (llama.cpp near-tie, gap {gaps[clear]:.2g}, at step {clear})"
                     if clear < N_NEW else ""))
            if not ok:
                print("   llama.cpp", want, "\n   kite     ", got)
        del llm
    print(f"check_tiny_llama: {'FAILED' if fails else 'passed'} ({fails} failures)")
    sys.exit(1 if fails else 0)
