/*
 * Softmax over the last dim: y[r, i] = exp(scale x[r, i] - m) / sum_j exp(scale x[r, j] - m),
 * m = max_j scale x[r, j], in double. Subtracting the max keeps exp from overflowing and leaves
 * the result unchanged. y may be x: each pass reads x[r, i] before y[r, i] is written.
 */
#include "ref.h"

kite_status ref_softmax_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_softmax_args *a = args;
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "softmax: ref: NULL args");
  if (a->op != KITE_OP_SOFTMAX)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "softmax: ref: op %s is not softmax",
                          ref_op_str(a->op));
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "softmax: ref: dtype %s is not supported",
                          ref_dtype_str(a->dtype));

  const kite_dtype t = a->dtype;
  const double scale = a->scale;
  for (int64_t r = 0; r < a->rows; r++) {
    const int64_t x0 = r * a->x_stride, y0 = r * a->y_stride;
    double m = -INFINITY;
    for (int64_t i = 0; i < a->cols; i++) {
      double v = scale * kite_load_f32(t, a->x, x0 + i);
      if (v > m || isnan(v)) m = v;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < a->cols; i++) sum += exp(scale * kite_load_f32(t, a->x, x0 + i) - m);
    for (int64_t i = 0; i < a->cols; i++) {
      double e = exp(scale * kite_load_f32(t, a->x, x0 + i) - m);
      kite_store_f64(t, a->y, y0 + i, e / sum);
    }
  }
  return KITE_OK;
}

/* Backward from the output: dx = scale y (dy - y . dy), the dot in double. */
kite_status ref_softmax_bwd_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_softmax_bwd_args *a = args;
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "softmax_backward: ref: NULL args");
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "softmax_backward: ref: dtype %s is not supported",
                          ref_dtype_str(a->dtype));
  const kite_dtype t = a->dtype;
  for (int64_t r = 0; r < a->rows; r++) {
    double dot = 0.0;
    for (int64_t i = 0; i < a->cols; i++)
      dot += (double)kite_load_f32(t, a->y, r * a->y_stride + i) *
             kite_load_f32(t, a->dy, r * a->dy_stride + i);
    for (int64_t i = 0; i < a->cols; i++) {
      const double y = kite_load_f32(t, a->y, r * a->y_stride + i);
      const double dy = kite_load_f32(t, a->dy, r * a->dy_stride + i);
      kite_store_f32(t, a->dx, r * a->dx_stride + i, (float)((double)a->scale * y * (dy - dot)));
    }
  }
  return KITE_OK;
}
