/* Front-end of softmax over the last dim: y[r, :] = softmax(scale * x[r, :]). */
#include <math.h>

#include "core/internal.h"

kite_status kite_softmax(kite_ctx *ctx, const DLTensor *x, float scale, DLTensor *y) {
  kite_clear_error();
  kite_init();
  kite_rowwise v;
  kite_status s;
  if ((s = kite_check_ctx(ctx, "softmax")) != KITE_OK) return s;
  if ((s = kite_check_rowwise(ctx, "softmax", x, y, 1, &v)) != KITE_OK) return s;
  if (!isfinite(scale))
    return kite_set_error(KITE_ERR_INVALID_ARG, "softmax: scale: %g is not finite", (double)scale);

  kite_softmax_args a = {.op = KITE_OP_SOFTMAX,
                         .dtype = v.dtype,
                         .rows = v.rows,
                         .cols = v.x_cols,
                         .x = v.x,
                         .x_stride = v.x_stride,
                         .y = v.y,
                         .y_stride = v.y_stride,
                         .scale = scale};
  if (a.rows == 0 || a.cols == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_SOFTMAX, a.dtype, &a);
}
