/*
 * fused_linear_cross_entropy on the CPU, and the target check the cross-entropy kernels share.
 *
 * The vocabulary goes in chunks of vc columns, each chunk's logits[N, vc] as large as
 * chunk_bytes allows; the [N, V] logits never exist. Every product runs through kite_linear
 * (the best linear kernel of this ctx, with the logits rounded to the dtype as a separate linear
 * would round them):
 *   pass 1, per chunk:  logits = h w_c^T + b_c; each row's running max, sum of exp, sum of z and
 *                       target z -> lse and the loss;
 *   pass 2, per chunk:  logits again, turned in place into dlogits (the gradient of the reduced
 *                       loss); then
 *                       dw_c [vc, H] = dlogits^T h   as linear(dlogits^T [vc, N], h^T [H, N]),
 *                       written straight into dw (a chunk's rows of dw are complete);
 *                       dh += dlogits w_c            as linear(dlogits, w_c^T [H, vc]), added
 *                       into an f32 accumulator [N, H];
 *                       db_c = column sums of dlogits in row order.
 * The logits are computed twice (4 products of N V H instead of 3) so that no chunk ever needs
 * the gradient of another: that is what lets dw be written without an accumulator of its size.
 * Scratch besides the chunks: h^T and the dh accumulator and product, O(N H).
 * Reductions run in a fixed order whatever the thread count (the GEMMs' own included: kite's
 * linear kernels split output tiles, not K).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "cpu_kernels.h"
#include "kite/dtype.h"

kite_status cpu_ce_check_targets(const kite_ce_args *a, int64_t *valid) {
  const char *name = kite_op_name(a->op);
  *valid = 0;
  for (int64_t i = 0; i < a->rows; i++) {
    const int32_t t = a->targets[i];
    if (t == a->opts.ignore_index) continue;
    if (t < 0 || t >= a->vocab)
      return kite_set_error(KITE_ERR_INVALID_ARG,
                            "%s: targets[%lld] = %d is outside [0, V = %lld) and is not "
                            "ignore_index %d",
                            name, (long long)i, (int)t, (long long)a->vocab,
                            (int)a->opts.ignore_index);
    ++*valid;
  }
  return KITE_OK;
}

typedef struct flce {
  const kite_flce_args *a;
  int64_t es, valid, v0, vc;
  char *logits;               /* [N, vc] */
  float *mx, *se, *sz, *zt;   /* per row: running max, sum of exp, sum of z, target z */
  float *lse, *row_loss;      /* per row */
  char *ht, *dlt, *wt, *part; /* h^T [H, N], dlogits^T [vc, N], w_c^T [H, vc], [N, H] */
  float *dh_acc;              /* [N, H] */
} flce;

static float cap(float x, float c) {
  return c > 0.0f ? c * tanhf(x / c) : x;
}

static void stats_task(const void *job, int64_t begin, int64_t end, int slot) {
  const flce *f = job;
  const kite_flce_args *a = f->a;
  const kite_dtype t = a->dtype;
  const float c = a->opts.softcap;
  for (int64_t r = begin; r < end; r++) {
    const int64_t base = r * f->vc;
    float m = f->mx[r], s = f->se[r], sz = f->sz[r];
    for (int64_t j = 0; j < f->vc; j++) {
      const float z = cap(kite_load_f32(t, f->logits, base + j), c);
      if (z > m) {
        s = s * expf(m - z) + 1.0f;
        m = z;
      } else {
        s += expf(z - m);
      }
      sz += z;
    }
    f->mx[r] = m, f->se[r] = s, f->sz[r] = sz;
    const int64_t tg = a->targets[r];
    if (tg >= f->v0 && tg < f->v0 + f->vc)
      f->zt[r] = cap(kite_load_f32(t, f->logits, base + tg - f->v0), c);
  }
}

/* The chunk's logits become the gradient of the reduced loss, in place. */
static void grad_task(const void *job, int64_t begin, int64_t end, int slot) {
  const flce *f = job;
  const kite_flce_args *a = f->a;
  const kite_ce_opts *o = &a->opts;
  const kite_dtype t = a->dtype;
  const float c = o->softcap, ls = o->label_smoothing;
  for (int64_t r = begin; r < end; r++) {
    const int64_t base = r * f->vc, tg = a->targets[r];
    float g = 0.0f;
    if (tg != o->ignore_index)
      g = o->reduction == KITE_REDUCTION_MEAN ? 1.0f / (float)f->valid : 1.0f;
    const float lse = f->lse[r], zf = g * (1.0f + 2.0f * o->z_loss * lse);
    const float off = g * ls / (float)a->vocab;
    for (int64_t j = 0; j < f->vc; j++) {
      float d = 0.0f;
      if (g != 0.0f) {
        const float x = kite_load_f32(t, f->logits, base + j), z = cap(x, c);
        d = zf * expf(z - lse) - off - (f->v0 + j == tg ? g * (1.0f - ls) : 0.0f);
        if (c > 0.0f) d *= 1.0f - (z / c) * (z / c);
      }
      kite_store_f32(t, f->logits, base + j, d);
    }
  }
}

/* db for the chunk's columns: each a sum over rows in row order. */
static void db_task(const void *job, int64_t begin, int64_t end, int slot) {
  const flce *f = job;
  const kite_flce_args *a = f->a;
  for (int64_t j = begin; j < end; j++) {
    float s = 0.0f;
    for (int64_t r = 0; r < a->rows; r++) s += kite_load_f32(a->dtype, f->logits, r * f->vc + j);
    kite_store_f32(a->dtype, a->db, f->v0 + j, s);
  }
}

/* dst[c, r] = src[r, c] for src [rows, cols] (row stride ld) of es-byte elements; items are rows
 * of dst. */
typedef struct transpose_job {
  const char *src;
  char *dst;
  int64_t rows, cols, ld, es;
} transpose_job;

static void transpose_task(const void *job, int64_t begin, int64_t end, int slot) {
  const transpose_job *j = job;
  for (int64_t c = begin; c < end; c++)
    for (int64_t r = 0; r < j->rows; r++)
      memcpy(j->dst + (c * j->rows + r) * j->es, j->src + (r * j->ld + c) * j->es, (size_t)j->es);
}

static void transpose(kite_ctx *ctx, const void *src, int64_t rows, int64_t cols, int64_t ld,
                      int64_t es, void *dst) {
  const transpose_job j = {src, dst, rows, cols, ld, es};
  cpu_parallel_run(cpu_parallel_parts(ctx, cols, rows * cols), cols, transpose_task, &j);
}

static void acc_task(const void *job, int64_t begin, int64_t end, int slot) {
  const flce *f = job;
  const int64_t H = f->a->hidden;
  for (int64_t i = begin * H; i < end * H; i++)
    f->dh_acc[i] += kite_load_f32(f->a->dtype, f->part, i);
}

static void dh_store_task(const void *job, int64_t begin, int64_t end, int slot) {
  const flce *f = job;
  const kite_flce_args *a = f->a;
  for (int64_t r = begin; r < end; r++)
    for (int64_t c = 0; c < a->hidden; c++)
      kite_store_f32(a->dtype, a->dh, r * a->dh_stride + c, f->dh_acc[r * a->hidden + c]);
}

/* A 2-d DLTensor over host memory for kite_linear. */
static DLTensor mat(kite_ctx *ctx, kite_dtype t, const void *p, int64_t *shape, int64_t *strides,
                    int64_t rows, int64_t cols, int64_t ld) {
  shape[0] = rows, shape[1] = cols, strides[0] = ld, strides[1] = 1;
  DLTensor d = {.data = (void *)p,
                .device = kite_ctx_device(ctx),
                .ndim = 2,
                .dtype = kite_dtype_dlpack(t),
                .shape = shape,
                .strides = strides,
                .byte_offset = 0};
  return d;
}

static kite_status linear(kite_ctx *ctx, kite_dtype t, const void *x, int64_t m, int64_t k,
                          int64_t ldx, const void *w, int64_t n, int64_t ldw, const void *bias,
                          void *y, int64_t ldy) {
  int64_t xs[2], xst[2], ws[2], wst[2], ys[2], yst[2], bs[1] = {n}, bst[1] = {1};
  DLTensor X = mat(ctx, t, x, xs, xst, m, k, ldx), W = mat(ctx, t, w, ws, wst, n, k, ldw);
  DLTensor Y = mat(ctx, t, y, ys, yst, m, n, ldy), B = X;
  if (bias) {
    B.data = (void *)bias, B.ndim = 1, B.shape = bs, B.strides = bst;
  }
  return kite_linear(ctx, &X, &W, bias ? &B : NULL, &Y);
}

static void *alloc(size_t bytes, bool *ok) {
  if (bytes == 0) return NULL;
  void *p = malloc(bytes);
  if (!p) *ok = false;
  return p;
}

kite_status cpu_flce_chunked(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_flce_args *a = args;
  const kite_dtype t = a->dtype;
  const int64_t N = a->rows, H = a->hidden, V = a->vocab, es = cpu_esize(t);
  flce f = {.a = a, .es = es};
  const kite_ce_args ce = {.op = KITE_OP_FUSED_LINEAR_CROSS_ENTROPY,
                           .rows = N,
                           .vocab = V,
                           .targets = a->targets,
                           .opts = a->opts};
  kite_status s = cpu_ce_check_targets(&ce, &f.valid);
  if (s != KITE_OK) return s;
  const kite_ce_opts *o = &a->opts;
  const bool grads = a->dh || a->dw || a->db;

  /* the chunk: logits [N, vc], and for the gradients dlogits^T [vc, N] and w_c^T [H, vc] */
  const int64_t per_col = es * (N + (a->dw ? N : 0) + (a->dh ? H : 0));
  int64_t vc = per_col > 0 ? (int64_t)(a->chunk_bytes / (size_t)per_col) : V;
  vc = vc < 1 ? 1 : vc > V ? V : vc;
  f.vc = vc;
  bool ok = true;
  const size_t n = (size_t)N, h = (size_t)H, c = (size_t)vc;
  f.logits = alloc(n * c * (size_t)es, &ok);
  float *rows = alloc(6 * n * sizeof(float), &ok);
  if (a->dw) f.ht = alloc(h * n * (size_t)es, &ok), f.dlt = alloc(c * n * (size_t)es, &ok);
  if (a->dh) {
    f.wt = alloc(h * c * (size_t)es, &ok);
    f.part = alloc(n * h * (size_t)es, &ok);
    f.dh_acc = alloc(n * h * sizeof(float), &ok);
  }
  if (!ok) {
    s = kite_set_error(KITE_ERR_OUT_OF_MEMORY, "fused_linear_cross_entropy: cpu: out of memory");
    goto done;
  }
  if (rows) {
    f.mx = rows, f.se = rows + n, f.sz = rows + 2 * n, f.zt = rows + 3 * n;
    f.lse = rows + 4 * n, f.row_loss = rows + 5 * n;
    for (size_t i = 0; i < n; i++) f.mx[i] = -INFINITY, f.se[i] = f.sz[i] = f.zt[i] = 0.0f;
  }
  const int64_t work = N * vc;

  for (f.v0 = 0; f.v0 < V && N > 0; f.v0 += vc) {
    f.vc = V - f.v0 < vc ? V - f.v0 : vc;
    s = linear(ctx, t, a->h, N, H, a->h_stride, (const char *)a->w + f.v0 * a->w_stride * es, f.vc,
               a->w_stride, a->bias ? (const char *)a->bias + f.v0 * es : NULL, f.logits, f.vc);
    if (s != KITE_OK) goto done;
    cpu_parallel_run(cpu_parallel_parts(ctx, N, work), N, stats_task, &f);
  }
  double total = 0.0;
  for (int64_t r = 0; r < N; r++) {
    f.lse[r] = f.mx[r] + logf(f.se[r]);
    const float ls = o->label_smoothing, lse = f.lse[r];
    float loss = 0.0f;
    if (a->targets[r] != o->ignore_index)
      loss = lse - (1.0f - ls) * f.zt[r] - (ls > 0.0f ? ls / (float)V * f.sz[r] : 0.0f) +
             o->z_loss * lse * lse;
    if (o->reduction == KITE_REDUCTION_NONE)
      a->loss[r] = loss;
    else
      total += loss;
  }
  if (o->reduction != KITE_REDUCTION_NONE)
    a->loss[0] = (float)(o->reduction == KITE_REDUCTION_SUM ? total
                         : f.valid > 0                      ? total / (double)f.valid
                                                            : 0.0);
  if (!grads) goto done;

  if (N == 0) { /* no rows: zero gradients */
    for (int64_t v = 0; v < V && a->dw; v++)
      memset((char *)a->dw + v * a->dw_stride * es, 0, (size_t)(H * es));
    if (a->db) memset(a->db, 0, (size_t)(V * es));
    goto done;
  }
  if (a->dw && H > 0) transpose(ctx, a->h, N, H, a->h_stride, es, f.ht);
  if (a->dh && f.dh_acc) memset(f.dh_acc, 0, n * h * sizeof(float));
  for (f.v0 = 0; f.v0 < V; f.v0 += vc) {
    f.vc = V - f.v0 < vc ? V - f.v0 : vc;
    const char *wc = (const char *)a->w + f.v0 * a->w_stride * es;
    s = linear(ctx, t, a->h, N, H, a->h_stride, wc, f.vc, a->w_stride,
               a->bias ? (const char *)a->bias + f.v0 * es : NULL, f.logits, f.vc);
    if (s != KITE_OK) goto done;
    cpu_parallel_run(cpu_parallel_parts(ctx, N, work), N, grad_task, &f);
    if (a->db) cpu_parallel_run(cpu_parallel_parts(ctx, f.vc, work), f.vc, db_task, &f);
    if (H == 0) continue;
    if (a->dw) {
      transpose(ctx, f.logits, N, f.vc, f.vc, es, f.dlt);
      s = linear(ctx, t, f.dlt, f.vc, N, N, f.ht, H, N, NULL,
                 (char *)a->dw + f.v0 * a->dw_stride * es, a->dw_stride);
      if (s != KITE_OK) goto done;
    }
    if (a->dh) {
      transpose(ctx, wc, f.vc, H, a->w_stride, es, f.wt);
      s = linear(ctx, t, f.logits, N, f.vc, f.vc, f.wt, H, f.vc, NULL, f.part, H);
      if (s != KITE_OK) goto done;
      cpu_parallel_run(cpu_parallel_parts(ctx, N, N * H), N, acc_task, &f);
    }
  }
  if (a->dh && H > 0) cpu_parallel_run(cpu_parallel_parts(ctx, N, N * H), N, dh_store_task, &f);
done:
  free(f.logits), free(rows), free(f.ht), free(f.dlt), free(f.wt), free(f.part), free(f.dh_acc);
  return s;
}
