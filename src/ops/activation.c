/* Front-ends of the elementwise activations: x[..., N] -> y[..., N], both viewed as rows. */
#include "core/internal.h"

static kite_status activation(kite_ctx *ctx, kite_op op, const DLTensor *x, DLTensor *y) {
  const char *name = kite_op_name(op);
  kite_clear_error();
  kite_init();
  kite_rowwise v;
  kite_status s;
  if ((s = kite_check_ctx(ctx, name)) != KITE_OK) return s;
  if ((s = kite_check_rowwise(ctx, name, x, y, 1, &v)) != KITE_OK) return s;

  kite_act_args a = {.op = op,
                     .dtype = v.dtype,
                     .rows = v.rows,
                     .cols = v.x_cols,
                     .x = v.x,
                     .x_stride = v.x_stride,
                     .y = v.y,
                     .y_stride = v.y_stride};
  if (a.rows == 0 || a.cols == 0) return KITE_OK;
  return kite_dispatch(ctx, op, a.dtype, &a);
}

kite_status kite_silu(kite_ctx *ctx, const DLTensor *x, DLTensor *y) {
  return activation(ctx, KITE_OP_SILU, x, y);
}
kite_status kite_gelu(kite_ctx *ctx, const DLTensor *x, DLTensor *y) {
  return activation(ctx, KITE_OP_GELU, x, y);
}
kite_status kite_gelu_tanh(kite_ctx *ctx, const DLTensor *x, DLTensor *y) {
  return activation(ctx, KITE_OP_GELU_TANH, x, y);
}
kite_status kite_gelu_quick(kite_ctx *ctx, const DLTensor *x, DLTensor *y) {
  return activation(ctx, KITE_OP_GELU_QUICK, x, y);
}
kite_status kite_relu(kite_ctx *ctx, const DLTensor *x, DLTensor *y) {
  return activation(ctx, KITE_OP_RELU, x, y);
}
