/*
 * Activations y = act(x) over [rows, cols], and gated activations y[r, i] = act(g) * u with the
 * gate g = x[r, i] and up u = x[r, cols + i] (optionally clamped by limit first).
 *
 * The sigmoid-type activations are x * sigmoid(k) = x / (1 + exp(-k)):
 *   silu k = x; gelu_quick k = 1.702 x;
 *   gelu_tanh: (1 + tanh(u)) / 2 = sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3), which stays
 *   accurate for negative x where 1 + tanh(u) cancels.
 * gelu (erf) is x * Phi(x), the normal CDF (vf_normal_cdf).
 * Part of kernels.h.
 */

typedef struct act_job {
  kite_op op;
  kite_dtype dtype;
  const char *x, *up; /* up: the second half of x's rows (gated ops only) */
  int64_t x_stride;
  char *y;
  int64_t y_stride;
  float limit; /* > 0: clamp, gated ops only */
  bool stream;
  cpu_grid grid;
} act_job;

CPU_INLINE bool act_is_gated(kite_op op) {
  return op == KITE_OP_SILU_AND_MUL || op == KITE_OP_GELU_AND_MUL ||
         op == KITE_OP_GELU_TANH_AND_MUL;
}

/* 1 + e^-x, in the cheaper form when the result is rounded to 16 bits (t is a constant in each
 * body, so the branch folds). */
CPU_INLINE vf act_sigmoid_den(kite_dtype t, vf x) {
  return t == KITE_DTYPE_F32 ? vf_sigmoid_den(x) : vf_sigmoid_den16(x);
}

/* The transcendental part of act: 1 + e^-k for the sigmoid types, Phi for gelu. */
CPU_INLINE vf act_inner(kite_dtype t, kite_op op, vf x) {
  switch (op) {
  case KITE_OP_SILU:
  case KITE_OP_SILU_AND_MUL:
    return act_sigmoid_den(t, x);
  case KITE_OP_GELU_QUICK:
    return act_sigmoid_den(t, vf_mul(x, vf_set1(1.702f)));
  case KITE_OP_GELU_TANH:
  case KITE_OP_GELU_TANH_AND_MUL: {
    /* 2u = x (c0 + c1 x^2), c0 = 2 sqrt(2/pi), c1 = 0.044715 c0 */
    const vf two_u =
        vf_mul(x, vf_fma(vf_mul(x, x), vf_set1(0.0713548162726f), vf_set1(1.5957691216057f)));
    return act_sigmoid_den(t, two_u);
  }
  case KITE_OP_GELU:
  case KITE_OP_GELU_AND_MUL:
    return t == KITE_DTYPE_F32 ? vf_normal_cdf(x) : vf_normal_cdf16(x);
  default:
    return vf_max(vf_set1(0.0f), x); /* relu; NaN stays NaN */
  }
}

/* act(x) from x and act_inner(x). Below -128 every smooth activation is 0 to f32's precision
 * (|act(x)| < 1e-37), so the x factor is clamped there: -inf and huge negative inputs give
 * about -0 instead of -inf * 0 = NaN or -huge / (1 + e^88) (kite.h: act(-inf) = -0). */
CPU_INLINE vf act_outer(kite_dtype t, kite_op op, vf x, vf inner) {
  if (op == KITE_OP_RELU) return inner;
  const vf xc = vf_max(vf_set1(-128.0f), x); /* NaN stays NaN */
  vf y;
  switch (op) {
  case KITE_OP_GELU:
  case KITE_OP_GELU_AND_MUL:
    y = vf_mul(xc, inner);
    break;
  default:
    y = t == KITE_DTYPE_F32 ? vf_div_pos(xc, inner) : vf_div_pos16(xc, inner);
    break;
  }
  /* above 128 every one is x to f32's precision; and +inf / 1 through an exact reciprocal
   * estimate (AVX-512's of 1) is inf * 0 = NaN in vf_div_pos's correction step */
  return vf_lt_select(vf_set1(128.0f), x, x, y);
}

/* Ops whose act_inner is computed where it is used, in one pass: gelu's polynomial is one short
 * chain (no division after it), and relu's max is nothing to split. */
CPU_INLINE bool act_one_pass(kite_op op) {
  return op == KITE_OP_GELU || op == KITE_OP_GELU_AND_MUL || op == KITE_OP_RELU;
}

/* The gate, clamped to <= limit when `clamp` (a constant in each body, as are t, op and stream
 * below: every branch on them folds, and the loops carry no flag tests). */
CPU_INLINE vf act_gate(kite_dtype t, bool clamp, vf limit, const char *x, int64_t i, int64_t m) {
  const vf v = vf_load(t, x, i, m);
  return clamp ? vf_min(limit, v) : v;
}

CPU_INLINE void act_inner_chunk(kite_dtype t, kite_op op, bool clamp, vf limit, const char *x,
                                float *inner, int64_t i, int64_t m) {
  vf_store(KITE_DTYPE_F32, inner, i, act_inner(t, op, act_gate(t, clamp, limit, x, i, m)), m,
           false);
}

CPU_INLINE void act_outer_chunk(kite_dtype t, kite_op op, bool clamp, vf limit, const char *x,
                                const char *up, const float *inner, char *y, int64_t i, int64_t m,
                                bool stream) {
  const vf g = act_gate(t, clamp, limit, x, i, m);
  vf v = act_outer(t, op, g,
                   act_one_pass(op) ? act_inner(t, op, g) : vf_load(KITE_DTYPE_F32, inner, i, m));
  if (act_is_gated(op)) {
    vf u = vf_load(t, up, i, m);
    if (clamp) u = vf_max(vf_neg(limit), vf_min(limit, u));
    v = vf_mul(v, u);
  }
  vf_store(t, y, i, v, m, stream);
}

/* The two chunk bodies on a pair of vectors (vf_load2 / vf_store2; inner keeps their lanes'
 * order, which only the pair functions know). */
CPU_INLINE void act_inner_pair(kite_dtype t, kite_op op, bool clamp, vf limit, const char *x,
                               float *inner, int64_t i) {
  vf a, b;
  vf_load2(t, x, i, &a, &b);
  if (clamp) a = vf_min(limit, a), b = vf_min(limit, b);
  vf_store(KITE_DTYPE_F32, inner, i, act_inner(t, op, a), VL, false);
  vf_store(KITE_DTYPE_F32, inner, i + VL, act_inner(t, op, b), VL, false);
}

CPU_INLINE void act_outer_pair(kite_dtype t, kite_op op, bool clamp, vf limit, const char *x,
                               const char *up, const float *inner, char *y, int64_t i,
                               bool stream) {
  vf a, b;
  vf_load2(t, x, i, &a, &b);
  if (clamp) a = vf_min(limit, a), b = vf_min(limit, b);
  if (act_one_pass(op)) {
    a = act_outer(t, op, a, act_inner(t, op, a));
    b = act_outer(t, op, b, act_inner(t, op, b));
  } else {
    a = act_outer(t, op, a, vf_load(KITE_DTYPE_F32, inner, i, VL));
    b = act_outer(t, op, b, vf_load(KITE_DTYPE_F32, inner, i + VL, VL));
  }
  if (act_is_gated(op)) {
    vf ua, ub;
    vf_load2(t, up, i, &ua, &ub);
    if (clamp) {
      ua = vf_max(vf_neg(limit), vf_min(limit, ua));
      ub = vf_max(vf_neg(limit), vf_min(limit, ub));
    }
    a = vf_mul(a, ua), b = vf_mul(b, ub);
  }
  vf_store2(t, y, i, a, b, stream);
}

/* Columns [c0, c1) of row r, in blocks of ACT_BLOCK: the first pass leaves act_inner of the block
 * in an L1 buffer, the second finishes. Two short dependency chains instead of one long one
 * (exp, then the division) let the core overlap more vectors: 25% faster for silu on Zen 3. The
 * first block is the streaming head when there is one, so later blocks start aligned. A block of
 * 64 vectors (2 KB of f32 on AVX2) keeps the loops long enough that their exits, mispredicted
 * once per loop, cost little: 30% faster than 8 vectors for bf16 silu. */
#define ACT_BLOCK (64 * VL)

CPU_INLINE void act_block(kite_dtype t, kite_op op, bool clamp, bool stream, const act_job *j,
                          int64_t r, int64_t c0, int64_t c1, int64_t head) {
  const int64_t es = cpu_esize(t), n = c1 - c0;
  const char *x = cpu_row(j->x, j->x_stride, r, es) + c0 * es;
  const char *up = act_is_gated(op) ? cpu_row(j->up, j->x_stride, r, es) + c0 * es : NULL;
  char *y = cpu_row(j->y, j->y_stride, r, es) + c0 * es;
  const vf limit = vf_set1(j->limit);
  float inner[ACT_BLOCK];
  for (int64_t b0 = 0, len; b0 < n; b0 += len) {
    len = b0 == 0 && head < VL ? head : ACT_BLOCK;
    if (len > n - b0) len = n - b0;
    const char *xb = x + b0 * es, *ub = up ? up + b0 * es : NULL;
    char *yb = y + b0 * es;
    if (!act_one_pass(op))
      CPU_ROW_PAIRS(i, m, len, VL, act_inner_chunk(t, op, clamp, limit, xb, inner, i, m),
                    act_inner_pair(t, op, clamp, limit, xb, inner, i));
    CPU_ROW_PAIRS(i, m, len, VL,
                  act_outer_chunk(t, op, clamp, limit, xb, ub, inner, yb, i, m, stream),
                  act_outer_pair(t, op, clamp, limit, xb, ub, inner, yb, i, stream));
  }
}

/* One body per (clamp, stream); clamp only for the gated ops. */
CPU_INLINE void act_items(kite_dtype t, kite_op op, const act_job *j, int64_t begin, int64_t end) {
  const bool clamp = act_is_gated(op) && j->limit > 0;
  for (int64_t it = begin; it < end; it++) {
    int64_t r, c0, c1;
    cpu_grid_item(&j->grid, it, &r, &c0, &c1);
    bool stream = j->stream;
    const int64_t head = cpu_stream_head(
        t, cpu_row(j->y, j->y_stride, r, cpu_esize(t)) + c0 * cpu_esize(t), &stream);
    if (clamp && stream)
      act_block(t, op, true, true, j, r, c0, c1, head);
    else if (clamp)
      act_block(t, op, true, false, j, r, c0, c1, head);
    else if (stream)
      act_block(t, op, false, true, j, r, c0, c1, head);
    else
      act_block(t, op, false, false, j, r, c0, c1, head);
  }
}

#define ACT_CASE(op)                                                                               \
  case op:                                                                                         \
    CPU_WITH_DTYPE(j->dtype, act_items, op, j, begin, end);                                        \
    break

static void act_task(const void *job, int64_t begin, int64_t end, int slot) {
  const act_job *j = job;
  switch (j->op) {
    ACT_CASE(KITE_OP_SILU);
    ACT_CASE(KITE_OP_GELU);
    ACT_CASE(KITE_OP_GELU_TANH);
    ACT_CASE(KITE_OP_GELU_QUICK);
    ACT_CASE(KITE_OP_RELU);
    ACT_CASE(KITE_OP_SILU_AND_MUL);
    ACT_CASE(KITE_OP_GELU_AND_MUL);
    ACT_CASE(KITE_OP_GELU_TANH_AND_MUL);
  default:
    break;
  }
  if (j->stream) vf_stream_end();
}
#undef ACT_CASE

/* ---- 16-bit inputs through a table ------------------------------------------------------
 * A bf16 or f16 input has 65536 values, so a one-input activation of it is a table of 65536
 * results (ggml keeps one for f16 gelu): one load per element instead of the exp or erf
 * polynomial, 1.35x faster for gelu at 8192 x 4096 bf16 on Zen 3. The table is built once per (op,
 * dtype) by the vector path itself, so its results are bit for bit that path's. A call must have
 * ACT_TABLE_MIN elements to use it: a smaller one would spend more on the cold 128 KB table. */
#define ACT_TABLE_MIN ((int64_t)1 << 17)
#define ACT_TABLE_CHUNK 256 /* elements looked up into an L1 buffer, then stored together */

static _Atomic(uint16_t *) g_act_tables[4][2]; /* [silu, gelu, gelu_tanh, gelu_quick][bf16, f16] */

/* The table of op over every 16-bit value of t, or NULL (no table for op, or out of memory:
 * the caller computes instead). Racing first calls each build one; one is kept. */
static const uint16_t *act_table(kite_op op, kite_dtype t) {
  const int o = op == KITE_OP_SILU         ? 0
                : op == KITE_OP_GELU       ? 1
                : op == KITE_OP_GELU_TANH  ? 2
                : op == KITE_OP_GELU_QUICK ? 3
                                           : -1;
  if (o < 0 || (t != KITE_DTYPE_BF16 && t != KITE_DTYPE_F16)) return NULL;
  _Atomic(uint16_t *) *slot = &g_act_tables[o][t == KITE_DTYPE_F16];
  uint16_t *tab = atomic_load_explicit(slot, memory_order_acquire);
  if (tab) return tab;
  uint16_t *in = malloc(sizeof(uint16_t) << 16);
  tab = malloc(sizeof(uint16_t) << 16);
  if (!in || !tab) {
    free(in);
    free(tab);
    return NULL;
  }
  for (int v = 0; v < 1 << 16; v++) in[v] = (uint16_t)v;
  const act_job j = {
      .op = op,
      .dtype = t,
      .x = (const char *)in,
      .x_stride = 1 << 16,
      .y = (char *)tab,
      .y_stride = 1 << 16,
      .grid = {.rows = 1, .cols = 1 << 16, .blocks = 1, .block_cols = 1 << 16, .items = 1}};
  act_task(&j, 0, 1, 0);
  free(in);
  uint16_t *none = NULL;
  if (!atomic_compare_exchange_strong_explicit(slot, &none, tab, memory_order_acq_rel,
                                               memory_order_acquire)) {
    free(tab);
    return none;
  }
  return tab;
}

typedef struct act_table_job {
  const act_job *j;
  const uint16_t *tab;
} act_table_job;

/* y[0..4) = tab[x[0..4)]: the four inputs in one 8-byte load and the four results in one store,
 * two memory accesses fewer per element than looking up one at a time (the loop's limit: Zen 3
 * retires three loads or two stores a cycle), 1.2x faster in L1. */
CPU_INLINE void act_table_4(const uint16_t *tab, const uint16_t *x, uint16_t *y) {
  uint64_t v, r;
  memcpy(&v, x, sizeof v);
  r = (uint64_t)tab[v & 0xffff] | (uint64_t)tab[(v >> 16) & 0xffff] << 16 |
      (uint64_t)tab[(v >> 32) & 0xffff] << 32 | (uint64_t)tab[v >> 48] << 48;
  memcpy(y, &r, sizeof r);
}

/* y[0..n) = tab[x[0..n)]; y may be x. */
CPU_INLINE void act_table_span(const uint16_t *tab, const uint16_t *x, uint16_t *y, int64_t n) {
  int64_t e = 0;
  for (; e + 8 <= n; e += 8) { /* two independent halves per iteration */
    act_table_4(tab, x + e, y + e);
    act_table_4(tab, x + e + 4, y + e + 4);
  }
  for (; e < n; e++) y[e] = tab[x[e]];
}

/* Not vectorized: GCC would build vectors lane by lane from the table loads (VPINSRW), slower
 * than the plain loads and stores it replaces; AVX2's gathers measured no faster. Streaming
 * stores need whole vectors, so a streamed y is looked up into an L1 buffer first. */
__attribute__((optimize("no-tree-vectorize"))) static void
act_table_task(const void *job, int64_t begin, int64_t end, int slot) {
  const act_table_job *tj = job;
  const act_job *j = tj->j;
  uint16_t buf[ACT_TABLE_CHUNK];
  for (int64_t it = begin; it < end; it++) {
    int64_t r, c0, c1;
    cpu_grid_item(&j->grid, it, &r, &c0, &c1);
    const uint16_t *x = (const uint16_t *)cpu_row(j->x, j->x_stride, r, 2) + c0;
    uint16_t *y = (uint16_t *)cpu_row(j->y, j->y_stride, r, 2) + c0;
    if (!j->stream) {
      act_table_span(tj->tab, x, y, c1 - c0);
      continue;
    }
    for (int64_t i = 0; i < c1 - c0; i += ACT_TABLE_CHUNK) {
      const int64_t n = c1 - c0 - i < ACT_TABLE_CHUNK ? c1 - c0 - i : ACT_TABLE_CHUNK;
      act_table_span(tj->tab, x + i, buf, n);
      vb_copy_stream(y + i, buf, (size_t)n * 2);
    }
  }
  if (j->stream) vf_stream_end();
}

/* Shared by the plain and the gated entry points: up is NULL for the plain ones. */
static kite_status act_launch(kite_ctx *ctx, kite_op op, kite_dtype t, int64_t rows, int64_t cols,
                              const void *x, const void *up, int64_t x_stride, void *y,
                              int64_t y_stride, float limit) {
  act_job j = {.op = op,
               .dtype = t,
               .x = x,
               .up = up,
               .x_stride = x_stride,
               .y = y,
               .y_stride = y_stride,
               .limit = limit,
               .stream = y != x && cpu_streams(rows * cols * cpu_esize(t) * (up ? 3 : 2)),
               .grid = cpu_grid_make(ctx, rows, cols)};
  const int64_t work = rows * cols * (up ? 3 : 2);
  const act_table_job tj = {.j = &j,
                            .tab = !up && rows * cols >= ACT_TABLE_MIN ? act_table(op, t) : NULL};
  cpu_parallel_run(cpu_parallel_parts(ctx, j.grid.items, work), j.grid.items,
                   tj.tab ? act_table_task : act_task, tj.tab ? (const void *)&tj : &j);
  return KITE_OK;
}

static kite_status act_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_act_args *a = args;
  return act_launch(ctx, a->op, a->dtype, a->rows, a->cols, a->x, NULL, a->x_stride, a->y,
                    a->y_stride, 0.0f);
}

static kite_status gated_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_gated_args *a = args;
  const char *up = (const char *)a->x + a->cols * cpu_esize(a->dtype);
  return act_launch(ctx, a->op, a->dtype, a->rows, a->cols, a->x, up, a->x_stride, a->y,
                    a->y_stride, a->limit);
}
