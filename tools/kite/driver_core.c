/*
 * Drivers of rope, softmax and embedding, forward and backward:
 *   rope, rope_backward:   q[T, Hq, D], k[T, Hkv, D] in place, positions[T], cos_sin
 *   softmax:               x[rows, cols] -> y;  softmax_backward: y, dy -> dx [rows, cols]
 *   embedding:             ids[T], table[V, H] -> y[T, H];  embedding_backward: ids, dy[T, H]
 *                          -> dtable[V, H]
 * Cases cover 0, 1 and many rows, odd and power-of-two widths, strided views, in place, and
 * every option of each op.
 */
#include <stdio.h>
#include <string.h>

#include "rows.h"
#include "util.h"

/* argument slots */

/* Ops of this family that share a layout. */
typedef enum kt_core_kind {
  KT_NONE,
  KT_ROPE,
  KT_SOFTMAX,
  KT_SOFTMAX_BWD,
  KT_EMBEDDING,
  KT_EMBEDDING_BWD
} kt_core_kind;

static kt_core_kind kt_core_kind_of(kite_op op) {
  switch (op) {
  case KITE_OP_ROPE:
  case KITE_OP_ROPE_BACKWARD:
    return KT_ROPE;
  case KITE_OP_SOFTMAX:
    return KT_SOFTMAX;
  case KITE_OP_SOFTMAX_BACKWARD:
    return KT_SOFTMAX_BWD;
  case KITE_OP_EMBEDDING:
    return KT_EMBEDDING;
  case KITE_OP_EMBEDDING_BACKWARD:
    return KT_EMBEDDING_BWD;
  default:
    return KT_NONE;
  }
}

/* ---- descriptions ------------------------------------------------------------------------ */

static void core_shape(const kt_case *c, char *buf, size_t n) {
  if (kt_core_kind_of(c->op) == KT_ROPE)
    snprintf(buf, n, "%lldx%lldx%lldx%lld", (long long)c->rows, (long long)c->hq, (long long)c->hkv,
             (long long)c->head_dim);
  else if (c->op == KITE_OP_EMBEDDING_BACKWARD)
    snprintf(buf, n, "%lldx%lldx%lld", (long long)c->rows, (long long)c->vocab, (long long)c->cols);
  else
    kt_rows_shape(c, buf, n);
}

static void core_describe(const kt_case *c, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = '\0';
  switch (kt_core_kind_of(c->op)) {
  case KT_ROPE:
    kt_cat(buf, n, &len, "T=%lld Hq=%lld Hkv=%lld D=%lld rot=%lld %s", (long long)c->rows,
           (long long)c->hq, (long long)c->hkv, (long long)c->head_dim, (long long)c->rot_dim,
           c->style == KITE_ROPE_GPTJ ? "gptj" : "neox");
    if (c->layout == KT_QK_FUSED) kt_cat(buf, n, &len, " fused-qkv");
    if (c->layout == KT_QK_HEAD_PAD) kt_cat(buf, n, &len, " head+%lld", (long long)c->pad_x);
    if (c->k_null) kt_cat(buf, n, &len, " k=NULL");
    return;
  case KT_EMBEDDING:
  case KT_EMBEDDING_BWD:
    kt_cat(buf, n, &len, "T=%lld V=%lld H=%lld", (long long)c->rows, (long long)c->vocab,
           (long long)c->cols);
    if (c->oob_ids) kt_cat(buf, n, &len, " ids-out-of-range");
    break;
  default:
    kt_cat(buf, n, &len, "%lldx%lld", (long long)c->rows, (long long)c->cols);
    if (c->scale != 1.0f) kt_cat(buf, n, &len, " scale=%g", (double)c->scale);
    break;
  }
  kt_describe_tail(c, buf, n, &len);
}

/* ---- layout ------------------------------------------------------------------------------ */

/* q[T, Hq, D] and k[T, Hkv, D] as the case's layout says. */
static void plan_rope(kt_run *r, const kt_case *c, float lo, float hi) {
  const int bwd = c->op == KITE_OP_ROPE_BACKWARD;
  const char *qn = bwd ? "dq" : "q", *kn = bwd ? "dk" : "k";
  int64_t T = c->rows, hq = c->hq, hkv = c->hkv, D = c->head_dim;
  kite_dtype t = c->dtype;
  if (c->layout == KT_QK_FUSED) {
    int64_t ts = (hq + 2 * hkv) * D; /* token stride of the fused projection */
    int b = kt_add_buf(r, "qkv", t, T * ts);
    int64_t qs[3] = {T, hq, D}, ks[3] = {T, hkv, D}, st[3] = {ts, D, 1};
    kt_bind(r, qn, kt_add_view(r, "q", b, t, KT_INOUT, 3, qs, st, 0, KT_FILL_UNIFORM, lo, hi));
    if (!c->k_null)
      kt_bind(r, kn,
              kt_add_view(r, "k", b, t, KT_INOUT, 3, ks, st, hq * D, KT_FILL_UNIFORM, lo, hi));
    if (hkv > 0)
      kt_add_view(r, "v", b, t, KT_IN, 3, ks, st, (hq + hkv) * D, KT_FILL_UNIFORM, lo, hi);
    return;
  }
  int64_t hs = D + (c->layout == KT_QK_HEAD_PAD ? c->pad_x : 0); /* head stride */
  int64_t qs[3] = {T, hq, D}, qst[3] = {hq * hs, hs, 1};
  kt_bind(r, qn,
          kt_add_view(r, "q", kt_add_buf(r, "q", t, T * hq * hs), t, KT_INOUT, 3, qs, qst, 0,
                      KT_FILL_UNIFORM, lo, hi));
  if (c->k_null) return;
  int64_t ks[3] = {T, hkv, D}, kst[3] = {hkv * hs, hs, 1};
  kt_bind(r, kn,
          kt_add_view(r, "k", kt_add_buf(r, "k", t, T * hkv * hs), t, KT_INOUT, 3, ks, kst, 0,
                      KT_FILL_UNIFORM, lo, hi));
}

static void core_plan(kt_run *r, const kt_case *c) {
  kite_dtype t = c->dtype;
  float lo = c->shift - c->amp, hi = c->shift + c->amp;
  int64_t R = c->rows, C = c->cols;
  switch (kt_core_kind_of(c->op)) {
  case KT_SOFTMAX: {
    int x = kt_bind(
        r, "x", kt_add_matrix(r, "x", t, c->inplace ? KT_INOUT : KT_IN, R, C, c->pad_x, lo, hi));
    kt_bind(r, "y", c->inplace ? x : kt_add_matrix(r, "y", t, KT_OUT, R, C, c->pad_y, 0, 0));
    break;
  }
  case KT_SOFTMAX_BWD:
    /* y: probabilities-like values (the formula holds for any y) */
    {
      kt_bind(r, "y",
              kt_add_matrix(r, "y", t, KT_IN, R, C, c->pad_x, 0, 2.0f / (float)(C > 0 ? C : 1)));
      int dy = kt_bind(r, "dy", kt_add_matrix(r, "dy", t, KT_IN, R, C, c->pad_x, -1, 1));
      kt_bind(r, "dx", kt_add_out_or_inplace(r, c, dy, "dx", R, C));
      break;
    }
  case KT_ROPE: {
    plan_rope(r, c, lo, hi);
    kt_bind(r, "positions",
            kt_add_vector(r, "positions", KITE_DTYPE_I32, KT_IN, R,
                          c->seq_positions ? KT_FILL_SEQ : KT_FILL_IDS, 0.0f, (float)c->max_pos));
    int64_t shape[2] = {c->max_pos, c->rot_dim}, strides[2] = {c->rot_dim, 1};
    int b = kt_add_buf(r, "cos_sin", KITE_DTYPE_F32, c->max_pos * c->rot_dim);
    kt_bind(r, "cos_sin",
            kt_add_view(r, "cos_sin", b, KITE_DTYPE_F32, KT_IN, 2, shape, strides, 0,
                        KT_FILL_ROPE_CACHE, 0, 0));
    break;
  }
  case KT_NONE:
    r->bad = 1;
    break;
  case KT_EMBEDDING:
  case KT_EMBEDDING_BWD: {
    /* with oob_ids about a fifth of the ids fall outside [0, V) on either side */
    float extra = c->oob_ids ? (float)(c->vocab / 8 + 2) : 0.0f;
    kt_bind(r, "ids",
            kt_add_vector(r, "ids", KITE_DTYPE_I32, KT_IN, R, KT_FILL_IDS, -extra,
                          (float)c->vocab + extra));
    if (c->op == KITE_OP_EMBEDDING_BACKWARD) {
      kt_bind(r, "dy", kt_add_matrix(r, "dy", t, KT_IN, R, C, c->pad_x, lo, hi));
      kt_bind(r, "dtable", kt_add_matrix(r, "dtable", t, KT_OUT, c->vocab, C, c->pad_y, 0, 0));
      break;
    }
    kt_bind(r, "table", kt_add_matrix(r, "table", t, KT_IN, c->vocab, C, c->pad_x, lo, hi));
    kt_bind(r, "y", kt_add_matrix(r, "y", t, KT_OUT, R, C, c->pad_y, 0, 0));
    break;
  }
  }
}

/* ---- the call ---------------------------------------------------------------------------- */

KT_SCALARS(core_scalar, KT_FIELD("scale", 'f', scale), KT_FIELD("rot_dim", 'l', rot_dim),
           KT_FIELD("style", 'i', style))

/* ---- cases and bounds -------------------------------------------------------------------- */

/* NMSE bounds [f32, f16, bf16]. A forward kernel that computes in f32 and rounds once to the
 * output type differs from the float64 ref by about one rounding of the output: NMSE ~ 1e-14
 * (f32), 1e-7 (f16), 5e-6 (bf16); the bounds leave room for f32 arithmetic inside long
 * reductions. The backward ops' sums (y . dy, a table row over its tokens) round more. */
static double core_bound(kite_op op, kite_dtype t) {
  static const double fwd[3] = {1e-10, 1e-6, 1e-4}, bwd[3] = {1e-6, 1e-5, 1e-4};
  const kt_core_kind k = kt_core_kind_of(op);
  return kt_bound_of(t, k == KT_SOFTMAX_BWD || k == KT_EMBEDDING_BWD ? bwd : fwd);
}

/* ---- the cases --------------------------------------------------------------------------- */

/* Every option of softmax at shape s. */
static void gen_softmax(kt_case_list *l, kite_op op, kite_dtype t, kt_shape2 s) {
  kt_case base = kt_case_default(op, t, s.rows, s.cols), c;
  c = base, c.pad_x = 5, c.pad_y = 3, kt_case_push(l, c);
  c = base, c.scale = 0.125f, c.amp = 8.0f, kt_case_push(l, c);
  c = base, c.scale = 2.5f, kt_case_push(l, c);
  /* large magnitudes: scale * x spans [-100, 100], exp underflows for most of the row */
  c = base, c.scale = 0.5f, c.amp = 200.0f, c.pad_x = 1, kt_case_push(l, c);
  c = base, c.shift = 50.0f, c.amp = 2.0f, kt_case_push(l, c); /* all large and positive */
}

/* softmax_backward at every backward size: plain, scaled and strided, in place. */
static void gen_softmax_bwd(kt_case_list *l, kite_dtype t, int quick) {
  int n;
  const kt_shape2 *s = kt_bwd_sizes(quick, &n);
  for (int i = 0; i < n; i++) {
    kt_case c = kt_bwd_case(KITE_OP_SOFTMAX_BACKWARD, t, s[i].rows, s[i].cols);
    kt_case_push(l, c);
    c.scale = 0.125f, c.pad_x = 3, c.pad_y = 2;
    kt_case_push(l, c);
    c = kt_bwd_case(KITE_OP_SOFTMAX_BACKWARD, t, s[i].rows, s[i].cols), c.inplace = 1;
    c.scale = 2.0f;
    kt_case_push(l, c);
  }
}

typedef struct rope_geom {
  int64_t tokens, hq, hkv, head_dim, rot_dim;
} rope_geom;

static const rope_geom g_rope[] = {
    {0, 4, 2, 64, 64},    {1, 1, 1, 2, 2},       {3, 4, 2, 64, 64},
    {2, 3, 3, 10, 6},     {5, 6, 2, 80, 32},     {7, 4, 1, 130, 128},
    {17, 8, 8, 128, 128}, {64, 32, 8, 128, 128}, {256, 32, 8, 128, 64}};
static const rope_geom g_quick_rope[] = {{0, 4, 2, 64, 64}, {3, 4, 2, 64, 64}, {5, 6, 2, 80, 32}};

static void gen_rope(kt_case_list *l, kite_op op, kite_dtype t, int quick) {
  const rope_geom *g = quick ? g_quick_rope : g_rope;
  int n = quick ? (int)(sizeof g_quick_rope / sizeof *g) : (int)(sizeof g_rope / sizeof *g);
  for (int i = 0; i < n; i++)
    for (int style = 0; style < 2; style++)
      for (int layout = KT_QK_SPLIT; layout <= KT_QK_HEAD_PAD; layout++)
        for (int k_null = 0; k_null <= 1; k_null++) {
          if (quick && k_null && layout != KT_QK_FUSED) continue;
          kt_case c = kt_case_default(op, t, g[i].tokens, 0);
          c.hq = g[i].hq, c.hkv = g[i].hkv, c.head_dim = g[i].head_dim, c.rot_dim = g[i].rot_dim;
          c.style = style ? KITE_ROPE_GPTJ : KITE_ROPE_NEOX;
          c.layout = (kt_qk_layout)layout;
          c.pad_x = layout == KT_QK_HEAD_PAD ? 6 : 0;
          c.k_null = k_null;
          c.amp = 2.0f;
          c.max_pos = 64 + i; /* positions repeat across tokens, rows of any length */
          kt_case_push(l, c);
        }
}

typedef struct emb_geom {
  int64_t tokens, vocab, hidden, pad_x, pad_y;
  int oob;
} emb_geom;

static const emb_geom g_emb[] = {
    {0, 8, 64, 0, 0, 1},       {1, 5, 1, 0, 0, 1},        {3, 50, 17, 0, 0, 1},
    {17, 50, 127, 5, 3, 1},    {9, 100, 1000, 0, 7, 1},   {33, 1000, 64, 1, 0, 1},
    {64, 1000, 4096, 0, 0, 1}, {64, 1000, 4096, 3, 5, 0}, {512, 64, 4096, 0, 0, 1},
    {1031, 300, 4104, 3, 1, 1}}; /* moves > 16 MB at 2-byte types: the streaming path */
static const emb_geom g_quick_emb[] = {
    {0, 8, 64, 0, 0, 1}, {3, 50, 17, 0, 0, 1}, {17, 50, 127, 5, 3, 1}, {9, 100, 1000, 0, 7, 1}};

static void gen_embedding(kt_case_list *l, kite_dtype t, int quick) {
  const emb_geom *g = quick ? g_quick_emb : g_emb;
  int n = quick ? (int)(sizeof g_quick_emb / sizeof *g) : (int)(sizeof g_emb / sizeof *g);
  for (int i = 0; i < n; i++) {
    kt_case c = kt_case_default(KITE_OP_EMBEDDING, t, g[i].tokens, g[i].hidden);
    c.vocab = g[i].vocab, c.pad_x = g[i].pad_x, c.pad_y = g[i].pad_y, c.oob_ids = g[i].oob;
    kt_case_push(l, c);
  }
}

/* embedding_backward: T, V, H, pad_x, pad_y; every case has ids out of range. */
static void gen_embedding_bwd(kt_case_list *l, kite_dtype t, int quick) {
  static const int64_t g[][5] = {{0, 8, 64, 0, 0},    {1, 5, 1, 0, 0},       {3, 50, 17, 0, 0},
                                 {17, 50, 127, 5, 3}, {64, 1000, 256, 1, 0}, {300, 7, 1031, 0, 2}};
  const int n = quick ? 3 : 6;
  for (int i = 0; i < n; i++) {
    kt_case c = kt_bwd_case(KITE_OP_EMBEDDING_BACKWARD, t, g[i][0], g[i][2]);
    c.vocab = g[i][1], c.pad_x = g[i][3], c.pad_y = g[i][4], c.oob_ids = 1;
    kt_case_push(l, c);
  }
}

/* kite check's cases of op at dtype t. */
static void core_check_cases(kite_op op, kite_dtype t, int quick, kt_case_list *l) {
  switch (kt_core_kind_of(op)) {
  case KT_ROPE:
    gen_rope(l, op, t, quick);
    return;
  case KT_SOFTMAX:
    kt_rows_check_cases(op, t, quick, 32000 /* a vocabulary */, gen_softmax, l);
    return;
  case KT_SOFTMAX_BWD:
    gen_softmax_bwd(l, t, quick);
    return;
  case KT_EMBEDDING:
    gen_embedding(l, t, quick);
    return;
  case KT_EMBEDDING_BWD:
    gen_embedding_bwd(l, t, quick);
    return;
  case KT_NONE:
    return;
  }
}

/* ---- bench ------------------------------------------------------------------------------- */

/* Minimum bytes each op must move (read + write), e = element size, for GB/s:
 *   rope                rotated part of q and k, read + written, positions, cos_sin rows used
 *                       2 T (Hq + Hkv) rot e + 4 T + 4 min(T, max_pos) rot
 *   softmax             x + y                                 2 R C e
 *   softmax_backward    y, dy, dx                             3 R C e
 *   embedding           ids + the T table rows read + y       4 T + 2 T H e
 *   embedding_backward  ids, dy, dtable written               4 T + (T + V) H e */
static double core_bytes(const kt_case *c) {
  double e = (double)kite_dtype_size(c->dtype), R = (double)c->rows, C = (double)c->cols;
  switch (kt_core_kind_of(c->op)) {
  case KT_SOFTMAX:
    return 2 * R * C * e;
  case KT_SOFTMAX_BWD:
    return 3 * R * C * e;
  case KT_ROPE: {
    double heads = (double)c->hq + (c->k_null ? 0 : (double)c->hkv), rot = (double)c->rot_dim;
    double rows = R < (double)c->max_pos ? R : (double)c->max_pos;
    return 2 * R * heads * rot * e + 4 * R + 4 * rows * rot;
  }
  case KT_EMBEDDING:
    return 4 * R + 2 * R * C * e;
  case KT_EMBEDDING_BWD:
    return 4 * R + (R + (double)c->vocab) * C * e;
  case KT_NONE:
    break;
  }
  return 0;
}

/* ---- shapes ------------------------------------------------------------------------------ */

static kt_case rope_case(kite_op op, kite_dtype t, int64_t tokens) {
  kt_case c = kt_case_default(op, t, tokens, 0);
  c.hq = 32, c.hkv = 8, c.head_dim = 128, c.rot_dim = 128;
  c.layout = KT_QK_FUSED; /* q and k as slices of the qkv projection, as engines call it */
  c.max_pos = tokens > 0 ? tokens : 1;
  c.seq_positions = 1;
  return c;
}

static kt_case embedding_case(kite_dtype t, int64_t tokens, int64_t hidden) {
  kt_case c = kt_case_default(KITE_OP_EMBEDDING, t, tokens, hidden);
  c.vocab = 32000;
  return c;
}

/* small: one mid shape per op. llm: T in {1, 16, 512, 8192} over Llama-like widths; the
 * backward ops at T = 8192 (llm) or 512, H = 4096 (embedding: V = 32000). */
static void core_bench_cases(kite_op op, kite_dtype t, int llm, kt_case_list *l) {
  static const int64_t tokens[] = {1, 16, 512, 8192}, widths[] = {32000, 4096};
  const int n = llm ? 4 : 1;
  kt_case c = kt_bwd_case(op, t, kt_bwd_bench_rows(llm), 4096);
  switch (kt_core_kind_of(op)) {
  case KT_ROPE:
    for (int i = 0; i < n; i++) kt_case_push(l, rope_case(op, t, llm ? tokens[i] : 512));
    return;
  case KT_EMBEDDING:
    for (int i = 0; i < n; i++) kt_case_push(l, embedding_case(t, llm ? tokens[i] : 512, 4096));
    return;
  case KT_SOFTMAX:
    if (llm)
      kt_rows_llm_cases(op, t, widths, 2, l);
    else
      kt_case_push(l, kt_case_default(op, t, 64, 32000));
    return;
  case KT_EMBEDDING_BWD:
    c.vocab = 32000;
    kt_case_push(l, c);
    return;
  case KT_SOFTMAX_BWD:
    kt_case_push(l, c);
    return;
  case KT_NONE:
    return;
  }
}

static int core_has(kite_op op) {
  return kt_core_kind_of(op) != KT_NONE;
}

const kt_family_ops kt_family_core = {
    .name = "core",
    .has = core_has,
    .plan = core_plan,
    .scalar = core_scalar,
    .describe = core_describe,
    .shape = core_shape,
    .check_cases = core_check_cases,
    .bench_cases = core_bench_cases,
    .bytes = core_bytes,
    .flops = NULL,
    .bound = core_bound,
};
