/*
 * Gated activations: x[rows, 2*cols] -> y[rows, cols], y[r, i] = act(g) * u with the gate
 * g = x[r, i] and the up projection u = x[r, cols + i] (the layout of a fused gate/up GEMM).
 * limit > 0 clamps first: g <= limit, u in [-limit, limit] (GPT-OSS style); NaN inputs stay NaN.
 */
#include "ref.h"

kite_status ref_gated_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_gated_args *a = args;
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "gated activation: ref: NULL args");
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: ref: dtype %s is not supported",
                          ref_op_str(a->op), ref_dtype_str(a->dtype));

  double (*act)(double);
  switch (a->op) {
  case KITE_OP_SILU_AND_MUL:
    act = ref_silu;
    break;
  case KITE_OP_GELU_AND_MUL:
    act = ref_gelu;
    break;
  case KITE_OP_GELU_TANH_AND_MUL:
    act = ref_gelu_tanh;
    break;
  default:
    return kite_set_error(KITE_ERR_UNSUPPORTED,
                          "gated activation: ref: op %s is not a gated activation",
                          ref_op_str(a->op));
  }

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
