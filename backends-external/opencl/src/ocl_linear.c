/*
 * linear through CLBlast's Sgemm, no GEMM of our own: y = x w^T (row-major, w transposed), then
 * the bias added in a second launch.
 * f32 runs Sgemm on the tensors in place. f16 and bf16 are converted to f32 in the ctx's
 * workspace first and the f32 product is rounded once into y: CLBlast has no bf16 GEMM, and its
 * Hgemm accumulates in half precision, which kite.h's "accumulation in f32 or better" rules out.
 */
#include <clblast_c.h>

#include "ocl_internal.h"

static kite_status sgemm(kite_ctx *ctx, const char *op, int64_t m, int64_t n, int64_t k,
                         const void *x, int64_t xs, const void *w, int64_t ws, void *y,
                         int64_t ys) {
  ocl_buf xb, wb, yb;
  kite_status s;
  if ((s = ocl_resolve(op, "x", x, &xb)) != KITE_OK ||
      (s = ocl_resolve(op, "w", w, &wb)) != KITE_OK ||
      (s = ocl_resolve(op, "y", y, &yb)) != KITE_OK)
    return s;
  ocl_dev *d;
  if ((s = ocl_device_get(kite_ctx_device(ctx).device_id, op, &d)) != KITE_OK) return s;
  cl_command_queue q = ocl_queue(ctx, d);
  /* CLBlast's offsets are in elements: f32 tensors are 4-byte aligned in their buffers */
  CLBlastStatusCode e =
      CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeYes, (size_t)m,
                   (size_t)n, (size_t)k, 1.0f, xb.mem, xb.off / 4, (size_t)xs, wb.mem, wb.off / 4,
                   (size_t)ws, 0.0f, yb.mem, yb.off / 4, (size_t)ys, &q, NULL);
  if (e != CLBlastSuccess)
    return kite_set_error(e == CLBlastOpenCLOutOfResources ? KITE_ERR_OUT_OF_MEMORY
                                                           : KITE_ERR_DEVICE,
                          "%s: opencl: CLBlastSgemm failed with status %d", op, (int)e);
  return KITE_OK;
}

/* dst (f32 compact [rows, cols], a workspace address) = src of dtype dt with row stride ss */
static kite_status to_f32(kite_ctx *ctx, kite_op op, kite_dtype dt, int64_t rows, int64_t cols,
                          const void *src, int64_t ss, void *dst) {
  ocl_launch L;
  kite_status s = ocl_begin(&L, ctx, op, OCL_K_TO_F32);
  if (s != KITE_OK) return s;
  ocl_arg_i32(&L, (int)dt);
  ocl_arg_i64(&L, rows);
  ocl_arg_i64(&L, cols);
  ocl_arg_buf(&L, "x", src);
  ocl_arg_i64(&L, ss);
  ocl_arg_buf(&L, "workspace", dst);
  const size_t global[2] = {(size_t)cols, (size_t)rows}, local[2] = {64, 1};
  return ocl_end(&L, 2, global, local);
}

OCL_RUN(ocl_linear_run) {
  (void)k;
  const kite_linear_args *a = args;
  const char *op = ocl_op_str(a->op);
  if (a->m == 0 || a->n == 0) return KITE_OK;
  if (a->k == 0) /* an empty product: y = bias (or 0) */
    return ocl_bias_store(ctx, a->op, a->dtype, a->m, a->n, NULL, a->bias, a->y, a->y_stride, 0);
  kite_status s;
  if (a->dtype == KITE_DTYPE_F32) {
    s = sgemm(ctx, op, a->m, a->n, a->k, a->x, a->x_stride, a->w, a->w_stride, a->y, a->y_stride);
    if (s == KITE_OK && a->bias)
      s = ocl_bias_store(ctx, a->op, a->dtype, a->m, a->n, NULL, a->bias, a->y, a->y_stride, 1);
    return s;
  }
  /* f16 / bf16: x, w and the product as f32 in the workspace, 256-byte aligned pieces */
  const size_t xe = ((size_t)(a->m * a->k) * 4 + 255) / 256 * 256;
  const size_t we = ((size_t)(a->n * a->k) * 4 + 255) / 256 * 256;
  const size_t ye = (size_t)(a->m * a->n) * 4;
  void *ws;
  if ((s = kite_ctx_workspace(ctx, xe + we + ye, &ws)) != KITE_OK) return s;
  char *x32 = ws, *w32 = x32 + xe, *y32 = w32 + we;
  if ((s = to_f32(ctx, a->op, a->dtype, a->m, a->k, a->x, a->x_stride, x32)) != KITE_OK ||
      (s = to_f32(ctx, a->op, a->dtype, a->n, a->k, a->w, a->w_stride, w32)) != KITE_OK ||
      (s = sgemm(ctx, op, a->m, a->n, a->k, x32, a->k, w32, a->k, y32, a->n)) != KITE_OK)
    return s;
  return ocl_bias_store(ctx, a->op, a->dtype, a->m, a->n, y32, a->bias, a->y, a->y_stride, 0);
}
