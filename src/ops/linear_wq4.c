/* Front-end of the linear layer on 4-bit block weights (GGUF Q4_0 / Q4_1 layouts). */
#include "ops/matrix.h"

int64_t kite_wq4_block_bytes(kite_wq4_format format) {
  return format == KITE_WQ4_SYM ? 18 : format == KITE_WQ4_MIN ? 20 : 0;
}

kite_status kite_linear_wq4(kite_ctx *ctx, const DLTensor *x, const DLTensor *w,
                            kite_wq4_format format, const DLTensor *bias, DLTensor *y) {
  const char *op = "linear_wq4";
  kite_mat xm, wm, ym;
  kite_tensor bt;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  const int64_t bb = kite_wq4_block_bytes(format);
  if (!bb)
    return kite_set_error(KITE_ERR_INVALID_ARG, "linear_wq4: format %d unknown (0 sym, 1 min)",
                          (int)format);
  if ((s = kite_float_mat_check(ctx, op, "x", x, &xm)) != KITE_OK) return s;
  if ((s = kite_typed_mat_check(ctx, op, "w", w, KITE_DTYPE_U8, &wm)) != KITE_OK) return s;
  const int64_t m = xm.rows, n = wm.rows, k = xm.cols;
  if (k % 32)
    return kite_set_error(KITE_ERR_INVALID_ARG, "linear_wq4: x: K=%lld is not a multiple of 32",
                          (long long)k);
  if (wm.cols != k / 32 * bb)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "linear_wq4: w: %lld bytes per row, expected K/32 blocks of %lld = %lld",
                          (long long)wm.cols, (long long)bb, (long long)(k / 32 * bb));
  if ((s = kite_linear_out_check(ctx, op, &xm, &wm, bias, y, n, &bt, &ym)) != KITE_OK) return s;

  kite_linear_wq4_args a = {.op = KITE_OP_LINEAR_WQ4,
                            .dtype = xm.t.dtype,
                            .format = format,
                            .m = m,
                            .n = n,
                            .k = k,
                            .x = xm.t.data,
                            .x_stride = xm.stride,
                            .w = wm.t.data,
                            .w_stride = wm.stride,
                            .bias = bias ? bt.data : NULL,
                            .y = ym.t.data,
                            .y_stride = ym.stride};
  if (m == 0 || n == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_LINEAR_WQ4, a.dtype, &a);
}
