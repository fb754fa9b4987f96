/*
 * The MoE router of today's models, fused_moe_ex and the load-balancing loss, portable C in f32
 * (one build for every ISA; the compiler vectorizes the inner loops).
 *
 * moe_route: per token, f32 scores, the f32 keys of kite.h, group keys, then k passes of
 * arg-max (strict >: the lower id keeps a tie); tokens over threads.
 * fused_moe_ex: per token, each chosen expert's gate/up rows (in the layout of the options)
 * dotted with x (transposed weights: x's elements times the stored rows, summed), the clamp and
 * activation, the intermediate rounded to the dtype, then w2 likewise; tokens over threads, each
 * output row written once.
 * moe_aux_loss: expert counts and softmax sums over the rows in order (float64 accumulators:
 * deterministic), then the loss; the backward's rows over threads.
 */
#include <math.h>
#include <stdlib.h>

#include "cpu.h"
#include "cpu_kernels.h"
#include "kite/dtype.h"

/* ---- moe_route ---------------------------------------------------------------------------- */

static float nan_low(float v) {
  return isnan(v) ? -INFINITY : v;
}

static int64_t arg_best(const float *v, const unsigned char *off, int64_t n) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; i++)
    if (!off[i] && (best < 0 || v[i] > v[best])) best = i;
  return best;
}

typedef struct route_job {
  const kite_route_args *a;
  char *scratch; /* per slot: s, key[E] f32, gkey[G] f32, off[E], goff[G] */
  size_t slot_bytes;
} route_job;

static void route_row(const kite_route_args *a, int64_t r, float *s, float *key, float *gkey,
                      unsigned char *off, unsigned char *goff) {
  const kite_route_opts *o = &a->opts;
  const int64_t E = a->experts, K = o->k, G = o->n_group, gs = E / G;
  const float *bias = a->bias;
  const char *l = (const char *)a->logits + r * a->logits_stride * cpu_esize(a->dtype);
  float m = -INFINITY;
  for (int64_t e = 0; e < E; e++) {
    s[e] = kite_load_f32(a->dtype, l, e);
    if (s[e] > m || isnan(s[e])) m = s[e];
  }
  const int on_logits = !bias && G == 1;
  if (on_logits || o->score == KITE_ROUTE_SOFTMAX_TOPK)
    for (int64_t e = 0; e < E; e++) key[e] = nan_low(s[e] + (bias ? bias[e] : 0.0f));
  if (o->score == KITE_ROUTE_SOFTMAX) {
    float sum = 0.0f;
    for (int64_t e = 0; e < E; e++) sum += s[e] = expf(s[e] - m);
    for (int64_t e = 0; e < E; e++) s[e] /= sum;
  } else if (o->score == KITE_ROUTE_SIGMOID) {
    for (int64_t e = 0; e < E; e++) s[e] = 1.0f / (1.0f + expf(-s[e]));
  } else {
    for (int64_t e = 0; e < E; e++) s[e] += bias ? bias[e] : 0.0f;
  }
  if (!on_logits && o->score != KITE_ROUTE_SOFTMAX_TOPK)
    for (int64_t e = 0; e < E; e++) key[e] = nan_low(s[e] + (bias ? bias[e] : 0.0f));
  for (int64_t e = 0; e < E; e++) off[e] = 0;
  if (G > 1) {
    for (int64_t g = 0; g < G; g++) {
      const float *kg = key + g * gs;
      unsigned char *og = off + g * gs;
      const int64_t b1 = arg_best(kg, og, gs);
      og[b1] = 1;
      const int64_t b2 = gs > 1 ? arg_best(kg, og, gs) : -1;
      og[b1] = 0;
      gkey[g] = nan_low(kg[b1] + (b2 >= 0 ? kg[b2] : 0.0f));
      goff[g] = 0;
    }
    for (int64_t j = 0; j < o->topk_group; j++) goff[arg_best(gkey, goff, G)] = 1;
    for (int64_t e = 0; e < E; e++) off[e] = !goff[e / gs];
  }
  float *w = a->weights + r * a->weights_stride;
  int32_t *id = a->ids + r * a->ids_stride;
  float zmax = -INFINITY, wsum = 0.0f;
  for (int64_t j = 0; j < K; j++) {
    const int64_t b = arg_best(key, off, E);
    off[b] = 1;
    id[j] = (int32_t)b;
    w[j] = s[b];
    if (w[j] > zmax) zmax = w[j];
  }
  if (o->score == KITE_ROUTE_SOFTMAX_TOPK) {
    float zs = 0.0f;
    for (int64_t j = 0; j < K; j++) zs += w[j] = expf(w[j] - zmax);
    for (int64_t j = 0; j < K; j++) w[j] /= zs;
  }
  for (int64_t j = 0; j < K; j++) wsum += w[j];
  const float scale = o->renormalize ? o->scaling / (wsum + 1e-20f) : o->scaling;
  for (int64_t j = 0; j < K; j++) w[j] *= scale;
}

static void route_task(const void *job, int64_t begin, int64_t end, int slot) {
  const route_job *j = job;
  const kite_route_args *a = j->a;
  const int64_t E = a->experts, G = a->opts.n_group;
  char *p = j->scratch + (size_t)slot * j->slot_bytes;
  float *s = (float *)p, *key = s + E, *gkey = key + E;
  unsigned char *off = (unsigned char *)(gkey + G), *goff = off + E;
  for (int64_t r = begin; r < end; r++) route_row(a, r, s, key, gkey, off, goff);
}

kite_status cpu_moe_route_scalar(const kite_kernel *kk, kite_ctx *ctx, const void *args) {
  const kite_route_args *a = args;
  const int64_t E = a->experts, G = a->opts.n_group;
  const int parts = cpu_parallel_parts(ctx, a->tokens, a->tokens * E * 4);
  route_job j = {a, NULL, (size_t)((2 * E + G) * 4 + E + G + 63) / 64 * 64};
  j.scratch = malloc(j.slot_bytes * (size_t)parts);
  if (!j.scratch) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "moe_route: cpu: no memory");
  cpu_parallel_run(parts, a->tokens, route_task, &j);
  free(j.scratch);
  return KITE_OK;
}

/* ---- fused_moe_ex ------------------------------------------------------------------------- */

typedef struct moe_job {
  const kite_moe_ex_args *a;
  float *scratch; /* per slot: x[H], acc[H], out[H], gu[2I], act[I] */
} moe_job;

/* y[n] = sum over c < K of w(n, c) v[c] for n < N, w stored [N, K] (a dot per row) or, tr,
 * [K, N] (an axpy per stored row, so that both walk memory in order). */
static void matvec(kite_dtype t, const char *w, int tr, int64_t n, int64_t k, const float *v,
                   float *y) {
  if (tr) {
    for (int64_t i = 0; i < n; i++) y[i] = 0.0f;
    for (int64_t c = 0; c < k; c++)
      for (int64_t i = 0; i < n; i++) y[i] += v[c] * kite_load_f32(t, w, c * n + i);
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    float d = 0.0f;
    for (int64_t c = 0; c < k; c++) d += v[c] * kite_load_f32(t, w, i * k + c);
    y[i] = d;
  }
}

static void moe_task(const void *job, int64_t begin, int64_t end, int slot) {
  const moe_job *mj = job;
  const kite_moe_ex_args *ax = mj->a;
  const kite_moe_args *a = &ax->moe;
  const kite_moe_opts *o = &ax->opts;
  const kite_dtype t = a->dtype;
  const int64_t H = a->hidden, I = a->inter, es = cpu_esize(t);
  const int il = o->layout == KITE_MOE_INTERLEAVED, tr = o->transposed != 0;
  const float lim = o->limit;
  float *x = mj->scratch + (size_t)slot * (size_t)(3 * H + 3 * I), *acc = x + H, *out = acc + H;
  float *gu = out + H, *act = gu + 2 * I;
  for (int64_t r = begin; r < end; r++) {
    for (int64_t c = 0; c < H; c++) x[c] = kite_load_f32(t, a->x, r * a->x_stride + c), acc[c] = 0;
    for (int64_t j = 0; j < a->topk; j++) {
      const int64_t e = a->ids[r * a->ids_stride + j];
      const float p = a->weights[r * a->weights_stride + j];
      if (e < 0 || e >= a->experts) continue;
      matvec(t, (const char *)a->w13 + e * 2 * I * H * es, tr, 2 * I, H, x, gu);
      for (int64_t i = 0; i < I; i++) {
        const int64_t gr = il ? 2 * i : i, ur = il ? 2 * i + 1 : I + i;
        float gate = ax->b13 ? kite_load_f32(t, ax->b13, e * 2 * I + gr) : 0.0f;
        float up = ax->b13 ? kite_load_f32(t, ax->b13, e * 2 * I + ur) : 0.0f;
        gate += gu[gr], up += gu[ur];
        if (lim > 0) gate = fminf(gate, lim), up = fmaxf(fminf(up, lim), -lim);
        float v;
        if (a->act == KITE_MOE_SWIGLU_OAI)
          v = gate / (1.0f + expf(-o->alpha * gate)) * (up + 1.0f);
        else if (a->act == KITE_MOE_GELU)
          v = 0.5f * gate * (1.0f + erff(gate * 0.70710678118654752f)) * up;
        else
          v = gate / (1.0f + expf(-gate)) * up;
        union {
          float f;
          uint16_t h;
        } u;
        kite_store_f32(t, &u, 0, v); /* the intermediate, rounded to the dtype */
        act[i] = kite_load_f32(t, &u, 0);
      }
      matvec(t, (const char *)a->w2 + e * H * I * es, tr, H, I, act, out);
      for (int64_t c = 0; c < H; c++) {
        float v = out[c];
        if (ax->b2) v += kite_load_f32(t, ax->b2, e * H + c);
        acc[c] += p * v;
      }
    }
    for (int64_t c = 0; c < H; c++) kite_store_f32(t, a->y, r * a->y_stride + c, acc[c]);
  }
}

kite_status cpu_fused_moe_ex_scalar(const kite_kernel *kk, kite_ctx *ctx, const void *args) {
  const kite_moe_ex_args *a = args;
  const kite_moe_args *m = &a->moe;
  const int parts =
      cpu_parallel_parts(ctx, m->tokens, m->tokens * m->topk * 3 * m->inter * m->hidden);
  moe_job j = {a, malloc(sizeof(float) * (size_t)(3 * m->hidden + 3 * m->inter) * (size_t)parts)};
  if (!j.scratch) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "fused_moe_ex: cpu: no memory");
  cpu_parallel_run(parts, m->tokens, moe_task, &j);
  free(j.scratch);
  return KITE_OK;
}

/* ---- moe_aux_loss and its backward -------------------------------------------------------- */

/* Row r's softmax into p[E] (f32). */
static void aux_softmax(const kite_aux_loss_args *a, int64_t r, float *p) {
  const int64_t E = a->experts;
  const char *l = (const char *)a->logits + r * a->logits_stride * cpu_esize(a->dtype);
  float m = -INFINITY, sum = 0.0f;
  for (int64_t e = 0; e < E; e++) {
    p[e] = kite_load_f32(a->dtype, l, e);
    if (p[e] > m || isnan(p[e])) m = p[e];
  }
  for (int64_t e = 0; e < E; e++) sum += p[e] = expf(p[e] - m);
  for (int64_t e = 0; e < E; e++) p[e] /= sum;
}

typedef struct aux_job {
  const kite_aux_loss_args *a;
  const double *c;
  double g;
  float *scratch; /* per slot: p[E] */
} aux_job;

static void aux_bwd_task(const void *job, int64_t begin, int64_t end, int slot) {
  const aux_job *j = job;
  const kite_aux_loss_args *a = j->a;
  const int64_t E = a->experts;
  float *p = j->scratch + (size_t)slot * (size_t)E;
  for (int64_t t = begin; t < end; t++) {
    const double gm = j->g * (a->mask ? a->mask[t] : 1.0f);
    aux_softmax(a, t, p);
    double cp = 0.0;
    for (int64_t e = 0; e < E; e++) cp += j->c[e] * p[e];
    char *d = (char *)a->dlogits + t * a->dlogits_stride * cpu_esize(a->dtype);
    for (int64_t e = 0; e < E; e++)
      kite_store_f32(a->dtype, d, e, (float)(gm * p[e] * (j->c[e] - cp)));
  }
}

kite_status cpu_moe_aux_loss_scalar(const kite_kernel *kk, kite_ctx *ctx, const void *args) {
  const kite_aux_loss_args *a = args;
  const int64_t E = a->experts, T = a->tokens;
  const int bwd = a->op == KITE_OP_MOE_AUX_LOSS_BACKWARD;
  const int parts = bwd ? cpu_parallel_parts(ctx, T, T * E) : 1;
  const size_t n = (size_t)(E > 0 ? E : 1);
  double *c = calloc(2 * n, sizeof *c), *P = c + n;
  float *p = malloc(n * (size_t)parts * sizeof *p);
  if (!c || !p) {
    free(c), free(p);
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: cpu: no memory", kite_op_name(a->op));
  }
  double M = 0.0;
  for (int64_t t = 0; t < T; t++) { /* in row order: the same sums whatever the threads */
    const float mt = a->mask ? a->mask[t] : 1.0f;
    M += mt;
    for (int64_t j = 0; j < a->k; j++) {
      const int32_t e = a->ids[t * a->ids_stride + j];
      if (e >= 0 && e < E) c[e] += mt;
    }
    if (bwd) continue;
    aux_softmax(a, t, p);
    for (int64_t e = 0; e < E; e++) P[e] += (double)mt * p[e];
  }
  if (!bwd) {
    double l = 0.0;
    for (int64_t e = 0; e < E; e++) l += c[e] * P[e];
    a->loss[0] = M != 0.0 ? (float)(l * (double)E / (M * M)) : 0.0f;
  } else {
    aux_job j = {a, c, M != 0.0 ? a->dloss[0] * (double)E / (M * M) : 0.0, p};
    cpu_parallel_run(parts, T, aux_bwd_task, &j);
  }
  free(c), free(p);
  return KITE_OK;
}
