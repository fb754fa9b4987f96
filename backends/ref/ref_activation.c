/*
 * Elementwise activations over x[rows, cols] -> y[rows, cols]: silu, gelu (erf), gelu_tanh,
 * gelu_quick, relu. y may be x: each element is read before it is written.
 */
#include "ref.h"

kite_status ref_act_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_act_args *a = args;
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "activation: ref: NULL args");
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: ref: dtype %s is not supported",
                          ref_op_str(a->op), ref_dtype_str(a->dtype));

  double (*act)(double);
  switch (a->op) {
  case KITE_OP_SILU:
    act = ref_silu;
    break;
  case KITE_OP_GELU:
    act = ref_gelu;
    break;
  case KITE_OP_GELU_TANH:
    act = ref_gelu_tanh;
    break;
  case KITE_OP_GELU_QUICK:
    act = ref_gelu_quick;
    break;
  case KITE_OP_RELU:
    act = ref_relu;
    break;
  default:
    return kite_set_error(KITE_ERR_UNSUPPORTED, "activation: ref: op %s is not an activation",
                          ref_op_str(a->op));
  }

  for (int64_t r = 0; r < a->rows; r++) {
    for (int64_t c = 0; c < a->cols; c++) {
      double x = kite_load_f32(a->dtype, a->x, r * a->x_stride + c);
      kite_store_f64(a->dtype, a->y, r * a->y_stride + c, act(x));
    }
  }
  return KITE_OK;
}
