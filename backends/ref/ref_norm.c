/*
 * Norms over rows of length cols: rms_norm, layer_norm and the fused residual-add forms
 * add_rms_norm, add_layer_norm (kite_norm_args states the PRE/POST rule; kite.h, kite_norm_pos).
 *   rms:   y = s / sqrt(mean(s^2) + eps) * (offset + w)       (w NULL: factor 1, offset unused)
 *   layer: y = (s - mean) / sqrt(var + eps) * w + b           (var biased, 1/N; w 1, b 0 if NULL)
 * s is the row the norm sees. It is gathered into a double buffer before y is written, so y may
 * alias x.
 */
#include <stdint.h>
#include <stdlib.h>

#include "ref.h"

/* Fills s[cols] with the input of the norm for row r. PRE stores the rounded sum into residual
 * and reads it back, so the norm sees exactly the residual it leaves behind. */
static void gather_row(const kite_norm_args *a, bool add, int64_t r, double *s) {
  const kite_dtype t = a->dtype;
  for (int64_t i = 0; i < a->cols; i++) {
    s[i] = kite_load_f32(t, a->x, r * a->x_stride + i);
    if (!add) continue;
    const int64_t ri = r * a->residual_stride + i;
    s[i] += kite_load_f32(t, a->residual, ri);
    if (a->pos == KITE_NORM_PRE) {
      kite_store_f64(t, a->residual, ri, s[i]);
      s[i] = kite_load_f32(t, a->residual, ri);
    }
  }
}

/* y[r, i] = v rounded once; POST also leaves those very values in the residual. */
static void put(const kite_norm_args *a, bool add, int64_t r, int64_t i, double v) {
  kite_store_f64(a->dtype, a->y, r * a->y_stride + i, v);
  if (add && a->pos == KITE_NORM_POST)
    kite_store_f64(a->dtype, a->residual, r * a->residual_stride + i, v);
}

static void rms_row(const kite_norm_args *a, bool add, int64_t r, const double *s) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < a->cols; i++) sum_sq += s[i] * s[i];
  const double rstd = 1.0 / sqrt(sum_sq / (double)a->cols + (double)a->eps);
  for (int64_t i = 0; i < a->cols; i++) {
    double factor = a->w ? (double)a->offset + kite_load_f32(a->dtype, a->w, i) : 1.0;
    put(a, add, r, i, s[i] * rstd * factor);
  }
}

static void layer_norm_row(const kite_norm_args *a, bool add, int64_t r, const double *s) {
  const double n = (double)a->cols;
  double sum = 0.0, sum_dev_sq = 0.0;
  for (int64_t i = 0; i < a->cols; i++) sum += s[i];
  const double mean = sum / n;
  for (int64_t i = 0; i < a->cols; i++) sum_dev_sq += (s[i] - mean) * (s[i] - mean);
  const double rstd = 1.0 / sqrt(sum_dev_sq / n + (double)a->eps);
  for (int64_t i = 0; i < a->cols; i++) {
    double w = a->w ? kite_load_f32(a->dtype, a->w, i) : 1.0;
    double b = a->b ? kite_load_f32(a->dtype, a->b, i) : 0.0;
    put(a, add, r, i, (s[i] - mean) * rstd * w + b);
  }
}

kite_status ref_norm_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_norm_args *a = args;
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "norm: ref: NULL args");
  const char *name = ref_op_str(a->op);
  if (a->op != KITE_OP_RMS_NORM && a->op != KITE_OP_LAYER_NORM && a->op != KITE_OP_ADD_RMS_NORM &&
      a->op != KITE_OP_ADD_LAYER_NORM)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "norm: ref: op %s is not a norm", name);
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: ref: dtype %s is not supported", name,
                          ref_dtype_str(a->dtype));
  const bool rms = a->op == KITE_OP_RMS_NORM || a->op == KITE_OP_ADD_RMS_NORM;
  const bool add = a->op == KITE_OP_ADD_RMS_NORM || a->op == KITE_OP_ADD_LAYER_NORM;
  if (add && a->pos != KITE_NORM_PRE && a->pos != KITE_NORM_POST)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: ref: unknown norm position %d", name,
                          (int)a->pos);
  if (a->rows <= 0 || a->cols <= 0) return KITE_OK;
  if (add && !a->residual)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: ref: residual is NULL", name);

  if ((uint64_t)a->cols > SIZE_MAX / sizeof(double))
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: ref: a row of %lld columns is too long",
                          name, (long long)a->cols);
  double *s = malloc((size_t)a->cols * sizeof(double));
  if (!s)
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: ref: cannot allocate a row of %lld doubles",
                          name, (long long)a->cols);

  for (int64_t r = 0; r < a->rows; r++) {
    gather_row(a, add, r, s);
    if (rms)
      rms_row(a, add, r, s);
    else
      layer_norm_row(a, add, r, s);
  }
  free(s);
  return KITE_OK;
}

/* ---- backward -------------------------------------------------------------------------------
 * dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy (offset + w) (layer: w, and the mean
 * terms; rms: no mean(g)), + dres; dw = sum over rows of dy xhat, db = sum of dy, in row order. */

kite_status ref_norm_bwd_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_norm_bwd_args *a = args;
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "norm backward: ref: NULL args");
  const char *name = ref_op_str(a->op);
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: ref: dtype %s is not supported", name,
                          ref_dtype_str(a->dtype));
  const bool rms = a->op == KITE_OP_RMS_NORM_BACKWARD;
  const kite_dtype t = a->dtype;
  const int64_t n = a->cols;
  if (n <= 0) return KITE_OK;
  if ((uint64_t)n > SIZE_MAX / (4 * sizeof(double)))
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: ref: rows of %lld are too long", name,
                          (long long)n);
  /* x, dxhat of one row; the dw and db sums over rows */
  double *buf = calloc((size_t)n * 4, sizeof(double));
  if (!buf) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: ref: out of memory", name);
  double *x = buf, *g = buf + n, *sw = buf + 2 * n, *sb = buf + 3 * n;
  for (int64_t r = 0; r < a->rows; r++) {
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < n; i++) x[i] = kite_load_f32(t, a->x, r * a->x_stride + i);
    if (!rms) {
      for (int64_t i = 0; i < n; i++) mean += x[i];
      mean /= (double)n;
    }
    for (int64_t i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    const double rstd = 1.0 / sqrt(var / (double)n + (double)a->eps);
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t i = 0; i < n; i++) {
      const double dy = kite_load_f32(t, a->dy, r * a->dy_stride + i);
      const double xhat = (x[i] - mean) * rstd;
      double wf = 1.0;
      if (a->w) wf = (rms ? (double)a->offset : 0.0) + kite_load_f32(t, a->w, i);
      g[i] = dy * wf;
      sum_g += g[i];
      sum_gx += g[i] * xhat;
      sw[i] += dy * xhat;
      sb[i] += dy;
    }
    const double mg = rms ? 0.0 : sum_g / (double)n, mgx = sum_gx / (double)n;
    /* read every input of the row before writing dx: dx may be dy or dres */
    for (int64_t i = 0; i < n; i++) {
      const double xhat = (x[i] - mean) * rstd;
      double d = rstd * (g[i] - mg - xhat * mgx);
      if (a->dres) d += kite_load_f32(t, a->dres, r * a->dres_stride + i);
      x[i] = d;
    }
    for (int64_t i = 0; i < n; i++) kite_store_f32(t, a->dx, r * a->dx_stride + i, (float)x[i]);
  }
  for (int64_t i = 0; i < n; i++) {
    if (a->dw) kite_store_f32(t, a->dw, i, (float)sw[i]);
    if (a->db) kite_store_f32(t, a->db, i, (float)sb[i]);
  }
  free(buf);
  return KITE_OK;
}
