/* Front-ends of the dense GEMMs: linear y[M, N] = x[M, K] w[N, K]^T + bias[N], and group_gemm
 * where G consecutive groups of x's rows each meet their own w[g]. */
#include "ops/matrix.h"

kite_status kite_linear(kite_ctx *ctx, const DLTensor *x, const DLTensor *w, const DLTensor *bias,
                        DLTensor *y) {
  const char *op = "linear";
  kite_mat xm, wm, ym;
  kite_tensor bt;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = kite_float_mat_check(ctx, op, "x", x, &xm)) != KITE_OK) return s;
  if ((s = kite_typed_mat_check(ctx, op, "w", w, xm.t.dtype, &wm)) != KITE_OK) return s;
  if (wm.cols != xm.cols)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "linear: w: shape [%lld, %lld], expected [N, K=%lld]", (long long)wm.rows,
                          (long long)wm.cols, (long long)xm.cols);
  const int64_t m = xm.rows, n = wm.rows, k = xm.cols;
  if ((s = kite_linear_out_check(ctx, op, &xm, &wm, bias, y, n, &bt, &ym)) != KITE_OK) return s;

  kite_linear_args a = {.op = KITE_OP_LINEAR,
                        .dtype = xm.t.dtype,
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
  if (m == 0 || n == 0) return KITE_OK; /* K = 0 still writes y = bias (or 0) */
  return kite_dispatch(ctx, KITE_OP_LINEAR, a.dtype, &a);
}

kite_status kite_group_gemm(kite_ctx *ctx, const DLTensor *x, const DLTensor *w,
                            const DLTensor *group_sizes, DLTensor *y) {
  const char *op = "group_gemm";
  kite_mat xm, ym;
  kite_tensor wt, gt;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = kite_float_mat_check(ctx, op, "x", x, &xm)) != KITE_OK) return s;

  const int64_t k = xm.cols, m = xm.rows;
  if ((s = kite_group_w_check(ctx, op, w, xm.t.dtype, k, "K", NULL, group_sizes, &wt, &gt)) !=
      KITE_OK)
    return s;
  const int64_t g = wt.shape[0], n = wt.shape[1];
  const kite_tensor *in[] = {&xm.t, &wt, &gt};
  const char *names[] = {"x", "w", "group_sizes"};
  if ((s = kite_out_mat_check(ctx, op, y, xm.t.dtype, m, n, &ym, in, names, 3)) != KITE_OK)
    return s;

  kite_group_gemm_args a = {.op = KITE_OP_GROUP_GEMM,
                            .dtype = xm.t.dtype,
                            .m = m,
                            .n = n,
                            .k = k,
                            .groups = g,
                            .x = xm.t.data,
                            .x_stride = xm.stride,
                            .w = wt.data,
                            .w_stride_g = wt.strides[0],
                            .w_stride_n = wt.strides[1],
                            .group_sizes = gt.data,
                            .y = ym.t.data,
                            .y_stride = ym.stride};
  /* group_sizes readable here: each >= 0, summing to M */
  if (kite_indices_on_host(ctx) && (s = kite_group_sizes_check(op, a.group_sizes, g, m)) != KITE_OK)
    return s;
  if (m == 0 || n == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_GROUP_GEMM, a.dtype, &a);
}
