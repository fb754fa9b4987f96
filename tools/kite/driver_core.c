/*
 * Drivers of the core ops: activations, gated activations, norms, rope, softmax, embedding.
 * Their tensors are row-major matrices [rows, cols] (rope: q[T, Hq, D], k[T, Hkv, D]) with
 * optional row padding; cases cover 0, 1 and many rows, odd and power-of-two widths, strided
 * views, in place, and every option of each op.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "util.h"
#include "kite/dtype.h"

/* argument slots */
enum { A_X, A_Y, A_W, A_B, A_RES, A_Q, A_K, A_POS, A_COS_SIN, A_IDS, A_TABLE };

/* Ops of this family that share a layout. */
typedef enum kt_core_kind {
  KT_NONE,
  KT_ACT,
  KT_GATED,
  KT_NORM,
  KT_ROPE,
  KT_SOFTMAX,
  KT_EMBEDDING
} kt_core_kind;

static kt_core_kind kt_core_kind_of(kite_op op) {
  switch (op) {
  case KITE_OP_SILU_AND_MUL:
  case KITE_OP_GELU_AND_MUL:
  case KITE_OP_GELU_TANH_AND_MUL:
    return KT_GATED;
  case KITE_OP_RMS_NORM:
  case KITE_OP_LAYER_NORM:
  case KITE_OP_ADD_RMS_NORM:
  case KITE_OP_ADD_LAYER_NORM:
    return KT_NORM;
  case KITE_OP_ROPE:
    return KT_ROPE;
  case KITE_OP_SOFTMAX:
    return KT_SOFTMAX;
  case KITE_OP_EMBEDDING:
    return KT_EMBEDDING;
  case KITE_OP_SILU:
  case KITE_OP_GELU:
  case KITE_OP_GELU_TANH:
  case KITE_OP_GELU_QUICK:
  case KITE_OP_RELU:
    return KT_ACT;
  default:
    return KT_NONE;
  }
}

static int has_residual(kite_op op) {
  return op == KITE_OP_ADD_RMS_NORM || op == KITE_OP_ADD_LAYER_NORM;
}

static int is_layer_norm(kite_op op) {
  return op == KITE_OP_LAYER_NORM || op == KITE_OP_ADD_LAYER_NORM;
}

/* ---- descriptions ------------------------------------------------------------------------ */

static void core_shape(const kt_case *c, char *buf, size_t n) {
  if (c->op == KITE_OP_ROPE)
    snprintf(buf, n, "%lldx%lldx%lldx%lld", (long long)c->rows, (long long)c->hq, (long long)c->hkv,
             (long long)c->head_dim);
  else
    snprintf(buf, n, "%lldx%lld", (long long)c->rows, (long long)c->cols);
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
    kt_cat(buf, n, &len, "T=%lld V=%lld H=%lld", (long long)c->rows, (long long)c->vocab,
           (long long)c->cols);
    if (c->oob_ids) kt_cat(buf, n, &len, " ids-out-of-range");
    break;
  case KT_GATED:
    kt_cat(buf, n, &len, "%lldx(2x%lld)", (long long)c->rows, (long long)c->cols);
    if (c->limit > 0) kt_cat(buf, n, &len, " limit=%g", (double)c->limit);
    break;
  default:
    kt_cat(buf, n, &len, "%lldx%lld", (long long)c->rows, (long long)c->cols);
    break;
  }
  if (kt_core_kind_of(c->op) == KT_NORM) {
    if (!c->with_w) kt_cat(buf, n, &len, " w=NULL");
    if (is_layer_norm(c->op) && !c->with_b) kt_cat(buf, n, &len, " b=NULL");
    if (!is_layer_norm(c->op)) kt_cat(buf, n, &len, " offset=%g", (double)c->offset);
    if (has_residual(c->op)) kt_cat(buf, n, &len, c->pos == KITE_NORM_POST ? " post" : " pre");
  }
  if (c->op == KITE_OP_SOFTMAX && c->scale != 1.0f)
    kt_cat(buf, n, &len, " scale=%g", (double)c->scale);
  if (c->amp != 1.0f || c->shift != 0.0f)
    kt_cat(buf, n, &len, " in[%g,%g]", (double)(c->shift - c->amp), (double)(c->shift + c->amp));
  if (c->step) kt_cat(buf, n, &len, " step");
  if (c->pad_x) kt_cat(buf, n, &len, " x+%lld", (long long)c->pad_x);
  if (c->pad_y) kt_cat(buf, n, &len, " y+%lld", (long long)c->pad_y);
  if (c->inplace) kt_cat(buf, n, &len, " inplace");
}

/* ---- layout ------------------------------------------------------------------------------ */

static int add_vector(kt_run *r, const char *name, kite_dtype t, int64_t n, kt_fill_kind fill,
                      float lo, float hi) {
  return kt_add_tensor(r, name, t, KT_IN, 1, &n, fill, lo, hi);
}

/* q[T, Hq, D] and k[T, Hkv, D] as the case's layout says. */
static void plan_rope(kt_run *r, const kt_case *c, float lo, float hi) {
  int64_t T = c->rows, hq = c->hq, hkv = c->hkv, D = c->head_dim;
  kite_dtype t = c->dtype;
  if (c->layout == KT_QK_FUSED) {
    int64_t ts = (hq + 2 * hkv) * D; /* token stride of the fused projection */
    int b = kt_add_buf(r, "qkv", t, T * ts);
    int64_t qs[3] = {T, hq, D}, ks[3] = {T, hkv, D}, st[3] = {ts, D, 1};
    r->arg[A_Q] = kt_add_view(r, "q", b, t, KT_INOUT, 3, qs, st, 0, KT_FILL_UNIFORM, lo, hi);
    if (!c->k_null)
      r->arg[A_K] = kt_add_view(r, "k", b, t, KT_INOUT, 3, ks, st, hq * D, KT_FILL_UNIFORM, lo, hi);
    if (hkv > 0)
      kt_add_view(r, "v", b, t, KT_IN, 3, ks, st, (hq + hkv) * D, KT_FILL_UNIFORM, lo, hi);
    return;
  }
  int64_t hs = D + (c->layout == KT_QK_HEAD_PAD ? c->pad_x : 0); /* head stride */
  int64_t qs[3] = {T, hq, D}, qst[3] = {hq * hs, hs, 1};
  r->arg[A_Q] = kt_add_view(r, "q", kt_add_buf(r, "q", t, T * hq * hs), t, KT_INOUT, 3, qs, qst, 0,
                            KT_FILL_UNIFORM, lo, hi);
  if (c->k_null) return;
  int64_t ks[3] = {T, hkv, D}, kst[3] = {hkv * hs, hs, 1};
  r->arg[A_K] = kt_add_view(r, "k", kt_add_buf(r, "k", t, T * hkv * hs), t, KT_INOUT, 3, ks, kst, 0,
                            KT_FILL_UNIFORM, lo, hi);
}

/* Norm rows whose first 32 elements sit far above the rest, which is uniform as usual: a
 * row's start says little of its mean (layer norm's one-pass variance must notice). */
static void fill_step(const kt_run *r, int vi, uint64_t seed, unsigned char *body) {
  const kt_view *v = &r->view[vi];
  const float lo = r->c.shift - r->c.amp, span = 2.0f * r->c.amp;
  for (int64_t e = 0, n = kt_view_numel(v); e < n; e++) {
    int64_t at = kt_view_at(v, e);
    double x = e % v->shape[1] < 32 ? r->c.shift + 16.0 * r->c.amp
                                    : lo + span * kt_unit(seed, (uint64_t)at);
    kt_store(v->dtype, body, at, x);
  }
}

static void core_plan(kt_run *r, const kt_case *c) {
  kite_dtype t = c->dtype;
  float lo = c->shift - c->amp, hi = c->shift + c->amp;
  int64_t R = c->rows, C = c->cols;
  switch (kt_core_kind_of(c->op)) {
  case KT_ACT:
  case KT_SOFTMAX:
    r->arg[A_X] = kt_add_matrix(r, "x", t, c->inplace ? KT_INOUT : KT_IN, R, C, c->pad_x, lo, hi);
    r->arg[A_Y] = c->inplace ? r->arg[A_X] : kt_add_matrix(r, "y", t, KT_OUT, R, C, c->pad_y, 0, 0);
    break;
  case KT_GATED:
    r->arg[A_X] = kt_add_matrix(r, "x", t, KT_IN, R, 2 * C, c->pad_x, lo, hi);
    r->arg[A_Y] = kt_add_matrix(r, "y", t, KT_OUT, R, C, c->pad_y, 0, 0);
    break;
  case KT_NORM:
    r->arg[A_X] = kt_add_matrix(r, "x", t, c->inplace ? KT_INOUT : KT_IN, R, C, c->pad_x, lo, hi);
    if (c->step) {
      r->view[r->arg[A_X]].fill = KT_FILL_CUSTOM;
      r->view[r->arg[A_X]].fill_fn = fill_step;
    }
    if (has_residual(c->op))
      r->arg[A_RES] = kt_add_matrix(r, "residual", t, KT_INOUT, R, C, c->pad_x, -c->amp, c->amp);
    if (c->with_w) r->arg[A_W] = add_vector(r, "w", t, C, KT_FILL_UNIFORM, -1.0f, 1.0f);
    if (c->with_b && is_layer_norm(c->op))
      r->arg[A_B] = add_vector(r, "b", t, C, KT_FILL_UNIFORM, -1.0f, 1.0f);
    r->arg[A_Y] = c->inplace ? r->arg[A_X] : kt_add_matrix(r, "y", t, KT_OUT, R, C, c->pad_y, 0, 0);
    break;
  case KT_ROPE: {
    plan_rope(r, c, lo, hi);
    r->arg[A_POS] =
        add_vector(r, "positions", KITE_DTYPE_I32, R, c->seq_positions ? KT_FILL_SEQ : KT_FILL_IDS,
                   0.0f, (float)c->max_pos);
    int64_t shape[2] = {c->max_pos, c->rot_dim}, strides[2] = {c->rot_dim, 1};
    int b = kt_add_buf(r, "cos_sin", KITE_DTYPE_F32, c->max_pos * c->rot_dim);
    r->arg[A_COS_SIN] = kt_add_view(r, "cos_sin", b, KITE_DTYPE_F32, KT_IN, 2, shape, strides, 0,
                                    KT_FILL_ROPE_CACHE, 0, 0);
    break;
  }
  case KT_NONE:
    r->bad = 1;
    break;
  case KT_EMBEDDING: {
    /* with oob_ids about a fifth of the ids fall outside [0, V) on either side */
    float extra = c->oob_ids ? (float)(c->vocab / 8 + 2) : 0.0f;
    r->arg[A_IDS] =
        add_vector(r, "ids", KITE_DTYPE_I32, R, KT_FILL_IDS, -extra, (float)c->vocab + extra);
    r->arg[A_TABLE] = kt_add_matrix(r, "table", t, KT_IN, c->vocab, C, c->pad_x, lo, hi);
    r->arg[A_Y] = kt_add_matrix(r, "y", t, KT_OUT, R, C, c->pad_y, 0, 0);
    break;
  }
  }
}

/* ---- the call ---------------------------------------------------------------------------- */

static kite_status core_call(kt_run *r) {
  const kt_case *c = &r->c;
  kite_ctx *ctx = r->ctx;
  DLTensor *x = kt_arg(r, A_X), *y = kt_arg(r, A_Y), *w = kt_arg(r, A_W), *b = kt_arg(r, A_B);
  switch (c->op) {
  case KITE_OP_SILU:
    return kite_silu(ctx, x, y);
  case KITE_OP_GELU:
    return kite_gelu(ctx, x, y);
  case KITE_OP_GELU_TANH:
    return kite_gelu_tanh(ctx, x, y);
  case KITE_OP_GELU_QUICK:
    return kite_gelu_quick(ctx, x, y);
  case KITE_OP_RELU:
    return kite_relu(ctx, x, y);
  case KITE_OP_SILU_AND_MUL:
    return kite_silu_and_mul(ctx, x, c->limit, y);
  case KITE_OP_GELU_AND_MUL:
    return kite_gelu_and_mul(ctx, x, c->limit, y);
  case KITE_OP_GELU_TANH_AND_MUL:
    return kite_gelu_tanh_and_mul(ctx, x, c->limit, y);
  case KITE_OP_RMS_NORM:
    return kite_rms_norm(ctx, x, w, c->eps, c->offset, y);
  case KITE_OP_LAYER_NORM:
    return kite_layer_norm(ctx, x, w, b, c->eps, y);
  case KITE_OP_ADD_RMS_NORM:
    return kite_add_rms_norm(ctx, x, kt_arg(r, A_RES), w, c->eps, c->offset, c->pos, y);
  case KITE_OP_ADD_LAYER_NORM:
    return kite_add_layer_norm(ctx, x, kt_arg(r, A_RES), w, b, c->eps, c->pos, y);
  case KITE_OP_ROPE:
    return kite_rope(ctx, kt_arg(r, A_Q), kt_arg(r, A_K), kt_arg(r, A_POS), kt_arg(r, A_COS_SIN),
                     c->rot_dim, c->style);
  case KITE_OP_SOFTMAX:
    return kite_softmax(ctx, x, c->scale, y);
  case KITE_OP_EMBEDDING:
    return kite_embedding(ctx, kt_arg(r, A_IDS), kt_arg(r, A_TABLE), y);
  default:
    break;
  }
  return kite_set_error(KITE_ERR_UNSUPPORTED, "kite: the CLI has no driver for op %d", (int)c->op);
}

/* ---- cases and bounds -------------------------------------------------------------------- */

/* NMSE bounds, [op][f32, f16, bf16]. A kernel that computes in f32 and rounds once to the output
 * type differs from the float64 ref by about one rounding of the output: NMSE ~ 1e-14 (f32),
 * 1e-7 (f16), 5e-6 (bf16). The bounds leave room for f32 arithmetic inside long reductions. */
static const double g_bound[KITE_OP_COUNT][3] = {
    [KITE_OP_SILU] = {1e-10, 1e-6, 1e-4},         [KITE_OP_GELU] = {1e-10, 1e-6, 1e-4},
    [KITE_OP_GELU_TANH] = {1e-10, 1e-6, 1e-4},    [KITE_OP_GELU_QUICK] = {1e-10, 1e-6, 1e-4},
    [KITE_OP_RELU] = {1e-10, 1e-6, 1e-4},         [KITE_OP_SILU_AND_MUL] = {1e-10, 1e-6, 1e-4},
    [KITE_OP_GELU_AND_MUL] = {1e-10, 1e-6, 1e-4}, [KITE_OP_GELU_TANH_AND_MUL] = {1e-10, 1e-6, 1e-4},
    [KITE_OP_RMS_NORM] = {1e-10, 1e-6, 1e-4},     [KITE_OP_LAYER_NORM] = {1e-10, 1e-6, 1e-4},
    [KITE_OP_ADD_RMS_NORM] = {1e-10, 1e-6, 1e-4}, [KITE_OP_ADD_LAYER_NORM] = {1e-10, 1e-6, 1e-4},
    [KITE_OP_ROPE] = {1e-10, 1e-6, 1e-4},         [KITE_OP_SOFTMAX] = {1e-10, 1e-6, 1e-4},
    [KITE_OP_EMBEDDING] = {1e-10, 1e-6, 1e-4},
};

static double core_bound(kite_op op, kite_dtype t) {
  int i = t == KITE_DTYPE_F16 ? 1 : t == KITE_DTYPE_BF16 ? 2 : 0;
  return g_bound[op][i];
}

/* ---- the cases --------------------------------------------------------------------------- */

typedef struct shape2 {
  int64_t rows, cols;
} shape2;

/* 0 rows, 1 row, odd widths, powers of two, one larger tensor. */
static const shape2 g_sizes[] = {{0, 64},   {1, 1},    {1, 3},  {3, 17},   {5, 127},
                                 {4, 1000}, {2, 1031}, {8, 64}, {3, 4096}, {512, 4096}};
static const shape2 g_quick_sizes[] = {{0, 64}, {1, 3}, {3, 17}, {4, 1000}, {2, 4096}};
/* where every option is tried */
static const shape2 g_option_sizes[] = {{3, 17}, {4, 1000}, {2, 4096}};
static const shape2 g_quick_option_sizes[] = {{3, 17}};

static void gen_rows(kt_case_list *l, kite_op op, kite_dtype t, shape2 s) {
  kt_case base = kt_case_default(op, t, s.rows, s.cols), c;
  switch (kt_core_kind_of(op)) {
  case KT_ACT:
    c = base, c.pad_x = 5, c.pad_y = 3, kt_case_push(l, c);
    c = base, c.inplace = 1, kt_case_push(l, c);
    c = base, c.inplace = 1, c.pad_x = 7, kt_case_push(l, c);
    c = base, c.amp = 8, c.pad_y = 1, kt_case_push(l, c); /* saturated tails */
    break;
  case KT_GATED:
    c = base, c.pad_x = 5, c.pad_y = 3, kt_case_push(l, c);
    c = base, c.amp = 4, c.limit = 1.0f, kt_case_push(l, c); /* many values beyond the limit */
    c = base, c.amp = 4, c.limit = 0.5f, c.pad_x = 2, c.pad_y = 6, kt_case_push(l, c);
    c = base, c.amp = 6, kt_case_push(l, c);
    break;
  case KT_NORM: {
    int layer = is_layer_norm(op), add = has_residual(op), k = 0;
    for (int w = 1; w >= 0; w--)
      for (int b = 1; b >= (layer ? 0 : 1); b--)
        for (int off = 0; off <= (layer ? 0 : 1); off++)
          for (int pos = 0; pos <= (add ? 1 : 0); pos++, k++) {
            c = base, c.with_w = w, c.with_b = b, c.offset = (float)off;
            c.pos = pos ? KITE_NORM_POST : KITE_NORM_PRE;
            if (k % 2) c.pad_x = 5, c.pad_y = 3;
            if (k % 4 == 3) c.inplace = 1;
            kt_case_push(l, c);
          }
    c = base, c.inplace = 1, kt_case_push(l, c);
    c = base, c.shift = 3.0f, kt_case_push(l, c);   /* mean far from 0: layer norm's variance */
    c = base, c.shift = 100.0f, kt_case_push(l, c); /* mean 170 std from 0 */
    c = base, c.step = 1, c.pad_x = 3, kt_case_push(l, c);
    c = base, c.amp = 50.0f, c.pad_y = 2, kt_case_push(l, c);
    break;
  }
  case KT_SOFTMAX:
    c = base, c.pad_x = 5, c.pad_y = 3, kt_case_push(l, c);
    c = base, c.scale = 0.125f, c.amp = 8.0f, kt_case_push(l, c);
    c = base, c.scale = 2.5f, kt_case_push(l, c);
    /* large magnitudes: scale * x spans [-100, 100], exp underflows for most of the row */
    c = base, c.scale = 0.5f, c.amp = 200.0f, c.pad_x = 1, kt_case_push(l, c);
    c = base, c.shift = 50.0f, c.amp = 2.0f, kt_case_push(l, c); /* all large and positive */
    break;
  default:
    break;
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

static void gen_rope(kt_case_list *l, kite_dtype t, int quick) {
  const rope_geom *g = quick ? g_quick_rope : g_rope;
  int n = quick ? (int)(sizeof g_quick_rope / sizeof *g) : (int)(sizeof g_rope / sizeof *g);
  for (int i = 0; i < n; i++)
    for (int style = 0; style < 2; style++)
      for (int layout = KT_QK_SPLIT; layout <= KT_QK_HEAD_PAD; layout++)
        for (int k_null = 0; k_null <= 1; k_null++) {
          if (quick && k_null && layout != KT_QK_FUSED) continue;
          kt_case c = kt_case_default(KITE_OP_ROPE, t, g[i].tokens, 0);
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

/* kite check's cases of op at dtype t. */
static void core_check_cases(kite_op op, kite_dtype t, int quick, kt_case_list *l) {
  switch (kt_core_kind_of(op)) {
  case KT_ROPE:
    gen_rope(l, t, quick);
    return;
  case KT_EMBEDDING:
    gen_embedding(l, t, quick);
    return;
  default:
    break;
  }
  const shape2 *sizes = quick ? g_quick_sizes : g_sizes;
  int ns =
      quick ? (int)(sizeof g_quick_sizes / sizeof *sizes) : (int)(sizeof g_sizes / sizeof *sizes);
  for (int i = 0; i < ns; i++)
    kt_case_push(l, kt_case_default(op, t, sizes[i].rows, sizes[i].cols));
  if (op == KITE_OP_SOFTMAX && !quick)
    kt_case_push(l, kt_case_default(op, t, 2, 32000)); /* vocab */
  if (!quick) /* > 16 MB moved at every type: the CPU's streaming-store path (CPU_STREAM_BYTES) */
    kt_case_push(l, kt_case_default(op, t, 1031, 4104));
  const shape2 *opt = quick ? g_quick_option_sizes : g_option_sizes;
  int no = quick ? (int)(sizeof g_quick_option_sizes / sizeof *opt)
                 : (int)(sizeof g_option_sizes / sizeof *opt);
  for (int i = 0; i < no; i++) gen_rows(l, op, t, opt[i]);
}

/* ---- bench ------------------------------------------------------------------------------- */

/* Minimum bytes each op must move (read + write), e = element size, for GB/s:
 *   activations       x + y                                   2 R C e
 *   gated (y is RxI)  x[R, 2I] + y                            3 R I e
 *   rms_norm          x + y + w                               (2 R C + C) e
 *   layer_norm        x + y + w + b                           (2 R C + 2 C) e
 *   add_rms_norm      x + residual read + written + y + w     (4 R C + C) e
 *   add_layer_norm    the same + b                            (4 R C + 2 C) e
 *   rope              rotated part of q and k, read + written, positions, cos_sin rows used
 *                     2 T (Hq + Hkv) rot e + 4 T + 4 min(T, max_pos) rot
 *   softmax           x + y                                   2 R C e
 *   embedding         ids + the T table rows read + y         4 T + 2 T H e
 * (w and b count only when present.) */
static double core_bytes(const kt_case *c) {
  double e = (double)kite_dtype_size(c->dtype), R = (double)c->rows, C = (double)c->cols;
  double wb = (c->with_w ? C : 0) + (c->with_b && is_layer_norm(c->op) ? C : 0);
  switch (kt_core_kind_of(c->op)) {
  case KT_ACT:
  case KT_SOFTMAX:
    return 2 * R * C * e;
  case KT_GATED:
    return 3 * R * C * e;
  case KT_NORM:
    return ((has_residual(c->op) ? 4 : 2) * R * C + wb) * e;
  case KT_ROPE: {
    double heads = (double)c->hq + (c->k_null ? 0 : (double)c->hkv), rot = (double)c->rot_dim;
    double rows = R < (double)c->max_pos ? R : (double)c->max_pos;
    return 2 * R * heads * rot * e + 4 * R + 4 * rows * rot;
  }
  case KT_EMBEDDING:
    return 4 * R + 2 * R * C * e;
  case KT_NONE:
    break;
  }
  return 0;
}

/* ---- shapes ------------------------------------------------------------------------------ */

static kt_case rope_case(kite_dtype t, int64_t tokens) {
  kt_case c = kt_case_default(KITE_OP_ROPE, t, tokens, 0);
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

/* small: one mid shape per op. llm: T in {1, 16, 512, 8192} over Llama-like widths. */
static void core_bench_cases(kite_op op, kite_dtype t, int llm, kt_case_list *l) {
  static const int64_t tokens[] = {1, 16, 512, 8192};
  static const int64_t hidden[] = {4096, 5120};
  if (!llm) {
    switch (kt_core_kind_of(op)) {
    case KT_ROPE:
      kt_case_push(l, rope_case(t, 512));
      break;
    case KT_EMBEDDING:
      kt_case_push(l, embedding_case(t, 512, 4096));
      break;
    case KT_SOFTMAX:
      kt_case_push(l, kt_case_default(op, t, 64, 32000));
      break;
    default:
      kt_case_push(l, kt_case_default(op, t, 512, 4096));
      break;
    }
    return;
  }
  for (int i = 0; i < 4; i++) {
    int64_t T = tokens[i];
    switch (kt_core_kind_of(op)) {
    case KT_ROPE:
      kt_case_push(l, rope_case(t, T));
      break;
    case KT_EMBEDDING:
      kt_case_push(l, embedding_case(t, T, 4096));
      break;
    case KT_GATED:
      kt_case_push(l, kt_case_default(op, t, T, 14336));
      break;
    case KT_SOFTMAX:
      kt_case_push(l, kt_case_default(op, t, T, 32000));
      kt_case_push(l, kt_case_default(op, t, T, 4096));
      break;
    default:
      for (int h = 0; h < 2; h++) kt_case_push(l, kt_case_default(op, t, T, hidden[h]));
      break;
    }
  }
}

static int core_has(kite_op op) {
  return kt_core_kind_of(op) != KT_NONE;
}

const kt_family_ops kt_family_core = {
    .name = "core",
    .has = core_has,
    .plan = core_plan,
    .call = core_call,
    .describe = core_describe,
    .shape = core_shape,
    .check_cases = core_check_cases,
    .bench_cases = core_bench_cases,
    .bytes = core_bytes,
    .flops = NULL,
    .bound = core_bound,
};
