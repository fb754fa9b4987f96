/*
 * Softmax over rows: y = exp(scale x - max) / sum, three passes per row:
 *   1. max of scale x (tail lanes filled with -inf),
 *   2. e = exp(scale x - max) into an f32 scratch row, and their sum,
 *   3. y = e * (1 / sum), rounded once (a low-precision y cannot hold e itself).
 * The scratch row (one per thread, from the ctx workspace) stays in L1/L2 between passes 2 and 3,
 * so x is read from memory once and y written once. y may alias x.
 * Part of kernels.h.
 */

typedef struct softmax_job {
  const kite_softmax_args *a;
  float *scratch; /* [threads, cols] */
  bool stream;
} softmax_job;

/* exp(z) for z = scale x - max <= 0, in the cheaper form when y is 16-bit. */
CPU_INLINE vf softmax_exp_of(kite_dtype t, vf z) {
  return t == KITE_DTYPE_F32 ? vf_exp_nonpos(z) : vf_exp16_nonpos(z);
}

/* e = exp(scale x - max) into the scratch row; returns the running sum. Also asks for the line of
 * the next row (next, NULL for none) that sits as far in as x[i]: the max pass that starts the
 * next row is a bare stream over memory, with nothing to overlap its misses unless they were
 * started here, behind the exp. */
CPU_INLINE vf softmax_exp(kite_dtype t, const char *x, const char *next, float *e, vf scale,
                          vf minus_max, int64_t i, int64_t m, vf sum) {
  const int64_t es = cpu_esize(t);
  if (next && (i * es) % 64 < VL * es) __builtin_prefetch(next + i * es);
  const vf ei = vf_tail(softmax_exp_of(t, vf_fma(vf_load(t, x, i, m), scale, minus_max)), m, 0.0f);
  vf_store(KITE_DTYPE_F32, e, i, ei, m, false);
  return vf_add(sum, ei);
}

/* The same on a pair of vectors (e keeps their lanes' order, which pass 3 reads back by pairs). */
CPU_INLINE vf softmax_exp_pair(kite_dtype t, const char *x, const char *next, float *e, vf scale,
                               vf minus_max, int64_t i, vf sum) {
  const int64_t es = cpu_esize(t);
  if (next) __builtin_prefetch(next + i * es);
  vf a, b;
  vf_load2(t, x, i, &a, &b);
  a = softmax_exp_of(t, vf_fma(a, scale, minus_max));
  b = softmax_exp_of(t, vf_fma(b, scale, minus_max));
  vf_store(KITE_DTYPE_F32, e, i, a, VL, false);
  vf_store(KITE_DTYPE_F32, e, i + VL, b, VL, false);
  return vf_add(sum, vf_add(a, b));
}

CPU_INLINE vf softmax_max_pair(kite_dtype t, const char *x, vf scale, int64_t i, vf mx) {
  vf a, b;
  vf_load2(t, x, i, &a, &b);
  return vf_max(mx, vf_max(vf_mul(a, scale), vf_mul(b, scale)));
}

CPU_INLINE void softmax_out_pair(kite_dtype t, const float *e, char *y, vf inv, int64_t i,
                                 bool stream) {
  const vf a = vf_mul(vf_load(KITE_DTYPE_F32, e, i, VL), inv);
  vf_store2(t, y, i, a, vf_mul(vf_load(KITE_DTYPE_F32, e, i + VL, VL), inv), stream);
}

/* Passes 2 and 3 walk the same chunks (from the streaming head of y), so that pairs of e are
 * read back as they were written. */
CPU_INLINE void softmax_rows(kite_dtype t, const softmax_job *j, int64_t begin, int64_t end,
                             float *e) {
  const kite_softmax_args *a = j->a;
  const int64_t n = a->cols, es = cpu_esize(t);
  const vf scale = vf_set1(a->scale);
  for (int64_t r = begin; r < end; r++) {
    const char *x = cpu_row(a->x, a->x_stride, r, es);
    char *y = cpu_row(a->y, a->y_stride, r, es);

    vf mx = vf_set1(-INFINITY);
    CPU_ROW_PAIRS(i, m, n, VL,
                  mx = vf_max(mx, vf_tail(vf_mul(vf_load(t, x, i, m), scale), m, -INFINITY)),
                  mx = softmax_max_pair(t, x, scale, i, mx));
    const vf minus_max = vf_set1(-vf_reduce_max(mx));

    bool stream = j->stream;
    const int64_t head = cpu_stream_head(t, y, &stream);
    vf sum = vf_set1(0.0f);
    const char *next = r + 1 < end ? cpu_row(a->x, a->x_stride, r + 1, es) : NULL;
    CPU_ROW_PAIRS(i, m, n, head, sum = softmax_exp(t, x, next, e, scale, minus_max, i, m, sum),
                  sum = softmax_exp_pair(t, x, next, e, scale, minus_max, i, sum));

    const vf inv = vf_set1(1.0f / vf_reduce_add(sum));
    CPU_ROW_PAIRS(i, m, n, head,
                  vf_store(t, y, i, vf_mul(vf_load(KITE_DTYPE_F32, e, i, m), inv), m, stream),
                  softmax_out_pair(t, e, y, inv, i, stream));
  }
}

static void softmax_task(const void *job, int64_t begin, int64_t end, int slot) {
  const softmax_job *j = job;
  float *e = j->scratch + (int64_t)slot * j->a->cols;
  CPU_WITH_DTYPE(j->a->dtype, softmax_rows, j, begin, end, e);
  if (j->stream) vf_stream_end();
}

static kite_status softmax_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_softmax_args *a = args;
  if (a->rows <= 0 || a->cols <= 0) return KITE_OK;
  const int64_t elems = a->rows * a->cols;
  const int parts = cpu_parallel_parts(ctx, a->rows, elems * 2);
  if ((uint64_t)a->cols > SIZE_MAX / sizeof(float) / (uint64_t)parts)
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "softmax: cpu: rows of %lld are too long",
                          (long long)a->cols);
  void *ws;
  kite_status s = kite_ctx_workspace(ctx, (size_t)parts * (size_t)a->cols * sizeof(float), &ws);
  if (s != KITE_OK) return s;
  const bool stream = a->y != a->x && cpu_streams(elems * cpu_esize(a->dtype) * 2);
  const softmax_job j = {.a = a, .scratch = ws, .stream = stream};
  cpu_parallel_run(parts, a->rows, softmax_task, &j);
  return KITE_OK;
}
