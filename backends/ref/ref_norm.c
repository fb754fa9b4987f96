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
      kite_store_f32(t, a->residual, ri, (float)s[i]);
      s[i] = kite_load_f32(t, a->residual, ri);
    }
  }
}

/* y[r, i] = v rounded once; POST also leaves those very values in the residual. */
static void put(const kite_norm_args *a, bool add, int64_t r, int64_t i, double v) {
  const float f = (float)v;
  kite_store_f32(a->dtype, a->y, r * a->y_stride + i, f);
  if (add && a->pos == KITE_NORM_POST)
    kite_store_f32(a->dtype, a->residual, r * a->residual_stride + i, f);
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
