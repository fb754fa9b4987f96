/*
 * The decoder's loaded state, shared by decoder_load.c (weights, buffers) and decoder.c (the
 * forward pass). Shapes as in decoder.c; under tensor parallelism (engine/tp.h) the head counts,
 * Dq, Dkv, QKV and F are this rank's share.
 */
#ifndef KITE_ENGINE_DECODER_NET_H
#define KITE_ENGINE_DECODER_NET_H

#include <kite/dtype.h>

#include "common.h"
#include "decoder.h"
#include "weights.h"

typedef struct dec_layer {
  void *attn_norm, *ffn_norm;           /* [H] act */
  void *post_attn_norm, *post_ffn_norm; /* [H] act, or NULL */
  void *q_norm, *k_norm;                /* [D] act, or NULL */
  /* split_qkv: q [Dq, H], k and v [Dkv, H]; else proj[0] alone: [QKV, H], q, k, v rows fused */
  kr_weight proj[3];
  void *qkv_bias;    /* [QKV] act, or NULL */
  kr_weight o;       /* [H, Dq] */
  kr_weight gate_up; /* [2F, H]: gate rows, then up rows */
  kr_weight down;    /* [H, F] */
  /* MoE layers (c.n_expert E > 0) instead of gate_up and down, I = c.n_ff_exp: */
  kr_weight router; /* [E, H] dense: the router's logits */
  void *w13;        /* [E, 2I, H] act: each expert's gate rows, then its up rows (fused_moe's) */
  void *w2;         /* [E, H, I] act */
} dec_layer;

typedef struct dec_net {
  kite_ctx *ctx;
  DLDevice dev;
  kr_config c; /* the whole model's */
  kite_dtype act;
  kite_comm *comm;       /* tensor parallelism: this rank's, else NULL */
  int rank, nranks;      /* 0 of 1 without it */
  int n_head, n_head_kv; /* this rank's heads: Hq / nranks, Hkv / nranks */
  int n_ff;              /* F / nranks */
  int64_t qkv_dim;       /* QKV */
  int ctx_len, max_tokens;
  /* the per-head q/k norms need q and k compact: three projections into three regions of
   * qkv ([T, Dq], [T, Dkv], [T, Dkv], each max_tokens rows) instead of one fused [T, QKV] */
  int split_qkv;
  void *embd;        /* [V, H] act: the token lookup table (times embd_scale) */
  kr_weight lm_head; /* [V, H]; its data is embd's when tied and dense; none on ranks > 0 */
  void *out_norm;    /* [H] act (over embd_scale when lm_head is the scaled table) */
  dec_layer *layers; /* [n_layer] */
  void *cos_sin[2];  /* [ctx_len, rot_dim] f32: the RoPE caches of global and local layers
                        (cos_sin[1] NULL: every layer uses cos_sin[0]) */
  /* activations of a step, T = max_tokens rows, B = max_seqs, all act */
  void *residual;            /* [T, H] the residual stream */
  void *normed;              /* [T, H] a block's normed input */
  void *qkv;                 /* [T, QKV] */
  void *attn;                /* [T, Dq] attention output */
  void *delta;               /* [T, H] a block's output, before it joins the residual */
  void *gate_up;             /* [T, 2F] */
  void *ffn;                 /* [T, F] */
  void *last;                /* [B, H] the normed rows that predict tokens */
  void *router;              /* MoE: [T, E] the router's logits */
  void *route_w, *route_ids; /* MoE: [T, k] f32 weights and i32 experts of each row */
  kr_linear_scratch scratch; /* int8 path: xq i8 [T, max(H, Dq, F)], xs f32 [T] */
} dec_net;

#endif /* KITE_ENGINE_DECODER_NET_H */
