#!/usr/bin/env bash
# kite run --bench beside llama.cpp (llama-cpp-python) on the same GGUF file, same threads, runs
# alternated: decode tok/s at batch 1 (32 tokens after a short prompt) and prompt tok/s (a
# 512-token prompt), kite in each --weights mode (WEIGHTS="q4 int8 bf16 f32" by default; for a
# K-quant file made by scripts/make-kquants.py, WEIGHTS=q4). The load average is printed before
# and after each round.
# LLAMA_EXTRA_BUFTS=0 turns off llama.cpp's repacked / AMX weight buffers (use_extra_bufts): with
# them llama-cpp-python 0.3.x built with GGML_NATIVE crashed in llama_decode on the K-quant files
# on the Sapphire Rapids class KVM host (docs/performance.md).
#   [WEIGHTS=...] scripts/engine-bench.sh MODEL.gguf [PYTHON_WITH_llama_cpp] [ROUNDS] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=$1
PY=${2:-python3}
ROUNDS=${3:-2}
THREADS=${4:-2}
KITE=${KITE:-build/bin/kite}
WEIGHTS=${WEIGHTS:-q4 int8 bf16 f32}
PROMPT=$(python3 -c "print(' '.join(['The quick brown fox jumps over the lazy dog.'] * 51))")
for r in $(seq "$ROUNDS"); do
  echo "round $r load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  for w in $WEIGHTS; do
    d=$("$KITE" run --model "$MODEL" --weights $w --threads "$THREADS" -n 33 --bench --ignore-eos --tokens \
      --prompt "Once upon a time" 2>&1 > /dev/null | tail -1 | sed 's/.*decode/decode/')
    p=$("$KITE" run --model "$MODEL" --weights $w --threads "$THREADS" -n 1 --bench --tokens \
      --prompt "$PROMPT" 2>&1 > /dev/null | tail -1 | sed 's/; decode.*//; s/kite run: //')
    echo "round $r kite $w: $p; $d"
  done
  "$PY" - "$MODEL" "$THREADS" "$PROMPT" << 'PYEOF'
import os, sys, time
import llama_cpp
if os.environ.get("LLAMA_EXTRA_BUFTS") == "0":  # llama.cpp's repacked / AMX weight buffers off
    _default = llama_cpp.llama_model_default_params
    def _params():
        p = _default()
        p.use_extra_bufts = False
        return p
    llama_cpp.llama_model_default_params = _params
    import llama_cpp.llama
    llama_cpp.llama.llama_cpp.llama_model_default_params = _params
from llama_cpp import Llama
model, threads, prompt = sys.argv[1], int(sys.argv[2]), sys.argv[3]
llm = Llama(model_path=model, n_ctx=1024, n_threads=threads, n_threads_batch=threads, n_batch=512,
            verbose=False)
ids = llm.tokenize(prompt.encode(), add_bos=False)[:512]
t = time.perf_counter(); llm.eval(ids); tp = time.perf_counter() - t
llm.reset()
llm.eval(llm.tokenize(b"Once upon a time", add_bos=False))
t = time.perf_counter()
for _ in range(32):
    tok = llm.sample(temp=0.0, top_k=1)
    llm.eval([tok])
td = time.perf_counter() - t
print("round llama.cpp: prompt %d tokens in %.3f s = %.1f tok/s; decode 32 tokens in %.3f s = %.1f tok/s"
      % (len(ids), tp, len(ids) / tp, td, 32 / td))
PYEOF
  echo "round $r load after: $(cut -d' ' -f1-3 /proc/loadavg)"
done
