/*
 * The losses in float64: cross-entropy forward and backward, fused linear cross-entropy. Formulas
 * are in kite.h ("Training"). Every reduction over rows runs in row order in double, so the
 * results are deterministic; the harness checks the gradients against finite differences of
 * ref's forward.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"

/* Checks every target before anything is written: ignore_index or in [0, vocab). */
static kite_status check_targets(const char *name, const int32_t *tg, int64_t rows, int64_t vocab,
                                 int32_t ignore, int64_t *valid) {
  *valid = 0;
  for (int64_t i = 0; i < rows; i++) {
    if (tg[i] == ignore) continue;
    if (tg[i] < 0 || tg[i] >= vocab)
      return kite_set_error(KITE_ERR_INVALID_ARG,
                            "%s: targets[%lld] = %d is outside [0, V = %lld) and is not "
                            "ignore_index %d",
                            name, (long long)i, (int)tg[i], (long long)vocab, (int)ignore);
    ++*valid;
  }
  return KITE_OK;
}

static double cap(double x, double c) {
  return c > 0.0 ? c * tanh(x / c) : x;
}

/* One row's loss and lse from its z (capped logits) in double. */
static double row_loss(const double *z, int64_t vocab, int32_t target, const kite_ce_opts *o,
                       double *lse_out) {
  double m = -INFINITY, sum = 0.0, sum_z = 0.0;
  for (int64_t j = 0; j < vocab; j++) m = z[j] > m ? z[j] : m;
  for (int64_t j = 0; j < vocab; j++) sum += exp(z[j] - m), sum_z += z[j];
  const double lse = m + log(sum), ls = o->label_smoothing;
  *lse_out = lse;
  /* the smoothing term only where it is on: 0 * sum_z would be NaN for a -inf logit */
  const double smooth = ls > 0.0 ? ls / (double)vocab * sum_z : 0.0;
  return lse - (1.0 - ls) * z[target] - smooth + (double)o->z_loss * lse * lse;
}

/* dloss/dx_j of one row, scaled by g, into d (z holds the row's z). */
static void row_grad(const double *z, const double *x, int64_t vocab, int32_t target, double lse,
                     double g, const kite_ce_opts *o, double *d) {
  const double ls = o->label_smoothing, zf = 1.0 + 2.0 * (double)o->z_loss * lse, c = o->softcap;
  for (int64_t j = 0; j < vocab; j++) {
    double dz = exp(z[j] - lse) * zf - ls / (double)vocab - (j == target ? 1.0 - ls : 0.0);
    if (c > 0.0) {
      const double th = tanh(x[j] / c);
      dz *= 1.0 - th * th;
    }
    d[j] = g * dz;
  }
}

/* The factor of row i's gradient from dloss (reduction none: per row; mean: over valid rows);
 * dloss NULL: 1 (cross_entropy_with_grad). */
static double grad_scale(const kite_ce_opts *o, const float *dloss, int64_t i, int64_t valid) {
  const double g = !dloss ? 1.0 : o->reduction == KITE_REDUCTION_NONE ? dloss[i] : dloss[0];
  if (o->reduction != KITE_REDUCTION_MEAN) return g;
  return valid > 0 ? g / (double)valid : 0.0;
}

kite_status ref_ce_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_ce_args *a = args;
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "cross_entropy: ref: NULL args");
  const char *name = ref_op_str(a->op);
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: ref: dtype %s is not supported", name,
                          ref_dtype_str(a->dtype));
  const kite_dtype t = a->dtype;
  const kite_ce_opts *o = &a->opts;
  const bool bwd = a->op == KITE_OP_CROSS_ENTROPY_BACKWARD;
  const bool with_grad = a->op == KITE_OP_CROSS_ENTROPY_WITH_GRAD;
  int64_t valid;
  kite_status s = check_targets(name, a->targets, a->rows, a->vocab, o->ignore_index, &valid);
  if (s != KITE_OK) return s;
  double *z = malloc(((size_t)a->vocab * 3 + 1) * sizeof(double));
  if (!z) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: ref: out of memory", name);
  double *x = z + a->vocab, *d = x + a->vocab, total = 0.0;
  for (int64_t i = 0; i < a->rows; i++) {
    for (int64_t j = 0; j < a->vocab; j++) {
      x[j] = kite_load_f32(t, a->logits, i * a->logits_stride + j);
      z[j] = cap(x[j], o->softcap);
    }
    const int32_t tg = a->targets[i];
    const bool ignored = tg == o->ignore_index;
    if (bwd) {
      if (ignored)
        memset(d, 0, (size_t)a->vocab * sizeof(double));
      else
        row_grad(z, x, a->vocab, tg, a->lse[i], grad_scale(o, a->dloss, i, valid), o, d);
      for (int64_t j = 0; j < a->vocab; j++)
        kite_store_f32(t, a->dlogits, i * a->dlogits_stride + j, (float)d[j]);
      continue;
    }
    double lse;
    double loss = row_loss(z, a->vocab, ignored ? 0 : tg, o, &lse);
    if (ignored) loss = 0.0;
    if (a->lse) a->lse[i] = (float)lse;
    if (o->reduction == KITE_REDUCTION_NONE)
      a->loss[i] = (float)loss;
    else
      total += loss;
    if (!with_grad) continue;
    if (ignored)
      memset(d, 0, (size_t)a->vocab * sizeof(double));
    else
      row_grad(z, x, a->vocab, tg, lse, grad_scale(o, NULL, i, valid), o, d);
    for (int64_t j = 0; j < a->vocab; j++)
      kite_store_f32(t, a->dlogits, i * a->dlogits_stride + j, (float)d[j]);
  }
  if (!bwd && o->reduction != KITE_REDUCTION_NONE)
    a->loss[0] = (float)(o->reduction == KITE_REDUCTION_SUM ? total
                         : valid > 0                        ? total / (double)valid
                                                            : 0.0);
  free(z);
  return KITE_OK;
}

/* Fused linear cross-entropy.
 * Row by row: the logits of a row in double (never rounded), its lse and loss; then the gradient
 * of each logit, which adds into dh (per row) and into double accumulators of dw and db. */
/* v rounded once to dtype t, as a tensor of that dtype would hold it. */
static double round_to(kite_dtype t, double v) {
  uint32_t cell = 0;
  kite_store_f64(t, &cell, 0, v);
  return kite_load_f32(t, &cell, 0);
}

/* The definition in kite.h: a separate linear (logits rounded to the dtype once), then
 * cross_entropy and its backward (dlogits rounded to the dtype), then the two products of
 * linear's backward from those dlogits, all in double. */
kite_status ref_flce_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_flce_args *a = args;
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "fused_linear_cross_entropy: ref: NULL args");
  const char *name = "fused_linear_cross_entropy";
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: ref: dtype %s is not supported", name,
                          ref_dtype_str(a->dtype));
  const kite_dtype t = a->dtype;
  const kite_ce_opts *o = &a->opts;
  const int64_t N = a->rows, H = a->hidden, V = a->vocab;
  int64_t valid;
  kite_status s = check_targets(name, a->targets, N, V, o->ignore_index, &valid);
  if (s != KITE_OK) return s;
  const size_t need = (size_t)V * 3 + (size_t)H * 2 + (a->dw ? (size_t)V * (size_t)H : 0) + 1;
  double *buf = calloc(need, sizeof(double));
  if (!buf) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: ref: out of memory", name);
  double *z = buf, *x = z + V, *d = x + V, *hrow = d + V, *dhrow = hrow + H, *dw = dhrow + H;
  double *db = NULL, total = 0.0;
  if (a->db && !(db = calloc((size_t)V + 1, sizeof(double)))) {
    free(buf);
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: ref: out of memory", name);
  }
  for (int64_t i = 0; i < N; i++) {
    for (int64_t c = 0; c < H; c++) hrow[c] = kite_load_f32(t, a->h, i * a->h_stride + c);
    for (int64_t j = 0; j < V; j++) {
      double acc = a->bias ? kite_load_f32(t, a->bias, j) : 0.0;
      for (int64_t c = 0; c < H; c++) acc += hrow[c] * kite_load_f32(t, a->w, j * a->w_stride + c);
      x[j] = round_to(t, acc);
      z[j] = cap(x[j], o->softcap);
    }
    const int32_t tg = a->targets[i];
    const bool ignored = tg == o->ignore_index;
    double lse, loss = row_loss(z, V, ignored ? 0 : tg, o, &lse);
    if (ignored) loss = 0.0;
    if (o->reduction == KITE_REDUCTION_NONE)
      a->loss[i] = (float)loss;
    else
      total += loss;
    /* the gradient of sum(loss), or of the mean */
    const double g = ignored                               ? 0.0
                     : o->reduction != KITE_REDUCTION_MEAN ? 1.0
                                                           : 1.0 / (double)valid;
    if (g != 0.0)
      row_grad(z, x, V, tg, lse, g, o, d);
    else
      memset(d, 0, (size_t)V * sizeof(double));
    for (int64_t j = 0; j < V; j++) d[j] = round_to(t, d[j]);
    for (int64_t c = 0; c < H; c++) dhrow[c] = 0.0;
    for (int64_t j = 0; j < V; j++) {
      if (db) db[j] += d[j];
      for (int64_t c = 0; c < H; c++) {
        dhrow[c] += d[j] * kite_load_f32(t, a->w, j * a->w_stride + c);
        if (a->dw) dw[j * H + c] += d[j] * hrow[c];
      }
    }
    if (a->dh)
      for (int64_t c = 0; c < H; c++)
        kite_store_f32(t, a->dh, i * a->dh_stride + c, (float)dhrow[c]);
  }
  if (o->reduction != KITE_REDUCTION_NONE)
    a->loss[0] = (float)(o->reduction == KITE_REDUCTION_SUM ? total
                         : valid > 0                        ? total / (double)valid
                                                            : 0.0);
  for (int64_t j = 0; j < V; j++) {
    if (a->dw)
      for (int64_t c = 0; c < H; c++)
        kite_store_f32(t, a->dw, j * a->dw_stride + c, (float)dw[j * H + c]);
    if (db) kite_store_f32(t, a->db, j, (float)db[j]);
  }
  free(db);
  free(buf);
  return KITE_OK;
}
