/*
 * Front-ends of MLA (multi-head latent attention, DeepSeek-V2/V3): mla_store_kv writes the
 * latent cache, mla_decode attends over it in the absorbed form (kite.h). Shapes, dtypes and
 * strides are checked here once, and the index values too when they live in host memory, with
 * the paged ops' helpers (ops/attention.h) so that both families refuse the same values alike.
 */
#include <math.h>

#include "ops/attention.h"

/* kv_lora_rank and qk_rope_head_dim bounds: the kernels keep a latent row per head in registers
 * or on the stack. */
#define MLA_MAX_RANK 1024
#define MLA_MAX_ROPE 256

/* A latent cache: [num_blocks, block_size, dim] compact, dtype want, block_size >= 1. */
static kite_status check_cache(const kite_ctx *ctx, const char *op, const char *arg,
                               const DLTensor *t, kite_dtype want, kite_tensor *out) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, arg, t, out)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, out, 3)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, arg, out, want)) != KITE_OK) return s;
  if ((s = kite_tensor_require_compact(op, arg, out)) != KITE_OK) return s;
  if (out->shape[1] < 1)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: block_size (dim 1) must be >= 1", op, arg);
  return KITE_OK;
}

/* Both caches, of one block geometry, disjoint; R = ckv's last dim in [1, 1024], P = kpe's in
 * [1, 256]. */
static kite_status check_caches(const kite_ctx *ctx, const char *op, const DLTensor *ckv_cache,
                                const DLTensor *kpe_cache, kite_dtype want, kite_tensor *ct,
                                kite_tensor *pt) {
  kite_status s;
  if ((s = check_cache(ctx, op, "ckv_cache", ckv_cache, want, ct)) != KITE_OK) return s;
  if ((s = check_cache(ctx, op, "kpe_cache", kpe_cache, want, pt)) != KITE_OK) return s;
  if (pt->shape[0] != ct->shape[0] || pt->shape[1] != ct->shape[1])
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: kpe_cache: %lld blocks of %lld, ckv_cache has %lld of %lld", op,
                          (long long)pt->shape[0], (long long)pt->shape[1], (long long)ct->shape[0],
                          (long long)ct->shape[1]);
  if (ct->shape[2] < 1 || ct->shape[2] > MLA_MAX_RANK)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: ckv_cache: kv_lora_rank %lld is outside [1, %d]", op,
                          (long long)ct->shape[2], MLA_MAX_RANK);
  if (pt->shape[2] < 1 || pt->shape[2] > MLA_MAX_ROPE)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: kpe_cache: rope dim %lld is outside [1, %d]",
                          op, (long long)pt->shape[2], MLA_MAX_ROPE);
  return kite_tensor_require_disjoint(op, "kpe_cache", pt, ct, "ckv_cache");
}

/* The cache's last dim equals the width of the tensor `of`. */
static kite_status check_width(const char *op, const kite_tensor *cache, const char *arg,
                               int64_t width, const char *of) {
  if (cache->shape[2] == width) return KITE_OK;
  return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: width %lld, %s has %lld", op, arg,
                        (long long)cache->shape[2], of, (long long)width);
}

/* A float matrix [rows, cols] (rows with one stride, unit-stride last dim) of like's dtype, or
 * of any float dtype when like is NULL. */
static kite_status check_rows(const kite_ctx *ctx, const char *op, const char *arg,
                              const DLTensor *t, const kite_tensor *like, kite_tensor *out,
                              int64_t *rows, int64_t *cols, int64_t *stride) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, arg, t, out)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, out, 2)) != KITE_OK) return s;
  s = like ? kite_tensor_require_dtype(op, arg, out, like->dtype)
           : kite_tensor_require_float(op, arg, out);
  if (s != KITE_OK) return s;
  return kite_tensor_rows(op, arg, out, rows, cols, stride);
}

kite_status kite_mla_store_kv(kite_ctx *ctx, const DLTensor *c_kv, const DLTensor *k_pe,
                              DLTensor *ckv_cache, DLTensor *kpe_cache, const DLTensor *slots) {
  const char *op = "mla_store_kv";
  kite_tensor ct, pt, cc, pc, st;
  kite_status s;
  int64_t tokens, rank, c_stride, p_tokens, rope, p_stride;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = check_rows(ctx, op, "c_kv", c_kv, NULL, &ct, &tokens, &rank, &c_stride)) != KITE_OK)
    return s;
  if ((s = check_rows(ctx, op, "k_pe", k_pe, &ct, &pt, &p_tokens, &rope, &p_stride)) != KITE_OK)
    return s;
  if (p_tokens != tokens)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: k_pe: %lld tokens, c_kv has %lld", op,
                          (long long)p_tokens, (long long)tokens);
  if ((s = check_caches(ctx, op, ckv_cache, kpe_cache, ct.dtype, &cc, &pc)) != KITE_OK) return s;
  if ((s = check_width(op, &cc, "ckv_cache", rank, "c_kv")) != KITE_OK ||
      (s = check_width(op, &pc, "kpe_cache", rope, "k_pe")) != KITE_OK)
    return s;
  if ((s = kite_attn_check_i32_vec(ctx, op, "slots", slots, tokens, "T", &st)) != KITE_OK) return s;
  const kite_tensor *in[] = {&ct, &pt, &st};
  const char *in_names[] = {"c_kv", "k_pe", "slots"};
  if ((s = kite_attn_check_output(op, "ckv_cache", &cc, in, in_names, 3)) != KITE_OK) return s;
  if ((s = kite_attn_check_output(op, "kpe_cache", &pc, in, in_names, 3)) != KITE_OK) return s;

  kite_mla_store_kv_args a = {.op = KITE_OP_MLA_STORE_KV,
                              .dtype = ct.dtype,
                              .tokens = tokens,
                              .kv_rank = rank,
                              .rope_dim = rope,
                              .c_kv = ct.data,
                              .c_kv_stride = c_stride,
                              .k_pe = pt.data,
                              .k_pe_stride = p_stride,
                              .ckv_cache = cc.data,
                              .kpe_cache = pc.data,
                              .num_blocks = cc.shape[0],
                              .block_size = cc.shape[1],
                              .slots = st.data};
  if (tokens == 0) return KITE_OK;
  if (kite_indices_on_host(ctx) &&
      (s = kite_check_slots(op, a.slots, tokens, a.num_blocks * a.block_size)) != KITE_OK)
    return s;
  return kite_dispatch(ctx, KITE_OP_MLA_STORE_KV, a.dtype, &a);
}

kite_status kite_mla_decode(kite_ctx *ctx, const DLTensor *q_nope, const DLTensor *q_pe,
                            const DLTensor *ckv_cache, const DLTensor *kpe_cache,
                            const DLTensor *block_table, const DLTensor *seq_lens, float scale,
                            DLTensor *o, DLTensor *lse) {
  const char *op = "mla_decode";
  kite_tensor qn, qp, cc, pc, bt, sl, ot, lt = {0};
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = kite_attn_check_heads(ctx, op, "q_nope", q_nope, 3, &qn)) != KITE_OK) return s;
  if ((s = kite_attn_check_heads(ctx, op, "q_pe", q_pe, 3, &qp)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "q_pe", &qp, qn.dtype)) != KITE_OK) return s;
  const int64_t batch = qn.shape[0], heads = qn.shape[1];
  if (qp.shape[0] != batch || qp.shape[1] != heads) {
    char x[160], y[160];
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: q_pe: shape %s does not fit q_nope %s", op,
                          kite_shape_str(&qp, x, sizeof x), kite_shape_str(&qn, y, sizeof y));
  }
  if ((s = check_caches(ctx, op, ckv_cache, kpe_cache, qn.dtype, &cc, &pc)) != KITE_OK) return s;
  if ((s = check_width(op, &cc, "ckv_cache", qn.shape[2], "q_nope")) != KITE_OK ||
      (s = check_width(op, &pc, "kpe_cache", qp.shape[2], "q_pe")) != KITE_OK)
    return s;
  int64_t bt_rows, max_blocks, bt_stride;
  if ((s = kite_attn_check_block_table(ctx, op, block_table, &bt, &bt_rows, &max_blocks,
                                       &bt_stride)) != KITE_OK)
    return s;
  if (bt_rows != batch)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: block_table: %lld rows, q_nope has B = %lld",
                          op, (long long)bt_rows, (long long)batch);
  if ((s = kite_attn_check_i32_vec(ctx, op, "seq_lens", seq_lens, batch, "B", &sl)) != KITE_OK)
    return s;
  if (!isfinite(scale) || scale <= 0.0f)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: scale: %g must be finite and > 0", op,
                          (double)scale);
  if ((s = kite_attn_check_like(ctx, op, "o", o, &qn, "q_nope", &ot)) != KITE_OK) return s;
  const int64_t lse_dims[2] = {batch, heads};
  if ((s = kite_attn_check_lse(ctx, op, lse, 2, lse_dims, &lt)) != KITE_OK) return s;
  const kite_tensor *in[] = {&qn, &qp, &cc, &pc, &bt, &sl};
  const char *in_names[] = {"q_nope", "q_pe", "ckv_cache", "kpe_cache", "block_table", "seq_lens"};
  if ((s = kite_attn_check_output(op, "o", &ot, in, in_names, 6)) != KITE_OK) return s;
  if (lse) {
    if ((s = kite_attn_check_output(op, "lse", &lt, in, in_names, 6)) != KITE_OK) return s;
    if ((s = kite_tensor_require_disjoint(op, "lse", &lt, &ot, "o")) != KITE_OK) return s;
  }

  kite_mla_decode_args a = {.op = KITE_OP_MLA_DECODE,
                            .dtype = qn.dtype,
                            .batch = batch,
                            .heads = heads,
                            .kv_rank = cc.shape[2],
                            .rope_dim = pc.shape[2],
                            .q_nope = qn.data,
                            .q_nope_stride_b = qn.strides[0],
                            .q_nope_stride_h = qn.strides[1],
                            .q_pe = qp.data,
                            .q_pe_stride_b = qp.strides[0],
                            .q_pe_stride_h = qp.strides[1],
                            .ckv_cache = cc.data,
                            .kpe_cache = pc.data,
                            .num_blocks = cc.shape[0],
                            .block_size = cc.shape[1],
                            .block_table = bt.data,
                            .max_blocks = max_blocks,
                            .block_table_stride = bt_stride,
                            .seq_lens = sl.data,
                            .scale = scale,
                            .o = ot.data,
                            .o_stride_b = ot.strides[0],
                            .o_stride_h = ot.strides[1],
                            .lse = lse ? lt.data : NULL};
  if (kite_indices_on_host(ctx)) {
    const kite_host_table t = {.batch = batch,
                               .tokens = batch,
                               .seq_lens = a.seq_lens,
                               .block_table = a.block_table,
                               .block_table_stride = bt_stride,
                               .max_blocks = max_blocks,
                               .block_size = a.block_size,
                               .num_blocks = a.num_blocks};
    if ((s = kite_attn_check_host_table(op, &t)) != KITE_OK) return s;
  }
  if (batch == 0 || heads == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_MLA_DECODE, a.dtype, &a);
}
