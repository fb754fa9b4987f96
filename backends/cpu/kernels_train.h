/*
 * Training kernels (kite.h "Training"): backward of the activations, gated activations, norms,
 * softmax and embedding; cross-entropy forward and backward. f32 math over the vector layer, one
 * rounding per output; rope_backward is rope_run's (kernels_rope.h).
 *
 * Determinism: a reduction over rows (dw, db, dtable, the reduced loss) never depends on the
 * thread count. Norm rows go in NORM_BWD_BLOCKS fixed blocks (a function of rows only), each
 * summed in row order into its own f32 partial row; the partial rows are then added in block
 * order. Embedding sums each table row over its tokens in token order. The reduced loss adds the
 * per-row losses in row order. Part of kernels.h.
 */
#include "kite/dtype.h"

/* ---- activations -------------------------------------------------------------------------- */

/* act(x) and act'(x) for the activation of op (forward ids: silu ... relu, *_and_mul). */
CPU_INLINE void act_and_grad(kite_op act, vf x, vf *f, vf *df) {
  const vf one = vf_set1(1.0f);
  switch (act) {
  case KITE_OP_SILU:
  case KITE_OP_SILU_AND_MUL:
  case KITE_OP_GELU_QUICK: {
    const float a = act == KITE_OP_GELU_QUICK ? 1.702f : 1.0f;
    const vf ax = vf_mul(vf_set1(a), x);
    const vf s = vf_div(one, vf_sigmoid_den(ax)); /* sigmoid(a x) */
    *f = vf_mul(x, s);
    *df = vf_mul(s, vf_fma(ax, vf_sub(one, s), one)); /* s (1 + a x (1 - s)) */
    return;
  }
  case KITE_OP_GELU:
  case KITE_OP_GELU_AND_MUL: {
    const vf cdf = vf_normal_cdf(x);
    const vf pdf =
        vf_mul(vf_set1(0.39894228040143268f), vf_exp_nonpos(vf_mul(vf_set1(-0.5f), vf_mul(x, x))));
    *f = vf_mul(x, cdf);
    *df = vf_fma(x, pdf, cdf);
    return;
  }
  case KITE_OP_GELU_TANH:
  case KITE_OP_GELU_TANH_AND_MUL: {
    const float k = 0.79788456080286536f, c = 0.044715f;
    const vf x2 = vf_mul(x, x);
    const vf u = vf_mul(vf_set1(k), vf_fma(vf_mul(vf_set1(c), x2), x, x));
    /* tanh(u) = 2 sigmoid(2u) - 1 */
    const vf th = vf_sub(vf_div(vf_set1(2.0f), vf_sigmoid_den(vf_mul(vf_set1(2.0f), u))), one);
    const vf half = vf_set1(0.5f);
    *f = vf_mul(vf_mul(half, x), vf_add(one, th));
    const vf du = vf_mul(vf_set1(k), vf_fma(vf_set1(3.0f * c), x2, one));
    const vf sech2 = vf_sub(one, vf_mul(th, th));
    *df = vf_fma(vf_mul(vf_mul(half, x), sech2), du, vf_mul(half, vf_add(one, th)));
    return;
  }
  default: { /* relu */
    const vf zero = vf_set1(0.0f);
    *f = vf_lt_select(zero, x, x, zero);
    *df = vf_lt_select(zero, x, one, zero);
    return;
  }
  }
}

CPU_INLINE void act_bwd_chunk(kite_dtype t, kite_op act, const char *x, const char *dy, char *dx,
                              int64_t i, int64_t m) {
  vf f, df;
  act_and_grad(act, vf_load(t, x, i, m), &f, &df);
  vf_store(t, dx, i, vf_mul(vf_load(t, dy, i, m), df), m, false);
}

/* gate g = x[i], up u = x[cols + i]; with a clamp (limit > 0) the gradient is 0 where it bit. */
CPU_INLINE void gated_bwd_chunk(kite_dtype t, kite_op act, const char *x, const char *dy, char *dx,
                                int64_t cols, float limit, int64_t i, int64_t m) {
  const int64_t es = cpu_esize(t);
  vf g = vf_load(t, x, i, m), u = vf_load(t, x + cols * es, i, m), f, df;
  const vf d = vf_load(t, dy, i, m);
  vf g_live = vf_set1(1.0f), u_live = g_live;
  if (limit > 0.0f) {
    const vf lim = vf_set1(limit), zero = vf_set1(0.0f);
    g_live = vf_lt_select(lim, g, zero, g_live);
    u_live = vf_lt_select(lim, vf_abs(u), zero, u_live);
    g = vf_min(lim, g);
    u = vf_max(vf_neg(lim), vf_min(lim, u));
  }
  act_and_grad(act, g, &f, &df);
  vf_store(t, dx, i, vf_mul(vf_mul(vf_mul(d, u), df), g_live), m, false);
  vf_store(t, dx + cols * es, i, vf_mul(vf_mul(d, f), u_live), m, false);
}

CPU_INLINE void act_bwd_rows(kite_dtype t, const kite_act_bwd_args *a, int64_t begin, int64_t end) {
  const int64_t es = cpu_esize(t);
  const bool gated = a->op == KITE_OP_GATED_BACKWARD;
  for (int64_t r = begin; r < end; r++) {
    const char *x = cpu_row(a->x, a->x_stride, r, es), *dy = cpu_row(a->dy, a->dy_stride, r, es);
    char *dx = cpu_row(a->dx, a->dx_stride, r, es);
    if (gated)
      CPU_ROW(i, m, a->cols, VL, gated_bwd_chunk(t, a->act, x, dy, dx, a->cols, a->limit, i, m));
    else
      CPU_ROW(i, m, a->cols, VL, act_bwd_chunk(t, a->act, x, dy, dx, i, m));
  }
}

static void act_bwd_task(const void *job, int64_t begin, int64_t end, int slot) {
  const kite_act_bwd_args *a = job;
  CPU_WITH_DTYPE(a->dtype, act_bwd_rows, a, begin, end);
}

static kite_status act_bwd_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_act_bwd_args *a = args;
  if (a->rows <= 0 || a->cols <= 0) return KITE_OK;
  const int64_t work = a->rows * a->cols * (a->op == KITE_OP_GATED_BACKWARD ? 5 : 3);
  cpu_parallel_run(cpu_parallel_parts(ctx, a->rows, work), a->rows, act_bwd_task, a);
  return KITE_OK;
}

/* ---- norms -------------------------------------------------------------------------------- */

/* Fixed blocks of rows for the dw / db partial sums: a function of the row count only. */
#define NORM_BWD_BLOCKS 32

typedef struct norm_bwd_job {
  const kite_norm_bwd_args *a;
  int64_t blocks, rows_per_block;
  float *partial; /* [blocks][2][cols]: dw then db partial rows */
} norm_bwd_job;

CPU_INLINE vf norm_wf(kite_dtype t, const kite_norm_bwd_args *a, bool rms, int64_t i, int64_t m) {
  if (!a->w) return vf_set1(1.0f);
  const vf w = vf_load(t, a->w, i, m);
  return rms ? vf_add(vf_set1(a->offset), w) : w;
}

CPU_INLINE void norm_bwd_rows(kite_dtype t, const norm_bwd_job *j, int64_t block) {
  const kite_norm_bwd_args *a = j->a;
  const int64_t es = cpu_esize(t), n = a->cols;
  const bool rms = a->op == KITE_OP_RMS_NORM_BACKWARD;
  const int64_t r0 = block * j->rows_per_block;
  const int64_t r1 = r0 + j->rows_per_block < a->rows ? r0 + j->rows_per_block : a->rows;
  float *pw = j->partial + block * 2 * n, *pb = pw + n;
  for (int64_t i = 0; i < 2 * n; i++) pw[i] = 0.0f;
  for (int64_t r = r0; r < r1; r++) {
    const char *x = cpu_row(a->x, a->x_stride, r, es), *dy = cpu_row(a->dy, a->dy_stride, r, es);
    const char *dres = a->dres ? cpu_row(a->dres, a->dres_stride, r, es) : NULL;
    char *dx = cpu_row(a->dx, a->dx_stride, r, es);
    /* statistics: rms from sum x^2; layer norm from sums shifted by the row's first element,
     * which keeps the variance of rows far from 0 (mean 100, std 1) from cancelling */
    const float x0 = rms ? 0.0f : kite_load_f32(t, x, 0);
    vf s1 = vf_set1(0.0f), s2 = s1;
    CPU_ROW(i, m, n, VL, {
      const vf d = vf_tail(vf_sub(vf_load(t, x, i, m), vf_set1(x0)), m, 0.0f);
      s1 = vf_add(s1, d);
      s2 = vf_fma(d, d, s2);
    });
    const float m1 = rms ? 0.0f : vf_reduce_add(s1) / (float)n;
    float var = vf_reduce_add(s2) / (float)n - m1 * m1;
    if (var < 0.0f) var = 0.0f;
    const float mean = x0 + m1, rstd = 1.0f / sqrtf(var + a->eps);
    const vf vmean = vf_set1(mean), vrstd = vf_set1(rstd);
    /* sums of g = dy * wf and g * xhat */
    vf sg = vf_set1(0.0f), sgx = sg;
    CPU_ROW(i, m, n, VL, {
      const vf g = vf_mul(vf_load(t, dy, i, m), norm_wf(t, a, rms, i, m));
      const vf xh = vf_mul(vf_sub(vf_load(t, x, i, m), vmean), vrstd);
      sg = vf_add(sg, g);
      sgx = vf_fma(g, vf_tail(xh, m, 0.0f), sgx);
    });
    const vf mg = vf_set1(rms ? 0.0f : vf_reduce_add(sg) / (float)n);
    const vf mgx = vf_set1(vf_reduce_add(sgx) / (float)n);
    CPU_ROW(i, m, n, VL, {
      const vf d = vf_load(t, dy, i, m);
      const vf xh = vf_mul(vf_sub(vf_load(t, x, i, m), vmean), vrstd);
      const vf g = vf_mul(d, norm_wf(t, a, rms, i, m));
      vf out = vf_mul(vrstd, vf_sub(vf_sub(g, mg), vf_mul(xh, mgx)));
      if (dres) out = vf_add(out, vf_load(t, dres, i, m));
      vf_store(t, dx, i, out, m, false);
      if (a->dw)
        vf_store(KITE_DTYPE_F32, pw, i, vf_fma(d, xh, vf_load(KITE_DTYPE_F32, pw, i, m)), m, false);
      if (a->db)
        vf_store(KITE_DTYPE_F32, pb, i, vf_add(d, vf_load(KITE_DTYPE_F32, pb, i, m)), m, false);
    });
  }
}

static void norm_bwd_task(const void *job, int64_t begin, int64_t end, int slot) {
  const norm_bwd_job *j = job;
  for (int64_t b = begin; b < end; b++) CPU_WITH_DTYPE(j->a->dtype, norm_bwd_rows, j, b);
}

/* Columns [begin, end) of dw and db: the partial rows added in block order. */
static void norm_bwd_reduce_task(const void *job, int64_t begin, int64_t end, int slot) {
  const norm_bwd_job *j = job;
  const kite_norm_bwd_args *a = j->a;
  const int64_t n = a->cols;
  for (int64_t c = begin; c < end; c++) {
    float sw = 0.0f, sb = 0.0f;
    for (int64_t b = 0; b < j->blocks; b++) {
      sw += j->partial[b * 2 * n + c];
      sb += j->partial[b * 2 * n + n + c];
    }
    if (a->dw) kite_store_f32(a->dtype, a->dw, c, sw);
    if (a->db) kite_store_f32(a->dtype, a->db, c, sb);
  }
}

static kite_status norm_bwd_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_norm_bwd_args *a = args;
  if (a->cols <= 0) return KITE_OK;
  norm_bwd_job j = {.a = a};
  j.blocks = a->rows < NORM_BWD_BLOCKS ? a->rows : NORM_BWD_BLOCKS;
  if (j.blocks < 1) j.blocks = 1;
  j.rows_per_block = (a->rows + j.blocks - 1) / j.blocks;
  if (j.rows_per_block < 1) j.rows_per_block = 1;
  void *ws;
  const kite_status s =
      kite_ctx_workspace(ctx, (size_t)j.blocks * 2 * (size_t)a->cols * sizeof(float), &ws);
  if (s != KITE_OK) return s;
  j.partial = ws;
  const int64_t work = a->rows * a->cols * 4;
  cpu_parallel_run(cpu_parallel_parts(ctx, j.blocks, work), j.blocks, norm_bwd_task, &j);
  if (a->dw || a->db)
    cpu_parallel_run(cpu_parallel_parts(ctx, a->cols, a->cols * j.blocks * 2), a->cols,
                     norm_bwd_reduce_task, &j);
  return KITE_OK;
}

/* ---- softmax ------------------------------------------------------------------------------ */

CPU_INLINE void softmax_bwd_rows(kite_dtype t, const kite_softmax_bwd_args *a, int64_t begin,
                                 int64_t end) {
  const int64_t es = cpu_esize(t);
  for (int64_t r = begin; r < end; r++) {
    const char *y = cpu_row(a->y, a->y_stride, r, es), *dy = cpu_row(a->dy, a->dy_stride, r, es);
    char *dx = cpu_row(a->dx, a->dx_stride, r, es);
    vf acc = vf_set1(0.0f);
    CPU_ROW(i, m, a->cols, VL, acc = vf_fma(vf_load(t, y, i, m), vf_load(t, dy, i, m), acc));
    const vf dot = vf_set1(vf_reduce_add(acc)), scale = vf_set1(a->scale);
    CPU_ROW(i, m, a->cols, VL, {
      const vf yv = vf_mul(scale, vf_load(t, y, i, m));
      vf_store(t, dx, i, vf_mul(yv, vf_sub(vf_load(t, dy, i, m), dot)), m, false);
    });
  }
}

static void softmax_bwd_task(const void *job, int64_t begin, int64_t end, int slot) {
  const kite_softmax_bwd_args *a = job;
  CPU_WITH_DTYPE(a->dtype, softmax_bwd_rows, a, begin, end);
}

static kite_status softmax_bwd_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_softmax_bwd_args *a = args;
  if (a->rows <= 0 || a->cols <= 0) return KITE_OK;
  cpu_parallel_run(cpu_parallel_parts(ctx, a->rows, a->rows * a->cols * 3), a->rows,
                   softmax_bwd_task, a);
  return KITE_OK;
}

/* ---- embedding ---------------------------------------------------------------------------- */

#define EMB_BWD_COLS 512 /* columns of a table row summed on the stack at once */

typedef struct emb_bwd_job {
  const kite_embedding_bwd_args *a;
  const int64_t *start; /* [vocab + 1]: id v's tokens are order[start[v] .. start[v + 1]) */
  const int64_t *order;
} emb_bwd_job;

CPU_INLINE void emb_bwd_rows(kite_dtype t, const emb_bwd_job *j, int64_t begin, int64_t end) {
  const kite_embedding_bwd_args *a = j->a;
  const int64_t es = cpu_esize(t);
  float acc[EMB_BWD_COLS];
  for (int64_t v = begin; v < end; v++) {
    char *dst = cpu_row(a->dtable, a->dtable_stride, v, es);
    for (int64_t c0 = 0; c0 < a->hidden; c0 += EMB_BWD_COLS) {
      const int64_t n = a->hidden - c0 < EMB_BWD_COLS ? a->hidden - c0 : EMB_BWD_COLS;
      CPU_ROW(i, m, n, VL, vf_store(KITE_DTYPE_F32, acc, i, vf_set1(0.0f), m, false));
      for (int64_t e = j->start[v]; e < j->start[v + 1]; e++) {
        const char *src = cpu_row(a->dy, a->dy_stride, j->order[e], es) + c0 * es;
        CPU_ROW(i, m, n, VL,
                vf_store(KITE_DTYPE_F32, acc, i,
                         vf_add(vf_load(KITE_DTYPE_F32, acc, i, m), vf_load(t, src, i, m)), m,
                         false));
      }
      char *out = dst + c0 * es;
      CPU_ROW(i, m, n, VL, vf_store(t, out, i, vf_load(KITE_DTYPE_F32, acc, i, m), m, false));
    }
  }
}

static void emb_bwd_task(const void *job, int64_t begin, int64_t end, int slot) {
  const emb_bwd_job *j = job;
  CPU_WITH_DTYPE(j->a->dtype, emb_bwd_rows, j, begin, end);
}

static kite_status emb_bwd_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_embedding_bwd_args *a = args;
  if (a->vocab <= 0 || a->hidden <= 0) return KITE_OK;
  void *ws;
  const size_t n = (size_t)a->vocab + 2 + (size_t)a->tokens;
  const kite_status s = kite_ctx_workspace(ctx, n * sizeof(int64_t), &ws);
  if (s != KITE_OK) return s;
  /* a counting sort of the tokens by id, stable: each id's tokens in token order */
  int64_t *start = ws, *order = start + a->vocab + 2;
  memset(start, 0, ((size_t)a->vocab + 2) * sizeof(int64_t));
  for (int64_t i = 0; i < a->tokens; i++)
    if (a->ids[i] >= 0 && a->ids[i] < a->vocab) start[a->ids[i] + 2]++;
  for (int64_t v = 0; v < a->vocab; v++) start[v + 2] += start[v + 1];
  for (int64_t i = 0; i < a->tokens; i++)
    if (a->ids[i] >= 0 && a->ids[i] < a->vocab) order[start[a->ids[i] + 1]++] = i;
  const emb_bwd_job j = {.a = a, .start = start, .order = order};
  const int64_t work = (a->vocab + a->tokens) * a->hidden;
  cpu_parallel_run(cpu_parallel_parts(ctx, a->vocab, work), a->vocab, emb_bwd_task, &j);
  return KITE_OK;
}

/* ---- cross-entropy -------------------------------------------------------------------------- */

typedef struct ce_job {
  const kite_ce_args *a;
  int64_t valid;   /* rows not ignored */
  float *row_loss; /* forward with a reduction: one loss per row, added in row order after */
} ce_job;

/* softcap * tanh(x / softcap), with tanh(u) = 2 sigmoid(2u) - 1. */
CPU_INLINE vf ce_cap(vf x, float c) {
  const vf two = vf_set1(2.0f);
  const vf th = vf_sub(vf_div(two, vf_sigmoid_den(vf_mul(vf_set1(2.0f / c), x))), vf_set1(1.0f));
  return vf_mul(vf_set1(c), th);
}

/* One row's max z, log of sum exp(z - max) and sum of z in one pass (lane-wise running max and
 * sum); lse = max + log-sum. */
CPU_INLINE void ce_row_stats(kite_dtype t, const kite_ce_args *a, const char *x, float *zmax,
                             float *logsum, float *sum_z) {
  const float c = a->opts.softcap;
  vf mx = vf_set1(-INFINITY), se = vf_set1(0.0f), sz = se;
  CPU_ROW(i, m, a->vocab, VL, {
    vf z = vf_load(t, x, i, m);
    if (c > 0.0f) z = ce_cap(z, c);
    z = vf_tail(z, m, -INFINITY);
    const vf nm = vf_max(z, mx);
    /* lanes still at -inf (a short row's padding) add nothing */
    const vf scale =
        vf_lt_select(vf_set1(-INFINITY), mx, vf_exp_nonpos(vf_sub(mx, nm)), vf_set1(0.0f));
    se = vf_fma(se, scale, vf_exp_nonpos(vf_sub(z, nm)));
    sz = vf_add(sz, vf_tail(z, m, 0.0f));
    mx = nm;
  });
  float lane_m[VL], lane_s[VL], big = -INFINITY, tot = 0.0f;
  vf_store(KITE_DTYPE_F32, lane_m, 0, mx, VL, false);
  vf_store(KITE_DTYPE_F32, lane_s, 0, se, VL, false);
  for (int l = 0; l < VL; l++) big = lane_m[l] > big ? lane_m[l] : big;
  for (int l = 0; l < VL; l++)
    if (lane_m[l] > -INFINITY) tot += lane_s[l] * expf(lane_m[l] - big);
  *zmax = big;
  *logsum = logf(tot);
  *sum_z = vf_reduce_add(sz);
}

/* z of element j, through the same vector code as the row's (so that z_t - max is exactly 0
 * when the target holds the max). */
CPU_INLINE float ce_z_at(kite_dtype t, const kite_ce_args *a, const char *x, int64_t j) {
  vf z = vf_load(t, x, j, 1);
  if (a->opts.softcap > 0.0f) z = ce_cap(z, a->opts.softcap);
  float lanes[VL];
  vf_store(KITE_DTYPE_F32, lanes, 0, z, VL, false);
  return lanes[0];
}

CPU_INLINE void ce_fwd_rows(kite_dtype t, const ce_job *j, int64_t begin, int64_t end) {
  const kite_ce_args *a = j->a;
  const kite_ce_opts *o = &a->opts;
  const int64_t es = cpu_esize(t);
  for (int64_t r = begin; r < end; r++) {
    const char *x = cpu_row(a->logits, a->logits_stride, r, es);
    float zmax, logsum, sum_z;
    ce_row_stats(t, a, x, &zmax, &logsum, &sum_z);
    const float lse = zmax + logsum;
    const int32_t tg = a->targets[r];
    float loss = 0.0f;
    if (tg != o->ignore_index) {
      /* (1 - ls)(lse - z_t) + ls (lse - mean z), from max - z terms: no cancellation against
       * lse when the target dominates */
      const float zt = ce_z_at(t, a, x, tg), ls = o->label_smoothing;
      const float mean_z = sum_z / (float)a->vocab;
      loss = logsum + (1.0f - ls) * (zmax - zt) + ls * (zmax - mean_z) + o->z_loss * lse * lse;
    }
    if (a->lse) a->lse[r] = lse;
    if (o->reduction == KITE_REDUCTION_NONE)
      a->loss[r] = loss;
    else
      j->row_loss[r] = loss;
  }
}

/* dlogits of one row: g (p_j (1 + 2 z_loss lse) - ls / V) dz/dx, then the target's -g (1 - ls)
 * dz/dx (its logit read before the row is written: dlogits may be the logits). */
CPU_INLINE void ce_bwd_rows(kite_dtype t, const ce_job *j, int64_t begin, int64_t end) {
  const kite_ce_args *a = j->a;
  const kite_ce_opts *o = &a->opts;
  const int64_t es = cpu_esize(t);
  const float c = o->softcap, ls = o->label_smoothing;
  for (int64_t r = begin; r < end; r++) {
    const char *x = cpu_row(a->logits, a->logits_stride, r, es);
    char *dx = cpu_row(a->dlogits, a->dlogits_stride, r, es);
    const int32_t tg = a->targets[r];
    float g = 0.0f;
    if (tg != o->ignore_index)
      g = o->reduction == KITE_REDUCTION_NONE  ? a->dloss[r]
          : o->reduction == KITE_REDUCTION_SUM ? a->dloss[0]
          : j->valid > 0                       ? a->dloss[0] / (float)j->valid
                                               : 0.0f;
    if (g == 0.0f) {
      CPU_ROW(i, m, a->vocab, VL, vf_store(t, dx, i, vf_set1(0.0f), m, false));
      continue;
    }
    const float lse = a->lse[r], zf = g * (1.0f + 2.0f * o->z_loss * lse);
    const float zt = ce_z_at(t, a, x, tg);
    float dt = zf * expf(zt - lse) - g * ls / (float)a->vocab - g * (1.0f - ls);
    if (c > 0.0f) dt *= 1.0f - (zt / c) * (zt / c);
    const vf vlse = vf_set1(lse), vzf = vf_set1(zf), off = vf_set1(g * ls / (float)a->vocab);
    CPU_ROW(i, m, a->vocab, VL, {
      vf z = vf_load(t, x, i, m);
      if (c > 0.0f) z = ce_cap(z, c);
      vf d = vf_sub(vf_mul(vzf, vf_exp_nonpos(vf_sub(z, vlse))), off);
      if (c > 0.0f) {
        const vf q = vf_mul(z, vf_set1(1.0f / c));
        d = vf_mul(d, vf_sub(vf_set1(1.0f), vf_mul(q, q)));
      }
      vf_store(t, dx, i, d, m, false);
    });
    kite_store_f32(t, dx, tg, dt);
  }
}

static void ce_task(const void *job, int64_t begin, int64_t end, int slot) {
  const ce_job *j = job;
  if (j->a->op == KITE_OP_CROSS_ENTROPY_BACKWARD)
    CPU_WITH_DTYPE(j->a->dtype, ce_bwd_rows, j, begin, end);
  else
    CPU_WITH_DTYPE(j->a->dtype, ce_fwd_rows, j, begin, end);
}

static kite_status ce_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_ce_args *a = args;
  const bool bwd = a->op == KITE_OP_CROSS_ENTROPY_BACKWARD;
  ce_job j = {.a = a};
  kite_status s = cpu_ce_check_targets(a, &j.valid);
  if (s != KITE_OK) return s;
  const bool reduce = !bwd && a->opts.reduction != KITE_REDUCTION_NONE;
  if (reduce) {
    void *ws;
    if ((s = kite_ctx_workspace(ctx, ((size_t)a->rows + 1) * sizeof(float), &ws)) != KITE_OK)
      return s;
    j.row_loss = ws;
  }
  if (a->rows > 0)
    cpu_parallel_run(cpu_parallel_parts(ctx, a->rows, a->rows * a->vocab * (bwd ? 2 : 1)), a->rows,
                     ce_task, &j);
  if (reduce) {
    double total = 0.0;
    for (int64_t r = 0; r < a->rows; r++) total += j.row_loss[r];
    if (a->opts.reduction == KITE_REDUCTION_MEAN) total = j.valid > 0 ? total / (double)j.valid : 0;
    a->loss[0] = (float)total;
  }
  return KITE_OK;
}
