/*
 * Elementwise activations over x[rows, cols] -> y[rows, cols]: silu, gelu (erf), gelu_tanh,
 * gelu_quick, relu. y may be x: each element is read before it is written. And their backward,
 * dx[rows, cols] = dy * act'(x) in double; dx may be dy.
 */
#include "ref.h"

kite_status ref_act_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_act_args *a = args;
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "activation: ref: NULL args");
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: ref: dtype %s is not supported",
                          ref_op_str(a->op), ref_dtype_str(a->dtype));

  double (*act)(double) = NULL, (*d_act)(double) = NULL;
  if (!kite_op_is_activation(a->op) || !ref_act_fns(a->op, &act, &d_act))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "activation: ref: op %s is not an activation",
                          ref_op_str(a->op));

  for (int64_t r = 0; r < a->rows; r++) {
    for (int64_t c = 0; c < a->cols; c++) {
      double x = kite_load_f32(a->dtype, a->x, r * a->x_stride + c);
      kite_store_f64(a->dtype, a->y, r * a->y_stride + c, act(x));
    }
  }
  return KITE_OK;
}

kite_status ref_act_bwd_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_act_bwd_args *a = args;
  double (*f)(double) = NULL, (*df)(double) = NULL;
  const kite_status s = ref_act_bwd_begin(a, &f, &df);
  if (s != KITE_OK) return s;
  const kite_dtype t = a->dtype;
  for (int64_t r = 0; r < a->rows; r++) {
    const int64_t x0 = r * a->x_stride, d0 = r * a->dy_stride, o0 = r * a->dx_stride;
    for (int64_t i = 0; i < a->cols; i++) {
      const double dy = kite_load_f32(t, a->dy, d0 + i);
      kite_store_f32(t, a->dx, o0 + i, (float)(dy * df(kite_load_f32(t, a->x, x0 + i))));
    }
  }
  return KITE_OK;
}
