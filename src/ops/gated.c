/* Front-ends of the gated activations: x[..., 2I] -> y[..., I] = act(gate) * up. */
#include <math.h>

#include "core/internal.h"

static kite_status gated(kite_ctx *ctx, kite_op op, const DLTensor *x, float limit, DLTensor *y) {
  const char *name = kite_op_name(op);
  kite_clear_error();
  kite_init();
  kite_rowwise v;
  kite_status s;
  if ((s = kite_check_ctx(ctx, name)) != KITE_OK) return s;
  if ((s = kite_check_rowwise(ctx, name, x, y, 2, &v)) != KITE_OK) return s;
  if (isnan(limit))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: limit: is NaN (use 0 for no clamp)", name);

  /* Kernels see a single spelling of "no clamp": 0. */
  kite_gated_args a = {.op = op,
                       .dtype = v.dtype,
                       .rows = v.rows,
                       .cols = v.y_cols,
                       .x = v.x,
                       .x_stride = v.x_stride,
                       .y = v.y,
                       .y_stride = v.y_stride,
                       .limit = limit > 0 ? limit : 0.0f};
  if (a.rows == 0 || a.cols == 0) return KITE_OK;
  return kite_dispatch(ctx, op, a.dtype, &a);
}

kite_status kite_silu_and_mul(kite_ctx *ctx, const DLTensor *x, float limit, DLTensor *y) {
  return gated(ctx, KITE_OP_SILU_AND_MUL, x, limit, y);
}
kite_status kite_gelu_and_mul(kite_ctx *ctx, const DLTensor *x, float limit, DLTensor *y) {
  return gated(ctx, KITE_OP_GELU_AND_MUL, x, limit, y);
}
kite_status kite_gelu_tanh_and_mul(kite_ctx *ctx, const DLTensor *x, float limit, DLTensor *y) {
  return gated(ctx, KITE_OP_GELU_TANH_AND_MUL, x, limit, y);
}
