/* Front-ends of the mixture-of-experts ops: topk_gating (router softmax + top-k) and fused_moe
 * (the gated expert MLPs of each token's chosen experts, weighted and summed). */
#include "ops/matrix.h"

kite_status kite_topk_gating(kite_ctx *ctx, const DLTensor *logits, int64_t k, int renormalize,
                             DLTensor *weights, DLTensor *ids) {
  const char *op = "topk_gating";
  kite_mat lm, wm, im;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = kite_float_mat_check(ctx, op, "logits", logits, &lm)) != KITE_OK) return s;
  const int64_t t = lm.rows, e = lm.cols;
  if (k < 1 || k > e)
    return kite_set_error(KITE_ERR_INVALID_ARG, "topk_gating: k: %lld is outside [1, E=%lld]",
                          (long long)k, (long long)e);
  if ((s = kite_mat_check(ctx, op, "weights", weights, true, &wm)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "weights", &wm.t, KITE_DTYPE_F32)) != KITE_OK) return s;
  if ((s = kite_mat_require_shape(op, "weights", &wm, t, k, "T", "k")) != KITE_OK) return s;
  if ((s = kite_mat_check(ctx, op, "ids", ids, true, &im)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "ids", &im.t, KITE_DTYPE_I32)) != KITE_OK) return s;
  if ((s = kite_mat_require_shape(op, "ids", &im, t, k, "T", "k")) != KITE_OK) return s;
  if ((s = kite_tensor_require_disjoint(op, "weights", &wm.t, &lm.t, "logits")) != KITE_OK)
    return s;
  if ((s = kite_tensor_require_disjoint(op, "ids", &im.t, &lm.t, "logits")) != KITE_OK) return s;
  if ((s = kite_tensor_require_disjoint(op, "ids", &im.t, &wm.t, "weights")) != KITE_OK) return s;

  kite_topk_args a = {.op = KITE_OP_TOPK_GATING,
                      .dtype = lm.t.dtype,
                      .tokens = t,
                      .experts = e,
                      .k = k,
                      .renormalize = renormalize != 0,
                      .logits = lm.t.data,
                      .logits_stride = lm.stride,
                      .weights = wm.t.data,
                      .weights_stride = wm.stride,
                      .ids = im.t.data,
                      .ids_stride = im.stride};
  if (t == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_TOPK_GATING, a.dtype, &a);
}

/* A compact expert weight [E, rows, cols] of dtype t. */
static kite_status check_experts(const kite_ctx *ctx, const char *arg, const DLTensor *d,
                                 kite_dtype dt, int64_t e, int64_t rows, int64_t cols,
                                 const char *shape_names, kite_tensor *out) {
  kite_status s;
  const char *op = "fused_moe";
  if ((s = kite_tensor_check(ctx, op, arg, d, out)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, out, 3)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, arg, out, dt)) != KITE_OK) return s;
  if (e >= 0 && out->shape[0] != e)
    return kite_set_error(KITE_ERR_INVALID_ARG, "fused_moe: %s: %lld experts, w13 has %lld", arg,
                          (long long)out->shape[0], (long long)e);
  if (out->shape[1] != rows || out->shape[2] != cols)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "fused_moe: %s: shape [%lld, %lld, %lld], expected %s = [E, %lld, %lld]",
                          arg, (long long)out->shape[0], (long long)out->shape[1],
                          (long long)out->shape[2], shape_names, (long long)rows, (long long)cols);
  return kite_tensor_require_compact(op, arg, out);
}

kite_status kite_fused_moe(kite_ctx *ctx, const DLTensor *x, const DLTensor *w13,
                           const DLTensor *w2, const DLTensor *weights, const DLTensor *ids,
                           kite_moe_act act, DLTensor *y) {
  const char *op = "fused_moe";
  kite_mat xm, wm, im, ym;
  kite_tensor w13t, w2t;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = kite_float_mat_check(ctx, op, "x", x, &xm)) != KITE_OK) return s;
  const kite_dtype dt = xm.t.dtype;
  const int64_t t = xm.rows, h = xm.cols;

  /* w13[E, 2I, H] fixes E and I; w2 must agree */
  if ((s = kite_tensor_check(ctx, op, "w13", w13, &w13t)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, "w13", &w13t, 3)) != KITE_OK) return s;
  if (w13t.shape[1] % 2 != 0)
    return kite_set_error(KITE_ERR_INVALID_ARG, "fused_moe: w13: dim 1 is %lld, expected 2I (even)",
                          (long long)w13t.shape[1]);
  const int64_t e = w13t.shape[0], inter = w13t.shape[1] / 2;
  if ((s = check_experts(ctx, "w13", w13, dt, -1, 2 * inter, h, "[E, 2I, H]", &w13t)) != KITE_OK)
    return s;
  if ((s = check_experts(ctx, "w2", w2, dt, e, h, inter, "[E, H, I]", &w2t)) != KITE_OK) return s;

  if ((s = kite_typed_mat_check(ctx, op, "weights", weights, KITE_DTYPE_F32, &wm)) != KITE_OK)
    return s;
  const int64_t topk = wm.cols;
  if (wm.rows != t)
    return kite_set_error(KITE_ERR_INVALID_ARG, "fused_moe: weights: %lld rows, expected T=%lld",
                          (long long)wm.rows, (long long)t);
  if ((s = kite_typed_mat_check(ctx, op, "ids", ids, KITE_DTYPE_I32, &im)) != KITE_OK) return s;
  if ((s = kite_mat_require_shape(op, "ids", &im, t, topk, "T", "k")) != KITE_OK) return s;
  if (act != KITE_MOE_SILU && act != KITE_MOE_GELU)
    return kite_set_error(KITE_ERR_INVALID_ARG, "fused_moe: act: %d is not a kite_moe_act",
                          (int)act);

  if ((s = kite_mat_check(ctx, op, "y", y, true, &ym)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "y", &ym.t, dt)) != KITE_OK) return s;
  if ((s = kite_mat_require_shape(op, "y", &ym, t, h, "T", "H")) != KITE_OK) return s;
  const kite_tensor *in[] = {&xm.t, &w13t, &w2t, &wm.t, &im.t};
  const char *names[] = {"x", "w13", "w2", "weights", "ids"};
  if ((s = kite_require_apart(op, "y", &ym.t, in, names, 5)) != KITE_OK) return s;

  kite_moe_args a = {.op = KITE_OP_FUSED_MOE,
                     .dtype = dt,
                     .tokens = t,
                     .hidden = h,
                     .inter = inter,
                     .experts = e,
                     .topk = topk,
                     .x = xm.t.data,
                     .x_stride = xm.stride,
                     .w13 = w13t.data,
                     .w2 = w2t.data,
                     .weights = wm.t.data,
                     .weights_stride = wm.stride,
                     .ids = im.t.data,
                     .ids_stride = im.stride,
                     .act = act,
                     .y = ym.t.data,
                     .y_stride = ym.stride};
  if (t == 0 || h == 0) return KITE_OK; /* I = 0, E = 0 or k = 0 still write y = 0 */
  return kite_dispatch(ctx, KITE_OP_FUSED_MOE, a.dtype, &a);
}
