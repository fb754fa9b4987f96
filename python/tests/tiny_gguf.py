"""Tiny random-init transformers models written to GGUF the way llama.cpp's converter lays them
out (its tensor names and metadata keys, from gguf-py's tables), for `kite run` tests that need
no download. One config per architecture kite runs (a name past "-" is a variant of it);
`write(name, path, seed)` returns the transformers model the file holds (float32, eval mode).

The vocabulary is GPT-2's 256 byte tokens, a few merges and unused tokens up to the embedding's
rows, so that `kite run` loads it as a byte-level BPE tokenizer.

Run as a script to write one file: python3 python/tests/tiny_gguf.py ARCH OUT.gguf [SEED]
"""
import math
import sys

import gguf
import numpy as np
import torch
import transformers

VOCAB = 320
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, initializer_range=0.15)
MOE = dict(COMMON, num_experts=4, num_experts_per_tok=2)
MOE_QUANT = {"qwen3moe-q8": gguf.GGMLQuantizationType.Q8_0}  # expert tensors' block type
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 16.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 16}

CONFIGS = {
    "llama": lambda: transformers.LlamaConfig(**COMMON, num_hidden_layers=2,
                                              tie_word_embeddings=False,
                                              rope_parameters=LLAMA3_ROPE),
    "qwen3": lambda: transformers.Qwen3Config(**COMMON, num_hidden_layers=2, head_dim=32,
                                              tie_word_embeddings=False),
    "gemma2": lambda: transformers.Gemma2Config(**COMMON, num_hidden_layers=4, head_dim=16,
                                                query_pre_attn_scalar=16, sliding_window=6,
                                                attn_logit_softcapping=5.0,
                                                final_logit_softcapping=3.0),
    "gemma3": lambda: transformers.Gemma3TextConfig(**COMMON, num_hidden_layers=6, head_dim=16,
                                                    query_pre_attn_scalar=16, sliding_window=6),
    # Gemma 3's larger models scale the global layers' positions linearly
    "gemma3-linear": lambda: transformers.Gemma3TextConfig(
        **COMMON, num_hidden_layers=6, head_dim=16, query_pre_attn_scalar=16, sliding_window=6,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 4.0,
                                            "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
    # mixtures of experts: every layer's FFN 4 experts of width 32, 2 per token, written stacked
    # per tensor (blk.N.ffn_gate_exps ...) as llama.cpp's converter writes them
    "qwen3moe": lambda: transformers.Qwen3MoeConfig(**MOE, num_hidden_layers=2, head_dim=32,
                                                    norm_topk_prob=True, decoder_sparse_step=1,
                                                    mlp_only_layers=[],
                                                    moe_intermediate_size=32,
                                                    tie_word_embeddings=False),
    # its experts in Q8_0 blocks; the model returned holds their decoded values
    "qwen3moe-q8": lambda: CONFIGS["qwen3moe"](),
    # Mixtral: llama.cpp writes it as arch llama with llama.expert_count
    "llama-mixtral": lambda: transformers.MixtralConfig(**dict(MOE, intermediate_size=32),
                                                        num_hidden_layers=2,
                                                        tie_word_embeddings=False),
    "phi3": lambda: transformers.Phi3Config(**COMMON, num_hidden_layers=2,
                                            tie_word_embeddings=False,
                                            rope_parameters={"rope_type": "default",
                                                             "rope_theta": 10000.0,
                                                             "partial_rotary_factor": 0.5},
                                            pad_token_id=0, bos_token_id=1, eos_token_id=2),
}

# Published models' shapes with random weights, for timing (`kite run --bench --ignore-eos`):
# not in the test parametrization over CONFIGS.
SHAPES = {
    "llama-smollm2-135m": lambda: transformers.LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0}, rms_norm_eps=1e-5,
        tie_word_embeddings=True, initializer_range=0.04),
}

T = gguf.MODEL_TENSOR


def _name(t, bid=None):
    return gguf.TENSOR_NAMES[t].format(bid=bid) + ".weight"


def _byte_tokens():
    """GPT-2's printable stand-ins for the 256 bytes, in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


def _tokenizer(w, n_vocab):
    merges = ["h e", "l l", "o \u0120", "he ll"]
    tokens = _byte_tokens() + ["he", "ll", "o\u0120", "hell"]
    types = [gguf.TokenType.NORMAL] * len(tokens)
    while len(tokens) < n_vocab:
        tokens.append(f"<unused{len(tokens)}>")
        types.append(gguf.TokenType.UNUSED)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)


def _permute(x, n_head):
    """llama.cpp's row order for llama's q and k: each head's two rotary halves interleaved,
    so that adjacent pairs rotate together."""
    rows = x.shape[0]
    return x.reshape(n_head, 2, rows // n_head // 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)


def _llama3_divisors(rope, head_dim):
    """What llama.cpp's converter writes as rope_freqs.weight: each frequency's divisor under
    Llama 3.1's wavelength-dependent scaling."""
    base, factor = rope["rope_theta"], rope["factor"]
    lo, hi = rope["low_freq_factor"], rope["high_freq_factor"]
    old = rope["original_max_position_embeddings"]
    out = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi * base ** (i / head_dim)
        if wavelen < old / hi:
            out.append(1.0)
        elif wavelen > old / lo:
            out.append(factor)
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def model(name, seed):
    arch = name.split("-")[0]
    torch.manual_seed(seed)
    cfg = (CONFIGS.get(name) or SHAPES[name])()
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"  # a loop over experts, which runs in float64 too
    m = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n:  # norm weights about 1 (Gemma's 1 + w about 2), each its own
                p.copy_(torch.randn_like(p) * 0.3 + 1.0)
        if arch.startswith("gemma"):  # the scaled embedding would drown the layers' sums
            m.model.embed_tokens.weight.mul_(0.2)
    return m


def _experts(w, m, sd, l, qtype):
    """Layer l's router (ffn_gate_inp [E, H]) and experts stacked per tensor: ffn_gate_exps and
    ffn_up_exps [E, I, H] (transformers' gate_up_proj [E, 2I, H], gate rows first), ffn_down_exps
    [E, H, I]. qtype: the experts in GGUF blocks of that type, the model's weights set to their
    decoded values (what a reader of the file computes with)."""
    p = f"model.layers.{l}.mlp."
    w.add_tensor(_name(T.FFN_GATE_INP, l), sd[p + "gate.weight"])
    gu, down = sd[p + "experts.gate_up_proj"], sd[p + "experts.down_proj"]
    half = gu.shape[1] // 2
    parts = {T.FFN_GATE_EXP: gu[:, :half], T.FFN_UP_EXP: gu[:, half:], T.FFN_DOWN_EXP: down}
    decoded = {}
    for t, x in parts.items():
        x = np.ascontiguousarray(x, dtype=np.float32)
        if qtype is None:
            w.add_tensor(_name(t, l), x)
            continue
        q = gguf.quants.quantize(x, qtype)
        w.add_tensor(_name(t, l), q, raw_dtype=qtype)
        decoded[t] = torch.from_numpy(gguf.quants.dequantize(q, qtype).reshape(x.shape))
    if decoded:
        experts = m.model.layers[l].mlp.experts
        with torch.no_grad():
            experts.gate_up_proj.copy_(torch.cat([decoded[T.FFN_GATE_EXP],
                                                  decoded[T.FFN_UP_EXP]], dim=1))
            experts.down_proj.copy_(decoded[T.FFN_DOWN_EXP])


def write(name, path, seed=0, meta=None, extra_tensors=None):
    """The model of config `name` and `seed` into path. meta: {key: None (left out) or (value,
    gguf.GGUFValueType)} over the metadata written; extra_tensors: {name: array} added."""
    arch = name.split("-")[0]
    m = model(name, seed)
    cfg = m.config
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in m.state_dict().items()}
    gemma = arch.startswith("gemma")
    H, nh, nkv = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or H // nh
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(H)
    w.add_feed_forward_length(cfg.intermediate_size)
    n_exp = getattr(cfg, "num_experts", None) or getattr(cfg, "num_local_experts", None)
    if n_exp:
        w.add_expert_count(n_exp)
        w.add_expert_used_count(cfg.num_experts_per_tok)
        if hasattr(cfg, "moe_intermediate_size"):  # Mixtral's is feed_forward_length
            w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    rope = cfg.rope_parameters
    rope = rope.get("full_attention", rope)
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_rope_dimension_count(int(hd * rope.get("partial_rotary_factor", 1.0)))
    if rope.get("rope_type") == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rope["factor"])
    if gemma:
        w.add_sliding_window(cfg.sliding_window)
    if arch == "gemma2":
        w.add_attn_logit_softcapping(cfg.attn_logit_softcapping)
        w.add_final_logit_softcapping(cfg.final_logit_softcapping)
    _tokenizer(w, cfg.vocab_size)
    for key, v in (meta or {}).items():
        w.kv_data[0].pop(key, None)
        if v is not None:
            w.add_key_value(key, *v)

    def put(name, x):
        if gemma and name.endswith("norm.weight"):
            x = x + 1  # llama.cpp stores Gemma's (1 + w)
        w.add_tensor(name, np.ascontiguousarray(x, dtype=np.float32))

    put(_name(T.TOKEN_EMBD), sd["model.embed_tokens.weight"])
    put(_name(T.OUTPUT_NORM), sd["model.norm.weight"])
    if not cfg.tie_word_embeddings:
        put(_name(T.OUTPUT), sd["lm_head.weight"])
    if rope.get("rope_type") == "llama3":
        put(_name(T.ROPE_FREQS), _llama3_divisors(rope, hd))
    for l in range(cfg.num_hidden_layers):
        p = f"model.layers.{l}."
        names = {T.ATTN_NORM: "input_layernorm", T.ATTN_OUT: "self_attn.o_proj"}
        if n_exp:
            _experts(w, m, sd, l, MOE_QUANT.get(name))
        else:
            names[T.FFN_DOWN] = "mlp.down_proj"
        if gemma:
            names.update({T.ATTN_POST_NORM: "post_attention_layernorm",
                          T.FFN_NORM: "pre_feedforward_layernorm",
                          T.FFN_POST_NORM: "post_feedforward_layernorm"})
        else:
            names[T.FFN_NORM] = "post_attention_layernorm"
        if arch == "phi3":
            names.update({T.ATTN_QKV: "self_attn.qkv_proj", T.FFN_UP: "mlp.gate_up_proj"})
        else:
            names.update({T.ATTN_Q: "self_attn.q_proj", T.ATTN_K: "self_attn.k_proj",
                          T.ATTN_V: "self_attn.v_proj"})
            if not n_exp:
                names.update({T.FFN_GATE: "mlp.gate_proj", T.FFN_UP: "mlp.up_proj"})
        if arch in ("qwen3", "qwen3moe", "gemma3"):
            names.update({T.ATTN_Q_NORM: "self_attn.q_norm", T.ATTN_K_NORM: "self_attn.k_norm"})
        for t, hf in names.items():
            x = sd[p + hf + ".weight"]
            if arch == "llama" and t in (T.ATTN_Q, T.ATTN_K):
                x = _permute(x, nh if t == T.ATTN_Q else nkv)
            put(_name(t, l), x)
    for name, x in (extra_tensors or {}).items():
        put(name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return m


if __name__ == "__main__":
    write(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0)
