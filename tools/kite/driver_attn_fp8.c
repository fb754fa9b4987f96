/*
 * Drivers of sdpa_fp8 (dense attention over e4m3 q, k, v with one f32 scale per block of
 * KITE_FP8_ATTN_BLOCK rows; the case's dtype is o's) and of quant_fp8_blocks, which makes such
 * inputs (x[B, H, S, D] of the case's dtype, held in attn.batch, hq, sq, head_dim; its codes and
 * scales must match ref exactly).
 *
 * q, k, v are uniform values rounded to e4m3 (the harness stores floats into e4m3 codes); the
 * scales are uniform in [0.25, 1.5), a different one for every block, so a kernel that takes a
 * scale from the wrong block, head or batch entry is off by O(1) on the rows of that block (one
 * case draws them from [-1.5, 1.5): negative and near-zero scales).
 * Cases cover Sq and Sk above, below and not multiples of 128 (partial last blocks of queries
 * and keys), causal with Sq < Sk and Sq > Sk, GQA grouped and interleaved, [B, S, H, D]
 * memory viewed as [B, H, S, D], padded rows, and head dims 64, 80, 128, 256.
 */
#include <stdio.h>

#include "driver_attn.h"

static int attn_fp8_has(kite_op op) {
  return op == KITE_OP_SDPA_FP8 || op == KITE_OP_QUANT_FP8_BLOCKS;
}

static void attn_fp8_shape(const kt_case *c, char *buf, size_t n) {
  const kt_attn_case *a = &c->attn;
  if (c->op == KITE_OP_QUANT_FP8_BLOCKS) {
    snprintf(buf, n, "B%lld H%lld %lldx%lld", (long long)a->batch, (long long)a->hq,
             (long long)a->sq, (long long)a->head_dim);
    return;
  }
  snprintf(buf, n, "B%lld %lld/%lld %lldx%lldx%lld%s", (long long)a->batch, (long long)a->hq,
           (long long)a->hkv, (long long)a->sq, (long long)a->sk, (long long)a->head_dim,
           a->opts.causal ? "" : " nc");
}

static void attn_fp8_describe(const kt_case *c, char *buf, size_t n) {
  const kt_attn_case *a = &c->attn;
  size_t len = 0;
  buf[0] = '\0';
  if (c->op == KITE_OP_QUANT_FP8_BLOCKS) {
    kt_cat(buf, n, &len, "B=%lld H=%lld S=%lld D=%lld", (long long)a->batch, (long long)a->hq,
           (long long)a->sq, (long long)a->head_dim);
    if (a->bshd) kt_cat(buf, n, &len, " bshd");
    if (a->pad) kt_cat(buf, n, &len, " pad=%lld", (long long)a->pad);
    return;
  }
  kt_cat(buf, n, &len, "B=%lld Hq=%lld Hkv=%lld D=%lld Sq=%lld Sk=%lld", (long long)a->batch,
         (long long)a->hq, (long long)a->hkv, (long long)a->head_dim, (long long)a->sq,
         (long long)a->sk);
  kt_cat(buf, n, &len, a->opts.causal ? " causal" : " non-causal");
  if (a->opts.scale != 0.0f) kt_cat(buf, n, &len, " scale=%g", (double)a->opts.scale);
  if (a->opts.gqa == KITE_GQA_INTERLEAVED) kt_cat(buf, n, &len, " interleaved");
  if (a->bshd) kt_cat(buf, n, &len, " bshd");
  if (a->with_lse) kt_cat(buf, n, &len, " lse");
  if (a->pad) kt_cat(buf, n, &len, " pad=%lld", (long long)a->pad);
  if (a->signed_scales) kt_cat(buf, n, &len, " signed-scales");
}

/* A scale tensor [B, H, ceil(S / 128)] of uniform values in [0.25, 1.5), or in [-1.5, 1.5)
 * (sign: kernels that fold a positive scale into the softmax take their other path there). */
static void plan_scale(kt_run *r, const char *name, int64_t B, int64_t H, int64_t S, int sign) {
  int64_t shape[3] = {B, H, kt_cdiv(S, KITE_FP8_ATTN_BLOCK)};
  kt_bind(r, name,
          kt_add_tensor(r, name, KITE_DTYPE_F32, KT_IN, 3, shape, KT_FILL_UNIFORM,
                        sign ? -1.5f : 0.25f, 1.5f));
}

/* quant_fp8_blocks: x in [-3, 3), its codes (every byte written) and scales. */
static void plan_quant(kt_run *r, const kt_case *c) {
  const kt_attn_case *a = &c->attn;
  int64_t B = a->batch, H = a->hq, S = a->sq, D = a->head_dim, pad = a->pad;
  kt_bind(r, "x", kt_attn_add_bhsd(r, "x", c->dtype, KT_IN, B, H, S, D, pad, a->bshd, -3, 3));
  kt_bind(r, "q",
          kt_attn_add_bhsd(r, "q", KITE_DTYPE_FP8_E4M3, KT_OUT, B, H, S, D, pad, a->bshd, 0, 0));
  int64_t shape[3] = {B, H, kt_cdiv(S, KITE_FP8_ATTN_BLOCK)};
  kt_bind(r, "scales",
          kt_add_tensor(r, "scales", KITE_DTYPE_F32, KT_OUT, 3, shape, KT_FILL_UNIFORM, 0, 0));
}

static void attn_fp8_plan(kt_run *r, const kt_case *c) {
  const kt_attn_case *a = &c->attn;
  const kite_dtype e = KITE_DTYPE_FP8_E4M3;
  int64_t B = a->batch, D = a->head_dim, pad = a->pad;
  if (c->op == KITE_OP_QUANT_FP8_BLOCKS) {
    plan_quant(r, c);
    return;
  }
  if (c->op != KITE_OP_SDPA_FP8) {
    r->bad = 1;
    return;
  }
  kt_bind(r, "q", kt_attn_add_bhsd(r, "q", e, KT_IN, B, a->hq, a->sq, D, pad, a->bshd, -2, 2));
  kt_bind(r, "k", kt_attn_add_bhsd(r, "k", e, KT_IN, B, a->hkv, a->sk, D, pad, a->bshd, -2, 2));
  kt_bind(r, "v", kt_attn_add_bhsd(r, "v", e, KT_IN, B, a->hkv, a->sk, D, pad, a->bshd, -1, 1));
  plan_scale(r, "q_scale", B, a->hq, a->sq, a->signed_scales);
  plan_scale(r, "k_scale", B, a->hkv, a->sk, a->signed_scales);
  plan_scale(r, "v_scale", B, a->hkv, a->sk, a->signed_scales);
  kt_bind(r, "o",
          kt_attn_add_bhsd(r, "o", c->dtype, KT_OUT, B, a->hq, a->sq, D, pad, a->bshd, 0, 0));
  if (a->with_lse) {
    int64_t lshape[3] = {B, a->hq, a->sq};
    kt_bind(r, "lse",
            kt_add_tensor(r, "lse", KITE_DTYPE_F32, KT_OUT, 3, lshape, KT_FILL_UNIFORM, 0, 0));
  }
}

KT_SCALARS(attn_fp8_scalar, KT_ATTN_OPTS_FIELDS)

/* sdpa_fp8: q, k, v one byte per element, o e bytes, the scales and lse; quant_fp8_blocks: x
 * read, codes and scales written. */
static double attn_fp8_bytes(const kt_case *c) {
  const kt_attn_case *a = &c->attn;
  double e = (double)kite_dtype_size(c->dtype), D = (double)a->head_dim, B = (double)a->batch;
  if (c->op == KITE_OP_QUANT_FP8_BLOCKS)
    return B * (double)a->hq *
           ((double)a->sq * D * (e + 1) + 4 * (double)kt_cdiv(a->sq, KITE_FP8_ATTN_BLOCK));
  double hq = (double)a->hq, hkv = (double)a->hkv, sq = (double)a->sq, sk = (double)a->sk;
  double scales = 4 * B *
                  (hq * (double)kt_cdiv(a->sq, KITE_FP8_ATTN_BLOCK) +
                   2 * hkv * (double)kt_cdiv(a->sk, KITE_FP8_ATTN_BLOCK));
  return B * hq * sq * D * (1 + e) + 2 * B * hkv * sk * D + scales +
         (a->with_lse ? 4 * B * hq * sq : 0);
}

/* 4 D per (query head, key) pair; causal halves the pairs (FlashAttention's count). */
static double attn_fp8_flops(const kt_case *c) {
  const kt_attn_case *a = &c->attn;
  if (c->op == KITE_OP_QUANT_FP8_BLOCKS) return 0; /* memory-bound */
  double half = a->opts.causal ? 0.5 : 1.0;
  return 4 * half * (double)a->batch * (double)a->sq * (double)a->sk * (double)a->hq *
         (double)a->head_dim;
}

/* Ref attends over the same dequantized values the kernels see, so the differences are those of
 * the bf16 sdpa kernels: o rounded to its dtype, and P and the dequantized V rounded to bf16
 * before P V (kite.h allows it whatever o's dtype): ~1e-5 NMSE, as the bf16 bound of sdpa
 * (driver_attn.c) explains. A scale of the wrong block or head moves its rows by O(1). */
static double attn_fp8_bound(kite_op op, kite_dtype t) {
  (void)t;
  return op == KITE_OP_QUANT_FP8_BLOCKS ? 1e-20 /* the same codes and scales */ : 1e-4;
}

static kt_case fp8_case(kite_dtype t, int64_t B, int64_t hq, int64_t hkv, int64_t sq, int64_t sk,
                        int64_t D, int causal) {
  kt_case c = kt_case_default(KITE_OP_SDPA_FP8, t, 0, 0);
  kt_attn_case *a = &c.attn;
  a->opts = kite_attn_opts_default();
  a->opts.causal = causal;
  a->batch = B, a->hq = hq, a->hkv = hkv, a->sq = sq, a->sk = sk, a->head_dim = D;
  return c;
}

typedef struct fp8_geom {
  int64_t batch, hq, hkv, sq, sk, head_dim;
} fp8_geom;

static const fp8_geom g_fp8[] = {
    {1, 4, 2, 200, 300, 128}, /* partial last blocks of queries and keys, causal Sq < Sk */
    {2, 8, 2, 17, 33, 64},    {1, 4, 4, 129, 129, 128}, {1, 4, 1, 300, 150, 128}, /* Sq > Sk */
    {2, 4, 2, 256, 256, 128},                                                     /* whole blocks */
    {1, 4, 4, 5, 9, 256},     {1, 6, 2, 100, 90, 80},   {1, 2, 1, 1, 260, 128},
};
static const int g_quick_fp8[] = {0, 1};

/* quant_fp8_blocks: [B, H, S, D] with S below, at and past block edges, [B, S, H, D] memory and
 * padded rows. */
static const int64_t g_quant[][5] = {
    {1, 2, 5, 64, 0}, {2, 3, 300, 128, 1}, {1, 1, 129, 80, 0}, {2, 2, 256, 128, 1}, {1, 3, 1, 7, 0},
};

static kt_case quant_case(kite_dtype t, const int64_t *g, int pad) {
  kt_case c = kt_case_default(KITE_OP_QUANT_FP8_BLOCKS, t, 0, 0);
  c.attn.batch = g[0], c.attn.hq = g[1], c.attn.sq = g[2], c.attn.head_dim = g[3];
  c.attn.bshd = (int)g[4], c.attn.pad = pad;
  return c;
}

static void attn_fp8_check_cases(kite_op op, kite_dtype t, int quick, kt_case_list *l) {
  if (op == KITE_OP_QUANT_FP8_BLOCKS) {
    for (int i = 0; i < (quick ? 2 : KT_COUNT(g_quant)); i++)
      kt_case_push(l, quant_case(t, g_quant[i], i % 2 ? 0 : 3));
    return;
  }
  if (op != KITE_OP_SDPA_FP8) return;
  const int n = quick ? KT_COUNT(g_quick_fp8) : KT_COUNT(g_fp8);
  for (int i = 0; i < n; i++) {
    const int gi = quick ? g_quick_fp8[i] : i;
    const fp8_geom *g = &g_fp8[gi];
    for (int causal = 1; causal >= 0; causal--) {
      kt_case c = fp8_case(t, g->batch, g->hq, g->hkv, g->sq, g->sk, g->head_dim, causal);
      kt_attn_case *a = &c.attn;
      a->with_lse = (gi + causal) % 2 == 0 || gi == 0;
      a->bshd = gi % 3 == 1;
      a->pad = (gi + causal) % 3 == 2 ? 3 : 0;
      if (gi % 4 == 3) a->opts.gqa = KITE_GQA_INTERLEAVED;
      if (gi == 2 && !causal) a->opts.scale = 0.05f;
      a->signed_scales = gi == 4 && !causal;
      kt_case_push(l, c);
    }
  }
}

/* Prefill-sized B 4, S 4096, Hq 32 / Hkv 8, D 128, causal and not (kite bench's llm shapes);
 * o in f16 or bf16 only (the f32 output has no fast kernel to time). */
static void attn_fp8_bench_cases(kite_op op, kite_dtype t, int llm, kt_case_list *l) {
  if (op == KITE_OP_QUANT_FP8_BLOCKS) { /* one layer's k of a prefill: B 4, S 4096, H 8, D 128 */
    const int64_t g[5] = {llm ? 4 : 1, 8, llm ? 4096 : 512, 128, 0};
    kt_case_push(l, quant_case(t, g, 0));
    return;
  }
  if (op != KITE_OP_SDPA_FP8 || t == KITE_DTYPE_F32) return;
  if (!llm) {
    kt_case_push(l, fp8_case(t, 1, 32, 8, 512, 512, 128, 1));
    return;
  }
  for (int causal = 1; causal >= 0; causal--)
    kt_case_push(l, fp8_case(t, 4, 32, 8, 4096, 4096, 128, causal));
}

const kt_family_ops kt_family_attn_fp8 = {KT_FAMILY_FIELDS(attn_fp8, attn_fp8_has, attn_fp8_flops)};
