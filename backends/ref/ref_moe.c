/*
 * Mixture of experts in float64.
 *
 * topk_gating: the k largest logits of each row (ties: lower expert id first) are the k largest
 * softmax probabilities, since softmax is monotonic; choosing on the logits themselves keeps
 * every backend's choice identical however its exp rounds. The weights are those probabilities,
 * renormalized over the k on request.
 *
 * fused_moe (and fused_moe_ex): per token, for each chosen expert e with weight p:
 *   [gate; up] = w13[e] x + b13[e], a = act(gate, up) rounded to the dtype,
 *   y += p * (w2[e] a + b2[e]).
 * Transposed weights (w13 [E, H, 2I], w2 [E, I, H]) are read through element strides: row n,
 * column c of the product's matrix at n * sn + c * sc.
 */
#include <stdlib.h>

#include "ref.h"

/* v rounded to dtype t and read back. */
static float round_to(kite_dtype t, double v) {
  union {
    float f;
    uint16_t h;
  } u;
  kite_store_f64(t, &u, 0, v);
  return kite_load_f32(t, &u, 0);
}

kite_status ref_topk_gating_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_topk_args *a = args;
  if (!a || a->op != KITE_OP_TOPK_GATING)
    return kite_set_error(KITE_ERR_INVALID_ARG, "topk_gating: ref: bad args");
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "topk_gating: ref: dtype %s is not supported",
                          ref_dtype_str(a->dtype));
  if (a->k < 1 || a->k > a->experts)
    return kite_set_error(KITE_ERR_INVALID_ARG, "topk_gating: ref: k %lld outside [1, %lld]",
                          (long long)a->k, (long long)a->experts);
  bool *taken = malloc((size_t)a->experts);
  double *p = malloc((size_t)a->k * sizeof *p);
  if (!taken || !p) {
    free(taken);
    free(p);
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "topk_gating: ref: no memory");
  }
  const kite_dtype t = a->dtype;
  for (int64_t r = 0; r < a->tokens; r++) {
    const int64_t l0 = r * a->logits_stride;
    double m = -INFINITY, sum = 0.0;
    for (int64_t e = 0; e < a->experts; e++) {
      double v = kite_load_f32(t, a->logits, l0 + e);
      if (v > m || isnan(v)) m = v;
      taken[e] = false;
    }
    for (int64_t e = 0; e < a->experts; e++) sum += exp(kite_load_f32(t, a->logits, l0 + e) - m);

    double chosen = 0.0;
    for (int64_t j = 0; j < a->k; j++) {
      int64_t best = -1;
      float bv = 0.0f;
      for (int64_t e = 0; e < a->experts; e++) {
        if (taken[e]) continue;
        float v = kite_load_f32(t, a->logits, l0 + e);
        if (best < 0 || v > bv) best = e, bv = v; /* strict: the lower id keeps a tie */
      }
      taken[best] = true;
      p[j] = exp((double)bv - m) / sum;
      chosen += p[j];
      a->ids[r * a->ids_stride + j] = (int32_t)best;
    }
    for (int64_t j = 0; j < a->k; j++)
      a->weights[r * a->weights_stride + j] = (float)(a->renormalize ? p[j] / chosen : p[j]);
  }
  free(taken);
  free(p);
  return KITE_OK;
}

/* fused_moe and fused_moe_ex: b13, b2 NULL when absent; o the options (fused_moe's: its act, the
 * split layout, no clamp). */
static kite_status moe_run(const kite_moe_args *a, const void *b13, const void *b2,
                           const kite_moe_opts *o) {
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "fused_moe: ref: dtype %s is not supported",
                          ref_dtype_str(a->dtype));
  const kite_dtype t = a->dtype;
  const int64_t h = a->hidden, in = a->inter;
  const bool il = o->layout == KITE_MOE_INTERLEAVED;
  const double lim = o->limit;
  /* strides of w13[e]'s (row n of 2I, column c of H) and w2[e]'s (row c of H, column i of I) */
  const int64_t w13_sn = o->transposed ? 1 : h, w13_sc = o->transposed ? 2 * in : 1;
  const int64_t w2_sn = o->transposed ? 1 : in, w2_sc = o->transposed ? h : 1;
  double *acc = malloc((size_t)h * sizeof *acc);
  float *act = malloc((size_t)(in > 0 ? in : 1) * sizeof *act);
  if (!acc || !act) {
    free(acc);
    free(act);
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "fused_moe: ref: no memory");
  }
  for (int64_t r = 0; r < a->tokens; r++) {
    const int64_t x0 = r * a->x_stride;
    for (int64_t i = 0; i < h; i++) acc[i] = 0.0;
    for (int64_t j = 0; j < a->topk; j++) {
      const int64_t e = a->ids[r * a->ids_stride + j];
      const double p = a->weights[r * a->weights_stride + j];
      if (e < 0 || e >= a->experts) continue;
      const int64_t w13_0 = e * 2 * in * h, w2_0 = e * h * in;
      for (int64_t i = 0; i < in; i++) {
        const int64_t gr = il ? 2 * i : i, ur = il ? 2 * i + 1 : in + i; /* rows of gate, up */
        double gate = b13 ? kite_load_f32(t, b13, e * 2 * in + gr) : 0.0;
        double up = b13 ? kite_load_f32(t, b13, e * 2 * in + ur) : 0.0;
        for (int64_t c = 0; c < h; c++) {
          const double xv = kite_load_f32(t, a->x, x0 + c);
          gate += xv * kite_load_f32(t, a->w13, w13_0 + gr * w13_sn + c * w13_sc);
          up += xv * kite_load_f32(t, a->w13, w13_0 + ur * w13_sn + c * w13_sc);
        }
        if (lim > 0) gate = fmin(gate, lim), up = fmax(fmin(up, lim), -lim);
        double g;
        if (a->act == KITE_MOE_SWIGLU_OAI)
          g = gate * ref_sigmoid((double)o->alpha * gate) * (up + 1.0);
        else
          g = (a->act == KITE_MOE_GELU ? ref_gelu(gate) : ref_silu(gate)) * up;
        act[i] = round_to(t, g); /* the intermediate, stored in the dtype */
      }
      for (int64_t c = 0; c < h; c++) {
        double v = b2 ? kite_load_f32(t, b2, e * h + c) : 0.0;
        for (int64_t i = 0; i < in; i++)
          v += (double)act[i] * kite_load_f32(t, a->w2, w2_0 + c * w2_sn + i * w2_sc);
        acc[c] += p * v;
      }
    }
    for (int64_t c = 0; c < h; c++) kite_store_f64(t, a->y, r * a->y_stride + c, acc[c]);
  }
  free(acc);
  free(act);
  return KITE_OK;
}

kite_status ref_fused_moe_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_moe_args *a = args;
  if (!a || a->op != KITE_OP_FUSED_MOE)
    return kite_set_error(KITE_ERR_INVALID_ARG, "fused_moe: ref: bad args");
  const kite_moe_opts o = {
      .act = a->act, .layout = KITE_MOE_SPLIT, .alpha = 0, .limit = 0, .transposed = 0};
  return moe_run(a, NULL, NULL, &o);
}

kite_status ref_fused_moe_ex_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_moe_ex_args *a = args;
  if (!a || a->op != KITE_OP_FUSED_MOE_EX || a->moe.op != KITE_OP_FUSED_MOE_EX)
    return kite_set_error(KITE_ERR_INVALID_ARG, "fused_moe_ex: ref: bad args");
  return moe_run(&a->moe, a->b13, a->b2, &a->opts);
}
