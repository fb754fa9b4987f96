#!/usr/bin/env python3
"""Makes K-quant copies of a GGUF model with llama.cpp's own quantizer (llama-cpp-python's
llama_model_quantize), from an F32 or F16 copy (scripts/gguf-to-f32.py writes one), for
scripts/engine-bench.sh and tests/engine/check_llama_ref.py.
Usage: PYTHON_WITH_llama_cpp scripts/make-kquants.py IN.F32.gguf OUT_PREFIX [TYPE ...]
  TYPE: llama.cpp's file type names, Q4_K_M and Q6_K by default; writes OUT_PREFIX.TYPE.gguf.
Where a tensor's rows are not whole 256-value blocks (SmolLM2-135M's 576 columns) llama.cpp's
quantizer falls back to a 32-value type (Q4_K -> Q5_0, Q6_K -> Q8_0): such a file mixes both."""
import ctypes
import sys

import llama_cpp

src, prefix = sys.argv[1], sys.argv[2]
for name in sys.argv[3:] or ["Q4_K_M", "Q6_K"]:
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + name)
    p.nthread = 2
    out = "%s.%s.gguf" % (prefix, name)
    rc = llama_cpp.llama_model_quantize(src.encode(), out.encode(), ctypes.byref(p))
    if rc != 0:
        sys.exit("llama_model_quantize %s -> %s failed (%d)" % (name, out, rc))
    print(out)
