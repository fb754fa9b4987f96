/*
 * Validation shared by the attention front-ends (attention.c: store_kv, the paged ops, sdpa;
 * attention_backward.c: sdpa_varlen and the two backwards). Every helper sets "<op>: <arg>:
 * <problem>" and returns INVALID_ARG (UNSUPPORTED for a dtype no kernel runs) on failure.
 */
#ifndef KITE_OPS_ATTENTION_H
#define KITE_OPS_ATTENTION_H

#include "core/internal.h"

/* Head dims above this are refused: kernels keep a query row and an output row on the stack. */
#define ATTN_MAX_HEAD_DIM 256

/* opts NULL means the defaults. On success *out holds the options with scale resolved
 * (0 -> 1/sqrt(head_dim)) and causal as 0 or 1. */
kite_status kite_attn_check_opts(const char *op, const kite_attn_opts *opts, int64_t head_dim,
                                 kite_attn_opts *out);
/* A float tensor of rank ndim whose last (head) dim is unit-stride; other strides are free. */
kite_status kite_attn_check_heads(const kite_ctx *ctx, const char *op, const char *arg,
                                  const DLTensor *t, int ndim, kite_tensor *out);
/* The last (head) dim of t (rank >= 1) is unit-stride. */
kite_status kite_attn_check_head_stride(const char *op, const char *arg, const kite_tensor *t);
/* kite_attn_check_heads of t with like's rank, dtype and shape (o of q, dq of q, dk of k ...). */
kite_status kite_attn_check_like(const kite_ctx *ctx, const char *op, const char *arg,
                                 const DLTensor *t, const kite_tensor *like, const char *like_arg,
                                 kite_tensor *out);
/* Dense attention's q[B, Hq, Sq, D], k and v[B, Hkv, Sk, D] (checked each): v of k's shape, k of
 * q's batch and head_dim, and the heads fit (kite_attn_check_heads_fit). */
kite_status kite_attn_check_dense_qkv(const char *op, const kite_tensor *qt, const kite_tensor *kt,
                                      const kite_tensor *vt);
/* hq query heads over hkv kv heads: hkv >= 1 and hq a multiple of it; 1 <= D <= 256. */
kite_status kite_attn_check_heads_fit(const char *op, int64_t hq, int64_t hkv, int64_t head_dim);
/* An output the kernel writes: distinct elements, no byte shared with any of the n inputs. */
kite_status kite_attn_check_output(const char *op, const char *arg, const kite_tensor *t,
                                   const kite_tensor *const *inputs, const char *const *names,
                                   int n);
/* lse: NULL, or compact f32 of shape dims[0..ndim). */
kite_status kite_attn_check_lse(const kite_ctx *ctx, const char *op, const DLTensor *lse, int ndim,
                                const int64_t *dims, kite_tensor *out);

/* A compact int32 vector of length n (slots, seq_lens, cu_q_lens); n_name names n in messages. */
kite_status kite_attn_check_i32_vec(const kite_ctx *ctx, const char *op, const char *arg,
                                    const DLTensor *t, int64_t n, const char *n_name,
                                    kite_tensor *out);
/* block_table[B, max_blocks] int32, rows with one stride. */
kite_status kite_attn_check_block_table(const kite_ctx *ctx, const char *op, const DLTensor *t,
                                        kite_tensor *out, int64_t *batch, int64_t *max_blocks,
                                        int64_t *stride);
/* The index values of a paged call in host memory (cu_q_lens NULL for decode). */
typedef struct kite_host_table {
  int64_t batch, tokens;
  const int32_t *seq_lens, *cu_q_lens, *block_table;
  int64_t block_table_stride, max_blocks, block_size, num_blocks;
} kite_host_table;
kite_status kite_attn_check_host_table(const char *op, const kite_host_table *a);

/* sinks (or dsinks) under the name arg: NULL, or compact f32 [hq] (kite.h, "Sinks"). */
kite_status kite_attn_check_sinks(const kite_ctx *ctx, const char *op, const char *arg,
                                  const DLTensor *t, int64_t hq, kite_tensor *out);

/* Everything kite_sdpa checks, under the name op: q, k, v, mask, sinks, opts, o (written by sdpa,
 * read by its backward: distinct elements, disjoint from q, k, v, mask, sinks either way) and lse
 * (NULL allowed unless lse_required). Fills *a (op KITE_OP_SDPA) and t[7], the checked q, k, v,
 * mask, o, lse, sinks (zeroed when absent), for the caller's further overlap checks. */
kite_status kite_attn_check_sdpa(kite_ctx *ctx, const char *op, const DLTensor *q,
                                 const DLTensor *k, const DLTensor *v, const DLTensor *mask,
                                 const DLTensor *sinks, const kite_attn_opts *opts,
                                 const DLTensor *o, const DLTensor *lse, bool lse_required,
                                 kite_sdpa_args *a, kite_tensor t[7]);

#endif
