/* Front-ends of softmax over the last dim, y[r, :] = softmax(scale * x[r, :]), and of its
 * backward from the output, dx[r, :] = scale * y (dy - y . dy). */
#include <math.h>

#include "core/internal.h"

kite_status kite_softmax(kite_ctx *ctx, const DLTensor *x, float scale, DLTensor *y) {
  kite_rowwise v;
  kite_status s = kite_rowwise_begin(ctx, "softmax", x, y, 1, &v);
  if (s != KITE_OK) return s;
  if (!isfinite(scale))
    return kite_set_error(KITE_ERR_INVALID_ARG, "softmax: scale: %g is not finite", (double)scale);

  kite_softmax_args a = {KITE_ROWWISE_FIELDS(KITE_OP_SOFTMAX, v), .scale = scale};
  if (a.rows == 0 || a.cols == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_SOFTMAX, a.dtype, &a);
}

kite_status kite_softmax_backward(kite_ctx *ctx, const DLTensor *y, const DLTensor *dy, float scale,
                                  DLTensor *dx) {
  const char *op = "softmax_backward";
  kite_clear_error();
  kite_init();
  kite_status s;
  kite_tensor yt, dyt, dxt;
  int64_t rows, cols, y_stride, dy_stride, dx_stride;
  if ((s = kite_check_ctx(ctx, op)) != KITE_OK) return s;
  if ((s = kite_tensor_check_float_rows(ctx, op, "y", y, &yt, &rows, &cols, &y_stride)) != KITE_OK)
    return s;
  if ((s = kite_tensor_check_like(ctx, op, "dy", dy, &yt, "y", &dyt, &dy_stride)) != KITE_OK)
    return s;
  if ((s = kite_tensor_check_like(ctx, op, "dx", dx, &yt, "y", &dxt, &dx_stride)) != KITE_OK)
    return s;
  /* dx may be dy (in place), never y */
  if ((s = kite_tensor_check_out(op, "dx", &dxt, &dyt, "dy", &yt, "y")) != KITE_OK) return s;
  if (!isfinite(scale))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: scale: %g is not finite", op, (double)scale);
  kite_softmax_bwd_args a = {.op = KITE_OP_SOFTMAX_BACKWARD,
                             .dtype = yt.dtype,
                             .rows = rows,
                             .cols = cols,
                             .y = yt.data,
                             .y_stride = y_stride,
                             .dy = dyt.data,
                             .dy_stride = dy_stride,
                             .dx = dxt.data,
                             .dx_stride = dx_stride,
                             .scale = scale};
  if (rows == 0 || cols == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_SOFTMAX_BACKWARD, a.dtype, &a);
}
