#!/usr/bin/env python3
"""Reference token ids from llama.cpp (PyPI's llama-cpp-python, built from source) for the
engine tests: the tokenization of tricky texts and the greedy continuation of fixed prompts, on
the same GGUF file kite runs. Writes tests/engine/llama_ref.txt, one line per case:
  tok <text as a JSON string> <ids...>
  gen <n> <prompt as a JSON string> <generated ids...>
Usage: python scripts/llama-ref.py MODEL.gguf > tests/engine/llama_ref.txt"""
import json
import sys

from llama_cpp import Llama

TEXTS = [
    "Hello world",
    "Hello  world,   spaces\tand\ttabs\n\nnew lines  ",
    "Numbers: 3.14159, 1234567, 2024-11-24, x=-42",
    "Unicode: caf\u00e9 na\u00efve \u00fcber \u4f60\u597d \u3053\u3093\u306b\u3061\u306f \U0001f600 \u0394\u03b5\u03bb\u03c4\u03b1",
    "Contractions: I'm, you're, they've, we'll, it's, he'd; DON'T SHOUT",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "code: def f(x):\n    return x**2  # square\n",
    "   leading and trailing   ",
    "\u00a0non-breaking\u2003em-space\u3000ideographic",
    "",
]

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "<|im_start|>user\nWhat is the tallest mountain on Earth?<|im_end|>\n<|im_start|>assistant\n",
]


def main():
    path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    llm = Llama(model_path=path, n_ctx=512, n_threads=2, verbose=False, seed=0)
    print("# produced by: python scripts/llama-ref.py %s %d (llama-cpp-python)" % (path.split("/")[-1], n))
    for t in TEXTS:
        ids = llm.tokenize(t.encode(), add_bos=False, special=True)
        print("tok", json.dumps(t), *ids)
    for p in PROMPTS:
        ids = llm.tokenize(p.encode(), add_bos=False, special=True)
        llm.reset()
        out = []
        for tok in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
            if tok == llm.token_eos():
                break
            out.append(tok)
            if len(out) >= n:
                break
        print("gen", n, json.dumps(p), *out)


if __name__ == "__main__":
    main()
