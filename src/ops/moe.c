/* Front-ends of the mixture-of-experts ops: topk_gating (router softmax + top-k), fused_moe (the
 * gated expert MLPs of each token's chosen experts, weighted and summed) and fused_moe_ex (the
 * same with expert biases, the clamp, gpt-oss's activation and layout). */
#include <math.h>

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
  if ((s = kite_route_out_check(ctx, op, weights, ids, t, k, &wm, &im)) != KITE_OK) return s;
  if ((s = kite_tensor_require_disjoint(op, "weights", &wm.t, &lm.t, "logits")) != KITE_OK)
    return s;
  if ((s = kite_tensor_require_disjoint(op, "ids", &im.t, &lm.t, "logits")) != KITE_OK) return s;

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
static kite_status check_experts(const kite_ctx *ctx, const char *op, const char *arg,
                                 const DLTensor *d, kite_dtype dt, int64_t e, int64_t rows,
                                 int64_t cols, const char *shape_names, kite_tensor *out) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, arg, d, out)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, out, 3)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, arg, out, dt)) != KITE_OK) return s;
  if (e >= 0 && out->shape[0] != e)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: %lld experts, w13 has %lld", op, arg,
                          (long long)out->shape[0], (long long)e);
  if (out->shape[1] != rows || out->shape[2] != cols)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: %s: shape [%lld, %lld, %lld], expected %s = [E, %lld, %lld]", op,
                          arg, (long long)out->shape[0], (long long)out->shape[1],
                          (long long)out->shape[2], shape_names, (long long)rows, (long long)cols);
  return kite_tensor_require_compact(op, arg, out);
}

/* The checks fused_moe and fused_moe_ex share, under the name op: x, w13, w2, weights, ids and
 * y (apart from every input) -> *a but for op and act; in[0..4]: the checked inputs. tr: the
 * weights stored transposed (w13 [E, H, 2I], w2 [E, I, H]). */
static kite_status moe_check(kite_ctx *ctx, const char *op, const DLTensor *x, const DLTensor *w13,
                             const DLTensor *w2, const DLTensor *weights, const DLTensor *ids,
                             DLTensor *y, bool tr, kite_moe_args *a, kite_tensor in[5]) {
  kite_mat xm, wm, im, ym;
  kite_tensor w13t, w2t;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = kite_float_mat_check(ctx, op, "x", x, &xm)) != KITE_OK) return s;
  const kite_dtype dt = xm.t.dtype;
  const int64_t t = xm.rows, h = xm.cols;

  /* w13 ([E, 2I, H], or [E, H, 2I] transposed) fixes E and I; w2 must agree */
  if ((s = kite_tensor_check(ctx, op, "w13", w13, &w13t)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, "w13", &w13t, 3)) != KITE_OK) return s;
  if (tr && w13t.shape[1] != h) /* most likely w13 in the other orientation */
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: transposed: 1 reads w13 as [E, H, 2I], but w13 is [%lld, %lld, "
                          "%lld] and H is %lld",
                          op, (long long)w13t.shape[0], (long long)w13t.shape[1],
                          (long long)w13t.shape[2], (long long)h);
  const int d2i = tr ? 2 : 1; /* the dim of w13 that holds 2I */
  if (w13t.shape[d2i] % 2 != 0)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: w13: dim %d is %lld, expected 2I (even)", op,
                          d2i, (long long)w13t.shape[d2i]);
  const int64_t e = w13t.shape[0], inter = w13t.shape[d2i] / 2;
  /* the products' [outputs, inputs] matrices, stored as they are or transposed */
  const int64_t n13 = 2 * inter, n2 = h;
  if ((s = check_experts(ctx, op, "w13", w13, dt, -1, tr ? h : n13, tr ? n13 : h,
                         tr ? "[E, H, 2I] (transposed)" : "[E, 2I, H]", &w13t)) != KITE_OK)
    return s;
  if ((s = check_experts(ctx, op, "w2", w2, dt, e, tr ? inter : n2, tr ? n2 : inter,
                         tr ? "[E, I, H] (transposed)" : "[E, H, I]", &w2t)) != KITE_OK)
    return s;

  if ((s = kite_typed_mat_check(ctx, op, "weights", weights, KITE_DTYPE_F32, &wm)) != KITE_OK)
    return s;
  const int64_t topk = wm.cols;
  if (wm.rows != t)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: weights: %lld rows, expected T=%lld", op,
                          (long long)wm.rows, (long long)t);
  if ((s = kite_typed_mat_check(ctx, op, "ids", ids, KITE_DTYPE_I32, &im)) != KITE_OK) return s;
  if ((s = kite_mat_require_shape(op, "ids", &im, t, topk, "T", "k")) != KITE_OK) return s;

  if ((s = kite_mat_check(ctx, op, "y", y, true, &ym)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "y", &ym.t, dt)) != KITE_OK) return s;
  if ((s = kite_mat_require_shape(op, "y", &ym, t, h, "T", "H")) != KITE_OK) return s;
  const kite_tensor *ins[] = {&xm.t, &w13t, &w2t, &wm.t, &im.t};
  const char *names[] = {"x", "w13", "w2", "weights", "ids"};
  if ((s = kite_require_apart(op, "y", &ym.t, ins, names, 5)) != KITE_OK) return s;
  for (int i = 0; i < 5; i++) in[i] = *ins[i];

  *a = (kite_moe_args){.dtype = dt,
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
                       .y = ym.t.data,
                       .y_stride = ym.stride};
  return KITE_OK;
}

kite_status kite_fused_moe(kite_ctx *ctx, const DLTensor *x, const DLTensor *w13,
                           const DLTensor *w2, const DLTensor *weights, const DLTensor *ids,
                           kite_moe_act act, DLTensor *y) {
  kite_moe_args a;
  kite_tensor in[5];
  kite_status s;
  if ((s = moe_check(ctx, "fused_moe", x, w13, w2, weights, ids, y, false, &a, in)) != KITE_OK)
    return s;
  if (act != KITE_MOE_SILU && act != KITE_MOE_GELU)
    return kite_set_error(KITE_ERR_INVALID_ARG, "fused_moe: act: %d is not silu or gelu", (int)act);
  a.op = KITE_OP_FUSED_MOE, a.act = act;
  if (a.tokens == 0 || a.hidden == 0) return KITE_OK; /* I = 0, E = 0 or k = 0 still write y = 0 */
  return kite_dispatch(ctx, KITE_OP_FUSED_MOE, a.dtype, &a);
}

kite_moe_opts kite_moe_opts_default(void) {
  kite_moe_opts o = {
      .act = KITE_MOE_SILU, .layout = KITE_MOE_SPLIT, .alpha = 1.702f, .limit = 0, .transposed = 0};
  return o;
}

/* An optional compact expert bias [E, n] of dtype dt. */
static kite_status check_bias(const kite_ctx *ctx, const char *arg, const DLTensor *d,
                              kite_dtype dt, int64_t e, int64_t n, const char *n_name,
                              kite_tensor *t) {
  const char *op = "fused_moe_ex";
  kite_status s;
  if (!d) return KITE_OK;
  if ((s = kite_tensor_check(ctx, op, arg, d, t)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, t, 2)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, arg, t, dt)) != KITE_OK) return s;
  if (t->shape[0] != e || t->shape[1] != n)
    return kite_set_error(
        KITE_ERR_INVALID_ARG, "%s: %s: shape [%lld, %lld], expected [E=%lld, %s=%lld]", op, arg,
        (long long)t->shape[0], (long long)t->shape[1], (long long)e, n_name, (long long)n);
  return kite_tensor_require_compact(op, arg, t);
}

kite_status kite_fused_moe_ex(kite_ctx *ctx, const DLTensor *x, const DLTensor *w13,
                              const DLTensor *b13, const DLTensor *w2, const DLTensor *b2,
                              const DLTensor *weights, const DLTensor *ids,
                              const kite_moe_opts *opts, DLTensor *y) {
  const char *op = "fused_moe_ex";
  kite_moe_ex_args a = {.op = KITE_OP_FUSED_MOE_EX};
  kite_tensor in[5], b13t, b2t;
  kite_status s;
  const kite_moe_opts o = opts ? *opts : kite_moe_opts_default();
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if (o.transposed != 0 && o.transposed != 1)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: transposed: %d is not 0 or 1", op,
                          (int)o.transposed);
  if ((s = moe_check(ctx, op, x, w13, w2, weights, ids, y, o.transposed, &a.moe, in)) != KITE_OK)
    return s;
  const kite_moe_args *m = &a.moe;
  if ((s = check_bias(ctx, "b13", b13, m->dtype, m->experts, 2 * m->inter, "2I", &b13t)) != KITE_OK)
    return s;
  if ((s = check_bias(ctx, "b2", b2, m->dtype, m->experts, m->hidden, "H", &b2t)) != KITE_OK)
    return s;
  if (o.act != KITE_MOE_SILU && o.act != KITE_MOE_GELU && o.act != KITE_MOE_SWIGLU_OAI)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: act: %d is not a kite_moe_act", op,
                          (int)o.act);
  if (o.layout != KITE_MOE_SPLIT && o.layout != KITE_MOE_INTERLEAVED)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: layout: %d is not a kite_moe_layout", op,
                          (int)o.layout);
  if (!isfinite(o.alpha))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: alpha: %g is not finite", op, (double)o.alpha);
  if (!(o.limit >= 0.0f) || !isfinite(o.limit))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: limit: %g must be finite and >= 0", op,
                          (double)o.limit);
  kite_tensor yt; /* y apart from the biases too */
  if ((s = kite_tensor_check(ctx, op, "y", y, &yt)) != KITE_OK) return s;
  const kite_tensor *bs[] = {b13 ? &b13t : NULL, b2 ? &b2t : NULL};
  const char *names[] = {"b13", "b2"};
  if ((s = kite_require_apart(op, "y", &yt, bs, names, 2)) != KITE_OK) return s;
  a.moe.op = KITE_OP_FUSED_MOE_EX, a.moe.act = o.act;
  a.dtype = m->dtype, a.opts = o;
  a.b13 = b13 ? b13t.data : NULL, a.b2 = b2 ? b2t.data : NULL;
  if (m->tokens == 0 || m->hidden == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_FUSED_MOE_EX, a.dtype, &a);
}
