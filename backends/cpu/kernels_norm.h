/*
 * rms_norm, layer_norm and their residual-add forms, one row at a time (kite_norm_args states
 * the PRE/POST rule). The row is read for its statistics, then again (from L1/L2) for the output:
 *   rms:   y = s * rstd * (offset + w),  rstd = 1 / sqrt(mean(s^2) + eps)
 *   layer: y = (s - mean) * rstd * w + b. The mean is k + E[d], d = s - k, k the mean of the
 *          row's first two vectors: sums of d lose far less than sums of s when |mean| >> std.
 *          f32 takes the variance around the mean in a second pass, which stays accurate where
 *          E[s^2] - mean^2 would not. The 16-bit types sum d^2 in the first pass too,
 *          var = E[d^2] - E[d]^2, and take the second pass only for a row where E[d]^2 > 4 var
 *          (the difference would cancel more than 2 bits). Sums of 8 / 16 lanes in f32 lose at
 *          most ~1e-5 of E[d^2] <= 5 var, far below a 16-bit output's half ulp (2e-3 bf16,
 *          5e-4 f16); the pass saved is 13 % of a bf16 layer norm's time on Zen 3.
 * s is the row the norm sees: x, or x + residual in float (POST), or that sum rounded to the
 * dtype (PRE: the value the residual keeps); the fused forms on 16-bit types keep it in an f32
 * scratch row (per thread, from the ctx workspace) after the first pass. The residual is written
 * in the output pass only, and y may alias x: every chunk is read before it is written. Only a y
 * that is not x streams: a line that was just read is in cache already, and a streaming store to
 * it would be slower. Part of kernels.h.
 */

typedef struct norm_job {
  const kite_norm_args *a;
  float *scratch; /* [threads, cols]: the f32 row s of the norms that cache it, else NULL */
  bool stream;
} norm_job;

/* Whether a norm keeps s in the f32 scratch row: the fused forms on 16-bit types, which would
 * otherwise redo the conversions, the add and PRE's rounding in every pass (30% of their time).
 * Where s is x, or an f32 sum, reading it again costs less than the scratch traffic. */
CPU_INLINE bool norm_caches(kite_dtype t, bool add) {
  return add && t != KITE_DTYPE_F32;
}

CPU_INLINE vf norm_input(kite_dtype t, bool add, kite_norm_pos pos, const char *x, const char *res,
                         int64_t i, int64_t m) {
  const vf s = vf_load(t, x, i, m);
  if (!add) return s;
  const vf sum = vf_add(s, vf_load(t, res, i, m));
  return pos == KITE_NORM_PRE ? vf_round_to(t, sum) : sum;
}

/* The first pass: s (kept in the scratch row when the norm caches it), returned for the sum. */
CPU_INLINE vf norm_first(kite_dtype t, bool rms, bool add, kite_norm_pos pos, const char *x,
                         const char *res, float *srow, int64_t i, int64_t m) {
  const vf s = norm_input(t, add, pos, x, res, i, m);
  if (norm_caches(t, add)) vf_store(KITE_DTYPE_F32, srow, i, s, m, false);
  return rms ? vf_mul(s, s) : s;
}

/* s in the later passes. */
CPU_INLINE vf norm_again(kite_dtype t, bool add, kite_norm_pos pos, const char *x, const char *res,
                         const float *srow, int64_t i, int64_t m) {
  return norm_caches(t, add) ? vf_load(KITE_DTYPE_F32, srow, i, m)
                             : norm_input(t, add, pos, x, res, i, m);
}

/* Whether layer_norm takes its statistics in one pass (see the top). */
CPU_INLINE bool norm_one_pass(kite_dtype t, bool rms) {
  return !rms && t != KITE_DTYPE_F32;
}

/* k: the mean of s over the row's first (up to 2 VL) elements. */
CPU_INLINE float norm_origin(kite_dtype t, bool add, kite_norm_pos pos, const char *x,
                             const char *res, int64_t n) {
  const int64_t m0 = n < VL ? n : VL, m1 = n - m0 < VL ? n - m0 : VL;
  vf s = norm_input(t, add, pos, x, res, 0, m0);
  if (m1 > 0) s = vf_add(s, norm_input(t, add, pos, x, res, VL, m1));
  return vf_reduce_add(s) / (float)(m0 + m1);
}

/* The shifted sums: d = s - k into sum, and d^2 into sq when the norm takes one pass (0 past a
 * partial chunk). */
CPU_INLINE void norm_first_shifted(kite_dtype t, bool add, kite_norm_pos pos, const char *x,
                                   const char *res, float *srow, int64_t i, int64_t m, vf k,
                                   vf *sum, vf *sq) {
  const vf d = vf_tail(vf_sub(norm_first(t, false, add, pos, x, res, srow, i, m), k), m, 0.0f);
  *sum = vf_add(*sum, d);
  if (norm_one_pass(t, false)) *sq = vf_fma(d, d, *sq);
}

/* (s - mean)^2, 0 past a partial chunk (where s is 0). */
CPU_INLINE vf norm_dev_sq(kite_dtype t, bool add, kite_norm_pos pos, const char *x, const char *res,
                          const float *srow, int64_t i, int64_t m, vf mean) {
  const vf s = norm_again(t, add, pos, x, res, srow, i, m);
  const vf d = vf_tail(vf_sub(s, mean), m, 0.0f);
  return vf_mul(d, d);
}

/* The next row's lines at byte offset off (next, next_res: NULL for none). */
CPU_INLINE void norm_prefetch_next(const char *next, const char *next_res, int64_t off) {
  if (!next) return;
  __builtin_prefetch(next + off);
  if (next_res) __builtin_prefetch(next_res + off);
}

/* y from s, with w's and b's values (used only when the norm has them). */
CPU_INLINE vf norm_y(bool rms, vf s, vf mean, vf rstd, vf offset, const char *w, vf wv,
                     const char *b, vf bv) {
  vf v = vf_mul(rms ? s : vf_sub(s, mean), rstd);
  if (w) v = vf_mul(v, rms ? vf_add(offset, wv) : wv);
  if (!rms && b) v = vf_add(v, bv);
  return v;
}

/* The output chunk: y, and the residual for the fused forms (PRE keeps s, POST keeps y). */
CPU_INLINE void norm_out(kite_dtype t, bool rms, bool add, kite_norm_pos pos, const char *x,
                         char *res, const float *srow, const char *w, const char *b, char *y,
                         vf offset, vf mean, vf rstd, int64_t i, int64_t m, bool stream,
                         const char *next, const char *next_res) {
  const int64_t es = cpu_esize(t);
  if ((i * es) % 64 < VL * es) norm_prefetch_next(next, next_res, i * es);
  const vf s = norm_again(t, add, pos, x, res, srow, i, m), zero = vf_set1(0.0f);
  const vf v = norm_y(rms, s, mean, rstd, offset, w, w ? vf_load(t, w, i, m) : zero, b,
                      !rms && b ? vf_load(t, b, i, m) : zero);
  vf_store(t, y, i, v, m, stream);
  if (add) vf_store(t, res, i, pos == KITE_NORM_PRE ? s : v, m, false);
}

/* The chunk functions above on a pair of vectors (vf_load2 / vf_store2: s, w, b, y and the
 * residual in the pair's lanes' order, and srow too, which is why every pass of a row walks the
 * same chunks). */
CPU_INLINE void norm_input_pair(kite_dtype t, bool add, kite_norm_pos pos, const char *x,
                                const char *res, int64_t i, vf *a, vf *b) {
  vf_load2(t, x, i, a, b);
  if (!add) return;
  vf ra, rb;
  vf_load2(t, res, i, &ra, &rb);
  *a = vf_add(*a, ra), *b = vf_add(*b, rb);
  if (pos == KITE_NORM_PRE) *a = vf_round_to(t, *a), *b = vf_round_to(t, *b);
}

/* Adds the pair's terms into two sums (s^2 for rms, s for layer): two add chains, each 3 cycles
 * per pair, keep the loop from waiting on one. */
CPU_INLINE void norm_first_pair(kite_dtype t, bool rms, bool add, kite_norm_pos pos, const char *x,
                                const char *res, float *srow, int64_t i, vf *acc0, vf *acc1) {
  vf a, b;
  norm_input_pair(t, add, pos, x, res, i, &a, &b);
  if (norm_caches(t, add)) {
    vf_store(KITE_DTYPE_F32, srow, i, a, VL, false);
    vf_store(KITE_DTYPE_F32, srow, i + VL, b, VL, false);
  }
  *acc0 = vf_add(*acc0, rms ? vf_mul(a, a) : a);
  *acc1 = vf_add(*acc1, rms ? vf_mul(b, b) : b);
}

/* The shifted sums on a pair: two chains each for d and d^2. */
CPU_INLINE void norm_first_shifted_pair(kite_dtype t, bool add, kite_norm_pos pos, const char *x,
                                        const char *res, float *srow, int64_t i, vf k, vf *sum0,
                                        vf *sum1, vf *sq0, vf *sq1) {
  vf a, b;
  norm_input_pair(t, add, pos, x, res, i, &a, &b);
  if (norm_caches(t, add)) {
    vf_store(KITE_DTYPE_F32, srow, i, a, VL, false);
    vf_store(KITE_DTYPE_F32, srow, i + VL, b, VL, false);
  }
  a = vf_sub(a, k), b = vf_sub(b, k);
  *sum0 = vf_add(*sum0, a), *sum1 = vf_add(*sum1, b);
  if (norm_one_pass(t, false)) *sq0 = vf_fma(a, a, *sq0), *sq1 = vf_fma(b, b, *sq1);
}

CPU_INLINE void norm_again_pair(kite_dtype t, bool add, kite_norm_pos pos, const char *x,
                                const char *res, const float *srow, int64_t i, vf *a, vf *b) {
  if (norm_caches(t, add)) {
    *a = vf_load(KITE_DTYPE_F32, srow, i, VL);
    *b = vf_load(KITE_DTYPE_F32, srow, i + VL, VL);
  } else {
    norm_input_pair(t, add, pos, x, res, i, a, b);
  }
}

CPU_INLINE void norm_dev_sq_pair(kite_dtype t, bool add, kite_norm_pos pos, const char *x,
                                 const char *res, const float *srow, int64_t i, vf mean, vf *acc0,
                                 vf *acc1) {
  vf a, b;
  norm_again_pair(t, add, pos, x, res, srow, i, &a, &b);
  a = vf_sub(a, mean), b = vf_sub(b, mean);
  *acc0 = vf_add(*acc0, vf_mul(a, a));
  *acc1 = vf_add(*acc1, vf_mul(b, b));
}

CPU_INLINE void norm_out_pair(kite_dtype t, bool rms, bool add, kite_norm_pos pos, const char *x,
                              char *res, const float *srow, const char *w, const char *b, char *y,
                              vf offset, vf mean, vf rstd, int64_t i, bool stream, const char *next,
                              const char *next_res) {
  norm_prefetch_next(next, next_res, i * cpu_esize(t));
  vf sa, sb, wa = vf_set1(0.0f), wb = wa, ba = wa, bb = wa;
  norm_again_pair(t, add, pos, x, res, srow, i, &sa, &sb);
  if (w) vf_load2(t, w, i, &wa, &wb);
  if (!rms && b) vf_load2(t, b, i, &ba, &bb);
  const vf va = norm_y(rms, sa, mean, rstd, offset, w, wa, b, ba);
  const vf vb = norm_y(rms, sb, mean, rstd, offset, w, wb, b, bb);
  vf_store2(t, y, i, va, vb, stream);
  if (add) {
    if (pos == KITE_NORM_PRE)
      vf_store2(t, res, i, sa, sb, false);
    else
      vf_store2(t, res, i, va, vb, false);
  }
}

CPU_INLINE void norm_row(kite_dtype t, bool rms, bool add, kite_norm_pos pos, const norm_job *j,
                         float *srow, int64_t r, int64_t end) {
  const kite_norm_args *a = j->a;
  const int64_t n = a->cols, es = cpu_esize(t);
  const char *x = cpu_row(a->x, a->x_stride, r, es);
  char *res = add ? cpu_row(a->residual, a->residual_stride, r, es) : NULL;
  char *y = cpu_row(a->y, a->y_stride, r, es);

  bool stream = j->stream;
  const int64_t head = cpu_stream_head(t, y, &stream);

  /* rms: mean(s^2); layer: the mean from the shifted sums, then the variance (top of file) */
  vf acc = vf_set1(0.0f), acc1 = vf_set1(0.0f);
  double mean = 0.0, var = -1.0; /* var < 0: not known yet */
  if (!rms) {
    const float k = norm_origin(t, add, pos, x, res, n);
    const vf kv = vf_set1(k);
    vf sq = vf_set1(0.0f), sq1 = vf_set1(0.0f);
    CPU_ROW_PAIRS(
        i, m, n, head, norm_first_shifted(t, add, pos, x, res, srow, i, m, kv, &acc, &sq),
        norm_first_shifted_pair(t, add, pos, x, res, srow, i, kv, &acc, &acc1, &sq, &sq1));
    const double dm = (double)vf_reduce_add(vf_add(acc, acc1)) / (double)n;
    const double v = (double)vf_reduce_add(vf_add(sq, sq1)) / (double)n - dm * dm;
    mean = (double)k + dm;
    if (norm_one_pass(t, false) && dm * dm <= 4.0 * v) var = v; /* else (or NaN) a second pass */
  } else {
    CPU_ROW_PAIRS(i, m, n, head,
                  acc = vf_add(acc, norm_first(t, rms, add, pos, x, res, srow, i, m)),
                  norm_first_pair(t, rms, add, pos, x, res, srow, i, &acc, &acc1));
    var = (double)vf_reduce_add(vf_add(acc, acc1)) / (double)n;
  }
  const vf mv = vf_set1((float)mean);
  if (var < 0.0) {
    acc = acc1 = vf_set1(0.0f);
    CPU_ROW_PAIRS(i, m, n, head,
                  acc = vf_add(acc, norm_dev_sq(t, add, pos, x, res, srow, i, m, mv)),
                  norm_dev_sq_pair(t, add, pos, x, res, srow, i, mv, &acc, &acc1));
    var = (double)vf_reduce_add(vf_add(acc, acc1)) / (double)n;
  }

  const vf rstd = vf_set1((float)(1.0 / sqrt(var + (double)a->eps)));
  const vf offset = vf_set1(a->offset);
  const char *w = a->w, *b = a->b; /* locals: stores through y could alias *a for the compiler */
  /* the next row's statistics pass is a bare stream over memory, with nothing to overlap its
   * misses unless they were started here, behind this row's output */
  const char *next = r + 1 < end ? cpu_row(a->x, a->x_stride, r + 1, es) : NULL;
  const char *next_res = add && next ? cpu_row(a->residual, a->residual_stride, r + 1, es) : NULL;
  CPU_ROW_PAIRS(i, m, n, head,
                norm_out(t, rms, add, pos, x, res, srow, w, b, y, offset, mv, rstd, i, m, stream,
                         next, next_res),
                norm_out_pair(t, rms, add, pos, x, res, srow, w, b, y, offset, mv, rstd, i, stream,
                              next, next_res));
}

CPU_INLINE void norm_rows(kite_dtype t, bool rms, bool add, kite_norm_pos pos, const norm_job *j,
                          float *srow, int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; r++) norm_row(t, rms, add, pos, j, srow, r, end);
}

#define NORM_KIND(rms, add, pos)                                                                   \
  CPU_WITH_DTYPE(j->a->dtype, norm_rows, rms, add, pos, j, srow, begin, end)

static void norm_task(const void *job, int64_t begin, int64_t end, int slot) {
  const norm_job *j = job;
  float *srow = j->scratch ? j->scratch + (int64_t)slot * j->a->cols : NULL;
  const bool pre = j->a->pos == KITE_NORM_PRE;
  switch (j->a->op) {
  case KITE_OP_RMS_NORM:
    NORM_KIND(true, false, KITE_NORM_PRE);
    break;
  case KITE_OP_LAYER_NORM:
    NORM_KIND(false, false, KITE_NORM_PRE);
    break;
  case KITE_OP_ADD_RMS_NORM:
    if (pre)
      NORM_KIND(true, true, KITE_NORM_PRE);
    else
      NORM_KIND(true, true, KITE_NORM_POST);
    break;
  case KITE_OP_ADD_LAYER_NORM:
    if (pre)
      NORM_KIND(false, true, KITE_NORM_PRE);
    else
      NORM_KIND(false, true, KITE_NORM_POST);
    break;
  default:
    break;
  }
  if (j->stream) vf_stream_end();
}
#undef NORM_KIND

static kite_status norm_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_norm_args *a = args;
  if (a->rows <= 0 || a->cols <= 0) return KITE_OK;
  const bool add = a->op == KITE_OP_ADD_RMS_NORM || a->op == KITE_OP_ADD_LAYER_NORM;
  const int64_t elems = a->rows * a->cols;
  const int threads = cpu_parallel_parts(ctx, a->rows, elems * (add ? 4 : 2));
  void *scratch = NULL;
  if (norm_caches(a->dtype, add)) {
    if ((uint64_t)a->cols > SIZE_MAX / sizeof(float) / (uint64_t)threads)
      return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: cpu: rows of %lld are too long",
                            kite_op_name(a->op), (long long)a->cols);
    const size_t bytes = (size_t)threads * (size_t)a->cols * sizeof(float);
    const kite_status s = kite_ctx_workspace(ctx, bytes, &scratch);
    if (s != KITE_OK) return s;
  }
  const norm_job j = {.a = a,
                      .scratch = scratch,
                      .stream =
                          a->y != a->x && cpu_streams(elems * cpu_esize(a->dtype) * (add ? 4 : 2))};
  cpu_parallel_run(threads, a->rows, norm_task, &j);
  return KITE_OK;
}
