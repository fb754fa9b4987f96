#!/usr/bin/env python3
"""Writes a copy of a GGUF file with every tensor dequantized to F32 (same metadata), so that a
reference implementation computes with exactly the weights kite's f32 mode loads, without
quantizing activations for quantized dot products as llama.cpp does on Q4/Q8 tensors.
Usage: python scripts/gguf-to-f32.py IN.gguf OUT.gguf   (needs PyPI's gguf package)"""
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize

src, dst = sys.argv[1], sys.argv[2]
r = GGUFReader(src)
arch = r.fields["general.architecture"].contents()
w = GGUFWriter(dst, arch)
for name, f in r.fields.items():
    if name.startswith("GGUF.") or name == "general.architecture":
        continue
    t = f.types[0]
    v = f.contents()
    if name == "general.file_type":
        v = 0  # all F32
    if t == GGUFValueType.ARRAY:
        w.add_array(name, v)
    elif t == GGUFValueType.STRING:
        w.add_string(name, v)
    else:
        w.add_key_value(name, v, t)
for t in r.tensors:
    a = dequantize(t.data, t.tensor_type).astype(np.float32)
    a = a.reshape([int(x) for x in reversed(t.shape)])
    w.add_tensor(t.name, a, raw_dtype=GGMLQuantizationType.F32)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
