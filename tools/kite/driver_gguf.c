/*
 * Driver of the GGUF block-weight ops: linear_gguf (y[m, n] = x[m, k] w^T + bias), linear_gguf_q8
 * (the same with x's blocks quantized to int8), dequant_gguf (y[n, k] = w's values) and
 * group_gemm_gguf (groups of x's rows, each against its w[g] and bias[g]), every block type kite
 * runs. The blocks are random bytes
 * with their f16 (Q8_K: f32) scales replaced by finite values of either sign, sized so that each
 * weight is of order 1 / 8. Cases cover 0, 1 and many rows, one and several blocks per row, the
 * GEMV's row groups and their tails, K = 0, bias on and off, padded rows of x, w and y.
 */
#include <stdio.h>
#include <string.h>

#include "driver.h"
#include "kite/dtype.h"
#include "util.h"

static const kite_gguf_type g_types[] = {
    KITE_GGUF_Q4_0, KITE_GGUF_Q4_1,   KITE_GGUF_Q5_0, KITE_GGUF_Q5_1, KITE_GGUF_Q8_0,
    KITE_GGUF_Q2_K, KITE_GGUF_Q3_K,   KITE_GGUF_Q4_K, KITE_GGUF_Q5_K, KITE_GGUF_Q6_K,
    KITE_GGUF_Q8_K, KITE_GGUF_IQ4_NL, KITE_GGUF_MXFP4};

static int gguf_has(kite_op op) {
  return op == KITE_OP_LINEAR_GGUF || op == KITE_OP_DEQUANT_GGUF || op == KITE_OP_LINEAR_GGUF_Q8 ||
         op == KITE_OP_GROUP_GEMM_GGUF;
}

static int64_t block_values(kite_gguf_type t) {
  int64_t v = 0;
  kite_gguf_block_info(t, &v, NULL);
  return v;
}

static int64_t row_bytes(kite_gguf_type t, int64_t k) {
  int64_t v = 0, b = 0;
  kite_gguf_block_info(t, &v, &b);
  return v ? k / v * b : 0;
}

/* ---- descriptions ------------------------------------------------------------------------ */

static const char *type_name(kite_gguf_type t) {
  const char *s = kite_gguf_type_name(t);
  return s ? s : "?";
}

static void gguf_shape(const kt_case *c, char *buf, size_t n) {
  const kt_gemm_case *g = &c->gemm;
  if (c->op == KITE_OP_DEQUANT_GGUF)
    snprintf(buf, n, "%lldx%lld %s", (long long)g->n, (long long)g->k, type_name(g->gguf));
  else
    snprintf(buf, n, "%lldx%lldx%lld %s", (long long)g->m, (long long)g->n, (long long)g->k,
             type_name(g->gguf));
}

static void gguf_describe(const kt_case *c, char *buf, size_t n) {
  const kt_gemm_case *g = &c->gemm;
  size_t len = 0;
  buf[0] = '\0';
  kt_cat(buf, n, &len, "%s ", type_name(g->gguf));
  if (c->op != KITE_OP_DEQUANT_GGUF) kt_cat(buf, n, &len, "M=%lld ", (long long)g->m);
  if (c->op == KITE_OP_GROUP_GEMM_GGUF) {
    kt_cat(buf, n, &len, "G=%lld sizes=", (long long)g->groups);
    for (int64_t i = 0; i < g->groups && i < KT_MAX_SEQS; i++)
      kt_cat(buf, n, &len, "%s%d", i ? "," : "", (int)g->group_sizes[i]);
    kt_cat(buf, n, &len, " ");
  }
  kt_cat(buf, n, &len, "N=%lld K=%lld%s", (long long)g->n, (long long)g->k,
         g->with_bias ? " bias" : "");
  if (g->pad_x) kt_cat(buf, n, &len, " x+%lld", (long long)g->pad_x);
  if (g->pad_w) kt_cat(buf, n, &len, " w+%lld", (long long)g->pad_w);
  if (g->pad_y) kt_cat(buf, n, &len, " y+%lld", (long long)g->pad_y);
}

/* ---- the blocks -------------------------------------------------------------------------- */

/* Where a block type keeps its scales: byte offsets of up to two f16 fields (-1: none; Q8_K's
 * d is an f32 at 0) and the largest |integer factor| a scale multiplies, so d ~ 1 / (8 qmax). */
typedef struct scale_fields {
  int d, m;
  float qmax;
} scale_fields;

static scale_fields fields_of(kite_gguf_type t) {
  switch (t) {
  case KITE_GGUF_Q4_1:
    return (scale_fields){0, 2, 15};
  case KITE_GGUF_Q5_0:
    return (scale_fields){0, -1, 16};
  case KITE_GGUF_Q5_1:
    return (scale_fields){0, 2, 31};
  case KITE_GGUF_Q8_0:
  case KITE_GGUF_Q8_K:
  case KITE_GGUF_IQ4_NL:
    return (scale_fields){0, -1, 127};
  case KITE_GGUF_Q2_K:
    return (scale_fields){80, 82, 3 * 15};
  case KITE_GGUF_Q3_K:
    return (scale_fields){108, -1, 4 * 32};
  case KITE_GGUF_Q4_K:
    return (scale_fields){0, 2, 15 * 63};
  case KITE_GGUF_Q5_K:
    return (scale_fields){0, 2, 31 * 63};
  case KITE_GGUF_Q6_K:
    return (scale_fields){208, -1, 32 * 127};
  default: /* Q4_0 */
    return (scale_fields){0, -1, 8};
  }
}

static void put_f16(unsigned char *p, float v) {
  const uint16_t h = kite_f32_to_f16(v);
  p[0] = (unsigned char)(h & 0xff), p[1] = (unsigned char)(h >> 8);
}

static void fill_blocks(const kt_run *r, int v, uint64_t seed, unsigned char *body) {
  const kt_view *vw = &r->view[v];
  const kite_gguf_type t = r->c.gemm.gguf;
  const scale_fields f = fields_of(t);
  int64_t bv = 0, bb = 0;
  kite_gguf_block_info(t, &bv, &bb);
  const int64_t cols = kt_view_cols(vw), rows = cols > 0 ? kt_view_numel(vw) / cols : 0;
  for (int64_t i = 0; i < rows; i++) {
    unsigned char *row = body + kt_view_row(vw, i);
    for (int64_t j = 0; j < cols; j++)
      row[j] = (unsigned char)kt_hash(seed + 1, (uint64_t)(i * cols + j));
    for (int64_t b = 0; bb > 0 && b < cols / bb; b++) {
      const uint64_t n = (uint64_t)(i * (cols / bb) + b), h = kt_hash(seed, n);
      const float d =
          (1.0f + kt_unit(seed ^ 0x5bd1e995u, n)) / (8.0f * f.qmax) * ((h >> 63) ? -1.0f : 1.0f);
      unsigned char *blk = row + b * bb;
      if (t == KITE_GGUF_MXFP4) /* e8m0: 2^(e - 128) in [2^-8, 2^-3], so w within +-12/8 */
        blk[0] = (unsigned char)(120 + h % 6);
      else if (t == KITE_GGUF_Q8_K)
        memcpy(blk, &d, 4);
      else
        put_f16(blk + f.d, d);
      if (f.m >= 0) put_f16(blk + f.m, ((h >> 62) & 1 ? 0.5f : -0.5f) * d * f.qmax / 8.0f);
    }
  }
}

/* ---- layout ------------------------------------------------------------------------------ */

/* group_gemm_gguf: w[G, N, row bytes] with padded rows, group_sizes, bias[G, N], y[M, N]. */
static void group_plan(kt_run *r, const kt_case *c) {
  const kt_gemm_case *g = &c->gemm;
  const kite_dtype t = c->dtype;
  const int64_t M = g->m, N = g->n, G = g->groups, ws = row_bytes(g->gguf, g->k) + g->pad_w;
  const int64_t shape[3] = {G, N, ws - g->pad_w}, strides[3] = {N * ws, ws, 1}, gs[1] = {G};
  kt_bind(r, "x", kt_add_matrix(r, "x", t, KT_IN, M, g->k, g->pad_x, -1, 1));
  const int b = kt_add_buf(r, "w", KITE_DTYPE_U8, G * N * ws);
  const int w =
      kt_bind(r, "w", kt_add_view(r, "w", b, KITE_DTYPE_U8, KT_IN, 3, shape, strides, 0, 0, 0, 0));
  if (w >= 0) {
    r->view[w].fill = KT_FILL_CUSTOM;
    r->view[w].fill_fn = fill_blocks;
  }
  const int v =
      kt_bind(r, "group_sizes",
              kt_add_tensor(r, "group_sizes", KITE_DTYPE_I32, KT_IN, 1, gs, KT_FILL_CUSTOM, 0, 0));
  if (v >= 0) r->view[v].fill_fn = kt_fill_group_sizes;
  if (g->with_bias) {
    const int64_t bs[2] = {G, N};
    kt_bind(r, "bias", kt_add_tensor(r, "bias", t, KT_IN, 2, bs, KT_FILL_UNIFORM, -1, 1));
  }
  kt_bind(r, "y", kt_add_matrix(r, "y", t, KT_OUT, M, N, g->pad_y, 0, 0));
}

static void gguf_plan(kt_run *r, const kt_case *c) {
  const kt_gemm_case *g = &c->gemm;
  const kite_dtype t = c->dtype;
  const int64_t M = g->m, N = g->n, K = g->k;
  if (c->op == KITE_OP_GROUP_GEMM_GGUF) {
    group_plan(r, c);
    return;
  }
  if (c->op != KITE_OP_DEQUANT_GGUF)
    kt_bind(r, "x", kt_add_matrix(r, "x", t, KT_IN, M, K, g->pad_x, -1, 1));
  int w = kt_bind(
      r, "w",
      kt_add_matrix(r, "w", KITE_DTYPE_U8, KT_IN, N, row_bytes(g->gguf, K), g->pad_w, 0, 0));
  if (w >= 0) {
    r->view[w].fill = KT_FILL_CUSTOM;
    r->view[w].fill_fn = fill_blocks;
  }
  if (c->op == KITE_OP_DEQUANT_GGUF) {
    kt_bind(r, "y", kt_add_matrix(r, "y", t, KT_OUT, N, K, g->pad_y, 0, 0));
    return;
  }
  if (g->with_bias) {
    int64_t shape[1] = {N};
    kt_bind(r, "bias", kt_add_tensor(r, "bias", t, KT_IN, 1, shape, KT_FILL_UNIFORM, -1, 1));
  }
  kt_bind(r, "y", kt_add_matrix(r, "y", t, KT_OUT, M, N, g->pad_y, 0, 0));
}

KT_SCALARS(gguf_scalar, KT_FIELD("type", 'i', gemm.gguf))

/* ---- bounds ------------------------------------------------------------------------------ */

/* dequant_gguf: 0. Each weight is exact in f32 once rounded by its last operation (kite.h), on
 *   every backend, then rounded once to y's dtype: all agree bit for bit.
 * linear_gguf: the same weights, f32 dot products over K <= 2048 terms (the linear bounds of
 *   driver_gemm_cases.c: 5e-11 for f32 would do for the dots, but a block's weights may be
 *   much larger than the output when its min term cancels: 1e-6, as linear_wq4), f16 / bf16
 *   outputs rounded once: 1e-6 / 1e-4.
 * linear_gguf_q8: ref quantizes x exactly as the kernels must (f32 scale and division, ties to
 *   even), so the codes agree and only the sums' rounding differs (integer sums in the kernels,
 *   f32 scale products and offsets): linear_gguf's bounds. */
static double gguf_bound(kite_op op, kite_dtype t) {
  if (op == KITE_OP_DEQUANT_GGUF) return 0;
  return t == KITE_DTYPE_BF16 ? 1e-4 : 1e-6;
}

/* ---- the cases --------------------------------------------------------------------------- */

static kt_case gguf_case(kite_op op, kite_dtype t, kite_gguf_type type, int64_t m, int64_t n,
                         int64_t k) {
  kt_case c = kt_case_default(op, t, m, n);
  c.gemm.m = m, c.gemm.n = n, c.gemm.k = k;
  c.gemm.gguf = type;
  return c;
}

/* {m, n, blocks per row}: one block, odd counts; 0 and 1 rows, the 8-row groups with tails;
 * K = 0 (y = bias or 0); M = 0; then the tensor-core tiles (16 rows and up): whole 32 x 64
 * tiles, several, and tails of both. dequant_gguf reads n and the blocks only. */
typedef struct shape {
  int64_t m, n, kb;
} shape;
static const shape g_shapes[] = {{1, 1, 1},  {1, 7, 3},   {3, 17, 2},  {8, 13, 4},
                                 {9, 5, 1},  {17, 3, 2},  {2, 3, 0},   {0, 5, 1},
                                 {16, 9, 2}, {33, 70, 3}, {70, 67, 1}, {32, 128, 1}};
static const shape g_quick[] = {{1, 7, 3}, {9, 5, 1}};

/* group_gemm_gguf: {n, blocks per row, sizes} with empty groups, one-row groups and groups
 * spanning several 64-row tiles with tails; every type. */
typedef struct group_shape {
  int64_t n, kb;
  int32_t sizes[4];
} group_shape;
static const group_shape g_groups[] = {
    {7, 1, {2, 0, 5, -1}}, {70, 2, {20, 17, -1, -1}}, {9, 1, {1, 70, 0, 3}}};

static void group_cases(kite_dtype t, int quick, kt_case_list *l) {
  for (int ti = 0; ti < KT_COUNT(g_types); ti++)
    for (int i = 0; i < (quick ? 1 : KT_COUNT(g_groups)); i++) {
      const group_shape *s = &g_groups[i];
      int64_t g = 0, m = 0;
      while (g < 4 && s->sizes[g] >= 0) m += s->sizes[g++];
      kt_case c = gguf_case(KITE_OP_GROUP_GEMM_GGUF, t, g_types[ti], m, s->n,
                            s->kb * block_values(g_types[ti]));
      c.gemm.groups = g;
      memcpy(c.gemm.group_sizes, s->sizes, sizeof s->sizes);
      c.gemm.with_bias = (i + ti) % 2 == 0;
      if (i == 1) c.gemm.pad_x = 3, c.gemm.pad_w = 5, c.gemm.pad_y = 2;
      kt_case_push(l, c);
    }
}

static void gguf_check_cases(kite_op op, kite_dtype t, int quick, kt_case_list *l) {
  const shape *s = quick ? g_quick : g_shapes;
  if (op == KITE_OP_GROUP_GEMM_GGUF) {
    group_cases(t, quick, l);
    return;
  }
  const int ns = quick ? KT_COUNT(g_quick) : KT_COUNT(g_shapes);
  for (int ti = 0; ti < KT_COUNT(g_types); ti++)
    for (int i = 0; i < ns; i++) {
      if (op == KITE_OP_DEQUANT_GGUF && (s[i].m == 0 || s[i].kb == 0)) continue;
      kt_case c =
          gguf_case(op, t, g_types[ti], s[i].m, s[i].n, s[i].kb * block_values(g_types[ti]));
      c.gemm.with_bias = (i + ti) % 2 == 0;
      if (i % 3 == 1) c.gemm.pad_x = 5, c.gemm.pad_y = 3;
      if (i % 3 == 2) c.gemm.pad_w = 7, c.gemm.pad_y = 1;
      kt_case_push(l, c);
    }
}

/* bf16 llm: the GEMMs of quantized weights beside kite linear's bf16 rows of the same shapes
 * (driver_gemm_cases.c): Q4_K, Q6_K and MXFP4 on a 4096 x 4096 projection, and MXFP4 and Q8_0
 * on a gpt-oss-20b expert's gate_up (N 5760 = 2I, K 2880 = H: no K-quant, 2880 is not whole
 * 256-value blocks), at decode (M 1), a batch (64) and a prompt (4096). */
static void gguf_bench_bf16(kite_op op, kite_dtype t, kt_case_list *l) {
  static const kite_gguf_type sq[] = {KITE_GGUF_Q4_K, KITE_GGUF_Q6_K, KITE_GGUF_MXFP4};
  static const kite_gguf_type ex[] = {KITE_GGUF_MXFP4, KITE_GGUF_Q8_0};
  if (op == KITE_OP_GROUP_GEMM_GGUF) {
    /* gpt-oss-20b's 32 experts (gate_up: N 5760, K 2880) in MXFP4, 4 and 128 rows each (a
     * decode step of 32 tokens x top-4, a 1024-token prompt), beside group_gemm's bf16 rows */
    for (int32_t rows = 4; rows <= 128; rows *= 32) {
      kt_case c = gguf_case(op, t, KITE_GGUF_MXFP4, 32 * rows, 5760, 2880);
      c.gemm.groups = 32;
      for (int g = 0; g < 32; g++) c.gemm.group_sizes[g] = rows;
      kt_case_push(l, c);
    }
    return;
  }
  if (op != KITE_OP_LINEAR_GGUF) return;
  for (int64_t m = 1; m <= 4096; m *= 64) {
    for (int i = 0; i < KT_COUNT(sq); i++) kt_case_push(l, gguf_case(op, t, sq[i], m, 4096, 4096));
    for (int i = 0; i < KT_COUNT(ex); i++) kt_case_push(l, gguf_case(op, t, ex[i], m, 5760, 2880));
  }
}

/* llm: a 4096 x 4096 projection per type, decode (M = 1) and a short prompt (M = 64); dequant
 * the whole matrix. small: 1024 x 1024, M = 1, the types of a Q4_K_M file. f32 activations
 * (the CUDA-core kernels convert x to f32 first), and the bf16 rows above. */
static void gguf_bench_cases(kite_op op, kite_dtype t, int llm, kt_case_list *l) {
  if (t == KITE_DTYPE_BF16 && llm) gguf_bench_bf16(op, t, l);
  if (t != KITE_DTYPE_F32 || op == KITE_OP_GROUP_GEMM_GGUF) return;
  const int64_t nk = llm ? 4096 : 1024;
  for (int ti = 0; ti < KT_COUNT(g_types); ti++) {
    const kite_gguf_type ty = g_types[ti];
    if (!llm && ty != KITE_GGUF_Q4_K && ty != KITE_GGUF_Q6_K && ty != KITE_GGUF_Q8_0) continue;
    if (op == KITE_OP_DEQUANT_GGUF) {
      kt_case_push(l, gguf_case(op, t, ty, 0, nk, nk));
      continue;
    }
    kt_case_push(l, gguf_case(op, t, ty, 1, nk, nk));
    if (llm) kt_case_push(l, gguf_case(op, t, ty, 64, nk, nk));
  }
}

/* Bytes: x + blocks + y (+ bias): (M K + M N) e + N K / V B; dequant: blocks + N K e. */
static double gguf_bytes(const kt_case *c) {
  const kt_gemm_case *g = &c->gemm;
  const double e = (double)kite_dtype_size(c->dtype), M = (double)g->m, N = (double)g->n,
               K = (double)g->k, w = N * (double)row_bytes(g->gguf, g->k);
  if (c->op == KITE_OP_DEQUANT_GGUF) return w + N * K * e;
  if (c->op == KITE_OP_GROUP_GEMM_GGUF) /* every group's blocks and bias */
    return (M * K + M * N) * e + (double)g->groups * (w + (g->with_bias ? N * e : 0));
  return (M * K + M * N) * e + w + (g->with_bias ? N * e : 0);
}

static double gguf_flops(const kt_case *c) {
  const kt_gemm_case *g = &c->gemm;
  return c->op == KITE_OP_DEQUANT_GGUF ? 0 : 2.0 * (double)g->m * (double)g->n * (double)g->k;
}

const kt_family_ops kt_family_gguf = {KT_FAMILY_FIELDS(gguf, gguf_has, gguf_flops)};
