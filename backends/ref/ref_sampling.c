/*
 * The sampling family in float64: argmax, sample (the rules of kite.h written out plainly: sort
 * for top-k and top-p, then the exponential race over the kept tokens), apply_penalties,
 * logprobs and softcap. Logits and parameters are host memory here, so NaN logits and bad parameter
 * values are reported (after every token is written, as a device would write it).
 */
#include <stdio.h>
#include <stdlib.h>

#include "kite/sampling.h"
#include "ref.h"

/* Row r as doubles, NaN read as -inf; *nan set when the row held one. */
static void load_row(const kite_dtype t, const void *base, int64_t off, int64_t v, double *out,
                     bool *nan) {
  for (int64_t i = 0; i < v; i++) {
    double x = kite_load_f32(t, base, off + i);
    if (isnan(x)) {
      *nan = true;
      x = -INFINITY;
    }
    out[i] = x;
  }
}

/* Lowest index of the largest value (0 when every value is -inf). */
static int64_t row_argmax(const double *x, int64_t v) {
  int64_t best = 0;
  for (int64_t i = 1; i < v; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

static int cmp_desc(const void *pa, const void *pb) {
  const double a = *(const double *)pa, b = *(const double *)pb;
  return a < b ? 1 : a > b ? -1 : 0;
}

/* The sampled token of a row that has a finite largest logit m at `best`. x is clobbered. */
static int64_t sample_row(const kite_sample_row *p, double *x, double *sorted, int64_t v,
                          int64_t best) {
  const double m = x[best], t = p->temperature;
  /* top-k: the k-th largest logit; every logit >= it stays */
  double lo = -INFINITY;
  if (p->top_k > 0 || p->top_p < 1.0f) {
    for (int64_t i = 0; i < v; i++) sorted[i] = x[i];
    qsort(sorted, (size_t)v, sizeof *sorted, cmp_desc);
  }
  int64_t kept = v;
  if (p->top_k > 0) {
    lo = sorted[p->top_k - 1];
    kept = p->top_k;
    while (kept < v && sorted[kept] >= lo) kept++;
  }
  /* top-p over the kept sorted prefix: walk groups of equal logits from the top; a group stays
   * while the mass strictly above it is < top_p of the kept mass */
  if (p->top_p < 1.0f) {
    double z = 0.0;
    for (int64_t j = 0; j < kept; j++) z += exp((sorted[j] - m) / t);
    double above = 0.0;
    int64_t j = 0;
    while (j < kept) {
      if (j > 0 && !(above < (double)p->top_p * z)) break;
      const double g = sorted[j];
      lo = g;
      while (j < kept && sorted[j] == g) above += exp((sorted[j++] - m) / t);
    }
  }
  int64_t tok = best;
  double best_s = -INFINITY;
  for (int64_t i = 0; i < v; i++) {
    if (!(x[i] >= lo)) continue;
    const double zi = (x[i] - m) / t;
    if (p->min_p > 0.0f && !(exp(zi) >= (double)p->min_p)) continue;
    const double s = zi - log(-log((double)kite_sample_uniform(p, i)));
    if (s > best_s) {
      best_s = s;
      tok = i;
    }
  }
  return tok;
}

kite_status ref_sample_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_sample_args *a = args;
  const char *op = ref_op_str(a->op);
  if (a->op != KITE_OP_ARGMAX && a->op != KITE_OP_SAMPLE)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: ref: not a sampling op", op);
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: ref: dtype %s is not supported", op,
                          ref_dtype_str(a->dtype));
  const int64_t v = a->vocab;
  double *x = malloc((size_t)v * 2 * sizeof *x);
  if (!x) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: ref: no memory for a row", op);
  int64_t nan_row = -1, bad_row = -1;
  unsigned bad = 0;
  for (int64_t r = 0; r < a->rows; r++) {
    const kite_sample_row p = kite_sample_row_get(a, r);
    if (p.bad && bad_row < 0) {
      bad_row = r;
      bad = p.bad;
    }
    bool nan = false;
    load_row(a->dtype, a->logits, r * a->logits_stride, v, x, &nan);
    if (nan && nan_row < 0) nan_row = r;
    const int64_t best = row_argmax(x, v);
    const bool special = isinf(x[best]); /* all -inf: token 0; +inf: the first +inf */
    a->tokens[r] = (int32_t)(p.greedy || special ? best : sample_row(&p, x, x + v, v, best));
  }
  free(x);
  if (nan_row >= 0)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: logits: row %lld holds NaN", op,
                          (long long)nan_row);
  if (bad_row >= 0) {
    const char *what = bad & KITE_SAMPLE_BAD_TEMPERATURE
                           ? "temperature: row %lld is negative or not finite"
                       : bad & KITE_SAMPLE_BAD_TOP_P ? "top_p: row %lld is NaN"
                                                     : "min_p: row %lld is NaN";
    char msg[96];
    snprintf(msg, sizeof msg, what, (long long)bad_row);
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s", op, msg);
  }
  return KITE_OK;
}

kite_status ref_penalties_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_penalty_args *a = args;
  if (a->op != KITE_OP_APPLY_PENALTIES || !ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "apply_penalties: ref: op or dtype not supported");
  /* per token id: seen anywhere (bit 0 of seen) and its count in the output */
  int64_t *count = calloc((size_t)a->vocab, sizeof *count);
  unsigned char *seen = calloc((size_t)a->vocab, 1);
  if (!count || !seen) {
    free(count);
    free(seen);
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "apply_penalties: ref: no memory");
  }
  for (int64_t r = 0; r < a->rows; r++) {
    const kite_penalty_row pen = kite_penalty_row_get(a, r);
    const double rep = pen.repetition, pres = pen.presence, freq = pen.frequency;
    for (int64_t j = 0; j < a->prompt_len; j++) {
      const int32_t id = a->prompt_ids[r * a->prompt_stride + j];
      if (id >= 0 && id < a->vocab) seen[id] = 1;
    }
    for (int64_t j = 0; j < a->output_len; j++) {
      const int32_t id = a->output_ids[r * a->output_stride + j];
      if (id >= 0 && id < a->vocab) {
        seen[id] = 1;
        count[id]++;
      }
    }
    const int64_t off = r * a->logits_stride;
    for (int64_t i = 0; i < a->vocab; i++) {
      if (!seen[i]) continue;
      double l = kite_load_f32(a->dtype, a->logits, off + i);
      l = l > 0.0 ? l / rep : l * rep;
      l -= freq * (double)count[i] + (count[i] > 0 ? pres : 0.0);
      kite_store_f32(a->dtype, a->logits, off + i, (float)l);
      seen[i] = 0;
      count[i] = 0;
    }
  }
  free(count);
  free(seen);
  return KITE_OK;
}

kite_status ref_softcap_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_softcap_args *a = args;
  if (a->op != KITE_OP_SOFTCAP || !ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "softcap: ref: op or dtype not supported");
  const double cap = a->cap;
  for (int64_t r = 0; r < a->rows; r++)
    for (int64_t i = 0, off = r * a->logits_stride; i < a->vocab; i++) {
      const double l = kite_load_f32(a->dtype, a->logits, off + i);
      kite_store_f32(a->dtype, a->logits, off + i, (float)(cap * tanh(l / cap)));
    }
  return KITE_OK;
}

kite_status ref_logprobs_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_logprobs_args *a = args;
  if (a->op != KITE_OP_LOGPROBS || !ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "logprobs: ref: op or dtype not supported");
  const int64_t v = a->vocab;
  double *x = malloc((size_t)v * sizeof *x);
  if (!x) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "logprobs: ref: no memory for a row");
  for (int64_t r = 0; r < a->rows; r++) {
    bool nan = false;
    load_row(a->dtype, a->logits, r * a->logits_stride, v, x, &nan);
    const double m = x[row_argmax(x, v)];
    /* log-sum-exp; a row of -inf (or holding +inf) has no finite normalizer: NaN / -inf follow */
    double lse = m;
    if (isfinite(m)) {
      double s = 0.0;
      for (int64_t i = 0; i < v; i++) s += exp(x[i] - m);
      lse = m + log(s);
    }
    if (a->tokens) {
      const int32_t t = a->tokens[r];
      a->token_logprobs[r] = t >= 0 && t < v ? (float)(x[t] - lse) : NAN;
    }
    /* top n by selection, n <= 20: each pick is the lowest id of the largest value not taken */
    for (int64_t j = 0; j < a->n; j++) {
      int64_t best = -1;
      for (int64_t i = 0; i < v; i++) {
        if (isnan(x[i])) continue; /* taken */
        if (best < 0 || x[i] > x[best]) best = i;
      }
      a->top_ids[r * a->top_ids_stride + j] = (int32_t)best;
      a->top_logprobs[r * a->top_logprobs_stride + j] = (float)(x[best] - lse);
      x[best] = NAN;
    }
  }
  free(x);
  return KITE_OK;
}
