/*
 * Drivers of the GEMM, MoE and quantization ops: linear, group_gemm, topk_gating, fused_moe,
 * quant, dequant, linear_quant, linear_wq4. Matrices are row-major with optional row padding;
 * weight stacks ([G, N, K], [E, 2I, H], [E, H, I]) are compact. The cases and their bounds are
 * in driver_gemm_cases.c (driver_gemm.h).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "driver_gemm.h"
#include "kite/dtype.h"
#include "util.h"

static int kt_gemm_has(kite_op op) {
  switch (op) {
  case KITE_OP_LINEAR:
  case KITE_OP_GROUP_GEMM:
  case KITE_OP_TOPK_GATING:
  case KITE_OP_FUSED_MOE:
  case KITE_OP_QUANT:
  case KITE_OP_DEQUANT:
  case KITE_OP_LINEAR_QUANT:
  case KITE_OP_LINEAR_WQ4:
    return 1;
  default:
    return 0;
  }
}

/* ---- descriptions ------------------------------------------------------------------------ */

static const char *act_name(kite_moe_act a) {
  return a == KITE_MOE_GELU ? "gelu" : "silu";
}

static const char *wq4_name(kite_wq4_format f) {
  return f == KITE_WQ4_MIN ? "q4_1" : "q4_0";
}

static void gemm_shape(const kt_case *c, char *buf, size_t n) {
  const kt_gemm_case *g = &c->gemm;
  long long m = g->m, nn = g->n, k = g->k;
  switch (c->op) {
  case KITE_OP_GROUP_GEMM:
    snprintf(buf, n, "%lldx%lldx%lldx%lld", (long long)g->groups, m, nn, k);
    break;
  case KITE_OP_TOPK_GATING:
    snprintf(buf, n, "%lldx%lld k%lld", m, nn, (long long)g->topk);
    break;
  case KITE_OP_FUSED_MOE:
    snprintf(buf, n, "%lldx%lldx%lld E%lldk%lld", m, nn, k, (long long)g->groups,
             (long long)g->topk);
    break;
  case KITE_OP_QUANT:
  case KITE_OP_DEQUANT:
    snprintf(buf, n, "%lldx%lld %s", m, k, kite_dtype_name(g->qtype));
    break;
  case KITE_OP_LINEAR_QUANT:
    snprintf(buf, n, "%lldx%lldx%lld %s", m, nn, k, kite_dtype_name(g->qtype));
    break;
  case KITE_OP_LINEAR_WQ4:
    snprintf(buf, n, "%lldx%lldx%lld %s", m, nn, k, wq4_name(g->wq4));
    break;
  default:
    snprintf(buf, n, "%lldx%lldx%lld", m, nn, k);
    break;
  }
}

static void gemm_describe(const kt_case *c, char *buf, size_t n) {
  const kt_gemm_case *g = &c->gemm;
  size_t len = 0;
  buf[0] = '\0';
  switch (c->op) {
  case KITE_OP_LINEAR:
  case KITE_OP_LINEAR_QUANT:
  case KITE_OP_LINEAR_WQ4:
    if (c->op == KITE_OP_LINEAR_QUANT) kt_cat(buf, n, &len, "%s ", kite_dtype_name(g->qtype));
    if (c->op == KITE_OP_LINEAR_WQ4) kt_cat(buf, n, &len, "%s ", wq4_name(g->wq4));
    kt_cat(buf, n, &len, "M=%lld N=%lld K=%lld%s", (long long)g->m, (long long)g->n,
           (long long)g->k, g->with_bias ? " bias" : "");
    break;
  case KITE_OP_GROUP_GEMM:
    kt_cat(buf, n, &len, "M=%lld N=%lld K=%lld groups[", (long long)g->m, (long long)g->n,
           (long long)g->k);
    for (int64_t i = 0; i < g->groups && i < KT_MAX_SEQS; i++)
      kt_cat(buf, n, &len, "%s%d", i ? "," : "", (int)g->group_sizes[i]);
    kt_cat(buf, n, &len, "]");
    break;
  case KITE_OP_TOPK_GATING:
    kt_cat(buf, n, &len, "T=%lld E=%lld k=%lld%s%s", (long long)g->m, (long long)g->n,
           (long long)g->topk, g->renormalize ? " renorm" : "", g->ties ? " ties" : "");
    break;
  case KITE_OP_FUSED_MOE:
    kt_cat(buf, n, &len, "T=%lld H=%lld I=%lld E=%lld k=%lld %s%s", (long long)g->m,
           (long long)g->n, (long long)g->k, (long long)g->groups, (long long)g->topk,
           act_name(g->act), g->oob_ids ? " ids-out-of-range" : "");
    break;
  case KITE_OP_QUANT:
  case KITE_OP_DEQUANT:
    kt_cat(buf, n, &len, "%lldx%lld %s%s", (long long)g->m, (long long)g->k,
           kite_dtype_name(g->qtype), g->specials ? " specials" : "");
    break;
  default:
    break;
  }
  if (g->pad_x) kt_cat(buf, n, &len, " x+%lld", (long long)g->pad_x);
  if (g->pad_w)
    kt_cat(buf, n, &len, c->op == KITE_OP_FUSED_MOE ? " ids+%lld" : " w+%lld", (long long)g->pad_w);
  if (g->pad_y) kt_cat(buf, n, &len, " y+%lld", (long long)g->pad_y);
}

/* ---- custom fills ------------------------------------------------------------------------ */

/* Element (row, col) of view v's buffer body, as the index kt_store takes. */
static int64_t at(const kt_view *v, int64_t row, int64_t col) {
  return kt_view_row(v, row) + col;
}

static int64_t view_rows(const kt_view *v) {
  int64_t cols = kt_view_cols(v);
  return cols > 0 ? kt_view_numel(v) / cols : 0;
}

void kt_fill_group_sizes(const kt_run *r, int v, uint64_t seed, unsigned char *body) {
  const kt_view *vw = &r->view[v];
  for (int64_t g = 0; g < vw->shape[0]; g++)
    kt_store(KITE_DTYPE_I32, body, at(vw, 0, g), r->c.gemm.group_sizes[g]);
}

/* Integer logits in [-4, 4): many exact ties in every row, in any float dtype. */
static void fill_tied_logits(const kt_run *r, int v, uint64_t seed, unsigned char *body) {
  const kt_view *vw = &r->view[v];
  int64_t cols = kt_view_cols(vw);
  for (int64_t i = 0; i < view_rows(vw); i++)
    for (int64_t j = 0; j < cols; j++)
      kt_store(vw->dtype, body, at(vw, i, j),
               floor(8.0 * kt_unit(seed, (uint64_t)(i * cols + j))) - 4.0);
}

/* k distinct experts per token (k <= E), as topk_gating hands them to fused_moe. */
static void fill_distinct_ids(const kt_run *r, int v, uint64_t seed, unsigned char *body) {
  const kt_view *vw = &r->view[v];
  int64_t k = kt_view_cols(vw), e = r->c.gemm.groups > 0 ? r->c.gemm.groups : 1;
  for (int64_t i = 0; i < view_rows(vw); i++) {
    int64_t first = (int64_t)(kt_hash(seed, (uint64_t)i) % (uint64_t)e);
    for (int64_t j = 0; j < k; j++)
      kt_store(KITE_DTYPE_I32, body, at(vw, i, j), (double)((first + j) % e));
  }
}

/* The e4m3 value halfway between code c and the next one up (c in [0, 0x7d]). */
static double e4m3_midpoint(unsigned c) {
  return 0.5 * ((double)kite_fp8_e4m3_to_f32((uint8_t)c) +
                (double)kite_fp8_e4m3_to_f32((uint8_t)(c + 1)));
}

/* Rows of quant's x, by row index mod 7:
 *   0 uniform in [-3, 3]
 *   1 rounding ties: amax qmax * s (s a power of two, so scale = s exactly) and every other
 *     value such that x / scale lies halfway between two codes (n + 0.5 for int8; midpoints
 *     of adjacent e4m3 values, subnormals included)
 *   2 zeros: scale 0, codes 0
 *   3 uniform with NaN every 5th element: amax ignores NaN; int8 codes 0, e4m3 NaN
 *   4 uniform with +inf and -inf: scale inf, finite values give code 0, inf / inf is NaN
 *   5 magnitudes spread over 2^-20 .. 1: e4m3 subnormals and underflow to 0
 *   6 +-amax only: x / scale rounds just above or below qmax and must saturate at qmax */
static void fill_quant_specials(const kt_run *r, int v, uint64_t seed, unsigned char *body) {
  const kt_view *vw = &r->view[v];
  int64_t cols = kt_view_cols(vw);
  int fp8 = r->c.gemm.qtype == KITE_DTYPE_FP8_E4M3;
  double qmax = fp8 ? 448.0 : 127.0;
  for (int64_t i = 0; i < view_rows(vw); i++) {
    double s = ldexp(1.0, (int)(i % 3) - 1), amax = 1.0 + 3.0 * kt_unit(seed, (uint64_t)~i);
    for (int64_t j = 0; j < cols; j++) {
      uint64_t n = (uint64_t)(i * cols + j), h = kt_hash(seed, n);
      double u = 2.0 * kt_unit(seed, n) - 1.0, sign = (h >> 63) ? -1.0 : 1.0, x = 3.0 * u;
      switch (i % 7) {
      case 1:
        if (j == 0)
          x = sign * qmax * s;
        else if (fp8)
          x = sign * s * e4m3_midpoint((unsigned)(h % 0x7e));
        else
          x = s * ((double)(int64_t)(h % 254) - 127.0 + 0.5);
        break;
      case 2:
        x = 0.0;
        break;
      case 3:
        if (j % 5 == 2) x = NAN;
        break;
      case 4:
        if (j % 7 == 1) x = INFINITY;
        if (j % 7 == 4) x = -INFINITY;
        break;
      case 5:
        x = u * ldexp(1.0, -(int)(h % 21));
        break;
      case 6:
        x = sign * amax;
        break;
      default:
        break;
      }
      kt_store(vw->dtype, body, at(vw, i, j), x);
    }
  }
}

/* dequant's e4m3 codes: any byte; with specials NaN codes (0x7f, 0xff) come too. */
static void fill_e4m3_codes(const kt_run *r, int v, uint64_t seed, unsigned char *body) {
  const kt_view *vw = &r->view[v];
  int64_t cols = kt_view_cols(vw);
  for (int64_t i = 0; i < view_rows(vw); i++)
    for (int64_t j = 0; j < cols; j++) {
      uint8_t b = (uint8_t)kt_hash(seed, (uint64_t)(i * cols + j));
      if ((b & 0x7f) == 0x7f && !r->c.gemm.specials) b ^= 1; /* 0x7e: 448 */
      body[at(vw, i, j)] = b;
    }
}

/* linear_wq4's blocks: random nibbles, d (and m) f16 of magnitude 2^-4 .. 2^-3 with either sign,
 * so each weight is of order 1 / 8 and y of order sqrt(K) / 8 for x in [-1, 1]. */
static void fill_wq4(const kt_run *r, int v, uint64_t seed, unsigned char *body) {
  const kt_view *vw = &r->view[v];
  const int min = r->c.gemm.wq4 == KITE_WQ4_MIN;
  const int64_t cols = kt_view_cols(vw), bb = kite_wq4_block_bytes(r->c.gemm.wq4), nb = cols / bb;
  for (int64_t i = 0; i < view_rows(vw); i++)
    for (int64_t b = 0; b < nb; b++) {
      uint64_t n = (uint64_t)(i * nb + b), h = kt_hash(seed, n);
      float d = (1.0f + kt_unit(seed ^ 0x5bd1e995u, n)) / 16.0f * ((h >> 63) ? -1.0f : 1.0f);
      uint16_t hd = kite_f32_to_f16(d), hm = kite_f32_to_f16(-4.0f * d);
      unsigned char *blk = body + at(vw, i, b * bb);
      blk[0] = (unsigned char)(hd & 0xff), blk[1] = (unsigned char)(hd >> 8);
      if (min) blk[2] = (unsigned char)(hm & 0xff), blk[3] = (unsigned char)(hm >> 8);
      for (int64_t j = min ? 4 : 2; j < bb; j++)
        blk[j] = (unsigned char)kt_hash(seed + 1, n * 32 + (uint64_t)j);
    }
}

/* ---- layout ------------------------------------------------------------------------------ */

static int add_vector(kt_run *r, const char *name, kite_dtype t, kt_role role, int64_t n, float lo,
                      float hi) {
  int64_t shape[1] = {n};
  return kt_add_tensor(r, name, t, role, 1, shape, KT_FILL_UNIFORM, lo, hi);
}

static void set_custom(kt_run *r, int v, kt_fill_fn fn) {
  if (v < 0) return;
  r->view[v].fill = KT_FILL_CUSTOM;
  r->view[v].fill_fn = fn;
}

/* Scratch of the per-expert composition: Tk = T * k rows routed, grouped by expert. Views of no
 * argument of fused_moe: alt_call finds them by name (scratch_view). */
static void plan_moe_scratch(kt_run *r, const kt_case *c) {
  const kt_gemm_case *g = &c->gemm;
  kite_dtype t = c->dtype;
  int64_t tk = g->m * g->topk, h = g->n, in = g->k;
  int64_t rows[1] = {tk};
  kt_add_tensor(r, "rows", KITE_DTYPE_I32, KT_OUT, 1, rows, KT_FILL_IDS, 0, 0);
  kt_add_matrix(r, "x_routed", t, KT_OUT, tk, h, 0, 0, 0);
  kt_add_matrix(r, "gate_up", t, KT_OUT, tk, 2 * in, 0, 0, 0);
  kt_add_matrix(r, "act", t, KT_OUT, tk, in, 0, 0, 0);
  kt_add_matrix(r, "expert_out_t", t, KT_OUT, h, tk, 0, 0, 0); /* [H, Tk] */
  kt_add_matrix(r, "combine", t, KT_OUT, g->m, tk, 0, 0, 0);   /* [T, Tk] */
}

/* The view of that name (a scratch view of plan_moe_scratch), or -1. */
static int scratch_view(const kt_run *r, const char *name) {
  for (int i = 0; i < r->nviews; i++)
    if (strcmp(r->view[i].name, name) == 0) return i;
  return -1;
}

static void gemm_plan(kt_run *r, const kt_case *c) {
  const kt_gemm_case *g = &c->gemm;
  kite_dtype t = c->dtype, qt = g->qtype;
  int64_t M = g->m, N = g->n, K = g->k;
  switch (c->op) {
  case KITE_OP_LINEAR:
    kt_bind(r, "x", kt_add_matrix(r, "x", t, KT_IN, M, K, g->pad_x, -1, 1));
    kt_bind(r, "w", kt_add_matrix(r, "w", t, KT_IN, N, K, g->pad_w, -1, 1));
    if (g->with_bias) kt_bind(r, "bias", add_vector(r, "bias", t, KT_IN, N, -1, 1));
    kt_bind(r, "y", kt_add_matrix(r, "y", t, KT_OUT, M, N, g->pad_y, 0, 0));
    break;
  case KITE_OP_GROUP_GEMM: {
    int64_t G = g->groups, ws = K + g->pad_w; /* w row stride */
    int64_t shape[3] = {G, N, K}, strides[3] = {N * ws, ws, 1}, gs[1] = {G};
    kt_bind(r, "x", kt_add_matrix(r, "x", t, KT_IN, M, K, g->pad_x, -1, 1));
    int b = kt_add_buf(r, "w", t, G * N * ws);
    kt_bind(r, "w", kt_add_view(r, "w", b, t, KT_IN, 3, shape, strides, 0, KT_FILL_UNIFORM, -1, 1));
    int v = kt_bind(
        r, "group_sizes",
        kt_add_tensor(r, "group_sizes", KITE_DTYPE_I32, KT_IN, 1, gs, KT_FILL_CUSTOM, 0, 0));
    set_custom(r, v, kt_fill_group_sizes);
    kt_bind(r, "y", kt_add_matrix(r, "y", t, KT_OUT, M, N, g->pad_y, 0, 0));
    break;
  }
  case KITE_OP_TOPK_GATING: {
    int x = kt_bind(r, "logits", kt_add_matrix(r, "logits", t, KT_IN, M, N, g->pad_x, -4, 4));
    if (g->ties) set_custom(r, x, fill_tied_logits);
    kt_bind(r, "weights",
            kt_add_matrix(r, "weights", KITE_DTYPE_F32, KT_OUT, M, g->topk, g->pad_y, 0, 0));
    kt_bind(r, "ids", kt_add_matrix(r, "ids", KITE_DTYPE_I32, KT_OUT, M, g->topk, g->pad_y, 0, 0));
    break;
  }
  case KITE_OP_FUSED_MOE: {
    /* x[T, H], w13[E, 2I, H], w2[E, H, I]; weights in [0, 1); with oob_ids the ids span
     * [-1, E + 1): about 2 in E + 2 contribute nothing */
    int64_t E = g->groups, w13[3] = {E, 2 * K, N}, w2[3] = {E, N, K};
    float wamp = 1.0f / sqrtf((float)(N > 0 ? N : 1)) * 2.0f; /* gate, up of order 1 */
    kt_bind(r, "x", kt_add_matrix(r, "x", t, KT_IN, M, N, g->pad_x, -1, 1));
    kt_bind(r, "w13", kt_add_tensor(r, "w13", t, KT_IN, 3, w13, KT_FILL_UNIFORM, -wamp, wamp));
    kt_bind(r, "w2", kt_add_tensor(r, "w2", t, KT_IN, 3, w2, KT_FILL_UNIFORM, -0.5f, 0.5f));
    kt_bind(r, "weights", kt_add_matrix(r, "weights", KITE_DTYPE_F32, KT_IN, M, g->topk, 0, 0, 1));
    int ids = kt_add_matrix(r, "ids", KITE_DTYPE_I32, KT_IN, M, g->topk, g->pad_w, 0, 0);
    r->view[ids].fill = KT_FILL_IDS;
    r->view[ids].lo = g->oob_ids ? -1.0f : 0.0f;
    r->view[ids].hi = (float)E + (g->oob_ids ? 1.0f : 0.0f);
    if (g->distinct_ids) set_custom(r, ids, fill_distinct_ids);
    kt_bind(r, "ids", ids);
    kt_bind(r, "y", kt_add_matrix(r, "y", t, KT_OUT, M, N, g->pad_y, 0, 0));
    if (g->alt_scratch) plan_moe_scratch(r, c);
    break;
  }
  case KITE_OP_QUANT: {
    int x = kt_bind(r, "x", kt_add_matrix(r, "x", t, KT_IN, M, K, g->pad_x, -3, 3));
    if (g->specials) set_custom(r, x, fill_quant_specials);
    int q = kt_bind(r, "q", kt_add_matrix(r, "q", qt, KT_OUT, M, K, g->pad_y, 0, 0));
    if (q >= 0) r->view[q].nan_ok = qt == KITE_DTYPE_FP8_E4M3;
    kt_bind(r, "scales", add_vector(r, "scales", KITE_DTYPE_F32, KT_OUT, M, 0, 0));
    break;
  }
  case KITE_OP_DEQUANT: {
    int q = kt_bind(r, "q", kt_add_matrix(r, "q", qt, KT_IN, M, K, g->pad_x, -128, 128));
    if (q >= 0) {
      if (qt == KITE_DTYPE_I8)
        r->view[q].fill = KT_FILL_IDS; /* every code, -128 included */
      else
        set_custom(r, q, fill_e4m3_codes);
    }
    kt_bind(r, "scales", add_vector(r, "scales", KITE_DTYPE_F32, KT_IN, M, 0, 0.05f));
    int y = kt_bind(r, "y", kt_add_matrix(r, "y", t, KT_OUT, M, K, g->pad_y, 0, 0));
    if (y >= 0) r->view[y].nan_ok = qt == KITE_DTYPE_FP8_E4M3;
    break;
  }
  case KITE_OP_LINEAR_QUANT: {
    /* every int8 code (-128 included); e4m3 values over their whole range, +-448 */
    int i8 = qt == KITE_DTYPE_I8;
    float lo = i8 ? -128.0f : -448.0f, hi = i8 ? 128.0f : 448.0f;
    int xq = kt_bind(r, "xq", kt_add_matrix(r, "xq", qt, KT_IN, M, K, g->pad_x, lo, hi));
    kt_bind(r, "x_scales", add_vector(r, "x_scales", KITE_DTYPE_F32, KT_IN, M, 0.5e-3f, 2.5e-3f));
    int wq = kt_bind(r, "wq", kt_add_matrix(r, "wq", qt, KT_IN, N, K, g->pad_w, lo, hi));
    kt_bind(r, "w_scales", add_vector(r, "w_scales", KITE_DTYPE_F32, KT_IN, N, 0.5e-3f, 2.5e-3f));
    if (i8 && xq >= 0 && wq >= 0) r->view[xq].fill = r->view[wq].fill = KT_FILL_IDS;
    if (g->with_bias) kt_bind(r, "bias", add_vector(r, "bias", t, KT_IN, N, -1, 1));
    kt_bind(r, "y", kt_add_matrix(r, "y", t, KT_OUT, M, N, g->pad_y, 0, 0));
    break;
  }
  case KITE_OP_LINEAR_WQ4: {
    kt_bind(r, "x", kt_add_matrix(r, "x", t, KT_IN, M, K, g->pad_x, -1, 1));
    int w = kt_bind(r, "w",
                    kt_add_matrix(r, "w", KITE_DTYPE_U8, KT_IN, N,
                                  K / 32 * kite_wq4_block_bytes(g->wq4), g->pad_w, 0, 0));
    set_custom(r, w, fill_wq4);
    if (g->with_bias) kt_bind(r, "bias", add_vector(r, "bias", t, KT_IN, N, -1, 1));
    kt_bind(r, "y", kt_add_matrix(r, "y", t, KT_OUT, M, N, g->pad_y, 0, 0));
    break;
  }
  default:
    r->bad = 1;
    break;
  }
}

/* ---- the call's scalars ------------------------------------------------------------------ */

KT_SCALARS(gemm_scalar, KT_FIELD("k", 'l', gemm.topk),
           KT_FIELD("renormalize", 'i', gemm.renormalize), KT_FIELD("act", 'i', gemm.act),
           KT_FIELD("format", 'i', gemm.wq4))

/* ---- fused_moe another way: per-expert calls of the public ops ----------------------------- */

/* A 2-D window [rows, cols] of view vi, from its element (row0, col0). */
static DLTensor window(const kt_run *r, int vi, int64_t row0, int64_t col0, int64_t *shape,
                       int64_t *strides, int64_t rows, int64_t cols) {
  const kt_view *v = &r->view[vi];
  DLTensor t = v->t;
  shape[0] = rows, shape[1] = cols;
  strides[0] = v->strides[v->ndim - 2], strides[1] = 1;
  t.ndim = 2, t.shape = shape, t.strides = strides;
  t.byte_offset += (uint64_t)(row0 * strides[0] + col0) * (uint64_t)kite_dtype_size(v->dtype);
  return t;
}

/* Expert e's matrix of a weight stack [E, R, C] (view vi) as a [R, C] tensor. */
static DLTensor expert(const kt_run *r, int vi, int64_t e, int64_t *shape, int64_t *strides) {
  const kt_view *v = &r->view[vi];
  DLTensor t = v->t;
  shape[0] = v->shape[1], shape[1] = v->shape[2];
  strides[0] = v->strides[1], strides[1] = 1;
  t.ndim = 2, t.shape = shape, t.strides = strides;
  t.byte_offset += (uint64_t)(e * v->strides[0]) * (uint64_t)kite_dtype_size(v->dtype);
  return t;
}

/* The routing is read back to the host, as an engine without a fused kernel would: the Tk
 * routed rows are grouped by expert; per expert e with n_e rows:
 *   x_routed[n_e, H] = x[rows]                  (kite_embedding gathers the token rows)
 *   gate_up[n_e, 2I] = x_routed w13[e]^T        (kite_linear)
 *   act[n_e, I]      = act(gate) * up           (kite_silu_and_mul / kite_gelu_and_mul)
 *   out_t[H, n_e]    = w2[e] act^T              (kite_linear, columns of expert_out_t)
 * then y[T, H] = combine[T, Tk] out_t^T with combine[t, row] the routing weight of that row
 * (kite_linear; the weights rounded to the dtype). Out-of-range ids are dropped on the host. */
static kite_status moe_alt_call(kt_run *r) {
  const kt_gemm_case *g = &r->c.gemm;
  kite_ctx *ctx = r->ctx;
  kite_dtype t = r->c.dtype;
  int64_t T = g->m, k = g->topk, E = g->groups, tk = T * k, I = g->k;
  const int v_rows = scratch_view(r, "rows"), v_xe = scratch_view(r, "x_routed");
  const int v_h = scratch_view(r, "gate_up"), v_act = scratch_view(r, "act");
  const int v_ot = scratch_view(r, "expert_out_t"), v_comb = scratch_view(r, "combine");
  if (v_rows < 0 || v_xe < 0 || v_h < 0 || v_act < 0 || v_ot < 0 || v_comb < 0)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "kite: this fused_moe case has no scratch");
  const kt_view *vi = &r->view[kt_arg_view(r, "ids")], *vw = &r->view[kt_arg_view(r, "weights")];
  size_t ib = (size_t)r->buf[vi->buf].count * 4, wb = (size_t)r->buf[vw->buf].count * 4;
  size_t cb = (size_t)(T * tk) * kite_dtype_size(t);
  int32_t *ids = malloc(ib + 4), *rows = malloc((size_t)tk * 4 + 4);
  float *wts = malloc(wb + 4);
  int64_t *count = calloc((size_t)E + 1, sizeof *count);
  unsigned char *comb = calloc(cb + 1, 1); /* zeros in every float dtype */
  kite_status s = KITE_OK;
  if (!ids || !rows || !wts || !count || !comb)
    s = kite_set_error(KITE_ERR_OUT_OF_MEMORY, "kite: fused_moe: out of host memory");
  if (s == KITE_OK)
    s = kite_memcpy_offset(ctx, ids, 0, vi->t.data, KT_GUARD, ib, KITE_COPY_DEVICE_TO_HOST);
  if (s == KITE_OK)
    s = kite_memcpy_offset(ctx, wts, 0, vw->t.data, KT_GUARD, wb, KITE_COPY_DEVICE_TO_HOST);
  int64_t n = 0;
  for (int64_t e = 0; e < E && s == KITE_OK; e++) {
    int64_t start = n;
    for (int64_t i = 0; i < T; i++)
      for (int64_t j = 0; j < k; j++) {
        if (ids[at(vi, i, j)] != e) continue;
        kt_store(t, comb, i * tk + n, wts[at(vw, i, j)]);
        rows[n++] = (int32_t)i;
      }
    count[e] = n - start;
  }
  if (s == KITE_OK && n > 0) {
    const kt_view *vr = &r->view[v_rows];
    s = kite_memcpy_offset(ctx, vr->t.data, KT_GUARD, rows, 0, (size_t)n * 4,
                           KITE_COPY_HOST_TO_DEVICE);
  }
  if (s == KITE_OK) {
    const kt_view *vc = &r->view[v_comb];
    s = kite_memcpy_offset(ctx, vc->t.data, KT_GUARD, comb, 0, cb, KITE_COPY_HOST_TO_DEVICE);
  }
  int64_t start = 0;
  for (int64_t e = 0; e < E && s == KITE_OK; e++) {
    int64_t ne = count[e], sh[6][2], st[6][2];
    if (ne == 0) continue;
    DLTensor sel = r->view[v_rows].t;
    int64_t sel_shape[1] = {ne}, sel_stride[1] = {1};
    sel.shape = sel_shape, sel.strides = sel_stride;
    sel.byte_offset += (uint64_t)start * 4;
    DLTensor xe = window(r, v_xe, 0, 0, sh[0], st[0], ne, g->n);
    DLTensor hu = window(r, v_h, 0, 0, sh[1], st[1], ne, 2 * I);
    DLTensor act = window(r, v_act, 0, 0, sh[2], st[2], ne, I);
    DLTensor out = window(r, v_ot, 0, start, sh[3], st[3], g->n, ne);
    DLTensor w13 = expert(r, kt_arg_view(r, "w13"), e, sh[4], st[4]);
    DLTensor w2 = expert(r, kt_arg_view(r, "w2"), e, sh[5], st[5]);
    s = kite_embedding(ctx, &sel, kt_arg_named(r, "x"), &xe);
    if (s == KITE_OK) s = kite_linear(ctx, &xe, &w13, NULL, &hu);
    if (s == KITE_OK)
      s = g->act == KITE_MOE_GELU ? kite_gelu_and_mul(ctx, &hu, 0.0f, &act)
                                  : kite_silu_and_mul(ctx, &hu, 0.0f, &act);
    if (s == KITE_OK) s = kite_linear(ctx, &w2, &act, NULL, &out);
    start += ne;
  }
  if (s == KITE_OK) {
    /* with nothing routed the combine is all zeros over an empty K: y = 0 */
    int64_t sh[2][2], st[2][2];
    DLTensor comb_t = window(r, v_comb, 0, 0, sh[0], st[0], T, n);
    DLTensor out_t = window(r, v_ot, 0, 0, sh[1], st[1], g->n, n);
    s = kite_linear(ctx, &comb_t, &out_t, NULL, kt_arg_named(r, "y"));
  }
  free(ids), free(rows), free(wts), free(count), free(comb);
  return s;
}

static const char *gemm_alt_name(const kt_case *c) {
  return c->op == KITE_OP_FUSED_MOE && c->gemm.alt_scratch ? "per-expert linear" : NULL;
}

/* ---- bytes, FLOPs ------------------------------------------------------------------------ */

/* Experts a fused_moe call must read: each token picks k of E distinct, so an expert is
 * untouched with probability (1 - k/E)^T. */
static double moe_experts_touched(const kt_gemm_case *g) {
  double e = (double)g->groups, k = (double)g->topk;
  if (e <= 0) return 0;
  return e * (1.0 - pow(k < e ? 1.0 - k / e : 0.0, (double)g->m));
}

/* Minimum bytes per call (e: the float dtype's size, q: 1 byte codes):
 *   linear        x + w + y (+ bias)                    (M K + N K + M N (+ N)) e
 *                 decode (M <= 16): the weight dominates, so %memcpy is weight streaming
 *   group_gemm    x + all G weights + y                 (M K + G N K + M N) e
 *   topk_gating   logits + weights + ids                T E e + 8 T k
 *   fused_moe     x + y + the experts touched           2 T H e + touched 3 I H e + 8 T k
 *   quant         x + q + scales                        M K (e + 1) + 4 M
 *   dequant       q + scales + y                        M K (1 + e) + 4 M
 *   linear_quant  xq + wq + scales + y (+ bias)         M K + N K + 4 (M + N) + M N e (+ N e)
 *   linear_wq4    x + 4-bit blocks + y (+ bias)         (M K + M N) e + N K / 32 (18 | 20) */
static double gemm_bytes(const kt_case *c) {
  const kt_gemm_case *g = &c->gemm;
  double e = (double)kite_dtype_size(c->dtype), M = (double)g->m, N = (double)g->n,
         K = (double)g->k, b = g->with_bias ? N * e : 0;
  switch (c->op) {
  case KITE_OP_LINEAR:
    return (M * K + N * K + M * N) * e + b;
  case KITE_OP_GROUP_GEMM:
    return (M * K + (double)g->groups * N * K + M * N) * e;
  case KITE_OP_TOPK_GATING:
    return M * N * e + 8 * M * (double)g->topk;
  case KITE_OP_FUSED_MOE:
    return 2 * M * N * e + moe_experts_touched(g) * 3 * K * N * e + 8 * M * (double)g->topk;
  case KITE_OP_QUANT:
  case KITE_OP_DEQUANT:
    return M * K * (e + 1) + 4 * M;
  case KITE_OP_LINEAR_QUANT:
    return M * K + N * K + 4 * (M + N) + M * N * e + b;
  case KITE_OP_LINEAR_WQ4:
    return (M * K + M * N) * e + N * K / 32 * (double)kite_wq4_block_bytes(g->wq4) + b;
  default:
    return 0;
  }
}

/* 2 M N K multiply-adds for the GEMMs; fused_moe: T k routed rows through 3 I H weights. */
static double gemm_flops(const kt_case *c) {
  const kt_gemm_case *g = &c->gemm;
  double M = (double)g->m, N = (double)g->n, K = (double)g->k;
  switch (c->op) {
  case KITE_OP_LINEAR:
  case KITE_OP_GROUP_GEMM:
  case KITE_OP_LINEAR_QUANT:
  case KITE_OP_LINEAR_WQ4:
    return 2 * M * N * K;
  case KITE_OP_FUSED_MOE:
    return 2 * M * (double)g->topk * 3 * N * K;
  default:
    return 0; /* memory-bound */
  }
}

const kt_family_ops kt_family_gemm = {KT_FAMILY_FIELDS(gemm, kt_gemm_has, gemm_flops),
                                      .alt_call = moe_alt_call, .alt_name = gemm_alt_name};
