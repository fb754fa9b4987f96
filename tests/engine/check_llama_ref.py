#!/usr/bin/env python3
"""kite run against llama.cpp's token ids (tests/engine/llama_ref.txt, made by
scripts/llama-ref.py with llama-cpp-python on the same GGUF file):
  tok lines: `kite run --tokenize TEXT` must give the same ids;
  gen lines: greedy `kite run --tokens` in f32, bf16 and q4 weights; how many leading ids agree
  with llama.cpp's is printed. With --strict (the reference made by llama.cpp on the file's
X
  quantization) f32 and bf16 must agree on all 32; otherwise (llama.cpp on the Q4_1 file itself,
  whose CPU dot products quantize activations to 8 bits) the agreement is reported only.
Usage: check_llama_ref.py [--strict] KITE_BINARY REF_FILE [MODEL]; the model comes from the
argument, $KITE_MODEL or scripts/fetch-model.sh; without one the test is skipped (exit 77)."""
import json
import os
import subprocess
import sys

args = sys.argv[1:]
strict = args[0] == "--strict"
if strict:
    args = args[1:]
kite, ref = args[0], args[1]
model = args[2] if len(args) > 2 else os.environ.get("KITE_MODEL", "")
if not model:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run(["bash", os.path.join(root, "scripts", "fetch-model.sh")],
                       capture_output=True, text=True)
    model = r.stdout.strip() if r.returncode == 0 else ""
if not model or not os.path.exists(model):
    print("no model (set KITE_MODEL or let scripts/fetch-model.sh reach PyPI): skipped")
    sys.exit(77)

fails = 0
for line in open(ref, encoding="utf-8"):
    if line.startswith("#") or not line.strip():
        continue
    kind, rest = line.split(" ", 1)
    if kind == "tok":
        text, end = json.JSONDecoder().raw_decode(rest)
        want = [int(x) for x in rest[end:].split()]
        out = subprocess.run([kite, "run", "--model", model, "--tokenize", text],
                             capture_output=True, text=True, check=True).stdout.split()
        got = [int(x) for x in out]
        ok = got == want
        fails += not ok
        print("%s tokenize %s" % ("ok  " if ok else "FAIL", json.dumps(text)[:60]))
        if not ok:
            print("   want", want, "\n   got ", got)
    elif kind == "gen":
        n, rest = rest.split(" ", 1)
        n = int(n)
        prompt, end = json.JSONDecoder().raw_decode(rest)
        want = [int(x) for x in rest[end:].split()][:32]
        for w in ("f32", "bf16", "q4"):
            out = subprocess.run([kite, "run", "--model", model, "--weights", w, "--threads", "2",
                                  "--prompt", prompt, "-n", str(len(want)), "--tokens"],
                                 capture_output=True, text=True, check=True).stdout.split()
            got = [int(x) for x in out][:len(want)]
            agree = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), len(want))
            ok = agree == len(want) or w != "f32" or not strict
            fails += not ok
            print("%s %-4s %2d/%d leading tokens agree: %s" %
                  ("ok  " if ok else "FAIL", w, agree, len(want), json.dumps(prompt)[:50]))
sys.exit(1 if fails else 0)
