#!/usr/bin/env python3
"""Hugging Face transformers' LlamaForCausalLM on the weights of a llama GGUF file, beside
`kite run --bench`: the peer of the engine table.

The GGUF file is read here with numpy (no `gguf` package, no hub access): the header, the
metadata, the tensor infos; Q4_0, Q4_1, Q8_0, F16, BF16 and F32 tensors are dequantized to f32
(the values kite's engine loads) and cast to the run's dtype. llama.cpp's converter permutes the
rows of attn_q / attn_k so that rope rotates adjacent pairs; they are permuted back here for
transformers' rotate-half rope.

Runs (greedy `generate`, static cache; `--modes` eager and/or compile, compile being
transformers' own compilation of the forward with mode reduce-overhead):
  batch 1   "The capital of France is", -n new tokens
  batch 64  "Write a short story about a robot number i." (i = 1..64), left-padded, -n new tokens
  prompt    a 510-token prompt, 2 new tokens
printed as `hf <mode>, <run>: prompt P tokens in S s = R tok/s; decode D tokens in S s = R tok/s`,
where prompt is the time of a 1-token generate and decode the rest of an n-token one.
With --kite BINARY, the first tokens of the batch-1 run are compared with
`kite run --weights <dtype> --tokens` on the same device (--kite-device).

  --check-ref FILE  instead of timing: greedy ids of the `gen` prompts of a reference file
                    (tests/engine/llama_ref_f32.txt) and how many leading ids agree
  --check-gguf      instead of timing: every tensor dequantized here against PyPI's gguf package
                    (when installed) and against an F32 copy of the file (--f32-copy FILE)

Usage: python3 scripts/hf_peer.py --model FILE.gguf [--device cuda] [--dtype bfloat16]
           [--modes eager,compile] [-n 128] [--kite build/bin/kite] [--kite-device cuda]
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import time

import numpy as np

# ---- GGUF ------------------------------------------------------------------------------------
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q4_1, GGML_Q8_0, GGML_BF16 = 0, 1, 2, 3, 8, 30
# type: (values per block, bytes per block)
BLOCK = {GGML_F32: (1, 4), GGML_F16: (1, 2), GGML_BF16: (1, 2), GGML_Q4_0: (32, 18),
         GGML_Q4_1: (32, 20), GGML_Q8_0: (32, 34)}
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
          11: "<q", 12: "<d"}
NUMPY = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32,
         6: np.float32, 7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}


class Gguf:
    """metadata: dict key -> value (arrays of numbers as numpy arrays, of strings as lists);
    tensors: dict name -> (type, ne list, numpy uint8 view of its bytes)."""

    def __init__(self, path):
        self.buf = np.memmap(path, dtype=np.uint8, mode="r")
        self.pos = 0
        if bytes(self.buf[:4]) != b"GGUF":
            raise ValueError("%s: not a GGUF file" % path)
        self.pos = 4
        version, n_tensors, n_kv = self._u("<I"), self._u("<Q"), self._u("<Q")
        if version not in (2, 3):
            raise ValueError("GGUF version %d" % version)
        self.metadata = {}
        for _ in range(n_kv):
            key = self._str()
            self.metadata[key] = self._value(self._u("<I"))
        infos = []
        for _ in range(n_tensors):
            name = self._str()
            nd = self._u("<I")
            ne = [self._u("<Q") for _ in range(nd)]
            infos.append((name, ne, self._u("<I"), self._u("<Q")))
        align = int(self.metadata.get("general.alignment", 32))
        start = (self.pos + align - 1) // align * align
        self.tensors = {}
        for name, ne, typ, off in infos:
            if typ not in BLOCK:
                raise ValueError("tensor %s: ggml type %d not read here" % (name, typ))
            per, size = BLOCK[typ]
            n = int(np.prod(ne))
            nbytes = n // per * size
            if start + off + nbytes > len(self.buf):
                raise ValueError("tensor %s runs past the end of the file" % name)
            self.tensors[name] = (typ, ne, self.buf[start + off:start + off + nbytes])

    def _u(self, fmt):
        size = struct.calcsize(fmt)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return v

    def _str(self):
        n = self._u("<Q")
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def _value(self, t):
        if t in SCALAR:
            return self._u(SCALAR[t])
        if t == 8:
            return self._str()
        if t == 9:
            et, n = self._u("<I"), self._u("<Q")
            if et in NUMPY:
                a = np.frombuffer(self.buf, dtype=NUMPY[et], count=n, offset=self.pos).copy()
                self.pos += n * a.itemsize
                return a
            return [self._value(et) for _ in range(n)]
        raise ValueError("metadata value type %d" % t)

    def f32(self, name):
        """The tensor as f32, numpy shape reversed from ne ([rows, cols] for a matrix)."""
        typ, ne, raw = self.tensors[name]
        return dequantize(raw, typ).reshape(list(reversed(ne)))


def dequantize(raw, typ):
    """f32 values of a tensor's bytes, computed as d * q (+ m) in f32 like kite's loader."""
    if typ == GGML_F32:
        return raw.view(np.float32).copy()
    if typ == GGML_F16:
        return raw.view(np.float16).astype(np.float32)
    if typ == GGML_BF16:
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    per, size = BLOCK[typ]
    b = raw.reshape(-1, size)
    d = b[:, 0:2].copy().view(np.float16).astype(np.float32)  # [blocks, 1]
    if typ == GGML_Q8_0:
        return (d * b[:, 2:].view(np.int8).astype(np.float32)).reshape(-1)
    qs = b[:, 4:] if typ == GGML_Q4_1 else b[:, 2:]
    # element i of a block is the low nibble of byte i, element 16 + i its high nibble
    q = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.float32)
    if typ == GGML_Q4_0:
        return ((q - np.float32(8)) * d).reshape(-1)
    m = b[:, 2:4].copy().view(np.float16).astype(np.float32)
    return (q * d + m).reshape(-1)


# ---- the transformers model --------------------------------------------------------------------
def unpermute(w, heads):
    """Inverse of llama.cpp's converter permutation of q / k rows ([heads * hd, in])."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def build_model(g, dtype, device):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    md = g.metadata
    arch = md["general.architecture"]
    if arch not in ("llama", "mistral"):
        raise SystemExit("hf_peer: architecture %s not handled here" % arch)

    def k(key, default=None):
        return md.get("%s.%s" % (arch, key), default)

    n_head, n_kv = int(k("attention.head_count")), int(k("attention.head_count_kv", k("attention.head_count")))
    hidden = int(k("embedding_length"))
    emb = g.f32("token_embd.weight")
    tied = "output.weight" not in g.tensors
    cfg = LlamaConfig(
        vocab_size=emb.shape[0], hidden_size=hidden, intermediate_size=int(k("feed_forward_length")),
        num_hidden_layers=int(k("block_count")), num_attention_heads=n_head,
        num_key_value_heads=n_kv, head_dim=int(k("attention.key_length", hidden // n_head)),
        max_position_embeddings=int(k("context_length", 2048)),
        rms_norm_eps=float(k("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(k("rope.freq_base", 10000.0)), tie_word_embeddings=tied,
        bos_token_id=int(md.get("tokenizer.ggml.bos_token_id", 1)),
        eos_token_id=int(md.get("tokenizer.ggml.eos_token_id", 2)),
        pad_token_id=int(md.get("tokenizer.ggml.padding_token_id", md.get("tokenizer.ggml.eos_token_id", 2))),
        attention_bias=False, mlp_bias=False)
    # rope_theta is a rope_parameters entry in transformers 5
    if getattr(cfg, "rope_parameters", None) is not None:
        cfg.rope_parameters["rope_theta"] = float(k("rope.freq_base", 10000.0))
    model = LlamaForCausalLM(cfg)
    sd = {"model.embed_tokens.weight": emb, "model.norm.weight": g.f32("output_norm.weight")}
    if not tied:
        sd["lm_head.weight"] = g.f32("output.weight")
    names = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
             "ffn_norm": "post_attention_layernorm"}
    for layer in range(cfg.num_hidden_layers):
        for src, dst in names.items():
            w = g.f32("blk.%d.%s.weight" % (layer, src))
            if src == "attn_q":
                w = unpermute(w, n_head)
            elif src == "attn_k":
                w = unpermute(w, n_kv)
            sd["model.layers.%d.%s.weight" % (layer, dst)] = w
    sd = {n: torch.from_numpy(np.ascontiguousarray(v)) for n, v in sd.items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [n for n in missing if not (tied and n == "lm_head.weight")]
    if missing or unexpected:
        raise SystemExit("hf_peer: weights missing %s, unexpected %s" % (missing[:4], unexpected[:4]))
    if tied:
        model.tie_weights()
    model = model.to(device=device, dtype=dtype).eval()
    model.generation_config.pad_token_id = cfg.pad_token_id
    return model


# ---- tokens ------------------------------------------------------------------------------------
def kite_tokenize(kite, model, text):
    out = subprocess.run([kite, "run", "--model", model, "--tokenize", text], capture_output=True,
                         text=True, check=True).stdout.split()
    return [int(x) for x in out]


def prompt_ids(args, g, text):
    ids = kite_tokenize(args.kite_tok, args.model, text)
    if bool(g.metadata.get("tokenizer.ggml.add_bos_token", False)):
        ids = [int(g.metadata["tokenizer.ggml.bos_token_id"])] + ids
    return ids


def generate(model, batch, n, compile_mode, min_new=True):
    """Greedy continuation of the prompts in `batch` (lists of ids, left-padded here)."""
    import torch

    dev = model.device
    width = max(len(p) for p in batch)
    pad = model.generation_config.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch], device=dev)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=dev)
    kw = dict(max_new_tokens=n, do_sample=False, cache_implementation="static",
              attention_mask=mask, pad_token_id=pad)
    if min_new:
        kw["min_new_tokens"] = n
    if compile_mode == "eager":
        kw["disable_compile"] = True
    else:
        from transformers.generation.configuration_utils import CompileConfig

        kw["compile_config"] = CompileConfig(fullgraph=True, mode="reduce-overhead")
    with torch.inference_mode():
        out = model.generate(ids, **kw)
    return out[:, width:].tolist()


def timed(model, batch, n, mode):
    import torch

    def run(k):
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        generate(model, batch, k, mode)
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t

    run(1), run(n)  # warm-up: compilation and graph capture for both lengths
    tp = min(run(1) for _ in range(2))
    tn = min(run(n) for _ in range(2))
    ptok = sum(len(p) for p in batch)
    dtok = len(batch) * (n - 1)
    td = max(tn - tp, 1e-9)
    return ("prompt %d tokens in %.3f s = %.1f tok/s; decode %d tokens in %.3f s = %.1f tok/s"
            % (ptok, tp, ptok / tp, dtok, td, dtok / td))


def check_ref(args, g, model):
    """Leading ids of the greedy continuation that agree with a reference file's gen lines."""
    worst = None
    for line in open(args.check_ref, encoding="utf-8"):
        if not line.startswith("gen "):
            continue
        rest = line.split(" ", 2)[2]
        prompt, end = json.JSONDecoder().raw_decode(rest)
        want = [int(x) for x in rest[end:].split()]
        got = generate(model, [prompt_ids(args, g, prompt)], len(want), "eager", min_new=False)[0]
        agree = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        worst = agree if worst is None else min(worst, agree)
        print("hf %s: %2d/%d leading ids agree: %s" % (args.dtype, agree, len(want), json.dumps(prompt)[:50]))
    return worst


def check_gguf(args, g):
    """Every tensor dequantized here against the gguf package and against an F32 copy."""
    bad = 0
    ref = None
    try:
        from gguf import GGUFReader
        from gguf.quants import dequantize as gg_dequantize

        ref = {t.name: t for t in GGUFReader(args.model).tensors}
    except ImportError:
        print("gguf package not installed: that comparison is skipped")
    f32 = Gguf(args.f32_copy) if args.f32_copy else None
    for name, (typ, ne, raw) in g.tensors.items():
        mine = dequantize(raw, typ)
        for what, other in (("gguf package", ref and gg_dequantize(ref[name].data, ref[name].tensor_type)),
                            ("F32 copy", f32 and f32.tensors.get(name) and f32.f32(name))):
            if other is None or other is False:
                continue
            other = np.asarray(other, dtype=np.float32).reshape(-1)
            diff = float(np.max(np.abs(mine - other))) if other.size == mine.size else float("inf")
            scale = float(np.max(np.abs(other))) or 1.0
            if diff > 1e-6 * scale:
                bad += 1
                print("FAIL %s vs %s: max |diff| %g (scale %g)" % (name, what, diff, scale))
    print("hf_peer --check-gguf: %d tensors, %d mismatches" % (len(g.tensors), bad))
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--batches", default="1,64,prompt")
    ap.add_argument("--kite", help="kite binary: its tokenizer, and its tokens to compare with")
    ap.add_argument("--kite-device", default=None)
    ap.add_argument("--check-ref")
    ap.add_argument("--check-gguf", action="store_true")
    ap.add_argument("--f32-copy")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args.kite_tok = args.kite or os.path.join(root, "build", "bin", "kite")
    g = Gguf(args.model)
    if args.check_gguf:
        sys.exit(1 if check_gguf(args, g) else 0)

    import torch

    dtype = getattr(torch, args.dtype)
    t = time.perf_counter()
    model = build_model(g, dtype, args.device)
    print("hf_peer: transformers LlamaForCausalLM, %s on %s, built from %s in %.1f s"
          % (args.dtype, args.device, os.path.basename(args.model), time.perf_counter() - t))
    if args.check_ref:
        check_ref(args, g, model)
        return
    one = prompt_ids(args, g, "The capital of France is")
    if args.kite:
        w = {"bfloat16": "bf16", "float32": "f32"}.get(args.dtype)
        if w:
            kdev = args.kite_device or args.device
            out = subprocess.run([args.kite, "run", "--model", args.model, "--device", kdev, "--weights", w,
                                  "--tokens", "-n", "32", "--prompt", "The capital of France is"],
                                 capture_output=True, text=True)
            kite_ids = [int(x) for x in out.stdout.split()] if out.returncode == 0 else []
            hf_ids = generate(model, [one], 32, "eager", min_new=False)[0]
            agree = next((i for i, (a, b) in enumerate(zip(hf_ids, kite_ids)) if a != b),
                         min(len(hf_ids), len(kite_ids)))
            print("hf vs kite (%s, %s): %d/32 leading greedy ids agree%s" % (w, kdev, agree,
                  "" if out.returncode == 0 else " (kite failed: %s)" % out.stderr.strip()[-200:]))
    runs = []
    for b in args.batches.split(","):
        if b == "1":
            runs.append(("batch 1", [one], args.n))
        elif b == "64":
            runs.append(("batch 64", [prompt_ids(args, g, "Write a short story about a robot number %d." % i)
                                      for i in range(1, 65)], args.n))
        elif b == "prompt":
            text = " ".join(["The quick brown fox jumps over the lazy dog."] * 51)
            runs.append(("510-token prompt", [prompt_ids(args, g, text)], 2))
    for mode in args.modes.split(","):
        for name, batch, n in runs:
            try:
                print("hf %s, %s: %s" % (mode, name, timed(model, batch, n, mode)), flush=True)
            except Exception as e:  # a failing mode is reported, the others still run
                print("hf %s, %s: failed: %s" % (mode, name, str(e).splitlines()[0][:200]), flush=True)


if __name__ == "__main__":
    main()
