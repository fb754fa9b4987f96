/*
 * The rows of the bad-input suite (bad_input.h), by op family: every op, activations, norms,
 * RoPE, embedding, attention, GEMM, MoE, quantization, GGUF, training, losses, sampling, MLA.
 * Each breaks one thing in the valid call of a set of functions and names the status wanted;
 * the rows are written for the shapes of g_setups (bad_input_ops.c, f32).
 */
#include <math.h>

#include "bad_input.h"

/* A tensor breakage with its operands; a parameter set to p; a tensor given other's memory. */
#define T(ops, arg, how, want, ...)                                                                \
  {                                                                                                \
    ops, arg, how, want, NULL, 0, {                                                                \
      __VA_ARGS__                                                                                  \
    }                                                                                              \
  }
#define P(ops, param, p, want)                                                                     \
  {                                                                                                \
    ops, param, SET_PARAM, want, NULL, p, {                                                        \
      0                                                                                            \
    }                                                                                              \
  }
#define ALIAS(ops, arg, other, want)                                                               \
  {                                                                                                \
    ops, arg, SAME_DATA, want, other, 0, {                                                         \
      0                                                                                            \
    }                                                                                              \
  }

#define F16 kDLFloat, 16, 1
#define BF16 kDLBfloat, 16, 1
#define F32 kDLFloat, 32, 1
#define F64 kDLFloat, 64, 1
#define I8 kDLInt, 8, 1
#define I32 kDLInt, 32, 1

const bad_case g_cases[] = {
    /* Every op: the valid call, and a NULL ctx. */
    T(ALL, "", NOTHING, OK, 0), T(ALL, "ctx", NULL_CTX, INV, 0),
    /* Every tensor of every op, one at a time. */
    T(ALL, "*", NULL_TENSOR, INV, 0), T(ALL, "*", NULL_DATA, INV, 0),
    T(ALL, "*", NULL_SHAPE, INV, 0), T(ALL, "*", SET_RANK, INV, 0), T(ALL, "*", SET_RANK, INV, 9),
    T(ALL, "*", SET_DIM, INV, 0, -1),
    T(ALL, "*", SET_DIM, INV, 0, INT64_MAX / 2), /* element count or byte extent overflows */
    T(ALL, "*", SET_STRIDE, INV, -1, -1), T(ALL, "*", SET_STRIDE, INV, -1, INT64_MAX / 2),
    T(ALL, "*", SET_DTYPE, UNS, kDLFloat, 32, 2), T(ALL, "*", SET_DTYPE, UNS, kDLComplex, 64, 1),
    T(ALL, "*", SET_DTYPE, UNS, kDLInt, 16, 1), T(ALL, "*", SET_DEVICE, INV, kDLCUDA, 0),
    T(ALL, "*", SET_DEVICE, INV, kDLCPU, 1),
    T(ALL, "*", SET_OFFSET, INV, 2),   /* misaligned for a 4-byte element */
    T(ALL, "*", SET_OFFSET, INV, -64), /* address wraps around */

    /* Activations and softmax: x, y same shape and float dtype, y's rows distinct. */
    T(ROWWISE, "y", SET_DIM, INV, 1, 9), T(ROWWISE, "y", SET_SHAPE, INV, 3, 4, 8, 1),
    T(ROWWISE, "y", SET_DTYPE, INV, F16), T(ROWWISE, "x", SET_DTYPE, UNS, I8),
    T(ROWWISE, "x", SET_DTYPE, UNS, I32), T(ROWWISE, "x", SET_DTYPE, UNS, F64),
    T(ROWWISE, "x", SET_STRIDES, INV, 8, 2), T(ROWWISE, "y", SET_STRIDES, INV, 0, 1),
    T(ROWWISE, "y", SET_STRIDES, INV, 4, 1), T(ROWWISE, "x,y", SET_DTYPE, OK, BF16),
    T(ROWWISE, "x", SET_STRIDES, OK, 16, 1), /* a row-strided view */
    T(ROWWISE, "x", SET_STRIDES, OK, 0, 1),  /* one row broadcast: inputs may overlap */
    ALIAS(ROWWISE, "y", "x", OK),            /* in place */
    T(ROWWISE, "x,y", SET_DIM, OK, 0, 0), T(ROWWISE, "x,y", SET_DIM, OK, 1, 0),
    P("softmax", "scale", NAN, INV), P("softmax", "scale", INFINITY, INV),
    P("softmax", "scale", 0.125, OK),

    /* Gated: x[..., 2I] -> y[..., I]. */
    T(GATED, "y", SET_DIM, INV, 1, 8), T(GATED, "y", SET_DIM, INV, 0, 3),
    T(GATED, "x", SET_DIM, INV, 1, 7), T(GATED, "y", SET_SHAPE, INV, 1, 4),
    T(GATED, "y", SET_DTYPE, INV, BF16), T(GATED, "x", SET_DTYPE, UNS, I8),
    T(GATED, "y", SET_STRIDES, INV, 0, 1), P(GATED, "limit", NAN, INV), P(GATED, "limit", 0.5, OK),
    P(GATED, "limit", -1.0, OK), P(GATED, "limit", INFINITY, OK),
    T(GATED, "x", SET_STRIDES, OK, 16, 1), T(GATED, "x,y", SET_DIM, OK, 0, 0),

    /* Norms: w, b [H] of x's dtype; y like x; residual like x, apart from x and y. */
    T(NORMS, "y", SET_DIM, INV, 1, 9), T(NORMS, "y", SET_DTYPE, INV, F16),
    T(NORMS, "x", SET_DTYPE, UNS, I8), T(NORMS, "w", SET_DIM, INV, 0, 9),
    T(NORMS, "w", SET_SHAPE, INV, 2, 1, 8), T(NORMS, "w", SET_DTYPE, INV, BF16),
    T(NORMS, "w", SET_STRIDES, INV, 2), T(NORMS, "y", SET_STRIDES, INV, 0, 1),
    P(NORMS, "eps", NAN, INV), P(NORMS, "eps", -1e-6, INV), P(NORMS, "eps", INFINITY, INV),
    P("rms_norm add_rms_norm", "offset", NAN, INV), T(LAYER, "b", SET_DIM, INV, 0, 7),
    T(LAYER, "b", SET_DTYPE, INV, F16), T(FUSED, "residual", SET_DIM, INV, 1, 9),
    T(FUSED, "residual", SET_DTYPE, INV, BF16), T(FUSED, "residual", SET_STRIDES, INV, 0, 1),
    ALIAS(FUSED, "residual", "x", INV), ALIAS(FUSED, "residual", "y", INV), P(FUSED, "pos", 2, INV),
    P(FUSED, "pos", -1, INV), P(FUSED, "pos", KITE_NORM_POST, OK), ALIAS(NORMS, "y", "x", OK),
    P(NORMS, "eps", 0.0, OK), T(NORMS, "x", SET_STRIDES, OK, 16, 1),
    P("rms_norm add_rms_norm", "offset", 1.0, OK),
    T("rms_norm layer_norm", "x,y", SET_DIM, OK, 0, 0), T(FUSED, "x,residual,y", SET_DIM, OK, 0, 0),

    /* RoPE: q[T, Hq, D], k[T, Hkv, D], positions[T] i32, cos_sin[max_pos, rot_dim] f32. */
    T("rope", "q", SET_SHAPE, INV, 2, 3, 16), T("rope", "q", SET_DTYPE, UNS, I32),
    T("rope", "q", SET_STRIDES, INV, 32, 16, 2),
    T("rope", "q", SET_STRIDES, INV, 8, 0, 1), /* both heads on one address */
    T("rope", "k", SET_DIM, INV, 0, 4), T("rope", "k", SET_DIM, INV, 2, 6),
    T("rope", "k", SET_DTYPE, INV, F16), T("rope", "k", SET_SHAPE, INV, 4, 3, 1, 8, 1),
    ALIAS("rope", "k", "q", INV), T("rope", "positions", SET_DTYPE, INV, F32),
    T("rope", "positions", SET_DIM, INV, 0, 4), T("rope", "positions", SET_SHAPE, INV, 2, 3, 1),
    T("rope", "positions", SET_STRIDES, INV, 2),
    T("rope", "positions", SET_INT, INV, 1, 16), /* outside the cache: caught by the kernel */
    T("rope", "positions", SET_INT, INV, 2, -1), T("rope", "cos_sin", SET_DTYPE, INV, F16),
    T("rope", "cos_sin", SET_DIM, INV, 1, 6), T("rope", "cos_sin", SET_DIM, INV, 0, 0),
    T("rope", "cos_sin", SET_SHAPE, INV, 1, 128), T("rope", "cos_sin", SET_STRIDES, INV, 16, 1),
    P("rope", "rot_dim", 7, INV), P("rope", "rot_dim", 0, INV), P("rope", "rot_dim", -2, INV),
    P("rope", "rot_dim", 10, INV), P("rope", "style", 2, INV), P("rope", "style", -1, INV),
    P("rope", "style", KITE_ROPE_GPTJ, OK),
    T("rope", "q", SET_STRIDES, OK, 32, 8, 1), /* a slice of a fused qkv */
    T("rope", "q", SET_STRIDES, OK, 8, 24, 1), /* head-major */
    T("rope", "k", SET_DIM, OK, 1, 0), T("rope", "q,k,positions", SET_DIM, OK, 0, 0),

    /* Embedding: ids[T] i32, table[V, H] float, y[T, H] of table's dtype. */
    T("embedding", "ids", SET_DTYPE, INV, F32),
    T("embedding", "ids", SET_DTYPE, UNS, kDLUInt, 16, 1), /* a dtype kite does not know */
    T("embedding", "ids", SET_DTYPE, INV, kDLInt, 64, 1),
    T("embedding", "ids", SET_SHAPE, INV, 2, 3, 1), T("embedding", "ids", SET_STRIDES, INV, 2),
    T("embedding", "table", SET_SHAPE, INV, 1, 80), T("embedding", "table", SET_DTYPE, UNS, I32),
    T("embedding", "table", SET_STRIDES, INV, 8, 2), T("embedding", "y", SET_DIM, INV, 0, 4),
    T("embedding", "y", SET_DIM, INV, 1, 6), T("embedding", "y", SET_DTYPE, INV, F16),
    T("embedding", "y", SET_SHAPE, INV, 3, 3, 8, 1), T("embedding", "y", SET_STRIDES, INV, 0, 1),
    T("embedding", "ids", SET_INT, OK, 0, 10), /* out of range: a zero row, not an error */
    T("embedding", "ids", SET_INT, OK, 1, -5), ALIAS("embedding", "y", "table", INV),
    ALIAS("embedding", "y", "ids", INV), T("embedding", "table", SET_STRIDES, OK, 16, 1),
    T("embedding", "table", SET_DIM, OK, 0, 0), /* empty vocabulary: zeros */
    T("embedding", "ids,y", SET_DIM, OK, 0, 0),

    /* store_kv: k, v [T, Hkv, D] -> caches [blocks, Hkv, block_size, D] at slots[T]. */
    T("store_kv", "k", SET_DTYPE, UNS, I32), T("store_kv", "v", SET_DTYPE, INV, F16),
    T("store_kv", "v", SET_DIM, INV, 1, 3), T("store_kv", "k", SET_STRIDES, INV, 16, 8, 2),
    T("store_kv", "key_cache", SET_DTYPE, INV, F16),
    T("store_kv", "key_cache", SET_SHAPE, INV, 3, 8, 4, 8),
    T("store_kv", "value_cache", SET_DIM, INV, 0, 3),
    T("store_kv", "key_cache,value_cache", SET_DIM, INV, 1, 1),
    T("store_kv", "key_cache,value_cache", SET_DIM, INV, 2, 0),
    T("store_kv", "key_cache,value_cache", SET_DIM, INV, 3, 300),
    T("store_kv", "key_cache", SET_STRIDES, INV, 128, 64, 8, 2),
    ALIAS("store_kv", "value_cache", "key_cache", INV), ALIAS("store_kv", "key_cache", "k", INV),
    T("store_kv", "slots", SET_DTYPE, INV, F32), T("store_kv", "slots", SET_DIM, INV, 0, 4),
    T("store_kv", "slots", SET_STRIDES, INV, 2),
    T("store_kv", "slots", SET_INT, INV, 1, 16), /* past the cache: caught by the kernel */
    T("store_kv", "slots", SET_INT, OK, 1, -1),  /* padding: skipped */
    T("store_kv", "k", SET_STRIDES, OK, 32, 8, 1), T("store_kv", "k,v,slots", SET_DIM, OK, 0, 0),

    /* Paged attention: q[T, Hq, D] over the caches, block_table[B, max_blocks], seq_lens[B]. */
    T(ATTN, "q", SET_DTYPE, UNS, I32), T(PAGED, "q", SET_SHAPE, INV, 2, 2, 32),
    T(PAGED, "key_cache", SET_DTYPE, INV, F16),
    T(PAGED, "key_cache,value_cache", SET_DIM, INV, 3, 4),
    T(PAGED, "q,o", SET_DIM, INV, 1, 3), /* 3 q heads over 2 kv heads */
    T(PAGED, "block_table", SET_DTYPE, INV, F32), T(PAGED, "block_table", SET_SHAPE, INV, 1, 6),
    T(PAGED, "block_table", SET_STRIDES, INV, 6, 2),
    T("paged_decode", "block_table", SET_DIM, INV, 0, 3), T(PAGED, "seq_lens", SET_DIM, INV, 0, 3),
    T(PAGED, "seq_lens", SET_DTYPE, INV, F32), T(PAGED, "o", SET_DIM, INV, 2, 4),
    T(PAGED, "o", SET_DTYPE, INV, F16), T(PAGED, "o", SET_STRIDES, INV, 8, 0, 1),
    ALIAS(PAGED, "o", "q", INV), ALIAS(PAGED, "o", "key_cache", INV),
    T(PAGED, "lse", SET_DIM, INV, 1, 3), T(PAGED, "lse", SET_DTYPE, INV, F16),
    ALIAS(PAGED, "lse", "o", INV), T("paged_prefill", "cu_q_lens", SET_DIM, INV, 0, 2),
    T("paged_prefill", "cu_q_lens", SET_DTYPE, INV, F32),
    T("paged_prefill", "cu_q_lens", SET_INT, INV, 2, 2), /* does not end at T */
    T("paged_prefill", "cu_q_lens", SET_INT, INV, 0, 1), /* does not start at 0 */
    P(ATTN, "opts.scale", NAN, INV), P(ATTN, "opts.scale", -1.0, INV),
    P(ATTN, "opts.softcap", INFINITY, INV), P(ATTN, "opts.softcap", -1.0, INV),
    P(ATTN, "opts.window_left", -2, INV), P(ATTN, "opts.gqa", 2, INV),
    P(ATTN, "opts.scale", 0.5, OK), P(ATTN, "opts.softcap", 30.0, OK),
    P(ATTN, "opts.window_left", 1, OK), P(ATTN, "opts.gqa", KITE_GQA_INTERLEAVED, OK),
    P(ATTN, "opts.causal", 0, OK), T(PAGED, "q", SET_STRIDES, OK, 64, 8, 1),
    T("paged_decode", "seq_lens", SET_INT, OK, 0, 0),  /* zeros */
    T("paged_prefill", "seq_lens", SET_INT, OK, 0, 1), /* as long as its one query */
    /* index values in host memory (a CPU ctx) are checked before any kernel runs */
    T(PAGED, "seq_lens", SET_INT, INV, 0, -1),           /* negative */
    T("paged_decode", "seq_lens", SET_INT, INV, 1, 13),  /* past the table's 3 blocks of 4 */
    T("paged_prefill", "seq_lens", SET_INT, INV, 1, 33), /* past the table's 8 blocks of 4 */
    T("paged_prefill", "seq_lens", SET_INT, INV, 1, 1),  /* below its 2 queries */
    T(PAGED, "block_table", SET_INT, INV, 0, 4),         /* past the cache's 4 blocks */
    T(PAGED, "block_table", SET_INT, INV, 0, -1),        /* inside sequence 0 */
    T("paged_prefill", "cu_q_lens", SET_INT, INV, 1, 4), /* decreases */
    T("paged_decode", "q,block_table,seq_lens,o,lse", SET_DIM, OK, 0, 0),

    /* sdpa: q[B, Hq, Sq, D], k, v[B, Hkv, Sk, D], mask [Sq, Sk] or [B|1, Hq|1, Sq, Sk]. */
    T("sdpa", "k,v", SET_DIM, INV, 0, 2), T("sdpa", "k", SET_DTYPE, INV, F16),
    T("sdpa", "v", SET_DIM, INV, 2, 4), T("sdpa", "v", SET_DTYPE, INV, BF16),
    T("sdpa", "k", SET_SHAPE, INV, 3, 2, 5, 8),
    T("sdpa", "q,o", SET_DIM, INV, 1, 3), /* 3 q heads over 2 kv heads */
    T("sdpa", "q", SET_STRIDES, INV, 96, 24, 8, 2), T("sdpa", "mask", SET_DIM, INV, 1, 4),
    T("sdpa", "mask", SET_DTYPE, INV, I32), T("sdpa", "mask", SET_SHAPE, INV, 3, 4, 3, 5),
    T("sdpa", "mask", SET_SHAPE, INV, 4, 2, 1, 3, 5), T("sdpa", "o", SET_DIM, INV, 2, 4),
    T("sdpa", "o", SET_DTYPE, INV, F16), T("sdpa", "o", SET_STRIDES, INV, 96, 0, 8, 1),
    ALIAS("sdpa", "o", "q", INV), ALIAS("sdpa", "o", "mask", INV),
    T("sdpa", "lse", SET_DIM, INV, 2, 4), ALIAS("sdpa", "lse", "o", INV),
    T("sdpa", "mask", SET_SHAPE, OK, 4, 1, 1, 3, 5),
    T("sdpa", "mask", SET_DTYPE, OK, KITE_DL_BOOL, 8, 1),
    T("sdpa", "mask", SET_STRIDES, OK, 0, 1), /* one mask row for every query */
    T("sdpa", "q", SET_STRIDES, OK, 256, 8, 32, 1), T("sdpa", "q,k,v,o,lse", SET_DIM, OK, 0, 0),

    /* sdpa_fp8: q[3, 64, 4, 2], k, v[3, 32, 5, 2] e4m3, q_scale[3, 64, 1], k_scale and
     * v_scale[3, 32, 1] f32 (one block of 128 rows), o like q (f32, f16 or bf16). */
    T("sdpa_fp8", "q", SET_DTYPE, INV, BF16), T("sdpa_fp8", "k", SET_DTYPE, INV, I8),
    T("sdpa_fp8", "v", SET_DTYPE, INV, F16), T("sdpa_fp8", "o", SET_DTYPE, UNS, I8),
    T("sdpa_fp8", "q_scale", SET_DTYPE, INV, BF16), T("sdpa_fp8", "q_scale", SET_DIM, INV, 2, 2),
    T("sdpa_fp8", "k_scale", SET_DIM, INV, 1, 16), T("sdpa_fp8", "v_scale", SET_DIM, INV, 0, 2),
    T("sdpa_fp8", "v_scale", SET_SHAPE, INV, 2, 3, 32), T("sdpa_fp8", "k,v", SET_DIM, INV, 3, 4),
    T("sdpa_fp8", "q,o,q_scale", SET_DIM, INV, 1, 3), /* 3 q heads over 32 kv heads */
    T("sdpa_fp8", "o", SET_DIM, INV, 2, 5), T("sdpa_fp8", "lse", SET_DIM, INV, 2, 5),
    P("sdpa_fp8", "opts.softcap", 30.0, UNS), P("sdpa_fp8", "opts.window_left", 1, UNS),
    P("sdpa_fp8", "opts.scale", NAN, INV), P("sdpa_fp8", "opts.gqa", 2, INV),
    P("sdpa_fp8", "opts.scale", 0.5, OK), P("sdpa_fp8", "opts.causal", 0, OK),
    P("sdpa_fp8", "opts.gqa", KITE_GQA_INTERLEAVED, OK), T("sdpa_fp8", "o", SET_DTYPE, OK, BF16),
    T("sdpa_fp8", "o", SET_DTYPE, OK, F16), ALIAS("sdpa_fp8", "o", "q", INV),
    ALIAS("sdpa_fp8", "o", "k_scale", INV), ALIAS("sdpa_fp8", "lse", "o", INV),
    ALIAS("sdpa_fp8", "lse", "v_scale", INV),
    T("sdpa_fp8", "q,k,v,q_scale,k_scale,v_scale,o,lse", SET_DIM, OK, 0, 0),
    T("sdpa_fp8", "k,v,k_scale,v_scale", SET_DIM, OK, 2, 0), /* no keys: o = 0, lse = -inf */
    T("sdpa_fp8", "q", SET_STRIDES, OK, 256, 8, 32, 1),
    /* quant_fp8_blocks: x[3, 32, 4, 2] float, q like it e4m3, scales[3, 32, 1] f32. */
    T("quant_fp8_blocks", "x", SET_DTYPE, UNS, I32), T("quant_fp8_blocks", "q", SET_DTYPE, INV, I8),
    T("quant_fp8_blocks", "q", SET_DTYPE, INV, BF16),
    T("quant_fp8_blocks", "q", SET_DIM, INV, 2, 5),
    T("quant_fp8_blocks", "scales", SET_DIM, INV, 2, 2),
    T("quant_fp8_blocks", "scales", SET_DTYPE, INV, F16), ALIAS("quant_fp8_blocks", "q", "x", INV),
    ALIAS("quant_fp8_blocks", "scales", "x", INV), ALIAS("quant_fp8_blocks", "scales", "q", INV),
    T("quant_fp8_blocks", "x", SET_DTYPE, OK, BF16), T("quant_fp8_blocks", "x", SET_DTYPE, OK, F16),
    T("quant_fp8_blocks", "x,q,scales", SET_DIM, OK, 2, 0), /* no rows: no block */
    T("quant_fp8_blocks", "x,q", SET_DIM, OK, 3, 0),        /* D = 0: scales of 1 */

    /* sdpa_varlen and the backwards: q [5, 4, 8], k, v [5, 2, 8], cu_seqlens [0, 5, 5, 5, 5, 5]
     * (max_seqlen 5); sdpa_backward as sdpa, o, lse, dout, dq, dk, dv shaped as its tensors. */
    T(VARLEN, "cu_seqlens_q", SET_INT, INV, 0, 1), /* does not start at 0 */
    T(VARLEN, "cu_seqlens_k", SET_INT, INV, 5, 4), /* does not end at Tk */
    T(VARLEN, "cu_seqlens_k", SET_INT, INV, 2, 4), /* decreases */
    T(VARLEN, "cu_seqlens_k", SET_DIM, INV, 0, 5), /* not cu_seqlens_q's B + 1 */
    T(VARLEN, "cu_seqlens_q", SET_DTYPE, INV, I8), P(VARLEN, "max_seqlen_q", 0, INV),
    P(VARLEN, "max_seqlen_k", -1, INV), P(VARLEN, "max_seqlen_k", 4, INV),
    P(VARLEN, "max_seqlen_q", 100, OK), /* a loose bound */
    T(VARLEN, "k,v", SET_DIM, INV, 2, 4), T(VARLEN, "q", SET_DIM, INV, 1, 3),
    ALIAS(VARLEN, "o", "q", INV), ALIAS(VARLEN, "lse", "o", INV),
    T(ATTN_BWD, "dout", SET_DIM, INV, 1, 3), T(ATTN_BWD, "dk", SET_DTYPE, INV, F16),
    T(ATTN_BWD, "dv", SET_DIM, INV, 1, 4), T(ATTN_BWD, "lse", SET_DTYPE, INV, F16),
    ALIAS(ATTN_BWD, "dv", "dk", INV), ALIAS(ATTN_BWD, "dq", "dout", INV),
    ALIAS(ATTN_BWD, "dv", "k", INV), ALIAS(ATTN_BWD, "dq", "lse", INV),
    ALIAS(ATTN_BWD, "dq", "o", INV), T("sdpa_backward", "mask", SET_DTYPE, INV, I32),
    /* sinks [Hq = 4] f32 compact on every attention op; dsinks [Hq] only with sinks */
    T(SINKS, "sinks", SET_DIM, INV, 0, 3), T(SINKS, "sinks", SET_DTYPE, INV, BF16),
    T(SINKS, "sinks", SET_SHAPE, INV, 2, 1, 4), T(SINKS, "sinks", SET_STRIDES, INV, 2),
    ALIAS(PAGED " sdpa sdpa_varlen", "lse", "sinks", INV), ALIAS(ATTN_BWD, "dsinks", "sinks", INV),
    ALIAS(ATTN_BWD, "dsinks", "lse", INV), ALIAS(ATTN_BWD, "dsinks", "dq", INV),
    T(ATTN_BWD, "dsinks", SET_DIM, INV, 0, 5), T(ATTN_BWD, "dsinks", SET_DTYPE, INV, F16),
    T(ATTN_BWD, "sinks", NULL_TENSOR, INV), /* dsinks without sinks */
    T(ATTN_BWD, "sinks,dsinks", NULL_TENSOR, OK), T(ATTN_BWD, "dsinks", NULL_TENSOR, OK),
    T(PAGED " sdpa sdpa_varlen", "sinks", NULL_TENSOR, OK),

    /* GEMM: x[M, K], w[N, K] (group_gemm: w[G, N, K], group_sizes[G]), bias[N], y[M, N]. */
    T("linear group_gemm", "x", SET_DTYPE, UNS, I32), T("linear", "w", SET_DIM, INV, 1, 7),
    T("group_gemm", "w", SET_DIM, INV, 2, 7), T("linear group_gemm", "w", SET_DTYPE, INV, F16),
    T("group_gemm", "w", SET_SHAPE, INV, 2, 12, 8), T("linear", "bias", SET_DIM, INV, 0, 5),
    T("linear", "bias", SET_DTYPE, INV, BF16), T("linear group_gemm", "y", SET_DIM, INV, 1, 5),
    T("linear group_gemm", "y", SET_DTYPE, INV, F16),
    T("linear group_gemm", "y", SET_STRIDES, INV, 0, 1), ALIAS("linear group_gemm", "y", "x", INV),
    T("group_gemm", "group_sizes", SET_DTYPE, INV, F32),
    T("group_gemm", "group_sizes", SET_DIM, INV, 0, 3),
    T("group_gemm", "group_sizes", SET_INT, INV, 0, -1), /* negative (host-visible) */
    T("group_gemm", "group_sizes", SET_INT, INV, 0, 3),  /* sums to 6, M = 5 */
    T("linear group_gemm", "x", SET_STRIDES, OK, 16, 1),
    T("linear", "x,w", SET_DIM, OK, 1, 6), /* K = 6 */
    T("linear", "x,y", SET_DIM, OK, 0, 0),

    /* MoE: topk_gating(logits[T, E], k) -> weights, ids [T, k]; fused_moe over E experts. */
    T("topk_gating", "logits", SET_DTYPE, UNS, I32), P("topk_gating", "k", 0, INV),
    P("topk_gating", "k", 7, INV), T("topk_gating", "weights", SET_DIM, INV, 1, 3),
    T("topk_gating", "weights", SET_DTYPE, INV, F16), T("topk_gating", "ids", SET_DIM, INV, 0, 4),
    T("topk_gating", "ids", SET_DTYPE, INV, F32), ALIAS("topk_gating", "ids", "weights", INV),
    ALIAS("topk_gating", "weights", "logits", INV), P("topk_gating", "renormalize", 1, OK),
    T("fused_moe", "x", SET_DTYPE, UNS, I8), T("fused_moe", "w13", SET_DIM, INV, 1, 5),
    T("fused_moe", "w13", SET_DTYPE, INV, F16), T("fused_moe", "w2", SET_DIM, INV, 0, 3),
    T("fused_moe", "w2", SET_DIM, INV, 2, 4), T("fused_moe", "weights", SET_DIM, INV, 0, 4),
    T("fused_moe", "weights", SET_DTYPE, INV, BF16), T("fused_moe", "ids", SET_DIM, INV, 1, 3),
    T("fused_moe", "ids", SET_DTYPE, INV, F32), T("fused_moe", "y", SET_DIM, INV, 1, 6),
    ALIAS("fused_moe", "y", "x", INV), P("fused_moe", "act", 2, INV),
    P("fused_moe", "act", KITE_MOE_GELU, OK),
    T("fused_moe", "ids", SET_INT, OK, 0, 9), /* an expert outside [0, E) contributes nothing */

    /* MoE of today's models: moe_route(logits[3, 32], bias[32], k 4, groups), fused_moe_ex with
     * b13[E, 2I], b2[E, H] (w13 [2, 8, 32], w2 [2, 32, 4]: the transposed layout's shapes wrong),
     * the load-balancing loss over ids[3, 4] and mask[3]. */
    P("moe_route", "k", 0, INV), P("moe_route", "k", 33, INV), P("moe_route", "score", 3, INV),
    P("moe_route", "score", 1, OK), P("moe_route", "score", 2, OK),
    P("moe_route", "n_group", 0, INV), P("moe_route", "n_group", 5, INV),
    P("moe_route", "n_group", 8, OK), P("moe_route", "n_group", 16, INV), /* 2 experts < k */
    P("moe_route", "topk_group", 2, INV), P("moe_route", "topk_group", 0, INV),
    P("moe_route", "scaling", NAN, INV), P("moe_route", "renormalize", 1, OK),
    T("moe_route", "bias", SET_DIM, INV, 0, 31), T("moe_route", "bias", SET_DTYPE, INV, I32),
    ALIAS("moe_route", "weights", "logits", INV), ALIAS("moe_route", "ids", "weights", INV),
    ALIAS("moe_route", "ids", "bias", INV), T("fused_moe_ex", "b13", SET_DIM, INV, 1, 7),
    T("fused_moe_ex", "b2", SET_DIM, INV, 0, 3), T("fused_moe_ex", "b13", SET_DTYPE, INV, I32),
    T("fused_moe_ex", "w13", SET_DIM, INV, 1, 7), P("fused_moe_ex", "act", 3, INV),
    P("fused_moe_ex", "act", KITE_MOE_SWIGLU_OAI, OK), P("fused_moe_ex", "layout", 2, INV),
    P("fused_moe_ex", "layout", 1, OK), P("fused_moe_ex", "limit", -1, INV),
    P("fused_moe_ex", "limit", 7, OK), P("fused_moe_ex", "alpha", INFINITY, INV),
    ALIAS("fused_moe_ex", "y", "b2", INV), ALIAS("fused_moe_ex", "y", "x", INV),
    T("fused_moe_ex", "ids", SET_INT, OK, 0, 9), P("fused_moe_ex", "transposed", 2, INV),
    P("fused_moe_ex", "transposed", -1, INV),
    P("fused_moe_ex", "transposed", 1, INV), /* w13 [2, 8, 32] read as [E, H=8, 2I]: H != 32 */
    T("moe_aux_loss moe_aux_loss_backward", "mask", SET_DIM, INV, 0, 4),
    T("moe_aux_loss moe_aux_loss_backward", "ids", SET_DIM, INV, 0, 2),
    T("moe_aux_loss moe_aux_loss_backward", "ids", SET_INT, OK, 0, 99),
    T("moe_aux_loss moe_aux_loss_backward", "ids", SET_INT, OK, 0, -1),
    T("moe_aux_loss", "loss", SET_DIM, INV, 0, 2), ALIAS("moe_aux_loss", "loss", "mask", INV),
    T("moe_aux_loss_backward", "dloss", SET_DIM, INV, 0, 3),
    T("moe_aux_loss_backward", "dlogits", SET_DIM, INV, 1, 31),
    T("moe_aux_loss_backward", "dlogits", SET_DTYPE, INV, I32),
    ALIAS("moe_aux_loss_backward", "dlogits", "logits", INV),

    /* Quantization: x[M, K] float <-> q[M, K] i8/fp8 with scales[M]; linear on quantized x, w. */
    T("quant dequant", "q", SET_DTYPE, UNS, F32), T("quant", "x", SET_DTYPE, UNS, I8),
    T("quant", "q", SET_DIM, INV, 1, 4), T("dequant", "y", SET_DIM, INV, 1, 4),
    T("quant dequant", "scales", SET_DIM, INV, 0, 3),
    T("quant dequant", "scales", SET_DTYPE, INV, F16), ALIAS("quant", "q", "x", INV),
    ALIAS("dequant", "y", "q", INV), T("dequant", "y", SET_DTYPE, UNS, I32),
    T("quant dequant", "q", SET_DTYPE, OK, KITE_DL_FLOAT8_E4M3FN, 8, 1),
    T("linear_quant", "xq", SET_DTYPE, UNS, F32),
    T("linear_quant", "wq", SET_DTYPE, INV, KITE_DL_FLOAT8_E4M3FN, 8, 1),
    T("linear_quant", "wq", SET_DIM, INV, 1, 7), T("linear_quant", "x_scales", SET_DIM, INV, 0, 5),
    T("linear_quant", "w_scales", SET_DIM, INV, 0, 5),
    T("linear_quant", "w_scales", SET_DTYPE, INV, BF16),
    T("linear_quant", "bias", SET_DTYPE, INV, F16), T("linear_quant", "y", SET_DTYPE, UNS, I8),
    T("linear_quant", "y", SET_DIM, INV, 1, 5), ALIAS("linear_quant", "y", "wq", INV),
    T("linear_quant", "xq,wq", SET_DTYPE, OK, KITE_DL_FLOAT8_E4M3FN, 8, 1),
    T("linear_quant", "y,bias", SET_DTYPE, OK, BF16),
    /* GGUF blocks: a type kite does not run, K not whole blocks of the type (Q4_K: 256 values),
     * w not K / 32 blocks of 18 bytes, y's rows not w's, y over w. */
    P("linear_gguf linear_gguf_q8 dequant_gguf", "type", 1, INV),
    P("linear_gguf linear_gguf_q8 dequant_gguf", "type", 12, INV),
    P("linear_gguf linear_gguf_q8 dequant_gguf", "type", 99, INV),
    T("linear_gguf linear_gguf_q8 dequant_gguf", "w", SET_DIM, INV, 1, 17),
    T("linear_gguf", "w", SET_DTYPE, INV, I8), T("dequant_gguf", "y", SET_DIM, INV, 0, 5),
    ALIAS("dequant_gguf", "y", "w", INV), T("linear_gguf", "x,bias,y", SET_DTYPE, OK, BF16),
    T("dequant_gguf", "y", SET_DTYPE, OK, F16),
    /* grouped GGUF blocks: the type and row bytes as linear_gguf, w's rank, bias [G, N] of x's
     * dtype, group sizes as group_gemm's, y over w or bias. */
    P("group_gemm_gguf", "type", 1, INV), P("group_gemm_gguf", "type", 12, INV),
    T("group_gemm_gguf", "w", SET_DIM, INV, 2, 17), T("group_gemm_gguf", "w", SET_RANK, INV, 2),
    T("group_gemm_gguf", "w", SET_DTYPE, INV, I8),
    T("group_gemm_gguf", "w", SET_STRIDE, INV, -1, 2),
    T("group_gemm_gguf", "bias", SET_DIM, INV, 0, 3),
    T("group_gemm_gguf", "bias", SET_DIM, INV, 1, 7),
    T("group_gemm_gguf", "bias", SET_DTYPE, INV, BF16),
    T("group_gemm_gguf", "group_sizes", SET_DTYPE, INV, F32),
    T("group_gemm_gguf", "group_sizes", SET_DIM, INV, 0, 3),
    T("group_gemm_gguf", "group_sizes", SET_INT, INV, 0, -1), /* negative (host-visible) */
    T("group_gemm_gguf", "group_sizes", SET_INT, INV, 1, 2),  /* sums to 5, M = 3 */
    T("group_gemm_gguf", "y", SET_DIM, INV, 1, 7), ALIAS("group_gemm_gguf", "y", "w", INV),
    ALIAS("group_gemm_gguf", "y", "bias", INV),
    T("group_gemm_gguf", "x,bias,y", SET_DTYPE, OK, BF16),

    /* Training: backward ops take the forward's inputs and dy; gradients like their tensors. */
    T(BWD_ROWWISE, "dx", SET_DIM, INV, 1, 9), T(BWD_ROWWISE, "dy", SET_DIM, INV, 0, 3),
    T(BWD_ROWWISE, "dy", SET_DTYPE, INV, F16), T(BWD_ROWWISE, "dx", SET_DTYPE, INV, BF16),
    T(BWD_ROWWISE, "dx", SET_STRIDES, INV, 0, 1),
    ALIAS(BWD_ROWWISE, "dx", "dy", OK), /* in place over dy */
    T(BWD_ROWWISE, "dy,dx", SET_STRIDES, OK, 16, 1),
    P("activation_backward", "act", KITE_OP_SILU_AND_MUL, INV),
    P("activation_backward", "act", KITE_OP_RELU, OK), P("activation_backward", "act", -1, INV),
    P("gated_backward", "act", KITE_OP_RELU, INV),
    P("gated_backward", "act", KITE_OP_GELU_TANH_AND_MUL, OK),
    P("gated_backward", "limit", NAN, INV), P("gated_backward", "limit", 0.5, OK),
    T("gated_backward", "dy", SET_DIM, INV, 1, 8), T("gated_backward", "dx", SET_DIM, INV, 1, 4),
    T("gated_backward", "x", SET_DIM, INV, 1, 7), ALIAS("gated_backward", "dx", "dy", INV),
    ALIAS("gated_backward", "dx", "x", OK) /* in place */,
    ALIAS("activation_backward", "dx", "x", INV), ALIAS("softmax_backward", "dx", "y", INV),
    ALIAS("rms_norm_backward layer_norm_backward", "dx", "x", INV),
    ALIAS("add_rms_norm_backward add_layer_norm_backward", "dx", "s", INV),
    T(NORM_BWD, "w", SET_DIM, INV, 0, 9), T(NORM_BWD, "dw", SET_DIM, INV, 0, 7),
    T(NORM_BWD, "dw", SET_DTYPE, INV, BF16), T(NORM_BWD, "dw", SET_STRIDES, INV, 2),
    ALIAS(NORM_BWD, "dw", "dy", INV), P(NORM_BWD, "eps", NAN, INV), P(NORM_BWD, "eps", -1.0, INV),
    P("rms_norm_backward add_rms_norm_backward", "offset", INFINITY, INV),
    P("rms_norm_backward add_rms_norm_backward", "offset", 1.0, OK),
    T("layer_norm_backward add_layer_norm_backward", "db", SET_DIM, INV, 0, 3),
    ALIAS("layer_norm_backward add_layer_norm_backward", "db", "dw", INV),
    T("add_rms_norm_backward add_layer_norm_backward", "dres", SET_DIM, INV, 1, 4),
    ALIAS("add_rms_norm_backward add_layer_norm_backward", "dx", "dres", OK),
    T("rms_norm_backward layer_norm_backward", "x,dy,dx", SET_DIM, OK, 0, 0), /* dw = 0 */
    T("rope_backward", "positions", SET_INT, INV, 1, 16),
    T("rope_backward", "dk", SET_DIM, INV, 2, 6), ALIAS("rope_backward", "dk", "dq", INV),
    P("rope_backward", "rot_dim", 7, INV), P("rope_backward", "style", KITE_ROPE_GPTJ, OK),
    P("softmax_backward", "scale", NAN, INV), T("embedding_backward", "dtable", SET_DIM, INV, 1, 7),
    T("embedding_backward", "dtable", SET_DTYPE, INV, F16),
    T("embedding_backward", "dy", SET_DIM, INV, 0, 4),
    T("embedding_backward", "ids", SET_DTYPE, INV, F32),
    ALIAS("embedding_backward", "dtable", "dy", INV),
    T("embedding_backward", "dtable", SET_STRIDES, INV, 0, 1),
    T("embedding_backward", "ids", SET_INT, OK, 0, 10), /* outside [0, V): ignored */
    T("embedding_backward", "ids", SET_INT, OK, 1, -3),
    T("embedding_backward", "dtable", SET_DIM, OK, 0, 0),

    /* Losses: logits[N, V] float, targets[N] i32, loss f32 [1] (the table's reduction: mean). */
    T(LOSSES, "targets", SET_INT, INV, 1, 8), /* outside [0, V): an error on the host */
    T(LOSSES, "targets", SET_INT, INV, 3, -1), T(LOSSES, "targets", SET_INT, OK, 1, 5),
    T(LOSSES, "targets", SET_INT, OK, 1, -100), /* every row ignored: loss 0 */
    T(LOSSES, "targets", SET_DTYPE, INV, F32), T(LOSSES, "targets", SET_DIM, INV, 0, 3),
    T(LOSS_FWD, "loss", SET_DIM, INV, 0, 2), /* reduction mean: one loss */
    T(LOSS_FWD, "loss", SET_DTYPE, INV, BF16), P(LOSSES, "opts.label_smoothing", -0.1, INV),
    P(LOSSES, "opts.label_smoothing", 1.5, INV), P(LOSSES, "opts.label_smoothing", NAN, INV),
    P(LOSSES, "opts.z_loss", -1.0, INV), P(LOSSES, "opts.softcap", INFINITY, INV),
    P(LOSSES, "opts.reduction", 3, INV), P(LOSSES, "opts.label_smoothing", 0.1, OK),
    P(LOSSES, "opts.softcap", 30.0, OK), P(LOSSES, "opts.z_loss", 1e-4, OK),
    T(CE_ROWS, "logits", SET_DIM, INV, 1, 0), /* V = 0 */
    T(CE_ROWS, "logits", SET_DTYPE, UNS, I32), T(CE_ROWS, "logits", SET_STRIDES, OK, 16, 1),
    T("cross_entropy_with_grad", "lse", SET_DIM, INV, 0, 3),
    ALIAS("cross_entropy_with_grad", "loss", "logits", INV),
    ALIAS("cross_entropy_with_grad", "lse", "loss", INV),
    T("cross_entropy_with_grad", "dlogits", SET_DIM, INV, 1, 7),
    T("cross_entropy_with_grad", "dlogits", SET_DTYPE, INV, BF16),
    ALIAS("cross_entropy_with_grad", "dlogits", "logits", OK), /* in place */
    ALIAS("cross_entropy_with_grad", "dlogits", "lse", INV),
    ALIAS("cross_entropy_with_grad", "dlogits", "loss", INV),
    T("cross_entropy_with_grad", "logits,targets,lse,dlogits", SET_DIM, OK, 0, 0),
    T("cross_entropy", "lse", SET_DIM, INV, 0, 3), ALIAS("cross_entropy", "loss", "logits", INV),
    ALIAS("cross_entropy", "lse", "loss", INV),
    T("cross_entropy_backward", "lse", SET_DTYPE, INV, F16),
    T("cross_entropy_backward", "dloss", SET_DIM, INV, 0, 3),
    T("cross_entropy_backward", "dlogits", SET_DIM, INV, 1, 7),
    T("cross_entropy_backward", "dlogits", SET_DTYPE, INV, BF16),
    ALIAS("cross_entropy_backward", "dlogits", "logits", OK), /* in place */
    ALIAS("cross_entropy_backward", "dlogits", "lse", INV),
    T("cross_entropy", "logits,targets,lse", SET_DIM, OK, 0, 0), /* N = 0: the loss is 0 */
    T("cross_entropy_backward", "logits,targets,lse,dlogits", SET_DIM, OK, 0, 0),
    T("fused_linear_cross_entropy", "w", SET_DIM, INV, 1, 7),
    T("fused_linear_cross_entropy", "w", SET_DIM, INV, 0, 0), /* V = 0 */
    T("fused_linear_cross_entropy", "w", SET_DTYPE, INV, BF16),
    T("fused_linear_cross_entropy", "h", SET_DTYPE, UNS, I32),
    T("fused_linear_cross_entropy", "bias", SET_DIM, INV, 0, 5),
    T("fused_linear_cross_entropy", "dh", SET_DIM, INV, 1, 4),
    T("fused_linear_cross_entropy", "dw", SET_DIM, INV, 0, 5),
    T("fused_linear_cross_entropy", "db", SET_DTYPE, INV, F16),
    ALIAS("fused_linear_cross_entropy", "dh", "h", INV),
    ALIAS("fused_linear_cross_entropy", "dw", "w", INV),
    ALIAS("fused_linear_cross_entropy", "db", "loss", INV),
    P("fused_linear_cross_entropy", "chunk_bytes", 1, OK), /* one column at a time */
    T("fused_linear_cross_entropy", "h,targets,dh", SET_DIM, OK, 0, 0),
    T("fused_linear_cross_entropy", "h,w,dh,dw", SET_DIM, OK, 1, 0), /* H = 0: logits = bias */
    /* Sampling: logits[B, V] float, V >= 1; tokens[B] int32; per-row parameters [B]. NaN logits
     * and bad parameter values are found by the host kernels (bit patterns set as int32). */
    T("argmax sample logprobs apply_penalties softcap", "logits", SET_DTYPE, UNS, I32),
    T("argmax sample logprobs apply_penalties softcap", "logits", SET_DIM, INV, 1, 0),
    T("argmax sample", "tokens", SET_DTYPE, INV, F32),
    T("argmax sample", "tokens", SET_DIM, INV, 0, 4),
    T("argmax sample", "tokens", SET_STRIDES, INV, 2),
    ALIAS("argmax sample", "tokens", "logits", INV),
    T("argmax sample", "logits", SET_INT, INV, 4, 0x7fc00000), /* NaN */
    T("argmax sample", "logits", SET_STRIDES, OK, 8, 1),       /* row-strided */
    T("argmax", "logits,tokens", SET_DIM, OK, 0, 0),           /* B = 0 */
    T("sample", "temperature", SET_DTYPE, INV, F16), T("sample", "temperature", SET_DIM, INV, 0, 2),
    T("sample", "temperature", SET_INT, INV, 1, (int32_t)0xbf800000), /* -1 */
    T("sample", "temperature", SET_INT, INV, 1, 0x7f800000),          /* inf */
    T("sample", "temperature", SET_INT, OK, 1, 0),                    /* 0: greedy */
    T("sample", "top_p", SET_INT, INV, 0, 0x7fc00000),
    T("sample", "min_p", SET_INT, INV, 2, 0x7fc00000),
    T("sample", "top_k", SET_INT, OK, 0, -5), /* off */
    T("sample", "top_k", SET_DTYPE, INV, kDLInt, 64, 1), T("sample", "seeds", SET_DTYPE, INV, I32),
    T("sample", "steps", SET_STRIDES, INV, 2), T("sample", "top_p", SET_SHAPE, INV, 2, 3, 1),
    T("apply_penalties", "prompt_ids", SET_DIM, INV, 0, 2),
    T("apply_penalties", "output_ids", SET_DTYPE, INV, F32),
    T("apply_penalties", "output_ids", SET_RANK, INV, 1),
    T("apply_penalties", "output_ids", SET_INT, OK, 0, 99), /* outside [0, V): ignored */
    T("apply_penalties", "prompt_ids", SET_INT, OK, 1, -1),
    T("apply_penalties", "prompt_ids,output_ids", SET_DIM, OK, 1, 0), /* no ids */
    T("apply_penalties", "repetition", SET_DIM, INV, 0, 4),
    T("apply_penalties", "logits", SET_STRIDES, INV, 0, 1),
    ALIAS("apply_penalties", "logits", "repetition", INV), P("logprobs", "n", 21, INV),
    P("logprobs", "n", 7, INV), /* > V */
    P("logprobs", "n", -1, INV), T("logprobs", "top_ids", SET_DIM, INV, 1, 3),
    T("logprobs", "top_logprobs", SET_DTYPE, INV, F16),
    T("logprobs", "token_logprobs", SET_DIM, INV, 0, 2),
    ALIAS("logprobs", "top_logprobs", "logits", INV),
    /* softcap: cap > 0 and finite; logits row-strided, written in place */
    P("softcap", "cap", 0, INV), P("softcap", "cap", -2, INV), P("softcap", "cap", NAN, INV),
    P("softcap", "cap", INFINITY, INV), T("softcap", "logits", SET_STRIDES, OK, 8, 1),
    T("softcap", "logits", SET_STRIDES, INV, 0, 1), T("softcap", "logits", SET_DIM, OK, 0, 0),
    ALIAS("logprobs", "top_logprobs", "top_ids", INV),
    T("logprobs", "tokens,token_logprobs", NULL_TENSOR, OK), /* both absent */
    T("logprobs", "tokens", SET_INT, OK, 0, 99),             /* NaN logprob, not an error */
    /* MLA: c_kv[T, R], k_pe[T, P] into ckv_cache[blocks, bs, R], kpe_cache[blocks, bs, P];
     * decode q_nope[B, H, R], q_pe[B, H, P] over them with block_table[B, max_blocks]. */
    T("mla_store_kv", "slots", SET_INT, INV, 1, 16), /* past the 4 blocks of 4 */
    T("mla_store_kv", "slots", SET_INT, OK, 1, -1),  /* padding: skipped */
    T("mla_store_kv", "c_kv", SET_STRIDES, OK, 40, 1),
    T("mla_store_kv", "c_kv", SET_DTYPE, UNS, I32), T("mla_store_kv", "k_pe", SET_DTYPE, INV, F16),
    T("mla_store_kv", "k_pe", SET_DIM, INV, 0, 4),
    T("mla_store_kv", "ckv_cache", SET_STRIDES, INV, 256, 32, 2),
    T("mla_store_kv", "ckv_cache,kpe_cache", SET_DIM, INV, 1, 0), /* block_size 0 */
    T("mla_store_kv", "ckv_cache", SET_DIM, INV, 2, 2048),        /* R above 1024 */
    ALIAS("mla_store_kv", "kpe_cache", "ckv_cache", INV),
    ALIAS("mla_store_kv", "ckv_cache", "c_kv", INV),
    T("mla_store_kv", "c_kv,k_pe,slots", SET_DIM, OK, 0, 0), P("mla_decode", "scale", 0.0, INV),
    P("mla_decode", "scale", -1.0, INV), P("mla_decode", "scale", NAN, INV),
    P("mla_decode", "scale", INFINITY, INV), T("mla_decode", "q_pe", SET_DTYPE, INV, F16),
    T("mla_decode", "q_pe", SET_DIM, INV, 1, 3),
    T("mla_decode", "kpe_cache", SET_DIM, INV, 2, 300), /* P above 256 */
    T("mla_decode", "kpe_cache", SET_DIM, INV, 0, 5),   /* blocks unlike ckv_cache's */
    T("mla_decode", "block_table", SET_DIM, INV, 0, 3), T("mla_decode", "o", SET_DTYPE, INV, F16),
    T("mla_decode", "lse", SET_DTYPE, INV, F16), ALIAS("mla_decode", "o", "q_nope", INV),
    ALIAS("mla_decode", "o", "ckv_cache", INV), ALIAS("mla_decode", "lse", "o", INV),
    T("mla_decode", "seq_lens", SET_INT, INV, 0, -1),    /* negative */
    T("mla_decode", "seq_lens", SET_INT, INV, 1, 13),    /* past the table's 3 blocks of 4 */
    T("mla_decode", "block_table", SET_INT, INV, 0, 4),  /* past the cache's 4 blocks */
    T("mla_decode", "block_table", SET_INT, INV, 0, -1), /* inside sequence 0 */
    T("mla_decode", "q_nope", SET_STRIDES, OK, 256, 64, 1),
    T("mla_decode", "q_nope,q_pe,block_table,seq_lens,o,lse", SET_DIM, OK, 0, 0),
    T("mla_decode", "seq_lens", SET_INT, OK, 0, 0), /* zeros */
};
const size_t g_case_count = sizeof g_cases / sizeof g_cases[0];
