/*
 * Front-ends of the paged KV cache and the attention ops: store_kv, paged_decode, paged_prefill
 * and sdpa. Shapes, dtypes, strides and options are checked here once. The index values (slots,
 * block ids, seq_lens, cu_q_lens) are checked here too when they live in host memory (a CPU
 * ctx), so every host backend refuses the same bad values with the same message; in device
 * memory they are left to the kernels, which must stay inside the caches whatever they hold.
 */
#include <math.h>

#include <string.h>

#include "ops/attention.h"

kite_attn_opts kite_attn_opts_default(void) {
  kite_attn_opts o = {
      .scale = 0.0f, .softcap = 0.0f, .window_left = -1, .gqa = KITE_GQA_GROUPED, .causal = 1};
  return o;
}

/* opts NULL means the defaults. On success *out holds the options with scale resolved
 * (0 -> 1/sqrt(head_dim)) and causal as 0 or 1. */
kite_status kite_attn_check_opts(const char *op, const kite_attn_opts *opts, int64_t head_dim,
                                 kite_attn_opts *out) {
  kite_attn_opts o = opts ? *opts : kite_attn_opts_default();
  if (!isfinite(o.scale) || o.scale < 0.0f)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: opts.scale: %g must be finite and >= 0", op,
                          (double)o.scale);
  if (!isfinite(o.softcap) || o.softcap < 0.0f)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: opts.softcap: %g must be finite and >= 0", op,
                          (double)o.softcap);
  if (o.window_left < -1)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: opts.window_left: %d must be >= -1 (-1 = off)",
                          op, (int)o.window_left);
  if (o.gqa != KITE_GQA_GROUPED && o.gqa != KITE_GQA_INTERLEAVED)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: opts.gqa: %d is not a kite_gqa_layout", op,
                          (int)o.gqa);
  if (o.scale == 0.0f) o.scale = (float)(1.0 / sqrt((double)head_dim));
  o.causal = o.causal != 0;
  *out = o;
  return KITE_OK;
}

/* A float tensor of rank ndim whose last (head) dim is unit-stride; other strides are free. */
kite_status kite_attn_check_heads(const kite_ctx *ctx, const char *op, const char *arg,
                                  const DLTensor *t, int ndim, kite_tensor *out) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, arg, t, out)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, out, ndim)) != KITE_OK) return s;
  if ((s = kite_tensor_require_float(op, arg, out)) != KITE_OK) return s;
  return kite_attn_check_head_stride(op, arg, out);
}

/* The last (head) dim of t is unit-stride. */
kite_status kite_attn_check_head_stride(const char *op, const char *arg, const kite_tensor *t) {
  if (t->shape[t->ndim - 1] > 1 && t->strides[t->ndim - 1] != 1)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: %s: head dim must be unit-stride (stride %lld)", op, arg,
                          (long long)t->strides[t->ndim - 1]);
  return KITE_OK;
}

kite_status kite_attn_check_i32_vec(const kite_ctx *ctx, const char *op, const char *arg,
                                    const DLTensor *t, int64_t n, const char *n_name,
                                    kite_tensor *out) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, arg, t, out)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, out, 1)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, arg, out, KITE_DTYPE_I32)) != KITE_OK) return s;
  if (out->shape[0] != n)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: length %lld, expected %s = %lld", op, arg,
                          (long long)out->shape[0], n_name, (long long)n);
  return kite_tensor_require_compact(op, arg, out);
}

/* Both caches: [num_blocks, hkv, block_size, head_dim] compact, dtype want, the same shape, not
 * overlapping each other. */
static kite_status check_caches(const kite_ctx *ctx, const char *op, const DLTensor *key_cache,
                                const DLTensor *value_cache, kite_dtype want, kite_tensor *kc,
                                kite_tensor *vc) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, "key_cache", key_cache, kc)) != KITE_OK) return s;
  if ((s = kite_tensor_check(ctx, op, "value_cache", value_cache, vc)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, "key_cache", kc, 4)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "key_cache", kc, want)) != KITE_OK) return s;
  if ((s = kite_tensor_require_same_shape(op, "value_cache", vc, kc, "key_cache")) != KITE_OK)
    return s;
  if ((s = kite_tensor_require_dtype(op, "value_cache", vc, want)) != KITE_OK) return s;
  if ((s = kite_tensor_require_compact(op, "key_cache", kc)) != KITE_OK) return s;
  if ((s = kite_tensor_require_compact(op, "value_cache", vc)) != KITE_OK) return s;
  if (kc->shape[2] < 1)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: key_cache: block_size (dim 2) must be >= 1",
                          op);
  if (kc->shape[3] > ATTN_MAX_HEAD_DIM)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: key_cache: head_dim %lld exceeds %d", op,
                          (long long)kc->shape[3], ATTN_MAX_HEAD_DIM);
  return kite_tensor_require_disjoint(op, "value_cache", vc, kc, "key_cache");
}

/* hq query heads over hkv kv heads: hkv >= 1 and hq a multiple of it; 1 <= D <= 256. */
kite_status kite_attn_check_heads_fit(const char *op, int64_t hq, int64_t hkv, int64_t head_dim) {
  if (hkv < 1)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: the number of kv heads must be >= 1", op);
  if (hq % hkv != 0)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: q has %lld heads, not a multiple of the %lld kv heads", op,
                          (long long)hq, (long long)hkv);
  if (head_dim < 1 || head_dim > ATTN_MAX_HEAD_DIM)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: head_dim %lld is outside [1, %d]", op,
                          (long long)head_dim, ATTN_MAX_HEAD_DIM);
  return KITE_OK;
}

/* An output the kernel writes: distinct elements, no byte shared with any of the n inputs. */
kite_status kite_attn_check_output(const char *op, const char *arg, const kite_tensor *t,
                                   const kite_tensor *const *inputs, const char *const *names,
                                   int n) {
  kite_status s;
  if ((s = kite_tensor_require_no_overlap(op, arg, t)) != KITE_OK) return s;
  for (int i = 0; i < n; i++)
    if ((s = kite_tensor_require_disjoint(op, arg, t, inputs[i], names[i])) != KITE_OK) return s;
  return KITE_OK;
}

/* lse: NULL, or compact f32 of shape dims[0..ndim). */
kite_status kite_attn_check_lse(const kite_ctx *ctx, const char *op, const DLTensor *lse, int ndim,
                                const int64_t *dims, kite_tensor *out) {
  kite_status s;
  if (!lse) return KITE_OK;
  if ((s = kite_tensor_check(ctx, op, "lse", lse, out)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, "lse", out, ndim)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "lse", out, KITE_DTYPE_F32)) != KITE_OK) return s;
  for (int i = 0; i < ndim; i++)
    if (out->shape[i] != dims[i]) {
      char buf[160];
      return kite_set_error(KITE_ERR_INVALID_ARG, "%s: lse: shape %s does not match the output's",
                            op, kite_shape_str(out, buf, sizeof buf));
    }
  return kite_tensor_require_compact(op, "lse", out);
}

/* sinks (or dsinks): NULL, or compact f32 [hq] (kite.h, "Sinks"). */
kite_status kite_attn_check_sinks(const kite_ctx *ctx, const char *op, const char *arg,
                                  const DLTensor *t, int64_t hq, kite_tensor *out) {
  kite_status s;
  if (!t) return KITE_OK;
  if ((s = kite_tensor_check(ctx, op, arg, t, out)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, out, 1)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, arg, out, KITE_DTYPE_F32)) != KITE_OK) return s;
  if (out->shape[0] != hq)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: length %lld, expected Hq = %lld", op, arg,
                          (long long)out->shape[0], (long long)hq);
  return kite_tensor_require_compact(op, arg, out);
}

kite_status kite_store_kv(kite_ctx *ctx, const DLTensor *k, const DLTensor *v, DLTensor *key_cache,
                          DLTensor *value_cache, const DLTensor *slots) {
  const char *op = "store_kv";
  kite_tensor kt, vt, kc, vc, st;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = kite_attn_check_heads(ctx, op, "k", k, 3, &kt)) != KITE_OK) return s;
  if ((s = kite_attn_check_heads(ctx, op, "v", v, 3, &vt)) != KITE_OK) return s;
  if ((s = kite_tensor_require_same_shape(op, "v", &vt, &kt, "k")) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "v", &vt, kt.dtype)) != KITE_OK) return s;
  if ((s = check_caches(ctx, op, key_cache, value_cache, kt.dtype, &kc, &vc)) != KITE_OK) return s;
  const int64_t tokens = kt.shape[0], hkv = kt.shape[1], head_dim = kt.shape[2];
  if (kc.shape[1] != hkv || kc.shape[3] != head_dim)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "store_kv: key_cache: heads %lld and head_dim %lld do not match k's "
                          "[T, %lld, %lld]",
                          (long long)kc.shape[1], (long long)kc.shape[3], (long long)hkv,
                          (long long)head_dim);
  if ((s = kite_attn_check_i32_vec(ctx, op, "slots", slots, tokens, "T", &st)) != KITE_OK) return s;
  const kite_tensor *in[] = {&kt, &vt, &st};
  const char *in_names[] = {"k", "v", "slots"};
  if ((s = kite_attn_check_output(op, "key_cache", &kc, in, in_names, 3)) != KITE_OK) return s;
  if ((s = kite_attn_check_output(op, "value_cache", &vc, in, in_names, 3)) != KITE_OK) return s;

  kite_store_kv_args a = {.op = KITE_OP_STORE_KV,
                          .dtype = kt.dtype,
                          .tokens = tokens,
                          .hkv = hkv,
                          .head_dim = head_dim,
                          .k = kt.data,
                          .k_stride_t = kt.strides[0],
                          .k_stride_h = kt.strides[1],
                          .v = vt.data,
                          .v_stride_t = vt.strides[0],
                          .v_stride_h = vt.strides[1],
                          .key_cache = kc.data,
                          .value_cache = vc.data,
                          .num_blocks = kc.shape[0],
                          .block_size = kc.shape[2],
                          .slots = st.data};
  if (tokens == 0 || hkv == 0 || head_dim == 0) return KITE_OK;
  if (kite_indices_on_host(ctx) &&
      (s = kite_check_slots(op, a.slots, tokens, a.num_blocks * a.block_size)) != KITE_OK)
    return s;
  return kite_dispatch(ctx, KITE_OP_STORE_KV, a.dtype, &a);
}

kite_status kite_attn_check_block_table(const kite_ctx *ctx, const char *op, const DLTensor *t,
                                        kite_tensor *out, int64_t *batch, int64_t *max_blocks,
                                        int64_t *stride) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, "block_table", t, out)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, "block_table", out, 2)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "block_table", out, KITE_DTYPE_I32)) != KITE_OK) return s;
  return kite_tensor_rows(op, "block_table", out, batch, max_blocks, stride);
}

/* The index values of a paged_decode / paged_prefill call in host memory. */
static kite_status check_host_indices(const char *op, const kite_paged_attn_args *a) {
  const kite_host_table t = {.batch = a->batch,
                             .tokens = a->tokens,
                             .seq_lens = a->seq_lens,
                             .cu_q_lens = a->cu_q_lens,
                             .block_table = a->block_table,
                             .block_table_stride = a->block_table_stride,
                             .max_blocks = a->max_blocks,
                             .block_size = a->block_size,
                             .num_blocks = a->num_blocks};
  return kite_attn_check_host_table(op, &t);
}

/* What paged_decode and paged_prefill share: q[T, Hq, D], the caches, block_table[B, max_blocks]
 * (row-strided), seq_lens[B], opts, o[T, Hq, D], lse[T, Hq]. cu_q_lens (prefill only) is checked
 * by the caller and passed in cut for the overlap checks. */
static kite_status check_paged(kite_ctx *ctx, const char *op, const DLTensor *q,
                               const DLTensor *key_cache, const DLTensor *value_cache,
                               const DLTensor *block_table, const DLTensor *seq_lens,
                               const DLTensor *cu_q_lens, const DLTensor *sinks,
                               const kite_attn_opts *opts, DLTensor *o, DLTensor *lse,
                               kite_paged_attn_args *a) {
  kite_tensor qt, kc, vc, bt, sl, cu = {0}, st = {0}, ot, lt = {0};
  kite_status s;
  if ((s = kite_check_ctx(ctx, op)) != KITE_OK) return s;
  if ((s = kite_attn_check_heads(ctx, op, "q", q, 3, &qt)) != KITE_OK) return s;
  if ((s = check_caches(ctx, op, key_cache, value_cache, qt.dtype, &kc, &vc)) != KITE_OK) return s;
  const int64_t tokens = qt.shape[0], hq = qt.shape[1], head_dim = qt.shape[2];
  if (kc.shape[3] != head_dim)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: key_cache: head_dim %lld, q has %lld", op,
                          (long long)kc.shape[3], (long long)head_dim);
  if ((s = kite_attn_check_heads_fit(op, hq, kc.shape[1], head_dim)) != KITE_OK) return s;

  int64_t batch, max_blocks, bt_stride;
  if ((s = kite_attn_check_block_table(ctx, op, block_table, &bt, &batch, &max_blocks,
                                       &bt_stride)) != KITE_OK)
    return s;
  if (!cu_q_lens && batch != tokens)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: block_table: %lld rows, q has B = %lld", op,
                          (long long)batch, (long long)tokens);
  if ((s = kite_attn_check_i32_vec(ctx, op, "seq_lens", seq_lens, batch, "B", &sl)) != KITE_OK)
    return s;
  if (cu_q_lens && (s = kite_attn_check_i32_vec(ctx, op, "cu_q_lens", cu_q_lens, batch + 1, "B + 1",
                                                &cu)) != KITE_OK)
    return s;
  if ((s = kite_attn_check_sinks(ctx, op, "sinks", sinks, hq, &st)) != KITE_OK) return s;

  if ((s = kite_attn_check_like(ctx, op, "o", o, &qt, "q", &ot)) != KITE_OK) return s;
  const int64_t lse_dims[2] = {tokens, hq};
  if ((s = kite_attn_check_lse(ctx, op, lse, 2, lse_dims, &lt)) != KITE_OK) return s;

  const kite_tensor *in[] = {&qt, &kc, &vc, &bt, &sl, &cu, &st};
  const char *in_names[] = {"q",        "key_cache", "value_cache", "block_table",
                            "seq_lens", "cu_q_lens", "sinks"};
  if ((s = kite_attn_check_output(op, "o", &ot, in, in_names, 7)) != KITE_OK) return s;
  if (lse) {
    if ((s = kite_attn_check_output(op, "lse", &lt, in, in_names, 7)) != KITE_OK) return s;
    if ((s = kite_tensor_require_disjoint(op, "lse", &lt, &ot, "o")) != KITE_OK) return s;
  }

  kite_paged_attn_args r = {.dtype = qt.dtype,
                            .batch = batch,
                            .tokens = tokens,
                            .hq = hq,
                            .hkv = kc.shape[1],
                            .head_dim = head_dim,
                            .q = qt.data,
                            .q_stride_t = qt.strides[0],
                            .q_stride_h = qt.strides[1],
                            .key_cache = kc.data,
                            .value_cache = vc.data,
                            .num_blocks = kc.shape[0],
                            .block_size = kc.shape[2],
                            .block_table = bt.data,
                            .max_blocks = max_blocks,
                            .block_table_stride = bt_stride,
                            .seq_lens = sl.data,
                            .cu_q_lens = cu_q_lens ? cu.data : NULL,
                            .o = ot.data,
                            .o_stride_t = ot.strides[0],
                            .o_stride_h = ot.strides[1],
                            .lse = lse ? lt.data : NULL,
                            .sinks = sinks ? st.data : NULL};
  if ((s = kite_attn_check_opts(op, opts, head_dim, &r.opts)) != KITE_OK) return s;
  *a = r;
  return KITE_OK;
}

/* The index values of a paged call in host memory, sequence by sequence: cu_q_lens (prefill)
 * starts at 0, does not decrease and ends at T; 0 <= seq_len <= max_blocks * block_size; a query
 * chunk is no longer than its sequence; every block id a sequence's keys use is in
 * [0, num_blocks). */
kite_status kite_attn_check_host_table(const char *op, const kite_host_table *a) {
  const int32_t *cu = a->cu_q_lens;
  if (cu && (cu[0] != 0 || cu[a->batch] != a->tokens))
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: cu_q_lens: starts at %d and ends at %d, expected 0 and T = %lld", op,
                          (int)cu[0], (int)cu[a->batch], (long long)a->tokens);
  const int64_t capacity = a->max_blocks * a->block_size;
  for (int64_t b = 0; b < a->batch; b++) {
    const int64_t seq_len = a->seq_lens[b];
    if (seq_len < 0 || seq_len > capacity)
      return kite_set_error(KITE_ERR_INVALID_ARG,
                            "%s: seq_lens: sequence %lld: seq_len %lld is outside [0, %lld] (the "
                            "block table's %lld blocks of %lld)",
                            op, (long long)b, (long long)seq_len, (long long)capacity,
                            (long long)a->max_blocks, (long long)a->block_size);
    if (cu) {
      const int64_t q_len = (int64_t)cu[b + 1] - cu[b];
      if (q_len < 0)
        return kite_set_error(KITE_ERR_INVALID_ARG,
                              "%s: cu_q_lens: sequence %lld: cu_q_lens decreases (%d then %d)", op,
                              (long long)b, (int)cu[b], (int)cu[b + 1]);
      if (q_len > seq_len)
        return kite_set_error(KITE_ERR_INVALID_ARG,
                              "%s: seq_lens: sequence %lld: seq_len %lld is below its %lld "
                              "queries (a query chunk is the last positions of its sequence)",
                              op, (long long)b, (long long)seq_len, (long long)q_len);
    }
    const int32_t *row = a->block_table + b * a->block_table_stride;
    for (int64_t j = 0, used = (seq_len + a->block_size - 1) / a->block_size; j < used; j++)
      if (row[j] < 0 || row[j] >= a->num_blocks)
        return kite_set_error(KITE_ERR_INVALID_ARG,
                              "%s: block_table: sequence %lld: block_table[%lld][%lld] = %d is "
                              "outside the cache's %lld blocks",
                              op, (long long)b, (long long)b, (long long)j, (int)row[j],
                              (long long)a->num_blocks);
  }
  return KITE_OK;
}

kite_status kite_paged_decode(kite_ctx *ctx, const DLTensor *q, const DLTensor *key_cache,
                              const DLTensor *value_cache, const DLTensor *block_table,
                              const DLTensor *seq_lens, const DLTensor *sinks,
                              const kite_attn_opts *opts, DLTensor *o, DLTensor *lse) {
  kite_clear_error();
  kite_init();
  kite_paged_attn_args a;
  kite_status s = check_paged(ctx, "paged_decode", q, key_cache, value_cache, block_table, seq_lens,
                              NULL, sinks, opts, o, lse, &a);
  if (s != KITE_OK) return s;
  a.op = KITE_OP_PAGED_DECODE;
  if (kite_indices_on_host(ctx) && (s = check_host_indices("paged_decode", &a)) != KITE_OK)
    return s;
  if (a.tokens == 0 || a.hq == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_PAGED_DECODE, a.dtype, &a);
}

kite_status kite_paged_prefill(kite_ctx *ctx, const DLTensor *q, const DLTensor *key_cache,
                               const DLTensor *value_cache, const DLTensor *block_table,
                               const DLTensor *cu_q_lens, const DLTensor *seq_lens,
                               const DLTensor *sinks, const kite_attn_opts *opts, DLTensor *o,
                               DLTensor *lse) {
  kite_clear_error();
  kite_init();
  if (!cu_q_lens)
    return kite_set_error(KITE_ERR_INVALID_ARG, "paged_prefill: cu_q_lens: tensor is NULL");
  kite_paged_attn_args a;
  kite_status s = check_paged(ctx, "paged_prefill", q, key_cache, value_cache, block_table,
                              seq_lens, cu_q_lens, sinks, opts, o, lse, &a);
  if (s != KITE_OK) return s;
  a.op = KITE_OP_PAGED_PREFILL;
  if (kite_indices_on_host(ctx) && (s = check_host_indices("paged_prefill", &a)) != KITE_OK)
    return s;
  if (a.tokens == 0 || a.hq == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_PAGED_PREFILL, a.dtype, &a);
}

/* sdpa's mask: [Sq, Sk] or [B|1, Hq|1, Sq, Sk], bool/u8, f32 or q's dtype; size-1 dims
 * broadcast (their stride becomes 0), as do dims the caller gave stride 0. */
static kite_status check_mask(const kite_ctx *ctx, const char *op, const DLTensor *mask,
                              kite_dtype qdtype, const int64_t want[4], kite_sdpa_args *a,
                              kite_tensor *mt) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, "mask", mask, mt)) != KITE_OK) return s;
  if (mt->dtype != KITE_DTYPE_U8 && mt->dtype != KITE_DTYPE_F32 && mt->dtype != qdtype)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: mask: dtype %s, expected bool/u8, f32 or q's %s", op,
                          kite_dtype_name(mt->dtype), kite_dtype_name(qdtype));
  int64_t shape[4] = {1, 1, 1, 1}, stride[4] = {0, 0, 0, 0};
  if (mt->ndim == 2) {
    shape[2] = mt->shape[0], shape[3] = mt->shape[1];
    stride[2] = mt->strides[0], stride[3] = mt->strides[1];
  } else if (mt->ndim == 4) {
    for (int i = 0; i < 4; i++) shape[i] = mt->shape[i], stride[i] = mt->strides[i];
  } else {
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: mask: rank %d, expected 2 or 4", op, mt->ndim);
  }
  for (int i = 0; i < 4; i++) {
    const bool broadcast = i < 2 && shape[i] == 1;
    if (shape[i] != want[i] && !broadcast) {
      char buf[160];
      return kite_set_error(KITE_ERR_INVALID_ARG,
                            "%s: mask: shape %s does not broadcast to [B=%lld, Hq=%lld, "
                            "Sq=%lld, Sk=%lld]",
                            op, kite_shape_str(mt, buf, sizeof buf), (long long)want[0],
                            (long long)want[1], (long long)want[2], (long long)want[3]);
    }
    a->mask_stride[i] = shape[i] == 1 ? 0 : stride[i];
  }
  a->mask = mt->data;
  a->mask_dtype = mt->dtype;
  return KITE_OK;
}

kite_status kite_attn_check_like(const kite_ctx *ctx, const char *op, const char *arg,
                                 const DLTensor *t, const kite_tensor *like, const char *like_arg,
                                 kite_tensor *out) {
  kite_status s;
  if ((s = kite_attn_check_heads(ctx, op, arg, t, like->ndim, out)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, arg, out, like->dtype)) != KITE_OK) return s;
  return kite_tensor_require_same_shape(op, arg, out, like, like_arg);
}

kite_status kite_attn_check_dense_qkv(const char *op, const kite_tensor *qt, const kite_tensor *kt,
                                      const kite_tensor *vt) {
  kite_status s;
  if ((s = kite_tensor_require_same_shape(op, "v", vt, kt, "k")) != KITE_OK) return s;
  if (kt->shape[0] != qt->shape[0] || kt->shape[3] != qt->shape[3]) {
    char x[160], y[160];
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: k: shape %s does not fit q %s", op,
                          kite_shape_str(kt, x, sizeof x), kite_shape_str(qt, y, sizeof y));
  }
  return kite_attn_check_heads_fit(op, qt->shape[1], kt->shape[1], qt->shape[3]);
}

kite_status kite_attn_check_sdpa(kite_ctx *ctx, const char *op, const DLTensor *q,
                                 const DLTensor *k, const DLTensor *v, const DLTensor *mask,
                                 const DLTensor *sinks, const kite_attn_opts *opts,
                                 const DLTensor *o, const DLTensor *lse, bool lse_required,
                                 kite_sdpa_args *a, kite_tensor t[7]) {
  kite_tensor *qt = &t[0], *kt = &t[1], *vt = &t[2], *mt = &t[3], *ot = &t[4], *lt = &t[5];
  kite_tensor *st = &t[6];
  kite_status s;
  memset(t, 0, 7 * sizeof *t);
  if ((s = kite_attn_check_heads(ctx, op, "q", q, 4, qt)) != KITE_OK) return s;
  if ((s = kite_attn_check_heads(ctx, op, "k", k, 4, kt)) != KITE_OK) return s;
  if ((s = kite_attn_check_heads(ctx, op, "v", v, 4, vt)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "k", kt, qt->dtype)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "v", vt, qt->dtype)) != KITE_OK) return s;
  if ((s = kite_attn_check_dense_qkv(op, qt, kt, vt)) != KITE_OK) return s;
  const int64_t batch = qt->shape[0], hq = qt->shape[1], sq = qt->shape[2], head_dim = qt->shape[3];
  const int64_t hkv = kt->shape[1], sk = kt->shape[2];

  kite_sdpa_args r = {.op = KITE_OP_SDPA,
                      .dtype = qt->dtype,
                      .batch = batch,
                      .hq = hq,
                      .hkv = hkv,
                      .sq = sq,
                      .sk = sk,
                      .head_dim = head_dim,
                      .q = qt->data,
                      .k = kt->data,
                      .v = vt->data,
                      .mask = NULL,
                      .mask_dtype = KITE_DTYPE_U8};
  for (int i = 0; i < 3; i++) {
    r.q_stride[i] = qt->strides[i];
    r.k_stride[i] = kt->strides[i];
    r.v_stride[i] = vt->strides[i];
  }
  if (mask) {
    const int64_t want[4] = {batch, hq, sq, sk};
    if ((s = check_mask(ctx, op, mask, qt->dtype, want, &r, mt)) != KITE_OK) return s;
  }
  if ((s = kite_attn_check_sinks(ctx, op, "sinks", sinks, hq, st)) != KITE_OK) return s;
  r.sinks = sinks ? st->data : NULL;

  if ((s = kite_attn_check_like(ctx, op, "o", o, qt, "q", ot)) != KITE_OK) return s;
  if (!lse && lse_required)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: lse: tensor is NULL (the forward's lse is "
                          "required)",
                          op);
  const int64_t lse_dims[3] = {batch, hq, sq};
  if ((s = kite_attn_check_lse(ctx, op, lse, 3, lse_dims, lt)) != KITE_OK) return s;

  const kite_tensor *in[] = {qt, kt, vt, mt, st};
  const char *in_names[] = {"q", "k", "v", "mask", "sinks"};
  if ((s = kite_attn_check_output(op, "o", ot, in, in_names, 5)) != KITE_OK) return s;
  if (lse) {
    if ((s = kite_attn_check_output(op, "lse", lt, in, in_names, 5)) != KITE_OK) return s;
    if ((s = kite_tensor_require_disjoint(op, "lse", lt, ot, "o")) != KITE_OK) return s;
  }
  r.o = ot->data;
  for (int i = 0; i < 3; i++) r.o_stride[i] = ot->strides[i];
  r.lse = lse ? lt->data : NULL;
  if ((s = kite_attn_check_opts(op, opts, head_dim, &r.opts)) != KITE_OK) return s;
  *a = r;
  return KITE_OK;
}

kite_status kite_sdpa(kite_ctx *ctx, const DLTensor *q, const DLTensor *k, const DLTensor *v,
                      const DLTensor *mask, const DLTensor *sinks, const kite_attn_opts *opts,
                      DLTensor *o, DLTensor *lse) {
  kite_tensor t[7];
  kite_sdpa_args a;
  kite_status s;
  if ((s = kite_op_begin(ctx, "sdpa")) != KITE_OK) return s;
  if ((s = kite_attn_check_sdpa(ctx, "sdpa", q, k, v, mask, sinks, opts, o, lse, false, &a, t)) !=
      KITE_OK)
    return s;
  if (a.batch == 0 || a.hq == 0 || a.sq == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_SDPA, a.dtype, &a);
}
