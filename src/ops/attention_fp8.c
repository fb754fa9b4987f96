/*
 * Front-ends of sdpa_fp8 (dense attention over e4m3 q, k, v with one f32 scale per block of
 * KITE_FP8_ATTN_BLOCK rows) and of quant_fp8_blocks, which makes such inputs. Everything is
 * checked here once, with sdpa's helpers (attention.h); the kernels see only calls they can run
 * (no softcap, no window, no mask, no sinks).
 */
#include "ops/attention.h"

/* An e4m3 tensor of rank 4 whose head dim is unit-stride. */
static kite_status check_codes(const kite_ctx *ctx, const char *op, const char *arg,
                               const DLTensor *t, kite_tensor *out) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, arg, t, out)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, out, 4)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, arg, out, KITE_DTYPE_FP8_E4M3)) != KITE_OK) return s;
  return kite_attn_check_head_stride(op, arg, out);
}

/* A compact f32 [batch, heads, ceil(rows / KITE_FP8_ATTN_BLOCK)] scale tensor; who names the
 * tensor whose rows it scales. */
static kite_status check_scale(const kite_ctx *ctx, const char *op, const char *arg,
                               const DLTensor *t, const kite_tensor *of, const char *who,
                               kite_tensor *out) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, arg, t, out)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, out, 3)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, arg, out, KITE_DTYPE_F32)) != KITE_OK) return s;
  const int64_t blocks = (of->shape[2] + KITE_FP8_ATTN_BLOCK - 1) / KITE_FP8_ATTN_BLOCK;
  if (out->shape[0] != of->shape[0] || out->shape[1] != of->shape[1] || out->shape[2] != blocks) {
    char buf[160];
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: %s: shape %s, expected [%lld, %lld, %lld] (%s's batch, heads and "
                          "blocks of %d rows)",
                          op, arg, kite_shape_str(out, buf, sizeof buf), (long long)of->shape[0],
                          (long long)of->shape[1], (long long)blocks, who, KITE_FP8_ATTN_BLOCK);
  }
  return kite_tensor_require_compact(op, arg, out);
}

kite_status kite_sdpa_fp8(kite_ctx *ctx, const DLTensor *q, const DLTensor *k, const DLTensor *v,
                          const DLTensor *q_scale, const DLTensor *k_scale, const DLTensor *v_scale,
                          const kite_attn_opts *opts, DLTensor *o, DLTensor *lse) {
  const char *op = "sdpa_fp8";
  kite_tensor qt, kt, vt, qs, ks, vs, ot, lt = {0};
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = check_codes(ctx, op, "q", q, &qt)) != KITE_OK) return s;
  if ((s = check_codes(ctx, op, "k", k, &kt)) != KITE_OK) return s;
  if ((s = check_codes(ctx, op, "v", v, &vt)) != KITE_OK) return s;
  if ((s = kite_attn_check_dense_qkv(op, &qt, &kt, &vt)) != KITE_OK) return s;
  const int64_t batch = qt.shape[0], hq = qt.shape[1], sq = qt.shape[2], head_dim = qt.shape[3];
  const int64_t hkv = kt.shape[1], sk = kt.shape[2];
  if ((s = check_scale(ctx, op, "q_scale", q_scale, &qt, "q", &qs)) != KITE_OK) return s;
  if ((s = check_scale(ctx, op, "k_scale", k_scale, &kt, "k", &ks)) != KITE_OK) return s;
  if ((s = check_scale(ctx, op, "v_scale", v_scale, &vt, "v", &vs)) != KITE_OK) return s;

  if ((s = kite_attn_check_heads(ctx, op, "o", o, 4, &ot)) != KITE_OK) return s;
  if ((s = kite_tensor_require_same_shape(op, "o", &ot, &qt, "q")) != KITE_OK) return s;
  const int64_t lse_dims[3] = {batch, hq, sq};
  if ((s = kite_attn_check_lse(ctx, op, lse, 3, lse_dims, &lt)) != KITE_OK) return s;
  const kite_tensor *in[] = {&qt, &kt, &vt, &qs, &ks, &vs};
  const char *in_names[] = {"q", "k", "v", "q_scale", "k_scale", "v_scale"};
  if ((s = kite_attn_check_output(op, "o", &ot, in, in_names, 6)) != KITE_OK) return s;
  if (lse) {
    if ((s = kite_attn_check_output(op, "lse", &lt, in, in_names, 6)) != KITE_OK) return s;
    if ((s = kite_tensor_require_disjoint(op, "lse", &lt, &ot, "o")) != KITE_OK) return s;
  }

  kite_sdpa_fp8_args a = {.op = KITE_OP_SDPA_FP8,
                          .dtype = ot.dtype,
                          .batch = batch,
                          .hq = hq,
                          .hkv = hkv,
                          .sq = sq,
                          .sk = sk,
                          .head_dim = head_dim,
                          .q = qt.data,
                          .k = kt.data,
                          .v = vt.data,
                          .q_scale = qs.data,
                          .k_scale = ks.data,
                          .v_scale = vs.data,
                          .o = ot.data,
                          .lse = lse ? lt.data : NULL};
  for (int i = 0; i < 3; i++) {
    a.q_stride[i] = qt.strides[i];
    a.k_stride[i] = kt.strides[i];
    a.v_stride[i] = vt.strides[i];
    a.o_stride[i] = ot.strides[i];
  }
  if ((s = kite_attn_check_opts(op, opts, head_dim, &a.opts)) != KITE_OK) return s;
  if (a.opts.softcap != 0.0f)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: opts.softcap: %g is not supported (0 only)",
                          op, (double)a.opts.softcap);
  if (a.opts.window_left != -1)
    return kite_set_error(KITE_ERR_UNSUPPORTED,
                          "%s: opts.window_left: %d is not supported (-1 only: no window)", op,
                          (int)a.opts.window_left);
  if (batch == 0 || hq == 0 || sq == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_SDPA_FP8, a.dtype, &a);
}

kite_status kite_quant_fp8_blocks(kite_ctx *ctx, const DLTensor *x, DLTensor *q, DLTensor *scales) {
  const char *op = "quant_fp8_blocks";
  kite_tensor xt, qt, st;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = kite_attn_check_heads(ctx, op, "x", x, 4, &xt)) != KITE_OK) return s;
  if ((s = check_codes(ctx, op, "q", q, &qt)) != KITE_OK) return s;
  if ((s = kite_tensor_require_same_shape(op, "q", &qt, &xt, "x")) != KITE_OK) return s;
  if ((s = check_scale(ctx, op, "scales", scales, &xt, "x", &st)) != KITE_OK) return s;
  const kite_tensor *in[] = {&xt};
  const char *in_names[] = {"x"};
  if ((s = kite_attn_check_output(op, "q", &qt, in, in_names, 1)) != KITE_OK) return s;
  if ((s = kite_attn_check_output(op, "scales", &st, in, in_names, 1)) != KITE_OK) return s;
  if ((s = kite_tensor_require_disjoint(op, "scales", &st, &qt, "q")) != KITE_OK) return s;

  kite_quant_fp8_blocks_args a = {.op = KITE_OP_QUANT_FP8_BLOCKS,
                                  .dtype = xt.dtype,
                                  .batch = xt.shape[0],
                                  .heads = xt.shape[1],
                                  .rows = xt.shape[2],
                                  .dim = xt.shape[3],
                                  .x = xt.data,
                                  .q = qt.data,
                                  .scales = st.data};
  for (int i = 0; i < 3; i++) a.x_stride[i] = xt.strides[i], a.q_stride[i] = qt.strides[i];
  if (st.numel == 0) return KITE_OK; /* no block (D = 0 still writes the scales: 1) */
  return kite_dispatch(ctx, KITE_OP_QUANT_FP8_BLOCKS, a.dtype, &a);
}
