/*
 * Validation shared by the GEMM, MoE and quantization front-ends: rank-2 operands viewed as
 * [rows, cols] with unit-stride cols and one row stride, and compact per-row/per-channel vectors.
 */
#ifndef KITE_OPS_MATRIX_H
#define KITE_OPS_MATRIX_H

#include "core/internal.h"

/* A checked rank-2 tensor [rows, cols]: cols unit-stride, rows `stride` elements apart. */
typedef struct kite_mat {
  kite_tensor t;
  int64_t rows, cols, stride;
} kite_mat;

/* Checks d as a rank-2 matrix; `out` set when true (written by the kernel: distinct elements). */
static inline kite_status kite_mat_check(const kite_ctx *ctx, const char *op, const char *arg,
                                         const DLTensor *d, bool out, kite_mat *m) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, arg, d, &m->t)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, &m->t, 2)) != KITE_OK) return s;
  if ((s = kite_tensor_rows(op, arg, &m->t, &m->rows, &m->cols, &m->stride)) != KITE_OK) return s;
  if (out && (s = kite_tensor_require_no_overlap(op, arg, &m->t)) != KITE_OK) return s;
  return KITE_OK;
}

/* kite_mat_check of an input that must be of a float dtype (f32, f16, bf16). */
static inline kite_status kite_float_mat_check(const kite_ctx *ctx, const char *op, const char *arg,
                                               const DLTensor *d, kite_mat *m) {
  kite_status s = kite_mat_check(ctx, op, arg, d, false, m);
  return s != KITE_OK ? s : kite_tensor_require_float(op, arg, &m->t);
}

/* kite_mat_check of an input that must be of dtype `want`. */
static inline kite_status kite_typed_mat_check(const kite_ctx *ctx, const char *op, const char *arg,
                                               const DLTensor *d, kite_dtype want, kite_mat *m) {
  kite_status s = kite_mat_check(ctx, op, arg, d, false, m);
  return s != KITE_OK ? s : kite_tensor_require_dtype(op, arg, &m->t, want);
}

/* Requires m to be [rows, cols]; the names say where the expected sizes come from. */
static inline kite_status kite_mat_require_shape(const char *op, const char *arg, const kite_mat *m,
                                                 int64_t rows, int64_t cols, const char *rows_name,
                                                 const char *cols_name) {
  if (m->rows == rows && m->cols == cols) return KITE_OK;
  return kite_set_error(KITE_ERR_INVALID_ARG,
                        "%s: %s: shape [%lld, %lld], expected [%s=%lld, %s=%lld]", op, arg,
                        (long long)m->rows, (long long)m->cols, rows_name, (long long)rows,
                        cols_name, (long long)cols);
}

/* A compact vector [n] of dtype `want`; *data NULL when d is NULL and optional. */
static inline kite_status kite_vec_check(const kite_ctx *ctx, const char *op, const char *arg,
                                         const DLTensor *d, bool optional, kite_dtype want,
                                         int64_t n, const char *n_name, kite_tensor *t) {
  kite_status s;
  if (!d && optional) {
    *t = (kite_tensor){0};
    return KITE_OK;
  }
  if ((s = kite_tensor_check(ctx, op, arg, d, t)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, t, 1)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, arg, t, want)) != KITE_OK) return s;
  if (t->shape[0] != n)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: length %lld, expected %s=%lld", op, arg,
                          (long long)t->shape[0], n_name, (long long)n);
  return kite_tensor_require_compact(op, arg, t);
}

/* A router's outputs: weights[T, k] f32 and ids[T, k] int32, written, apart from each other. */
static inline kite_status kite_route_out_check(const kite_ctx *ctx, const char *op,
                                               const DLTensor *weights, const DLTensor *ids,
                                               int64_t t, int64_t k, kite_mat *wm, kite_mat *im) {
  kite_status s;
  if ((s = kite_mat_check(ctx, op, "weights", weights, true, wm)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "weights", &wm->t, KITE_DTYPE_F32)) != KITE_OK) return s;
  if ((s = kite_mat_require_shape(op, "weights", wm, t, k, "T", "k")) != KITE_OK) return s;
  if ((s = kite_mat_check(ctx, op, "ids", ids, true, im)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "ids", &im->t, KITE_DTYPE_I32)) != KITE_OK) return s;
  if ((s = kite_mat_require_shape(op, "ids", im, t, k, "T", "k")) != KITE_OK) return s;
  return kite_tensor_require_disjoint(op, "ids", &im->t, &wm->t, "weights");
}

/* Host-readable group sizes of a grouped GEMM (kite_group_gemm's rule): each >= 0, summing to m
 * rows. */
static inline kite_status kite_group_sizes_check(const char *op, const int32_t *sizes,
                                                 int64_t groups, int64_t m) {
  int64_t sum = 0;
  for (int64_t i = 0; i < groups; i++) {
    if (sizes[i] < 0)
      return kite_set_error(KITE_ERR_INVALID_ARG, "%s: group_sizes[%lld] = %d is negative", op,
                            (long long)i, (int)sizes[i]);
    sum += sizes[i];
  }
  if (sum != m)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: group_sizes sum to %lld, x has M = %lld rows",
                          op, (long long)sum, (long long)m);
  return KITE_OK;
}

/* A grouped GEMM's weights and group sizes: w [G, N, row] of dtype dt (its last dim unit-stride,
 * group and row strides free) -> *wt, and group_sizes int32 [G] (compact) -> *gt. row_what names
 * the row's length in the error of another one ("K"), note (or NULL) follows it. */
static inline kite_status kite_group_w_check(const kite_ctx *ctx, const char *op, const DLTensor *w,
                                             kite_dtype dt, int64_t row, const char *row_what,
                                             const char *note, const DLTensor *group_sizes,
                                             kite_tensor *wt, kite_tensor *gt) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, "w", w, wt)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, "w", wt, 3)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "w", wt, dt)) != KITE_OK) return s;
  if (wt->shape[2] != row)
    return kite_set_error(
        KITE_ERR_INVALID_ARG, "%s: w: shape [%lld, %lld, %lld], expected [G, N, %s=%lld]%s%s%s", op,
        (long long)wt->shape[0], (long long)wt->shape[1], (long long)wt->shape[2], row_what,
        (long long)row, note ? " (" : "", note ? note : "", note ? ")" : "");
  if (wt->shape[2] > 1 && wt->strides[2] != 1)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: w: last dim must be unit-stride (stride %lld)",
                          op, (long long)wt->strides[2]);
  return kite_vec_check(ctx, op, "group_sizes", group_sizes, false, KITE_DTYPE_I32, wt->shape[0],
                        "G", gt);
}

/* An output must not share bytes with any input it is computed from (absent inputs skipped). */
static inline kite_status kite_require_apart(const char *op, const char *arg,
                                             const kite_tensor *out, const kite_tensor *const *in,
                                             const char *const *names, int n) {
  kite_status s;
  for (int i = 0; i < n; i++)
    if (in[i] && (s = kite_tensor_require_disjoint(op, arg, out, in[i], names[i])) != KITE_OK)
      return s;
  return KITE_OK;
}

/* An output y[M, N] of dtype dt (written, row-strided allowed), apart from the n inputs in[]. */
static inline kite_status kite_out_mat_check(const kite_ctx *ctx, const char *op, DLTensor *y,
                                             kite_dtype dt, int64_t m, int64_t n, kite_mat *ym,
                                             const kite_tensor *const *in, const char *const *names,
                                             int count) {
  kite_status s;
  if ((s = kite_mat_check(ctx, op, "y", y, true, ym)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "y", &ym->t, dt)) != KITE_OK) return s;
  if ((s = kite_mat_require_shape(op, "y", ym, m, n, "M", "N")) != KITE_OK) return s;
  return kite_require_apart(op, "y", &ym->t, in, names, count);
}

/* The output side of a linear layer over x[M, K] and its weights w: y[M, N] of x's dtype, an
 * optional compact bias[N] of that dtype, and y apart from x, w and bias. */
static inline kite_status kite_linear_out_check(const kite_ctx *ctx, const char *op,
                                                const kite_mat *xm, const kite_mat *wm,
                                                const DLTensor *bias, DLTensor *y, int64_t n,
                                                kite_tensor *bt, kite_mat *ym) {
  kite_status s;
  if ((s = kite_vec_check(ctx, op, "bias", bias, true, xm->t.dtype, n, "N", bt)) != KITE_OK)
    return s;
  if ((s = kite_mat_check(ctx, op, "y", y, true, ym)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "y", &ym->t, xm->t.dtype)) != KITE_OK) return s;
  if ((s = kite_mat_require_shape(op, "y", ym, xm->rows, n, "M", "N")) != KITE_OK) return s;
  const kite_tensor *in[] = {&xm->t, &wm->t, bt};
  const char *names[] = {"x", "w", "bias"};
  return kite_require_apart(op, "y", &ym->t, in, names, 3);
}

#endif /* KITE_OPS_MATRIX_H */
