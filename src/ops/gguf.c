/* Front-ends of the GGUF block-weight ops: linear_gguf, dequant_gguf and group_gemm_gguf
 * (kite.h). */
#include "ops/matrix.h"

/* Values and bytes of a block, indexed by type (GGUF's numbers); 0 for a type kite does not run. */
static const struct {
  const char *name;
  int64_t values, bytes;
} g_gguf_types[] = {
    [KITE_GGUF_Q4_0] = {"q4_0", 32, 18},   [KITE_GGUF_Q4_1] = {"q4_1", 32, 20},
    [KITE_GGUF_Q5_0] = {"q5_0", 32, 22},   [KITE_GGUF_Q5_1] = {"q5_1", 32, 24},
    [KITE_GGUF_Q8_0] = {"q8_0", 32, 34},   [KITE_GGUF_Q2_K] = {"q2_k", 256, 84},
    [KITE_GGUF_Q3_K] = {"q3_k", 256, 110}, [KITE_GGUF_Q4_K] = {"q4_k", 256, 144},
    [KITE_GGUF_Q5_K] = {"q5_k", 256, 176}, [KITE_GGUF_Q6_K] = {"q6_k", 256, 210},
    [KITE_GGUF_Q8_K] = {"q8_k", 256, 292}, [KITE_GGUF_IQ4_NL] = {"iq4_nl", 32, 18},
    [KITE_GGUF_MXFP4] = {"mxfp4", 32, 17},
};

static int known(kite_gguf_type type) {
  return (int)type >= 0 && (size_t)type < sizeof g_gguf_types / sizeof g_gguf_types[0] &&
         g_gguf_types[type].values > 0;
}

const char *kite_gguf_type_name(kite_gguf_type type) {
  return known(type) ? g_gguf_types[type].name : NULL;
}

kite_status kite_gguf_block_info(kite_gguf_type type, int64_t *block_values, int64_t *block_bytes) {
  const int ok = known(type);
  if (block_values) *block_values = ok ? g_gguf_types[type].values : 0;
  if (block_bytes) *block_bytes = ok ? g_gguf_types[type].bytes : 0;
  if (ok) return KITE_OK;
  return kite_set_error(KITE_ERR_INVALID_ARG,
                        "gguf: type %d is not a block type kite runs (q4_0 2, q4_1 3, q5_0 6, "
                        "q5_1 7, q8_0 8, q2_k 10, q3_k 11, q4_k 12, q5_k 13, q6_k 14, q8_k 15, "
                        "iq4_nl 20, mxfp4 39)",
                        (int)type);
}

/* The type's block sizes, and w checked as uint8 [rows, K / bv * bb] for K values per row. */
static kite_status gguf_w_check(const kite_ctx *ctx, const char *op, const DLTensor *w,
                                kite_gguf_type type, int64_t k, int64_t *bv, int64_t *bb,
                                kite_mat *wm) {
  kite_status s;
  if (!known(type))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: type %d is not a GGUF block type kite runs",
                          op, (int)type);
  *bv = g_gguf_types[type].values, *bb = g_gguf_types[type].bytes;
  if ((s = kite_typed_mat_check(ctx, op, "w", w, KITE_DTYPE_U8, wm)) != KITE_OK) return s;
  if (k % *bv)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: type %s: K=%lld is not a multiple of %lld", op,
                          g_gguf_types[type].name, (long long)k, (long long)*bv);
  if (wm->cols != k / *bv * *bb)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: w: %lld bytes per row, expected K/%lld blocks of %lld = %lld (%s)",
                          op, (long long)wm->cols, (long long)*bv, (long long)*bb,
                          (long long)(k / *bv * *bb), g_gguf_types[type].name);
  return KITE_OK;
}

/* linear_gguf and linear_gguf_q8: the same arguments, the same checks. */
static kite_status linear_gguf_op(kite_ctx *ctx, kite_op id, const DLTensor *x, const DLTensor *w,
                                  kite_gguf_type type, const DLTensor *bias, DLTensor *y) {
  const char *op = kite_op_name(id);
  kite_mat xm, wm, ym;
  kite_tensor bt;
  int64_t bv, bb;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = kite_float_mat_check(ctx, op, "x", x, &xm)) != KITE_OK) return s;
  if ((s = gguf_w_check(ctx, op, w, type, xm.cols, &bv, &bb, &wm)) != KITE_OK) return s;
  if ((s = kite_linear_out_check(ctx, op, &xm, &wm, bias, y, wm.rows, &bt, &ym)) != KITE_OK)
    return s;
  kite_gguf_args a = {.op = id,
                      .dtype = xm.t.dtype,
                      .type = type,
                      .bv = bv,
                      .bb = bb,
                      .m = xm.rows,
                      .n = wm.rows,
                      .k = xm.cols,
                      .x = xm.t.data,
                      .x_stride = xm.stride,
                      .w = wm.t.data,
                      .w_stride = wm.stride,
                      .bias = bias ? bt.data : NULL,
                      .y = ym.t.data,
                      .y_stride = ym.stride};
  if (a.m == 0 || a.n == 0) return KITE_OK;
  return kite_dispatch(ctx, id, a.dtype, &a);
}

kite_status kite_linear_gguf(kite_ctx *ctx, const DLTensor *x, const DLTensor *w,
                             kite_gguf_type type, const DLTensor *bias, DLTensor *y) {
  return linear_gguf_op(ctx, KITE_OP_LINEAR_GGUF, x, w, type, bias, y);
}

kite_status kite_linear_gguf_q8(kite_ctx *ctx, const DLTensor *x, const DLTensor *w,
                                kite_gguf_type type, const DLTensor *bias, DLTensor *y) {
  return linear_gguf_op(ctx, KITE_OP_LINEAR_GGUF_Q8, x, w, type, bias, y);
}

kite_status kite_dequant_gguf(kite_ctx *ctx, const DLTensor *w, kite_gguf_type type, DLTensor *y) {
  const char *op = "dequant_gguf";
  kite_mat wm, ym;
  int64_t bv, bb;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = kite_mat_check(ctx, op, "y", y, true, &ym)) != KITE_OK) return s;
  if ((s = kite_tensor_require_float(op, "y", &ym.t)) != KITE_OK) return s;
  if ((s = gguf_w_check(ctx, op, w, type, ym.cols, &bv, &bb, &wm)) != KITE_OK) return s;
  if ((s = kite_mat_require_shape(op, "y", &ym, wm.rows, ym.cols, "N", "K")) != KITE_OK) return s;
  const kite_tensor *in[] = {&wm.t};
  const char *names[] = {"w"};
  if ((s = kite_require_apart(op, "y", &ym.t, in, names, 1)) != KITE_OK) return s;
  kite_gguf_args a = {.op = KITE_OP_DEQUANT_GGUF,
                      .dtype = ym.t.dtype,
                      .type = type,
                      .bv = bv,
                      .bb = bb,
                      .n = wm.rows,
                      .k = ym.cols,
                      .w = wm.t.data,
                      .w_stride = wm.stride,
                      .y = ym.t.data,
                      .y_stride = ym.stride};
  if (a.n == 0 || a.k == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_DEQUANT_GGUF, a.dtype, &a);
}

kite_status kite_group_gemm_gguf(kite_ctx *ctx, const DLTensor *x, const DLTensor *w,
                                 kite_gguf_type type, const DLTensor *group_sizes,
                                 const DLTensor *bias, DLTensor *y) {
  const char *op = "group_gemm_gguf";
  kite_mat xm, ym;
  kite_tensor wt, gt, bt = {0};
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = kite_float_mat_check(ctx, op, "x", x, &xm)) != KITE_OK) return s;
  if (!known(type))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: type %d is not a GGUF block type kite runs",
                          op, (int)type);
  const int64_t bv = g_gguf_types[type].values, bb = g_gguf_types[type].bytes;
  const int64_t m = xm.rows, k = xm.cols;
  if (k % bv)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: type %s: K=%lld is not a multiple of %lld", op,
                          g_gguf_types[type].name, (long long)k, (long long)bv);
  /* w[G, N, K / V * B] uint8: each row's bytes contiguous */
  if ((s = kite_group_w_check(ctx, op, w, KITE_DTYPE_U8, k / bv * bb, "K/V blocks of B bytes",
                              g_gguf_types[type].name, group_sizes, &wt, &gt)) != KITE_OK)
    return s;
  const int64_t g = wt.shape[0], n = wt.shape[1];
  if (bias) {
    if ((s = kite_tensor_check(ctx, op, "bias", bias, &bt)) != KITE_OK) return s;
    if ((s = kite_tensor_require_ndim(op, "bias", &bt, 2)) != KITE_OK) return s;
    if ((s = kite_tensor_require_dtype(op, "bias", &bt, xm.t.dtype)) != KITE_OK) return s;
    if (bt.shape[0] != g || bt.shape[1] != n)
      return kite_set_error(
          KITE_ERR_INVALID_ARG, "%s: bias: shape [%lld, %lld], expected [G=%lld, N=%lld]", op,
          (long long)bt.shape[0], (long long)bt.shape[1], (long long)g, (long long)n);
    if ((s = kite_tensor_require_compact(op, "bias", &bt)) != KITE_OK) return s;
  }
  const kite_tensor *in[] = {&xm.t, &wt, &gt, bias ? &bt : NULL};
  const char *names[] = {"x", "w", "group_sizes", "bias"};
  if ((s = kite_out_mat_check(ctx, op, y, xm.t.dtype, m, n, &ym, in, names, 4)) != KITE_OK)
    return s;
  kite_group_gguf_args a = {.op = KITE_OP_GROUP_GEMM_GGUF,
                            .dtype = xm.t.dtype,
                            .type = type,
                            .bv = bv,
                            .bb = bb,
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
                            .bias = bias ? bt.data : NULL,
                            .y = ym.t.data,
                            .y_stride = ym.stride};
  /* group_sizes readable here: each >= 0, summing to M */
  if (kite_indices_on_host(ctx) && (s = kite_group_sizes_check(op, a.group_sizes, g, m)) != KITE_OK)
    return s;
  if (m == 0 || n == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_GROUP_GEMM_GGUF, a.dtype, &a);
}
