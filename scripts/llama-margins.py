#!/usr/bin/env python3
"""How close each greedy choice of llama.cpp is: for every `gen` prompt of a reference file, the
greedy continuation on MODEL (llama-cpp-python, logits of every step) and, at each generated
position, the gap between the top-1 and the top-2 logits. A gap below what a weights mode's
rounding can move the logits by is where that mode may pick the other token. Prints lines
  margin <prompt as a JSON string> <gap at step 0> <gap at step 1> ...
for the steps whose greedy token is the reference's (it stops at the first that is not).
Usage: python scripts/llama-margins.py MODEL.gguf REF_FILE >> REF_FILE"""
import json
import sys

import numpy as np
from llama_cpp import Llama

model, ref = sys.argv[1], sys.argv[2]
# one thread: on a shared host, spinning worker threads slow every step down many times
llm = Llama(model_path=model, n_ctx=512, n_threads=1, verbose=False, seed=0, logits_all=True)
print("# produced by: python scripts/llama-margins.py %s %s (top-1 minus top-2 logit per step)"
      % (model.split("/")[-1], ref.split("/")[-1]))
for line in open(ref, encoding="utf-8"):
    if not line.startswith("gen "):
        continue
    rest = line.split(" ", 2)[2]
    prompt, end = json.JSONDecoder().raw_decode(rest)
    want = [int(x) for x in rest[end:].split()]
    ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
    llm.reset()
    llm.eval(ids)
    gaps = []
    for w in want:
        logits = np.array(llm.eval_logits[-1], dtype=np.float64)
        top = np.argsort(logits)[-2:]
        if int(top[1]) != w:
            break
        gaps.append(logits[top[1]] - logits[top[0]])
        llm.eval([w])
    print("margin", json.dumps(prompt), *("%.4f" % g for g in gaps))
