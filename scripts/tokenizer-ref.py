#!/usr/bin/env python3
"""llama.cpp's token ids (PyPI's llama-cpp-python, built from source) for the engine's tokenizer
vocabularies: trains each family's vocabulary as python/tests/engine_vocab.py does, writes it to
tests/engine/vocabs/<family>.gguf (tokenizer metadata only, a few tens of KB), and writes one
line per text to tests/engine/tokenizer_ref.txt:
  tok <family> <text as a JSON string> <ids...>
tests/engine/check_tokenizer_ref.py compares `kite run --tokenize` with those lines.
Usage: python scripts/tokenizer-ref.py   (needs tokenizers, sentencepiece, gguf, llama_cpp)"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))

import engine_vocab as ev  # noqa: E402
from llama_cpp import Llama  # noqa: E402

out_dir = os.path.join(ROOT, "tests", "engine", "vocabs")
os.makedirs(out_dir, exist_ok=True)
texts = ev.FIXED + ev.corpus(60, 2024)
files = {}
for pre in sorted(ev.FAMILIES):
    files[pre] = os.path.join(out_dir, pre + ".gguf")
    ev.write_gguf(ev.train(pre), pre, files[pre])
for name, prefix in (("spm-prefix", True), ("spm-no-prefix", False)):
    files[name] = os.path.join(out_dir, name + ".gguf")
    ev.write_spm_gguf(ev.train_spm(prefix), prefix, files[name])

with open(os.path.join(ROOT, "tests", "engine", "tokenizer_ref.txt"), "w", encoding="utf-8") as f:
    import llama_cpp
    f.write("# llama.cpp's llama_tokenize (add_special false, parse_special true) on "
            "tests/engine/vocabs/*.gguf\n")
    f.write("# (llama.cpp as vendored by llama-cpp-python %s; scripts/tokenizer-ref.py remakes "
            "this file)\n" % llama_cpp.__version__)
    for name, path in files.items():
        llm = Llama(model_path=path, vocab_only=True, verbose=False)
        for text in texts:
            ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
            f.write("tok %s %s %s\n" % (name, json.dumps(text), " ".join(map(str, ids))))
