#!/usr/bin/env python3
"""`kite run --tokenize` against llama.cpp's ids for the small vocabularies of tests/engine/vocabs
(tests/engine/tokenizer_ref.txt, made by scripts/tokenizer-ref.py with llama-cpp-python): one
qwen2, llama-bpe, gpt-2 and smollm byte-level BPE each, and SentencePiece with and without the
space prefix. Every line must agree token for token.
Usage: check_tokenizer_ref.py KITE_BINARY REF_FILE VOCAB_DIR"""
import json
import os
import subprocess
import sys

kite, ref, vocabs = sys.argv[1:4]
fails = total = 0
for line in open(ref, encoding="utf-8"):
    if line.startswith("#") or not line.strip():
        continue
    kind, name, rest = line.rstrip("\n").split(" ", 2)
    text, end = json.JSONDecoder().raw_decode(rest)
    want = [int(x) for x in rest[end:].split()]
    out = subprocess.run([kite, "run", "--model", os.path.join(vocabs, name + ".gguf"),
                          "--tokenize", text], capture_output=True, text=True)
    got = [int(x) for x in out.stdout.split()] if out.returncode == 0 else None
    total += 1
    if got != want:
        fails += 1
        print("FAIL %s %s\n   want %s\n   got  %s %s" % (name, json.dumps(text)[:70], want, got,
                                                      out.stderr.strip()))
print("%d of %d texts agree with llama.cpp" % (total - fails, total))
sys.exit(1 if fails or not total else 0)
