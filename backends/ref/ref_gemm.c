/*
 * Dense GEMMs in float64: linear y[m, n] = sum_k x[m, k] w[n, k] + bias[n], and group_gemm, where
 * consecutive groups of x's rows each use their own w[g]. One plain dot product per output.
 */
#include "ref.h"

/* y[r, :] = x_row . w^T (+ bias) for one row, w[n, k] with row stride w_stride. */
static void linear_row(kite_dtype t, int64_t n, int64_t k, const void *x, int64_t x0, const void *w,
                       int64_t w_stride, const void *bias, void *y, int64_t y0) {
  for (int64_t j = 0; j < n; j++) {
    double acc = bias ? kite_load_f32(t, bias, j) : 0.0;
    for (int64_t i = 0; i < k; i++)
      acc += (double)kite_load_f32(t, x, x0 + i) * kite_load_f32(t, w, j * w_stride + i);
    kite_store_f64(t, y, y0 + j, acc);
  }
}

kite_status ref_linear_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_linear_args *a = args;
  if (!a || a->op != KITE_OP_LINEAR)
    return kite_set_error(KITE_ERR_INVALID_ARG, "linear: ref: bad args");
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "linear: ref: dtype %s is not supported",
                          ref_dtype_str(a->dtype));
  for (int64_t r = 0; r < a->m; r++)
    linear_row(a->dtype, a->n, a->k, a->x, r * a->x_stride, a->w, a->w_stride, a->bias, a->y,
               r * a->y_stride);
  return KITE_OK;
}

kite_status ref_group_gemm_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_group_gemm_args *a = args;
  if (!a || a->op != KITE_OP_GROUP_GEMM)
    return kite_set_error(KITE_ERR_INVALID_ARG, "group_gemm: ref: bad args");
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "group_gemm: ref: dtype %s is not supported",
                          ref_dtype_str(a->dtype));
  const kite_dtype t = a->dtype;
  int64_t row = 0;
  for (int64_t g = 0; g < a->groups && row < a->m; g++) {
    int64_t rows = a->group_sizes[g] > 0 ? a->group_sizes[g] : 0; /* negative counts as empty */
    if (rows > a->m - row) rows = a->m - row;
    const void *wg = (const char *)a->w + (size_t)(g * a->w_stride_g) * kite_dtype_size(t);
    for (int64_t r = row; r < row + rows; r++)
      linear_row(t, a->n, a->k, a->x, r * a->x_stride, wg, a->w_stride_n, NULL, a->y,
                 r * a->y_stride);
    row += rows;
  }
  for (; row < a->m; row++) /* rows no group claims */
    for (int64_t j = 0; j < a->n; j++) kite_store_f32(t, a->y, row * a->y_stride + j, 0.0f);
  return KITE_OK;
}
