/*
 * Gated activations: x[rows, 2*cols] -> y[rows, cols], y[r, i] = act(g) * u with the gate
 * g = x[r, i] and the up projection u = x[r, cols + i] (the layout of a fused gate/up GEMM).
 * limit > 0 clamps first: g <= limit, u in [-limit, limit] (GPT-OSS style); NaN inputs stay NaN.
 * And their backward: dy[rows, cols] -> dx[rows, 2*cols], d g = dy u act'(g), d u = dy act(g)
 * from the clamped values, 0 where the clamp was active.
 */
#include "ref.h"

kite_status ref_gated_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_gated_args *a = args;
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "gated activation: ref: NULL args");
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: ref: dtype %s is not supported",
                          ref_op_str(a->op), ref_dtype_str(a->dtype));

  double (*act)(double) = NULL, (*d_act)(double) = NULL;
  if (!kite_op_is_gated(a->op) || !ref_act_fns(a->op, &act, &d_act))
    return kite_set_error(KITE_ERR_UNSUPPORTED,
                          "gated activation: ref: op %s is not a gated activation",
                          ref_op_str(a->op));

  const bool clamp = a->limit > 0.0f; /* false for NaN too */
  const double limit = a->limit;
  for (int64_t r = 0; r < a->rows; r++) {
    for (int64_t i = 0; i < a->cols; i++) {
      double g = kite_load_f32(a->dtype, a->x, r * a->x_stride + i);
      double u = kite_load_f32(a->dtype, a->x, r * a->x_stride + a->cols + i);
      if (clamp) {
        if (g > limit) g = limit;
        if (u > limit) u = limit;
        if (u < -limit) u = -limit;
      }
      kite_store_f64(a->dtype, a->y, r * a->y_stride + i, act(g) * u);
    }
  }
  return KITE_OK;
}

kite_status ref_gated_bwd_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_act_bwd_args *a = args;
  double (*f)(double) = NULL, (*df)(double) = NULL;
  const kite_status s = ref_act_bwd_begin(a, &f, &df);
  if (s != KITE_OK) return s;
  const kite_dtype t = a->dtype;
  const bool clamp = a->limit > 0.0f;
  const double limit = a->limit;
  for (int64_t r = 0; r < a->rows; r++) {
    const int64_t x0 = r * a->x_stride, d0 = r * a->dy_stride, o0 = r * a->dx_stride;
    for (int64_t i = 0; i < a->cols; i++) {
      const double dy = kite_load_f32(t, a->dy, d0 + i);
      double g = kite_load_f32(t, a->x, x0 + i), u = kite_load_f32(t, a->x, x0 + a->cols + i);
      bool g_live = true, u_live = true;
      if (clamp) {
        if (g > limit) g = limit, g_live = false;
        if (u > limit) u = limit, u_live = false;
        if (u < -limit) u = -limit, u_live = false;
      }
      kite_store_f32(t, a->dx, o0 + i, g_live ? (float)(dy * u * df(g)) : 0.0f);
      kite_store_f32(t, a->dx, o0 + a->cols + i, u_live ? (float)(dy * f(g)) : 0.0f);
    }
  }
  return KITE_OK;
}
