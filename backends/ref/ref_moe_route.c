/*
 * The MoE router of today's models and the load-balancing loss, in float64.
 *
 * moe_route: the scores in float64, the choice keys c = s + bias rounded to f32 (kite.h: the keys
 * of every backend are f32, so equal keys tie alike everywhere), group keys the f32 sum of a
 * group's two largest keys; without bias and groups the choice is made on the logits themselves,
 * which order the experts as the scores do. The choice: repeated arg-max, strict >, so the lower
 * id keeps a tie.
 *
 * moe_aux_loss: counts c_e and probability sums P_e over the rows in order, in float64; the
 * backward recomputes both, then dz = g m_t p (c - c.p) per row.
 */
#include <stdlib.h>

#include "ref.h"

/* f32 NaN counts as -inf in a choice. */
static float key_of(double v) {
  const float f = (float)v;
  return isnan(f) ? -INFINITY : f;
}

/* The index of the largest of v[0..n) not taken and allowed (ties: lower index), or -1. */
static int64_t arg_best(const float *v, const bool *off, int64_t n) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; i++)
    if (!off[i] && (best < 0 || v[i] > v[best])) best = i;
  return best;
}

kite_status ref_moe_route_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_route_args *a = args;
  if (!a || a->op != KITE_OP_MOE_ROUTE)
    return kite_set_error(KITE_ERR_INVALID_ARG, "moe_route: ref: bad args");
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "moe_route: ref: dtype %s is not supported",
                          ref_dtype_str(a->dtype));
  const kite_route_opts *o = &a->opts;
  const int64_t E = a->experts, K = o->k, G = o->n_group, gs = E / G;
  double *s = malloc((size_t)E * sizeof *s);
  float *key = malloc((size_t)E * sizeof *key), *gkey = malloc((size_t)G * sizeof *gkey);
  bool *off = malloc((size_t)E), *goff = malloc((size_t)G);
  double *wv = malloc((size_t)K * sizeof *wv);
  if (!s || !key || !gkey || !off || !goff || !wv) {
    free(s), free(key), free(gkey), free(off), free(goff), free(wv);
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "moe_route: ref: no memory");
  }
  const bool on_logits = !a->bias && G == 1;
  for (int64_t r = 0; r < a->tokens; r++) {
    const int64_t l0 = r * a->logits_stride;
    double m = -INFINITY, sum = 0.0;
    for (int64_t e = 0; e < E; e++) {
      s[e] = kite_load_f32(a->dtype, a->logits, l0 + e);
      if (s[e] > m || isnan(s[e])) m = s[e];
    }
    if (o->score == KITE_ROUTE_SOFTMAX) {
      for (int64_t e = 0; e < E; e++) sum += exp(s[e] - m);
      for (int64_t e = 0; e < E; e++) key[e] = key_of(s[e]), s[e] = exp(s[e] - m) / sum;
    } else if (o->score == KITE_ROUTE_SIGMOID) {
      for (int64_t e = 0; e < E; e++) key[e] = key_of(s[e]), s[e] = ref_sigmoid(s[e]);
    } else {
      for (int64_t e = 0; e < E; e++) s[e] += a->bias ? a->bias[e] : 0.0, key[e] = key_of(s[e]);
    }
    if (!on_logits && o->score != KITE_ROUTE_SOFTMAX_TOPK)
      for (int64_t e = 0; e < E; e++)
        key[e] = key_of((double)(float)s[e] + (a->bias ? a->bias[e] : 0.0f));
    /* groups: keep the topk_group with the largest top-2 sums */
    for (int64_t e = 0; e < E; e++) off[e] = false;
    if (G > 1) {
      for (int64_t g = 0; g < G; g++) {
        const int64_t b1 = arg_best(key + g * gs, off + g * gs, gs);
        off[g * gs + b1] = true;
        const int64_t b2 = gs > 1 ? arg_best(key + g * gs, off + g * gs, gs) : -1;
        off[g * gs + b1] = false;
        gkey[g] = key_of((double)key[g * gs + b1] + (b2 >= 0 ? (double)key[g * gs + b2] : 0.0));
        goff[g] = false;
      }
      for (int64_t j = 0; j < o->topk_group; j++) goff[arg_best(gkey, goff, G)] = true;
      for (int64_t e = 0; e < E; e++) off[e] = !goff[e / gs]; /* goff now marks the kept */
    }
    float *w = a->weights + r * a->weights_stride;
    int32_t *id = a->ids + r * a->ids_stride;
    double wsum = 0.0, zmax = -INFINITY;
    for (int64_t j = 0; j < K; j++) {
      const int64_t b = arg_best(key, off, E);
      off[b] = true;
      id[j] = (int32_t)b;
      wv[j] = s[b];
      if (wv[j] > zmax) zmax = wv[j];
    }
    if (o->score == KITE_ROUTE_SOFTMAX_TOPK) {
      double zs = 0.0;
      for (int64_t j = 0; j < K; j++) zs += exp(wv[j] - zmax);
      for (int64_t j = 0; j < K; j++) wv[j] = exp(wv[j] - zmax) / zs;
    }
    for (int64_t j = 0; j < K; j++) wsum += wv[j];
    for (int64_t j = 0; j < K; j++) {
      double v = o->renormalize ? wv[j] / (wsum + 1e-20) : wv[j];
      w[j] = (float)(v * o->scaling);
    }
  }
  free(s), free(key), free(gkey), free(off), free(goff), free(wv);
  return KITE_OK;
}

/* Softmax of row r into p[E] (float64). */
static void row_softmax(const kite_aux_loss_args *a, int64_t r, double *p) {
  const int64_t E = a->experts, l0 = r * a->logits_stride;
  double m = -INFINITY, sum = 0.0;
  for (int64_t e = 0; e < E; e++) {
    p[e] = kite_load_f32(a->dtype, a->logits, l0 + e);
    if (p[e] > m || isnan(p[e])) m = p[e];
  }
  for (int64_t e = 0; e < E; e++) sum += p[e] = exp(p[e] - m);
  for (int64_t e = 0; e < E; e++) p[e] /= sum;
}

kite_status ref_moe_aux_loss_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_aux_loss_args *a = args;
  if (!a || (a->op != KITE_OP_MOE_AUX_LOSS && a->op != KITE_OP_MOE_AUX_LOSS_BACKWARD))
    return kite_set_error(KITE_ERR_INVALID_ARG, "moe_aux_loss: ref: bad args");
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "moe_aux_loss: ref: dtype %s is not supported",
                          ref_dtype_str(a->dtype));
  const int64_t E = a->experts, T = a->tokens;
  const size_t n = (size_t)(E > 0 ? E : 1);
  double *c = calloc(n, sizeof *c), *P = calloc(n, sizeof *P), *p = malloc(n * sizeof *p);
  if (!c || !P || !p) {
    free(c), free(P), free(p);
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "moe_aux_loss: ref: no memory");
  }
  double M = 0.0;
  for (int64_t t = 0; t < T; t++) {
    const double mt = a->mask ? a->mask[t] : 1.0;
    M += mt;
    for (int64_t j = 0; j < a->k; j++) {
      const int32_t e = a->ids[t * a->ids_stride + j];
      if (e >= 0 && e < E) c[e] += mt;
    }
    row_softmax(a, t, p);
    for (int64_t e = 0; e < E; e++) P[e] += mt * p[e];
  }
  if (a->op == KITE_OP_MOE_AUX_LOSS) {
    double l = 0.0;
    for (int64_t e = 0; e < E; e++) l += c[e] * P[e];
    a->loss[0] = M != 0.0 ? (float)(l * (double)E / (M * M)) : 0.0f;
  } else {
    const double g = M != 0.0 ? a->dloss[0] * (double)E / (M * M) : 0.0;
    for (int64_t t = 0; t < T; t++) {
      const double mt = a->mask ? a->mask[t] : 1.0;
      row_softmax(a, t, p);
      double cp = 0.0;
      for (int64_t e = 0; e < E; e++) cp += c[e] * p[e];
      for (int64_t e = 0; e < E; e++)
        kite_store_f64(a->dtype, a->dlogits, t * a->dlogits_stride + e,
                       g * mt * p[e] * (c[e] - cp));
    }
  }
  free(c), free(P), free(p);
  return KITE_OK;
}
