/*
 * The cases `kite check` and `kite bench` run: an op, a dtype and each family's own fields (a
 * case is plain data; the family that owns the op reads its part).
 */
#ifndef KITE_TOOLS_CASES_H
#define KITE_TOOLS_CASES_H

#include <stddef.h>

#include "kite/backend.h"

#define KT_MAX_SEQS 64 /* sequences of an attention case, groups of a group_gemm case */

/* How q and k of rope are laid out. */
typedef enum kt_qk_layout {
  KT_QK_SPLIT = 0, /* q[T, Hq, D] and k[T, Hkv, D] compact, separate buffers */
  KT_QK_FUSED,     /* slices of one qkv[T, (Hq + 2 Hkv) * D] buffer: token stride (Hq+2Hkv)*D */
  KT_QK_HEAD_PAD,  /* separate buffers, head stride D + pad */
} kt_qk_layout;

/* Attention cases (driver_attn.c). */
typedef struct kt_attn_case {
  int64_t batch, hq, hkv, head_dim;
  int64_t block_size, num_blocks; /* paged cache [num_blocks, Hkv, block_size, D] */
  int64_t max_blocks;             /* block_table[batch, max_blocks] */
  int32_t seq_lens[KT_MAX_SEQS];  /* keys per sequence */
  int32_t q_lens[KT_MAX_SEQS];    /* prefill: queries per sequence (the last positions) */
  int64_t tokens;                 /* store_kv: T; prefill: the sum of q_lens */
  int64_t sq, sk;                 /* sdpa */
  kite_attn_opts opts;
  int with_lse;
  int sinks;         /* attention ops: sinks f32 [Hq] given (kite.h, "Sinks") */
  int mask;          /* sdpa: 0 none, else a driver_attn.c mask kind */
  int bshd;          /* sdpa: q, k, v, o are [B, S, H, D] memory viewed as [B, H, S, D] */
  int fused_kv;      /* store_kv: k and v are slices of one [T, 2 Hkv D + pad] buffer */
  int skip_slots;    /* store_kv: about a fifth of the slots are negative (padding tokens) */
  int64_t pad;       /* extra elements in token / head strides and block-table rows */
  int64_t rope_dim;  /* MLA: head_dim is kv_lora_rank R, rope_dim P, hq the heads */
  int signed_scales; /* sdpa_fp8: scales uniform in [-1.5, 1.5) (negative and near-zero blocks) */
} kt_attn_case;

/* GEMM, MoE and quantization cases (driver_gemm.c). Sizes per op:
 *   linear, linear_quant: y[m, n] = x[m, k] w[n, k]^T;  group_gemm: x[m, k], w[groups, n, k];
 *   topk_gating: logits[m = T, n = E], topk;  fused_moe: x[m = T, n = H], I = k, E = groups;
 *   quant, dequant: x[m, k]. */
typedef struct kt_gemm_case {
  int64_t m, n, k;
  int64_t pad_x, pad_w, pad_y; /* row padding of x (logits, xq, q), w (wq; MoE: ids), y */
  int with_bias;
  int64_t groups; /* group_gemm: G; MoE: experts E */
  int32_t group_sizes[KT_MAX_SEQS];
  int64_t topk; /* topk_gating / fused_moe */
  int renormalize, ties;
  kite_moe_act act;
  int oob_ids;         /* fused_moe: some ids outside [0, E) */
  int distinct_ids;    /* fused_moe: each token's ids distinct and in range, as top-k gives */
  int alt_scratch;     /* fused_moe (bench): buffers for the per-expert composition */
  kite_dtype qtype;    /* quant, dequant, linear_quant: KITE_DTYPE_I8 or KITE_DTYPE_FP8_E4M3 */
  int specials;        /* quant: NaN, inf, zero rows, ties, saturation; dequant: NaN codes */
  kite_wq4_format wq4; /* linear_wq4: block format */
  kite_gguf_type gguf; /* linear_gguf, dequant_gguf (driver_gguf.c): block type */
} kt_gemm_case;

/* The fields of the training ops' cases, the backward ops (driver_act.c, driver_norm.c,
 * driver_core.c) and the losses (driver_loss.c): rows = N (tokens), cols = the row width
 * (activation: C; gated: I; norms, softmax: H; embedding: H; cross-entropy: V); vocab = V for
 * embedding and fused_linear_cross_entropy, hidden = H of fused_linear_cross_entropy. */
typedef struct kt_train_case {
  kite_op act;   /* activation / gated backward: the forward op */
  int with_dres; /* norm backward: the fused pre rule's residual gradient */
  int want_dw, want_db;
  kite_ce_opts ce;
  float ignore_frac;  /* cross-entropy: share of targets set to ignore_index */
  int64_t hidden;     /* fused_linear_cross_entropy: H */
  int with_bias;      /* fused_linear_cross_entropy */
  int want_grads;     /* fused_linear_cross_entropy: dh, dw (and db) */
  size_t chunk_bytes; /* fused_linear_cross_entropy: 0 = default */
} kt_train_case;
/* Sampling-family cases (driver_sampling.c): logits[rows, cols = V]. */
typedef struct kt_sample_case {
  unsigned params; /* KT_SP_* bits: the per-row tensors passed (sample, apply_penalties) */
  int logits;      /* KT_LOGITS_*: how the logits are drawn */
  int64_t n;       /* logprobs: top n; apply_penalties: ids per row of the prompt and output */
  int fixed;       /* every row gets the values below (bench); else a per-row mix */
  float temperature, top_p, min_p;
  int32_t top_k;
} kt_sample_case;

/* MoE routing, fused_moe_ex and the load-balancing loss (driver_moe.c): logits[tokens,
 * experts] for moe_route and the losses (ids[tokens, k]); x[tokens, hidden], inter I, experts E
 * for fused_moe_ex. */
typedef struct kt_moe_case {
  int64_t tokens, experts, k, hidden, inter;
  kite_route_opts route; /* moe_route (its k is k) */
  kite_moe_opts opts;    /* fused_moe_ex */
  int with_bias;         /* moe_route: bias; fused_moe_ex: b13 and b2 */
  int ties;              /* moe_route: integer logits, many exact ties */
  int oob_ids;           /* fused_moe_ex, the losses: some ids outside [0, E) */
  int with_mask;         /* the losses: a 0/1 mask, about a quarter of the tokens off */
  int64_t pad;           /* row padding of logits / x and the outputs */
} kt_moe_case;

typedef struct kt_case {
  kite_op op;
  kite_dtype dtype;
  /* the row-wise families (rows.h): activations, norms, softmax: x[rows, cols]; gated: x[rows,
   * 2 cols] -> y[rows, cols]; rope: rows = tokens; embedding: rows = tokens, cols = hidden. */
  int64_t rows, cols;
  int64_t pad_x, pad_y; /* extra elements after each row of x (and residual, table) and of y */
  int inplace;          /* y is x */
  float amp, shift;     /* float inputs are uniform in [shift - amp, shift + amp] */
  int step;             /* norms: x's first 32 elements of a row sit at shift + 16 amp */
  int specials;         /* activations: +-inf and +-huge values among x */
  /* norms */
  int with_w, with_b;
  float eps, offset;
  kite_norm_pos pos;
  /* gated */
  float limit;
  /* softmax */
  float scale;
  /* rope */
  int64_t hq, hkv, head_dim, rot_dim, max_pos;
  kite_rope_style style;
  kt_qk_layout layout;
  int k_null;
  int seq_positions; /* positions 0..T-1 (bench) instead of random in [0, max_pos) */
  /* embedding */
  int64_t vocab;
  int oob_ids; /* some ids negative or >= vocab (check) */
  kt_attn_case attn;
  kt_gemm_case gemm;
  kt_train_case train;
  kt_sample_case sample;
  kt_moe_case moe;
} kt_case;

/* A growing list of cases. */
typedef struct kt_case_list {
  kt_case *c;
  int n, cap;
} kt_case_list;
void kt_case_push(kt_case_list *l, kt_case c);
void kt_case_list_free(kt_case_list *l);

/* A case with everyday options: w present, eps 1e-6, scale 1, inputs in [-1, 1]. */
kt_case kt_case_default(kite_op op, kite_dtype dtype, int64_t rows, int64_t cols);

#endif /* KITE_TOOLS_CASES_H */
