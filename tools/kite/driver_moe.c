/*
 * Driver of the MoE ops of today's models: moe_route (softmax / sigmoid / gpt-oss scores,
 * correction bias, groups), fused_moe_ex (expert biases, clamp, gpt-oss's SwiGLU, interleaved
 * gate/up) and the load-balancing loss with its backward. Cases cover 0, 1 and many tokens,
 * ties in the logits, every score function with and without bias, groups, renormalization and
 * scaling, both layouts, both weight orientations (gpt-oss's transposed storage), ids out of
 * range, masks, and strided rows.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "driver.h"
#include "util.h"

static int moe_has(kite_op op) {
  return op == KITE_OP_MOE_ROUTE || op == KITE_OP_FUSED_MOE_EX || op == KITE_OP_MOE_AUX_LOSS ||
         op == KITE_OP_MOE_AUX_LOSS_BACKWARD;
}

static const char *score_name(kite_route_score s) {
  return s == KITE_ROUTE_SIGMOID        ? "sigmoid"
         : s == KITE_ROUTE_SOFTMAX_TOPK ? "softmax_topk"
                                        : "softmax";
}

static const char *act_name(kite_moe_act a) {
  return a == KITE_MOE_SWIGLU_OAI ? "swiglu_oai" : a == KITE_MOE_GELU ? "gelu" : "silu";
}

static void moe_shape(const kt_case *c, char *buf, size_t n) {
  const kt_moe_case *m = &c->moe;
  if (c->op == KITE_OP_FUSED_MOE_EX)
    snprintf(buf, n, "%lldx%lldx%lld E%lldk%lld", (long long)m->tokens, (long long)m->hidden,
             (long long)m->inter, (long long)m->experts, (long long)m->k);
  else
    snprintf(buf, n, "%lldx%lld k%lld", (long long)m->tokens, (long long)m->experts,
             (long long)m->k);
}

static void moe_describe(const kt_case *c, char *buf, size_t n) {
  const kt_moe_case *m = &c->moe;
  size_t len = 0;
  buf[0] = '\0';
  if (c->op == KITE_OP_MOE_ROUTE) {
    const kite_route_opts *o = &m->route;
    kt_cat(buf, n, &len, "T=%lld E=%lld k=%lld %s", (long long)m->tokens, (long long)m->experts,
           (long long)m->k, score_name(o->score));
    if (o->n_group > 1) kt_cat(buf, n, &len, " groups %d/%d", o->topk_group, o->n_group);
    if (o->renormalize) kt_cat(buf, n, &len, " renorm");
    if (o->scaling != 1.0f) kt_cat(buf, n, &len, " scale=%g", (double)o->scaling);
    if (m->ties) kt_cat(buf, n, &len, " ties");
  } else if (c->op == KITE_OP_FUSED_MOE_EX) {
    kt_cat(buf, n, &len, "T=%lld H=%lld I=%lld E=%lld k=%lld %s%s", (long long)m->tokens,
           (long long)m->hidden, (long long)m->inter, (long long)m->experts, (long long)m->k,
           act_name(m->opts.act), m->opts.layout == KITE_MOE_INTERLEAVED ? " interleaved" : "");
    if (m->opts.transposed) kt_cat(buf, n, &len, " transposed");
    if (m->opts.limit > 0) kt_cat(buf, n, &len, " limit=%g", (double)m->opts.limit);
  } else {
    kt_cat(buf, n, &len, "T=%lld E=%lld k=%lld%s", (long long)m->tokens, (long long)m->experts,
           (long long)m->k, m->with_mask ? " mask" : "");
  }
  if (m->with_bias) kt_cat(buf, n, &len, " bias");
  if (m->oob_ids) kt_cat(buf, n, &len, " ids-out-of-range");
  if (m->pad) kt_cat(buf, n, &len, " rows+%lld", (long long)m->pad);
}

/* ---- fills ------------------------------------------------------------------------------- */

static int64_t rows_of(const kt_view *v) {
  const int64_t cols = kt_view_cols(v);
  return cols > 0 ? kt_view_numel(v) / cols : 0;
}

/* Integer logits in [-4, 4): many exact ties in every row, in any float dtype. */
static void fill_ties(const kt_run *r, int v, uint64_t seed, unsigned char *body) {
  const kt_view *vw = &r->view[v];
  const int64_t cols = kt_view_cols(vw);
  for (int64_t i = 0; i < rows_of(vw); i++)
    for (int64_t j = 0; j < cols; j++)
      kt_store(vw->dtype, body, kt_view_row(vw, i) + j,
               floor(8.0 * kt_unit(seed, (uint64_t)(i * cols + j))) - 4.0);
}

/* k distinct experts per token, about one in eight replaced by -1 or E with oob_ids; for
 * fused_moe_ex also the first token's last pick (decode cases of a few picks keep one whatever
 * the seed; the routers' losses keep their counts). */
static void fill_ids(const kt_run *r, int v, uint64_t seed, unsigned char *body) {
  const kt_view *vw = &r->view[v];
  const int64_t k = kt_view_cols(vw), e = r->c.moe.experts > 0 ? r->c.moe.experts : 1;
  for (int64_t i = 0; i < rows_of(vw); i++) {
    const int64_t first = (int64_t)(kt_hash(seed, (uint64_t)i) % (uint64_t)e);
    for (int64_t j = 0; j < k; j++) {
      int64_t id = (first + j * 3) % e;
      const uint64_t h = kt_hash(seed + 1, (uint64_t)(i * k + j));
      const int pinned = r->c.op == KITE_OP_FUSED_MOE_EX && i == 0 && j == k - 1;
      if (r->c.moe.oob_ids && (h % 8 == 0 || pinned)) id = (h >> 8) % 2 ? -1 : e;
      kt_store(KITE_DTYPE_I32, body, kt_view_row(vw, i) + j, (double)id);
    }
  }
}

/* 0/1 mask, about a quarter of the tokens 0. */
static void fill_mask(const kt_run *r, int v, uint64_t seed, unsigned char *body) {
  const kt_view *vw = &r->view[v];
  for (int64_t i = 0; i < kt_view_numel(vw); i++)
    kt_store(KITE_DTYPE_F32, body, i, kt_unit(seed, (uint64_t)i) < 0.25f ? 0.0 : 1.0);
}

static void custom(kt_run *r, int v, kt_fill_fn fn) {
  if (v < 0) return;
  r->view[v].fill = KT_FILL_CUSTOM;
  r->view[v].fill_fn = fn;
}

/* ---- layout ------------------------------------------------------------------------------ */

static void moe_plan(kt_run *r, const kt_case *c) {
  const kt_moe_case *m = &c->moe;
  const kite_dtype t = c->dtype;
  const int64_t T = m->tokens, E = m->experts, K = m->k, one[1] = {1};
  switch (c->op) {
  case KITE_OP_MOE_ROUTE: {
    int x = kt_bind(r, "logits", kt_add_matrix(r, "logits", t, KT_IN, T, E, m->pad, -4, 4));
    if (m->ties) custom(r, x, fill_ties);
    if (m->with_bias) {
      const int64_t sh[1] = {E};
      kt_bind(r, "bias",
              kt_add_tensor(r, "bias", KITE_DTYPE_F32, KT_IN, 1, sh, KT_FILL_UNIFORM, -0.5f, 0.5f));
    }
    kt_bind(r, "weights", kt_add_matrix(r, "weights", KITE_DTYPE_F32, KT_OUT, T, K, m->pad, 0, 0));
    kt_bind(r, "ids", kt_add_matrix(r, "ids", KITE_DTYPE_I32, KT_OUT, T, K, m->pad, 0, 0));
    break;
  }
  case KITE_OP_FUSED_MOE_EX: {
    const int64_t H = m->hidden, I = m->inter;
    const int tr = m->opts.transposed != 0; /* gpt-oss's [E, H, 2I] and [E, I, H] */
    const int64_t w13[3] = {E, tr ? H : 2 * I, tr ? 2 * I : H};
    const int64_t w2[3] = {E, tr ? I : H, tr ? H : I}, b13[2] = {E, 2 * I}, b2[2] = {E, H};
    const float wamp = 2.0f / sqrtf((float)(H > 0 ? H : 1)); /* gate, up of order 1 */
    kt_bind(r, "x", kt_add_matrix(r, "x", t, KT_IN, T, H, m->pad, -1, 1));
    kt_bind(r, "w13", kt_add_tensor(r, "w13", t, KT_IN, 3, w13, KT_FILL_UNIFORM, -wamp, wamp));
    kt_bind(r, "w2", kt_add_tensor(r, "w2", t, KT_IN, 3, w2, KT_FILL_UNIFORM, -0.5f, 0.5f));
    if (m->with_bias) {
      kt_bind(r, "b13", kt_add_tensor(r, "b13", t, KT_IN, 2, b13, KT_FILL_UNIFORM, -1, 1));
      kt_bind(r, "b2", kt_add_tensor(r, "b2", t, KT_IN, 2, b2, KT_FILL_UNIFORM, -1, 1));
    }
    kt_bind(r, "weights", kt_add_matrix(r, "weights", KITE_DTYPE_F32, KT_IN, T, K, 0, 0, 1));
    custom(r, kt_bind(r, "ids", kt_add_matrix(r, "ids", KITE_DTYPE_I32, KT_IN, T, K, 0, 0, 0)),
           fill_ids);
    kt_bind(r, "y", kt_add_matrix(r, "y", t, KT_OUT, T, H, m->pad, 0, 0));
    break;
  }
  case KITE_OP_MOE_AUX_LOSS:
  case KITE_OP_MOE_AUX_LOSS_BACKWARD: {
    const int64_t sh[1] = {T};
    kt_bind(r, "logits", kt_add_matrix(r, "logits", t, KT_IN, T, E, m->pad, -3, 3));
    custom(r, kt_bind(r, "ids", kt_add_matrix(r, "ids", KITE_DTYPE_I32, KT_IN, T, K, 0, 0, 0)),
           fill_ids);
    if (m->with_mask)
      custom(r,
             kt_bind(r, "mask",
                     kt_add_tensor(r, "mask", KITE_DTYPE_F32, KT_IN, 1, sh, KT_FILL_CUSTOM, 0, 0)),
             fill_mask);
    if (c->op == KITE_OP_MOE_AUX_LOSS) {
      kt_bind(r, "loss",
              kt_add_tensor(r, "loss", KITE_DTYPE_F32, KT_OUT, 1, one, KT_FILL_UNIFORM, 0, 0));
    } else {
      kt_bind(r, "dloss",
              kt_add_tensor(r, "dloss", KITE_DTYPE_F32, KT_IN, 1, one, KT_FILL_UNIFORM, 0.5f, 2));
      kt_bind(r, "dlogits", kt_add_matrix(r, "dlogits", t, KT_OUT, T, E, m->pad, 0, 0));
    }
    break;
  }
  default:
    r->bad = 1;
    break;
  }
}

KT_SCALARS(moe_scalar, KT_FIELD("k", 'l', moe.k), KT_FIELD("score", 'i', moe.route.score),
           KT_FIELD("n_group", 'i', moe.route.n_group),
           KT_FIELD("topk_group", 'i', moe.route.topk_group),
           KT_FIELD("renormalize", 'i', moe.route.renormalize),
           KT_FIELD("scaling", 'f', moe.route.scaling), KT_FIELD("act", 'i', moe.opts.act),
           KT_FIELD("layout", 'i', moe.opts.layout), KT_FIELD("alpha", 'f', moe.opts.alpha),
           KT_FIELD("limit", 'f', moe.opts.limit), KT_FIELD("transposed", 'i', moe.opts.transposed))

/* NMSE bounds against the float64 ref.
 *   moe_route: weights are f32 scores (~1e-14); ids are compared as numbers under the same
 *     bound, so one wrong id among T k of at most E - 1 (>= 1 / (T k E^2) > 1e-11 in every case
 *     here) fails, a swapped tie too.
 *   fused_moe_ex: as fused_moe (the intermediate rounded to the dtype, one ulp either way on a
 *     few elements): f32 1e-10, f16 1e-5, bf16 1e-4.
 *   moe_aux_loss: f32 softmax, sums in float64: ~1e-14; 1e-10. The backward: f32 p (c - c.p)
 *     rounded once to the dtype: f32 1e-10, f16 1e-6, bf16 1e-4. */
static double moe_bound(kite_op op, kite_dtype t) {
  const int f16 = t == KITE_DTYPE_F16, bf16 = t == KITE_DTYPE_BF16;
  switch (op) {
  case KITE_OP_MOE_ROUTE:
    return 1e-11;
  case KITE_OP_FUSED_MOE_EX:
    return f16 ? 1e-5 : bf16 ? 1e-4 : 1e-10;
  case KITE_OP_MOE_AUX_LOSS:
    return 1e-10;
  default:
    return f16 ? 1e-6 : bf16 ? 1e-4 : 1e-10;
  }
}

/* ---- the cases --------------------------------------------------------------------------- */

static kt_case moe_case(kite_op op, kite_dtype t, int64_t tokens, int64_t experts, int64_t k) {
  kt_case c = kt_case_default(op, t, tokens, experts);
  c.moe.tokens = tokens, c.moe.experts = experts, c.moe.k = k;
  c.moe.route = kite_route_opts_default();
  c.moe.route.k = k;
  c.moe.opts = kite_moe_opts_default();
  return c;
}

/* A router case: score, groups (n_group, topk_group), renormalize, scaling, bias, ties. */
typedef struct route_geom {
  int64_t t, e, k;
  kite_route_score score;
  int32_t groups, keep, renorm;
  float scaling;
  int bias, ties;
} route_geom;

static const route_geom g_route[] = {
    {17, 8, 2, KITE_ROUTE_SOFTMAX, 1, 1, 1, 1.0f, 0, 0},
    {64, 64, 6, KITE_ROUTE_SOFTMAX, 1, 1, 0, 1.0f, 0, 1},
    {33, 64, 8, KITE_ROUTE_SOFTMAX, 1, 1, 1, 1.0f, 1, 0},
    {1, 256, 8, KITE_ROUTE_SIGMOID, 8, 4, 1, 2.5f, 1, 0}, /* DeepSeek-V3 */
    {40, 256, 8, KITE_ROUTE_SIGMOID, 8, 4, 1, 2.5f, 1, 0},
    {19, 64, 6, KITE_ROUTE_SIGMOID, 8, 3, 0, 1.0f, 0, 0},
    {23, 16, 4, KITE_ROUTE_SIGMOID, 1, 1, 1, 1.0f, 0, 1},
    {9, 12, 3, KITE_ROUTE_SIGMOID, 12, 5, 1, 1.5f, 1, 0},      /* groups of one expert */
    {27, 32, 4, KITE_ROUTE_SOFTMAX_TOPK, 1, 1, 0, 1.0f, 1, 0}, /* gpt-oss */
    {16, 32, 4, KITE_ROUTE_SOFTMAX_TOPK, 1, 1, 0, 1.0f, 0, 1},
    {5, 3, 3, KITE_ROUTE_SOFTMAX_TOPK, 1, 1, 1, 2.0f, 1, 0},
    {0, 8, 2, KITE_ROUTE_SIGMOID, 2, 1, 1, 1.0f, 1, 0}};
static const route_geom g_quick_route[] = {
    {40, 256, 8, KITE_ROUTE_SIGMOID, 8, 4, 1, 2.5f, 1, 0},
    {27, 32, 4, KITE_ROUTE_SOFTMAX_TOPK, 1, 1, 0, 1.0f, 1, 0},
    {64, 64, 6, KITE_ROUTE_SOFTMAX, 1, 1, 0, 1.0f, 0, 1}};

static void route_cases(kite_dtype t, int quick, kt_case_list *l) {
  const route_geom *s = quick ? g_quick_route : g_route;
  const int n = quick ? KT_COUNT(g_quick_route) : KT_COUNT(g_route);
  for (int i = 0; i < n; i++) {
    kt_case c = moe_case(KITE_OP_MOE_ROUTE, t, s[i].t, s[i].e, s[i].k);
    c.moe.route.score = s[i].score, c.moe.route.n_group = s[i].groups;
    c.moe.route.topk_group = s[i].keep, c.moe.route.renormalize = s[i].renorm;
    c.moe.route.scaling = s[i].scaling, c.moe.with_bias = s[i].bias, c.moe.ties = s[i].ties;
    if (i % 2 == 1) c.moe.pad = 3;
    kt_case_push(l, c);
  }
}

typedef struct ex_geom {
  int64_t t, h, in, e, k;
  kite_moe_act act;
  kite_moe_layout layout;
  float limit;
  int bias, oob, transposed;
} ex_geom;

/* The transposed rows are gpt-oss's storage: interleaved, biases, clamped SwiGLU, w13 [E, H, 2I]
 * and w2 [E, I, H]; H != 2I and I != H so a swapped stride reads the wrong elements. */
static const ex_geom g_ex[] = {
    {0, 64, 48, 8, 2, KITE_MOE_SWIGLU_OAI, KITE_MOE_INTERLEAVED, 7.0f, 1, 0, 0},
    {1, 64, 48, 8, 4, KITE_MOE_SWIGLU_OAI, KITE_MOE_INTERLEAVED, 7.0f, 1, 1, 0},
    {17, 40, 24, 8, 2, KITE_MOE_SWIGLU_OAI, KITE_MOE_SPLIT, 0.5f, 1, 0, 0},
    {33, 33, 20, 4, 2, KITE_MOE_SILU, KITE_MOE_SPLIT, 0.0f, 1, 1, 0},
    {5, 17, 3, 3, 3, KITE_MOE_GELU, KITE_MOE_INTERLEAVED, 0.7f, 0, 0, 0},
    {3, 17, 0, 3, 2, KITE_MOE_SWIGLU_OAI, KITE_MOE_SPLIT, 7.0f, 1, 0, 0},
    {16, 128, 127, 8, 2, KITE_MOE_SILU, KITE_MOE_SPLIT, 0.0f, 0, 1, 0},
    {1, 64, 48, 8, 4, KITE_MOE_SWIGLU_OAI, KITE_MOE_INTERLEAVED, 7.0f, 1, 0, 1},
    {29, 72, 40, 16, 4, KITE_MOE_SWIGLU_OAI, KITE_MOE_INTERLEAVED, 1.0f, 1, 1, 1},
    {6, 33, 5, 3, 2, KITE_MOE_SILU, KITE_MOE_SPLIT, 0.0f, 0, 0, 1},
    {3, 17, 0, 3, 2, KITE_MOE_SWIGLU_OAI, KITE_MOE_INTERLEAVED, 7.0f, 1, 0, 1},
    /* many rows per expert (past the CPU's GEMV bound of 16: its packed GEMM, transposed weights
     * packed from their stored rows) under every option: both layouts, every act, clamp, biases,
     * both orientations, odd H and I (partial vectors); E 3 repeats an expert within a token; the
     * last needs two blocks of tokens on the CPU (k H T > 2^23 floats) */
    {96, 72, 40, 4, 2, KITE_MOE_SWIGLU_OAI, KITE_MOE_INTERLEAVED, 7.0f, 1, 1, 1},
    {80, 40, 24, 4, 3, KITE_MOE_SILU, KITE_MOE_SPLIT, 0.0f, 0, 0, 0},
    {64, 33, 20, 2, 2, KITE_MOE_GELU, KITE_MOE_INTERLEAVED, 0.7f, 1, 0, 1},
    {70, 48, 36, 3, 2, KITE_MOE_GELU, KITE_MOE_SPLIT, 0.0f, 1, 1, 0},
    {50, 64, 48, 2, 2, KITE_MOE_SWIGLU_OAI, KITE_MOE_SPLIT, 2.0f, 1, 0, 1},
    {40, 17, 9, 2, 2, KITE_MOE_SILU, KITE_MOE_INTERLEAVED, 0.5f, 0, 1, 1},
    {257, 4096, 4, 2, 8, KITE_MOE_SILU, KITE_MOE_SPLIT, 0.0f, 1, 1, 0},
    /* more than max(2 E, 8) pairs (T k) in f16 / bf16 take cuda.grouped: packed rows per expert
     * (uneven counts), or one padded batch (k = E: every token picks every expert; with ids out of
     * range, counts differ and the shorter experts get zero rows) */
    {64, 72, 40, 16, 2, KITE_MOE_SWIGLU_OAI, KITE_MOE_INTERLEAVED, 7.0f, 1, 1, 1},
    {96, 40, 24, 4, 4, KITE_MOE_SILU, KITE_MOE_SPLIT, 0.0f, 1, 0, 0},
    {80, 33, 20, 5, 5, KITE_MOE_GELU, KITE_MOE_INTERLEAVED, 0.7f, 0, 1, 1},
    {48, 128, 127, 8, 2, KITE_MOE_SILU, KITE_MOE_SPLIT, 0.0f, 0, 1, 0},
    {40, 64, 48, 8, 8, KITE_MOE_SWIGLU_OAI, KITE_MOE_SPLIT, 7.0f, 1, 1, 0},
    /* more experts than pairs: the pairs kernel on CUDA (ids spread over many experts) */
    {40, 40, 24, 128, 2, KITE_MOE_GELU, KITE_MOE_SPLIT, 0.0f, 1, 1, 0},
    {24, 48, 32, 64, 2, KITE_MOE_SWIGLU_OAI, KITE_MOE_INTERLEAVED, 7.0f, 1, 0, 1},
    /* decode (T 1 - 3, the CUDA pairs kernel in every dtype) with biases and ids out of range:
     * rows of 16-byte loads (H 2048, I 64 and 72) with the gate/up rows split in two chunks, and
     * at T 3 the strided x of one element per load; odd H and I (one element per load) with H
     * 300 in three chunks; gpt-oss's columns, 8 per load (2I 80, H 96) and one per load (2I 602,
     * H 45), their rows split among many chunks */
    {1, 2048, 72, 8, 4, KITE_MOE_SWIGLU_OAI, KITE_MOE_INTERLEAVED, 7.0f, 1, 1, 0},
    {2, 300, 45, 8, 3, KITE_MOE_SILU, KITE_MOE_SPLIT, 0.0f, 1, 1, 0},
    {3, 45, 301, 8, 4, KITE_MOE_GELU, KITE_MOE_INTERLEAVED, 0.7f, 1, 1, 1},
    {3, 2048, 64, 8, 8, KITE_MOE_SILU, KITE_MOE_SPLIT, 0.0f, 1, 1, 0},
    {3, 2048, 64, 8, 8, KITE_MOE_SILU, KITE_MOE_SPLIT, 0.0f, 1, 1, 0}, /* x rows + 5 */
    {2, 96, 40, 8, 3, KITE_MOE_SWIGLU_OAI, KITE_MOE_INTERLEAVED, 7.0f, 1, 1, 1}};
static const ex_geom g_quick_ex[] = {
    {1, 64, 48, 8, 4, KITE_MOE_SWIGLU_OAI, KITE_MOE_INTERLEAVED, 7.0f, 1, 1, 0},
    {17, 40, 24, 8, 2, KITE_MOE_SWIGLU_OAI, KITE_MOE_SPLIT, 0.5f, 1, 0, 0},
    {29, 72, 40, 16, 4, KITE_MOE_SWIGLU_OAI, KITE_MOE_INTERLEAVED, 1.0f, 1, 1, 1},
    {64, 72, 40, 16, 2, KITE_MOE_SWIGLU_OAI, KITE_MOE_INTERLEAVED, 7.0f, 1, 1, 1}};

static void ex_cases(kite_dtype t, int quick, kt_case_list *l) {
  const ex_geom *s = quick ? g_quick_ex : g_ex;
  const int n = quick ? KT_COUNT(g_quick_ex) : KT_COUNT(g_ex);
  for (int i = 0; i < n; i++) {
    kt_case c = moe_case(KITE_OP_FUSED_MOE_EX, t, s[i].t, s[i].e, s[i].k);
    c.moe.hidden = s[i].h, c.moe.inter = s[i].in;
    c.moe.opts.act = s[i].act, c.moe.opts.layout = s[i].layout, c.moe.opts.limit = s[i].limit;
    c.moe.with_bias = s[i].bias, c.moe.oob_ids = s[i].oob, c.moe.opts.transposed = s[i].transposed;
    if (i % 2 == 1) c.moe.pad = 5;
    kt_case_push(l, c);
  }
}

static void aux_cases(kite_op op, kite_dtype t, int quick, kt_case_list *l) {
  static const int64_t g[][3] = {{64, 8, 2}, {1, 4, 1}, {37, 64, 6}, {0, 8, 2}, {128, 3, 3}};
  const int n = quick ? 2 : (int)(sizeof g / sizeof g[0]);
  for (int i = 0; i < n; i++)
    for (int v = 0; v < 2; v++) {
      kt_case c = moe_case(op, t, g[i][0], g[i][1], g[i][2]);
      c.moe.with_mask = v, c.moe.oob_ids = v, c.moe.pad = v ? 3 : 0;
      kt_case_push(l, c);
    }
}

static void moe_check_cases(kite_op op, kite_dtype t, int quick, kt_case_list *l) {
  if (op == KITE_OP_MOE_ROUTE)
    route_cases(t, quick, l);
  else if (op == KITE_OP_FUSED_MOE_EX)
    ex_cases(t, quick, l);
  else
    aux_cases(op, t, quick, l);
}

/* ---- bench ------------------------------------------------------------------------------- */

/* DeepSeek-V3's router (E 256, k 8, 8 groups keep 4, sigmoid, correction bias, renormalized,
 * scaled by 2.5; f32 logits, as the model computes them) and gpt-oss-20b's (E 32, k 4, top-k
 * then softmax, router bias; bf16), at T 1, 64 and 4096. */
static kt_case deepseek_route(kite_dtype t, int64_t tokens) {
  kt_case c = moe_case(KITE_OP_MOE_ROUTE, t, tokens, 256, 8);
  c.moe.route.score = KITE_ROUTE_SIGMOID, c.moe.route.n_group = 8, c.moe.route.topk_group = 4;
  c.moe.route.renormalize = 1, c.moe.route.scaling = 2.5f, c.moe.with_bias = 1;
  return c;
}

static kt_case gpt_oss_route(kite_dtype t, int64_t tokens) {
  kt_case c = moe_case(KITE_OP_MOE_ROUTE, t, tokens, 32, 4);
  c.moe.route.score = KITE_ROUTE_SOFTMAX_TOPK, c.moe.with_bias = 1;
  return c;
}

/* gpt-oss-20b's experts: H 2880, I 2880, E 32, k 4, interleaved, biases, clamped SwiGLU (in the
 * [E, 2I, H] orientation; the bench adds T 64 transposed, as gpt-oss stores them). */
static kt_case gpt_oss_experts(kite_dtype t, int64_t tokens) {
  kt_case c = moe_case(KITE_OP_FUSED_MOE_EX, t, tokens, 32, 4);
  c.moe.hidden = 2880, c.moe.inter = 2880, c.moe.with_bias = 1;
  c.moe.opts.act = KITE_MOE_SWIGLU_OAI, c.moe.opts.layout = KITE_MOE_INTERLEAVED;
  c.moe.opts.limit = 7.0f;
  return c;
}

static void moe_bench_cases(kite_op op, kite_dtype t, int llm, kt_case_list *l) {
  switch (op) {
  case KITE_OP_MOE_ROUTE:
    if (!llm) {
      kt_case_push(l, deepseek_route(t, 512));
      break;
    }
    for (int64_t tok = 1; tok <= 4096; tok *= 64) {
      if (t == KITE_DTYPE_F32) kt_case_push(l, deepseek_route(t, tok));
      if (t == KITE_DTYPE_BF16) kt_case_push(l, gpt_oss_route(t, tok));
    }
    break;
  case KITE_OP_FUSED_MOE_EX:
    if (!llm) {
      kt_case c = gpt_oss_experts(t, 16);
      c.moe.hidden = 512, c.moe.inter = 512;
      kt_case_push(l, c);
      /* fused_moe's small shapes (H 1024, I 2048, E 8, k 2, silu) at T 1, 16 and 256: the plain
       * case beside fused_moe's rows */
      for (int64_t tok = 1; tok <= 256; tok *= 16) {
        c = moe_case(op, t, tok, 8, 2);
        c.moe.hidden = 1024, c.moe.inter = 2048;
        kt_case_push(l, c);
      }
    } else if (t == KITE_DTYPE_BF16) {
      kt_case_push(l, gpt_oss_experts(t, 1));
      kt_case_push(l, gpt_oss_experts(t, 64));
      kt_case c = gpt_oss_experts(t, 64); /* as the checkpoint stores them */
      c.moe.opts.transposed = 1;
      kt_case_push(l, c);
    }
    break;
  default: /* the losses: a training batch of 8192 tokens through 64 experts, top-6 */
    if (!llm || t == KITE_DTYPE_BF16) kt_case_push(l, moe_case(op, t, llm ? 8192 : 512, 64, 6));
    break;
  }
}

/* Minimum bytes per call (e: the dtype's size):
 *   moe_route          logits (+ bias) + weights + ids         T E e (+ 4 E) + 8 T k
 *   fused_moe_ex       x + y + the experts' weights (+ biases)  2 T H e + E (3 I H (+ 2I + H)) e
 *                      (every expert counted: an upper bound on the touched ones) + 8 T k
 *   moe_aux_loss       logits + ids (+ mask)                    T E e + 4 T k (+ 4 T)
 *   backward           logits twice (+ dlogits) + ids           2 T E e + 4 T k (+ 4 T) */
static double moe_bytes(const kt_case *c) {
  const kt_moe_case *m = &c->moe;
  const double e = (double)kite_dtype_size(c->dtype), T = (double)m->tokens, E = (double)m->experts,
               K = (double)m->k, H = (double)m->hidden, I = (double)m->inter;
  switch (c->op) {
  case KITE_OP_MOE_ROUTE:
    return T * E * e + (m->with_bias ? 4 * E : 0) + 8 * T * K;
  case KITE_OP_FUSED_MOE_EX: {
    const double touched = E * (1.0 - pow(K < E ? 1.0 - K / E : 0.0, T));
    return 2 * T * H * e + touched * (3 * I * H + (m->with_bias ? 2 * I + H : 0)) * e + 8 * T * K;
  }
  case KITE_OP_MOE_AUX_LOSS:
    return T * E * e + 4 * T * K + (m->with_mask ? 4 * T : 0);
  default:
    return 2 * T * E * e + 4 * T * K + (m->with_mask ? 4 * T : 0);
  }
}

/* fused_moe_ex: T k routed rows through 3 I H weights; the rest are memory-bound. */
static double moe_flops(const kt_case *c) {
  const kt_moe_case *m = &c->moe;
  return c->op == KITE_OP_FUSED_MOE_EX
             ? 2.0 * (double)m->tokens * (double)m->k * 3 * (double)m->inter * (double)m->hidden
             : 0;
}

const kt_family_ops kt_family_moe = {KT_FAMILY_FIELDS(moe, moe_has, moe_flops)};
