/* Front-ends of the norms over the last dim, plain and fused with the residual add:
 * x[..., H] -> y[..., H]; w[H], b[H] optional; residual[..., H] updated in place. */
#include <math.h>

#include "core/internal.h"

/* An optional per-channel vector w[H] or b[H] of dtype t; *out is NULL when v is. */
static kite_status check_channel(const kite_ctx *ctx, const char *op, const char *arg,
                                 const DLTensor *v, kite_dtype t, int64_t h, const void **out) {
  kite_tensor vt;
  kite_status s;
  *out = NULL;
  if (!v) return KITE_OK;
  if ((s = kite_tensor_check(ctx, op, arg, v, &vt)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, &vt, 1)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, arg, &vt, t)) != KITE_OK) return s;
  if (vt.shape[0] != h)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: length %lld, expected %lld (x's last dim)",
                          op, arg, (long long)vt.shape[0], (long long)h);
  if ((s = kite_tensor_require_compact(op, arg, &vt)) != KITE_OK) return s;
  *out = vt.data;
  return KITE_OK;
}

/* Everything the four norms share: ctx, x, y, residual (when fused, residual non-NULL for
 * the check), w, b, eps, pos, into *a (a->op is `op`). No dispatch. */
static kite_status norm_check(kite_ctx *ctx, kite_op op, const char *name, bool fused,
                              const DLTensor *x, DLTensor *residual, const DLTensor *w,
                              const DLTensor *b, float eps, float offset, kite_norm_pos pos,
                              DLTensor *y, kite_norm_args *out) {
  kite_rowwise v;
  kite_status s;
  if ((s = kite_check_ctx(ctx, name)) != KITE_OK) return s;
  if ((s = kite_check_rowwise(ctx, name, x, y, 1, &v)) != KITE_OK) return s;

  kite_norm_args a = {.op = op,
                      .dtype = v.dtype,
                      .rows = v.rows,
                      .cols = v.x_cols,
                      .x = v.x,
                      .x_stride = v.x_stride,
                      .y = v.y,
                      .y_stride = v.y_stride,
                      .eps = eps,
                      .offset = offset,
                      .pos = pos};
  if (fused) {
    kite_tensor rt;
    int64_t rows, cols;
    if ((s = kite_tensor_check(ctx, name, "residual", residual, &rt)) != KITE_OK) return s;
    if ((s = kite_tensor_require_dtype(name, "residual", &rt, v.dtype)) != KITE_OK) return s;
    if ((s = kite_tensor_require_same_shape(name, "residual", &rt, &v.xt, "x")) != KITE_OK)
      return s;
    if ((s = kite_tensor_rows(name, "residual", &rt, &rows, &cols, &a.residual_stride)) != KITE_OK)
      return s;
    if ((s = kite_tensor_require_no_overlap(name, "residual", &rt)) != KITE_OK) return s;
    if ((s = kite_tensor_require_disjoint(name, "residual", &rt, &v.xt, "x")) != KITE_OK) return s;
    if ((s = kite_tensor_require_disjoint(name, "residual", &rt, &v.yt, "y")) != KITE_OK) return s;
    if (pos != KITE_NORM_PRE && pos != KITE_NORM_POST)
      return kite_set_error(KITE_ERR_INVALID_ARG, "%s: pos: %d is not a kite_norm_pos", name,
                            (int)pos);
    a.residual = rt.data;
  }
  if ((s = check_channel(ctx, name, "w", w, v.dtype, v.x_cols, &a.w)) != KITE_OK) return s;
  if ((s = check_channel(ctx, name, "b", b, v.dtype, v.x_cols, &a.b)) != KITE_OK) return s;
  if (!isfinite(eps) || eps < 0)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: eps: %g must be finite and >= 0", name,
                          (double)eps);
  if (!isfinite(offset))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: offset: %g is not finite", name,
                          (double)offset);
  *out = a;
  return KITE_OK;
}

kite_status kite_add_norm_check(kite_ctx *ctx, const char *name, const DLTensor *x,
                                DLTensor *residual, const DLTensor *w, const DLTensor *b, float eps,
                                float offset, kite_norm_pos pos, DLTensor *y, kite_norm_args *out) {
  return norm_check(ctx, KITE_OP_ADD_RMS_NORM, name, true, x, residual, w, b, eps, offset, pos, y,
                    out);
}

static kite_status norm(kite_ctx *ctx, kite_op op, const DLTensor *x, DLTensor *residual,
                        const DLTensor *w, const DLTensor *b, float eps, float offset,
                        kite_norm_pos pos, DLTensor *y) {
  const char *name = kite_op_name(op);
  const bool fused = op == KITE_OP_ADD_RMS_NORM || op == KITE_OP_ADD_LAYER_NORM;
  kite_clear_error();
  kite_init();
  kite_norm_args a;
  kite_status s = norm_check(ctx, op, name, fused, x, residual, w, b, eps, offset, pos, y, &a);
  if (s != KITE_OK) return s;
  if (a.rows == 0 || a.cols == 0) return KITE_OK;
  return kite_dispatch(ctx, op, a.dtype, &a);
}

kite_status kite_rms_norm(kite_ctx *ctx, const DLTensor *x, const DLTensor *w, float eps,
                          float offset, DLTensor *y) {
  return norm(ctx, KITE_OP_RMS_NORM, x, NULL, w, NULL, eps, offset, KITE_NORM_PRE, y);
}

kite_status kite_layer_norm(kite_ctx *ctx, const DLTensor *x, const DLTensor *w, const DLTensor *b,
                            float eps, DLTensor *y) {
  return norm(ctx, KITE_OP_LAYER_NORM, x, NULL, w, b, eps, 0.0f, KITE_NORM_PRE, y);
}

kite_status kite_add_rms_norm(kite_ctx *ctx, const DLTensor *x, DLTensor *residual,
                              const DLTensor *w, float eps, float offset, kite_norm_pos pos,
                              DLTensor *y) {
  return norm(ctx, KITE_OP_ADD_RMS_NORM, x, residual, w, NULL, eps, offset, pos, y);
}

kite_status kite_add_layer_norm(kite_ctx *ctx, const DLTensor *x, DLTensor *residual,
                                const DLTensor *w, const DLTensor *b, float eps, kite_norm_pos pos,
                                DLTensor *y) {
  return norm(ctx, KITE_OP_ADD_LAYER_NORM, x, residual, w, b, eps, 0.0f, pos, y);
}
