/* Front-ends of dynamic per-token quantization (int8, fp8 e4m3), dequantization, and the linear
 * layer on quantized activations and weights. */
#include "ops/matrix.h"

/* Products of two int8 values reach 128 * 128 = 2^14 in magnitude, so an int32 sum of K of them
 * stays exact while K <= (2^31 - 1) / 2^14. */
#define KITE_I8_MAX_K 131071

static kite_status require_qdtype(const char *op, const char *arg, const kite_tensor *t) {
  if (t->dtype == KITE_DTYPE_I8 || t->dtype == KITE_DTYPE_FP8_E4M3) return KITE_OK;
  return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: %s: dtype %s is not supported (i8, fp8_e4m3)",
                        op, arg, kite_dtype_name(t->dtype));
}

kite_status kite_quant(kite_ctx *ctx, const DLTensor *x, DLTensor *q, DLTensor *scales) {
  const char *op = "quant";
  kite_mat xm, qm;
  kite_tensor st;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = kite_float_mat_check(ctx, op, "x", x, &xm)) != KITE_OK) return s;
  if ((s = kite_mat_check(ctx, op, "q", q, true, &qm)) != KITE_OK) return s;
  if ((s = require_qdtype(op, "q", &qm.t)) != KITE_OK) return s;
  if ((s = kite_mat_require_shape(op, "q", &qm, xm.rows, xm.cols, "M", "K")) != KITE_OK) return s;
  if ((s = kite_vec_check(ctx, op, "scales", scales, false, KITE_DTYPE_F32, xm.rows, "M", &st)) !=
      KITE_OK)
    return s;
  if ((s = kite_tensor_require_disjoint(op, "q", &qm.t, &xm.t, "x")) != KITE_OK) return s;
  if ((s = kite_tensor_require_disjoint(op, "scales", &st, &xm.t, "x")) != KITE_OK) return s;
  if ((s = kite_tensor_require_disjoint(op, "scales", &st, &qm.t, "q")) != KITE_OK) return s;

  kite_quant_args a = {.op = KITE_OP_QUANT,
                       .dtype = xm.t.dtype,
                       .qdtype = qm.t.dtype,
                       .rows = xm.rows,
                       .cols = xm.cols,
                       .x = xm.t.data,
                       .x_stride = xm.stride,
                       .q = qm.t.data,
                       .q_stride = qm.stride,
                       .scales = st.data,
                       .y = NULL,
                       .y_stride = 0};
  if (a.rows == 0) return KITE_OK; /* K = 0 still writes the scales (0) */
  return kite_dispatch(ctx, KITE_OP_QUANT, a.dtype, &a);
}

kite_status kite_dequant(kite_ctx *ctx, const DLTensor *q, const DLTensor *scales, DLTensor *y) {
  const char *op = "dequant";
  kite_mat qm, ym;
  kite_tensor st;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = kite_mat_check(ctx, op, "q", q, false, &qm)) != KITE_OK) return s;
  if ((s = require_qdtype(op, "q", &qm.t)) != KITE_OK) return s;
  if ((s = kite_vec_check(ctx, op, "scales", scales, false, KITE_DTYPE_F32, qm.rows, "M", &st)) !=
      KITE_OK)
    return s;
  if ((s = kite_mat_check(ctx, op, "y", y, true, &ym)) != KITE_OK) return s;
  if ((s = kite_tensor_require_float(op, "y", &ym.t)) != KITE_OK) return s;
  if ((s = kite_mat_require_shape(op, "y", &ym, qm.rows, qm.cols, "M", "K")) != KITE_OK) return s;
  if ((s = kite_tensor_require_disjoint(op, "y", &ym.t, &qm.t, "q")) != KITE_OK) return s;
  if ((s = kite_tensor_require_disjoint(op, "y", &ym.t, &st, "scales")) != KITE_OK) return s;

  kite_quant_args a = {.op = KITE_OP_DEQUANT,
                       .dtype = ym.t.dtype,
                       .qdtype = qm.t.dtype,
                       .rows = qm.rows,
                       .cols = qm.cols,
                       .x = NULL,
                       .x_stride = 0,
                       .q = qm.t.data,
                       .q_stride = qm.stride,
                       .scales = st.data,
                       .y = ym.t.data,
                       .y_stride = ym.stride};
  if (a.rows == 0 || a.cols == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_DEQUANT, a.dtype, &a);
}

kite_status kite_linear_quant(kite_ctx *ctx, const DLTensor *xq, const DLTensor *x_scales,
                              const DLTensor *wq, const DLTensor *w_scales, const DLTensor *bias,
                              DLTensor *y) {
  const char *op = "linear_quant";
  kite_mat xm, wm, ym;
  kite_tensor xst, wst, bt;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = kite_mat_check(ctx, op, "xq", xq, false, &xm)) != KITE_OK) return s;
  if ((s = require_qdtype(op, "xq", &xm.t)) != KITE_OK) return s;
  if ((s = kite_typed_mat_check(ctx, op, "wq", wq, xm.t.dtype, &wm)) != KITE_OK) return s;
  const int64_t m = xm.rows, n = wm.rows, k = xm.cols;
  if (wm.cols != k)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "linear_quant: wq: shape [%lld, %lld], expected [N, K=%lld]",
                          (long long)wm.rows, (long long)wm.cols, (long long)k);
  if (xm.t.dtype == KITE_DTYPE_I8 && k > KITE_I8_MAX_K)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "linear_quant: K=%lld exceeds %d, where int32 accumulation of int8 "
                          "products could overflow",
                          (long long)k, KITE_I8_MAX_K);
  if ((s = kite_vec_check(ctx, op, "x_scales", x_scales, false, KITE_DTYPE_F32, m, "M", &xst)) !=
      KITE_OK)
    return s;
  if ((s = kite_vec_check(ctx, op, "w_scales", w_scales, false, KITE_DTYPE_F32, n, "N", &wst)) !=
      KITE_OK)
    return s;
  if ((s = kite_mat_check(ctx, op, "y", y, true, &ym)) != KITE_OK) return s;
  if ((s = kite_tensor_require_float(op, "y", &ym.t)) != KITE_OK) return s;
  if ((s = kite_mat_require_shape(op, "y", &ym, m, n, "M", "N")) != KITE_OK) return s;
  if ((s = kite_vec_check(ctx, op, "bias", bias, true, ym.t.dtype, n, "N", &bt)) != KITE_OK)
    return s;
  const kite_tensor *in[] = {&xm.t, &xst, &wm.t, &wst, &bt};
  const char *names[] = {"xq", "x_scales", "wq", "w_scales", "bias"};
  if ((s = kite_require_apart(op, "y", &ym.t, in, names, 5)) != KITE_OK) return s;

  kite_linear_quant_args a = {.op = KITE_OP_LINEAR_QUANT,
                              .dtype = ym.t.dtype,
                              .qdtype = xm.t.dtype,
                              .m = m,
                              .n = n,
                              .k = k,
                              .xq = xm.t.data,
                              .x_stride = xm.stride,
                              .x_scales = xst.data,
                              .wq = wm.t.data,
                              .w_stride = wm.stride,
                              .w_scales = wst.data,
                              .bias = bias ? bt.data : NULL,
                              .y = ym.t.data,
                              .y_stride = ym.stride};
  if (m == 0 || n == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_LINEAR_QUANT, a.dtype, &a);
}
