/*
 * Drivers of the attention ops: store_kv, paged_decode, paged_prefill, sdpa.
 *
 * Paged cases hold a per-layer cache [num_blocks, Hkv, block_size, D] whose physical blocks are
 * handed out to the sequences in a seeded random order (the block table is a custom fill), so a
 * kernel that assumes contiguous blocks fails. Sequence lengths (and prefill's query counts) are
 * fixed in the case, so every size is known when the plan is laid out; they are ragged and
 * include 0 and 1. Each block-table row keeps one unused entry (-1) past the sequence's blocks
 * and a few physical blocks belong to no sequence.
 *
 * sdpa cases cover no mask, bool / uint8 / f32 / q-dtype masks, masks broadcast by shape 1 or
 * stride 0, causal with Sq < Sk and Sq > Sk, and q/k/v/o laid out as [B, S, H, D] memory viewed
 * as [B, H, S, D]. Masks hold rows that see no key: o = 0 there and lse = -inf, which the
 * harness matches exactly.
 *
 * The geometry, fills and plan pieces the attention drivers share are in driver_attn_plan.c.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_attn.h"
#include "util.h"

static int kt_attn_has(kite_op op) {
  return op == KITE_OP_STORE_KV || op == KITE_OP_PAGED_DECODE || op == KITE_OP_PAGED_PREFILL ||
         op == KITE_OP_SDPA;
}

/* ---- descriptions ------------------------------------------------------------------------ */

static void attn_shape(const kt_case *c, char *buf, size_t n) {
  const kt_attn_case *a = &c->attn;
  long long hq = a->hq, hkv = a->hkv, D = a->head_dim;
  switch (c->op) {
  case KITE_OP_STORE_KV:
    snprintf(buf, n, "T%lld %lldx%lld bs%lld", (long long)a->tokens, hkv, D,
             (long long)a->block_size);
    break;
  case KITE_OP_PAGED_DECODE:
    snprintf(buf, n, "B%lld L%d %lld/%lldx%lld", (long long)a->batch, (int)kt_attn_max_len(a), hq,
             hkv, D);
    break;
  case KITE_OP_PAGED_PREFILL:
    snprintf(buf, n, "B%lld T%lld L%d %lld/%lldx%lld%s", (long long)a->batch, (long long)a->tokens,
             (int)kt_attn_max_len(a), hq, hkv, D, a->opts.causal ? "" : " nc");
    break;
  default: /* "nc": not causal */
    snprintf(buf, n, "B%lld %lld/%lld %lldx%lldx%lld%s", (long long)a->batch, hq, hkv,
             (long long)a->sq, (long long)a->sk, D, a->opts.causal ? "" : " nc");
    break;
  }
}

/* The lengths of up to 8 sequences, then "...". */
static void cat_lens(char *buf, size_t n, size_t *len, const char *name, const int32_t *v,
                     int64_t count) {
  kt_cat(buf, n, len, " %s=", name);
  for (int64_t i = 0; i < count && i < 8; i++) kt_cat(buf, n, len, "%s%d", i ? "," : "", (int)v[i]);
  if (count > 8) kt_cat(buf, n, len, ",...");
}

static void attn_describe(const kt_case *c, char *buf, size_t n) {
  const kt_attn_case *a = &c->attn;
  const kite_attn_opts *o = &a->opts;
  size_t len = 0;
  buf[0] = '\0';
  if (c->op == KITE_OP_STORE_KV) {
    kt_cat(buf, n, &len, "T=%lld Hkv=%lld D=%lld bs=%lld blocks=%lld", (long long)a->tokens,
           (long long)a->hkv, (long long)a->head_dim, (long long)a->block_size,
           (long long)a->num_blocks);
    if (a->fused_kv) kt_cat(buf, n, &len, " fused-kv");
    if (a->skip_slots) kt_cat(buf, n, &len, " skipped-slots");
    if (a->pad) kt_cat(buf, n, &len, " row+%lld", (long long)a->pad);
    return;
  }
  kt_cat(buf, n, &len, "B=%lld Hq=%lld Hkv=%lld D=%lld", (long long)a->batch, (long long)a->hq,
         (long long)a->hkv, (long long)a->head_dim);
  if (c->op == KITE_OP_SDPA) {
    kt_cat(buf, n, &len, " Sq=%lld Sk=%lld", (long long)a->sq, (long long)a->sk);
    if (a->mask) kt_cat(buf, n, &len, " mask=%s", kt_mask_name[a->mask]);
    if (a->bshd) kt_cat(buf, n, &len, " bshd");
  } else {
    kt_cat(buf, n, &len, " bs=%lld", (long long)a->block_size);
    cat_lens(buf, n, &len, "L", a->seq_lens, a->batch);
    if (c->op == KITE_OP_PAGED_PREFILL) cat_lens(buf, n, &len, "q", a->q_lens, a->batch);
  }
  if (c->op != KITE_OP_PAGED_DECODE) kt_cat(buf, n, &len, o->causal ? " causal" : " non-causal");
  if (o->scale != 0.0f) kt_cat(buf, n, &len, " scale=%g", (double)o->scale);
  if (o->softcap != 0.0f) kt_cat(buf, n, &len, " softcap=%g", (double)o->softcap);
  if (o->window_left >= 0) kt_cat(buf, n, &len, " window=%d", (int)o->window_left);
  if (o->gqa == KITE_GQA_INTERLEAVED) kt_cat(buf, n, &len, " interleaved");
  if (a->with_lse) kt_cat(buf, n, &len, " lse");
  if (a->sinks) kt_cat(buf, n, &len, " sinks");
  if (a->pad) kt_cat(buf, n, &len, " pad=%lld", (long long)a->pad);
}

/* ---- plans ------------------------------------------------------------------------------- */

/* cu_q_lens[B + 1]: the running sum of q_lens, from 0. */
static void fill_cu_q_lens(const kt_run *r, int vi, uint64_t seed, unsigned char *body) {
  const kt_attn_case *a = &r->c.attn;
  int32_t *cu = (int32_t *)body + r->view[vi].offset;
  cu[0] = 0;
  for (int64_t b = 0; b < a->batch; b++) cu[b + 1] = cu[b] + a->q_lens[b];
}

/* Both caches [num_blocks, Hkv, block_size, D], values in [-1, 1]. */
static void plan_caches(kt_run *r, const kt_case *c, kt_role role) {
  const kt_attn_case *a = &c->attn;
  int64_t shape[4] = {a->num_blocks, a->hkv, a->block_size, a->head_dim};
  kt_bind(r, "key_cache",
          kt_add_tensor(r, "key_cache", c->dtype, role, 4, shape, KT_FILL_UNIFORM, -1, 1));
  kt_bind(r, "value_cache",
          kt_add_tensor(r, "value_cache", c->dtype, role, 4, shape, KT_FILL_UNIFORM, -1, 1));
}

/* store_kv: k, v [T, Hkv, D] row-strided (or slices of one kv buffer) into caches that already
 * hold values: the whole cache is the output, so slots not written must keep theirs. */
static void plan_store_kv(kt_run *r, const kt_case *c) {
  const kt_attn_case *a = &c->attn;
  kite_dtype t = c->dtype;
  int64_t T = a->tokens, H = a->hkv, D = a->head_dim;
  if (a->fused_kv) {
    int64_t row = 2 * H * D + a->pad, shape[3] = {T, H, D}, strides[3] = {row, D, 1};
    int b = kt_add_buf(r, "kv", t, T * row);
    kt_bind(r, "k", kt_add_view(r, "k", b, t, KT_IN, 3, shape, strides, 0, KT_FILL_UNIFORM, -1, 1));
    kt_bind(r, "v",
            kt_add_view(r, "v", b, t, KT_IN, 3, shape, strides, H * D, KT_FILL_UNIFORM, -1, 1));
  } else {
    int64_t shape[3] = {T, H, D}, strides[3] = {H * D + a->pad, D, 1};
    int bk = kt_add_buf(r, "k", t, T * (H * D + a->pad));
    kt_bind(r, "k",
            kt_add_view(r, "k", bk, t, KT_IN, 3, shape, strides, 0, KT_FILL_UNIFORM, -1, 1));
    int bv = kt_add_buf(r, "v", t, T * (H * D + a->pad));
    kt_bind(r, "v",
            kt_add_view(r, "v", bv, t, KT_IN, 3, shape, strides, 0, KT_FILL_UNIFORM, -1, 1));
  }
  plan_caches(r, c, KT_INOUT);
  kt_bind(r, "slots", kt_attn_add_ints(r, "slots", T, kt_attn_fill_slots));
}

/* paged_decode (N = B queries) and paged_prefill (N = T). q and o have head stride D + pad, the
 * block table row stride max_blocks + pad. */
static void plan_paged(kt_run *r, const kt_case *c) {
  const kt_attn_case *a = &c->attn;
  kite_dtype t = c->dtype;
  int prefill = c->op == KITE_OP_PAGED_PREFILL;
  int64_t N = prefill ? a->tokens : a->batch;
  if (a->batch < 0 || a->batch > KT_MAX_SEQS) {
    r->bad = 1;
    return;
  }
  kt_bind(r, "q", kt_attn_add_heads(r, "q", t, KT_IN, N, a->hq, a->head_dim, a->pad, -2, 2));
  plan_caches(r, c, KT_IN);
  kt_attn_plan_table(r, a);
  if (prefill)
    kt_bind(r, "cu_q_lens", kt_attn_add_ints(r, "cu_q_lens", a->batch + 1, fill_cu_q_lens));
  kt_attn_plan_sinks(r, c);
  kt_bind(r, "o", kt_attn_add_heads(r, "o", t, KT_OUT, N, a->hq, a->head_dim, a->pad, 0, 0));
  if (a->with_lse) {
    int64_t lshape[2] = {N, a->hq};
    kt_bind(r, "lse",
            kt_add_tensor(r, "lse", KITE_DTYPE_F32, KT_OUT, 2, lshape, KT_FILL_UNIFORM, 0, 0));
  }
}

static void plan_sdpa(kt_run *r, const kt_case *c) {
  const kt_attn_case *a = &c->attn;
  kite_dtype t = c->dtype;
  int64_t B = a->batch, D = a->head_dim;
  kt_bind(r, "q", kt_attn_add_bhsd(r, "q", t, KT_IN, B, a->hq, a->sq, D, a->pad, a->bshd, -2, 2));
  kt_bind(r, "k", kt_attn_add_bhsd(r, "k", t, KT_IN, B, a->hkv, a->sk, D, a->pad, a->bshd, -1, 1));
  kt_bind(r, "v", kt_attn_add_bhsd(r, "v", t, KT_IN, B, a->hkv, a->sk, D, a->pad, a->bshd, -1, 1));
  kt_attn_plan_mask(r, c);
  kt_attn_plan_sinks(r, c);
  kt_bind(r, "o", kt_attn_add_bhsd(r, "o", t, KT_OUT, B, a->hq, a->sq, D, a->pad, a->bshd, 0, 0));
  if (a->with_lse) {
    int64_t lshape[3] = {B, a->hq, a->sq};
    kt_bind(r, "lse",
            kt_add_tensor(r, "lse", KITE_DTYPE_F32, KT_OUT, 3, lshape, KT_FILL_UNIFORM, 0, 0));
  }
}

static void attn_plan(kt_run *r, const kt_case *c) {
  switch (c->op) {
  case KITE_OP_STORE_KV:
    plan_store_kv(r, c);
    break;
  case KITE_OP_PAGED_DECODE:
  case KITE_OP_PAGED_PREFILL:
    plan_paged(r, c);
    break;
  case KITE_OP_SDPA:
    plan_sdpa(r, c);
    break;
  default:
    r->bad = 1;
    break;
  }
}

/* ---- the call ---------------------------------------------------------------------------- */

KT_SCALARS(attn_scalar, KT_ATTN_OPTS_FIELDS)

/* ---- bytes, FLOPs, bounds ---------------------------------------------------------------- */

/* Minimum bytes one call moves, e = element size:
 *   store_kv       k, v read and written to the cache    4 T Hkv D e + 4 T (slots)
 *   paged_decode   q + o, every key and value row once   2 B Hq D e + 2 sum(L) Hkv D e
 *                  + block-table entries used, seq_lens, lse
 *   paged_prefill  the same with T queries, + cu_q_lens
 *   sdpa           q, k, v, o (+ mask, lse)
 * FLOPs: 2 D per score and 2 D per value accumulation, i.e. 4 D per (query head, key) pair
 * seen; causal halves the pairs as FlashAttention counts them (prefill with q_len = L). */
static double attn_bytes(const kt_case *c) {
  const kt_attn_case *a = &c->attn;
  double e = (double)kite_dtype_size(c->dtype), D = (double)a->head_dim;
  double hq = (double)a->hq, hkv = (double)a->hkv, keys, blocks;
  kt_attn_count_keys(a, &keys, &blocks);
  double lse = a->with_lse ? 4 : 0, sinks = a->sinks ? 4 * hq : 0;
  switch (c->op) {
  case KITE_OP_STORE_KV:
    return 4 * (double)a->tokens * hkv * D * e + 4 * (double)a->tokens;
  case KITE_OP_PAGED_DECODE:
  case KITE_OP_PAGED_PREFILL: {
    double N = c->op == KITE_OP_PAGED_PREFILL ? (double)a->tokens : (double)a->batch;
    return 2 * N * hq * D * e + 2 * keys * hkv * D * e + 4 * blocks + 8 * (double)a->batch +
           lse * N * hq + sinks;
  }
  case KITE_OP_SDPA: {
    double B = (double)a->batch, sq = (double)a->sq, sk = (double)a->sk, mask = 0;
    if (a->mask == MASK_U8) mask = B * hq * sq * sk;
    if (a->mask == MASK_BOOL) mask = sq * sk;
    if (a->mask == MASK_F32) mask = 4 * sq * sk;
    if (a->mask == MASK_QT_BCAST) mask = e * sq * sk;
    if (a->mask == MASK_F32_B1) mask = 4 * B * sq * sk;
    return 2 * B * hq * sq * D * e + 2 * B * hkv * sk * D * e + mask + lse * B * hq * sq + sinks;
  }
  default:
    return 0;
  }
}

static double attn_flops(const kt_case *c) {
  const kt_attn_case *a = &c->attn;
  double D = (double)a->head_dim, hq = (double)a->hq, pairs = 0;
  double half = a->opts.causal ? 0.5 : 1.0;
  switch (c->op) {
  case KITE_OP_PAGED_DECODE:
    for (int64_t b = 0; b < a->batch; b++) pairs += a->seq_lens[b];
    break;
  case KITE_OP_PAGED_PREFILL:
    for (int64_t b = 0; b < a->batch; b++) pairs += half * a->q_lens[b] * (double)a->seq_lens[b];
    break;
  case KITE_OP_SDPA:
    pairs = half * (double)a->batch * (double)a->sq * (double)a->sk;
    break;
  default:
    return 0;
  }
  return 4 * pairs * hq * D;
}

/* NMSE bounds [f32, f16, bf16]. store_kv copies: exact (a bound of 1e-20 rather than 0 keeps
 * the harness's NMSE / bound column finite).
 * Attention outputs are rounded once to the dtype, like ref's: NMSE from that alone is ~1e-14
 * (f32), ~4e-8 (f16: half an ulp is 2^-11 relative) and ~3e-6 (bf16: 2^-8) on the elements
 * where the two roundings differ. A tensor-core prefill (CUDA, as FlashAttention) also rounds
 * the probabilities P to the 16-bit type before P.V: each p gets a relative error of rms
 * ~2^-11/sqrt(3) (f16) or 2^-8/sqrt(3) (bf16); with values of mean 0 the error of o = sum p v
 * is then that same fraction of |o|, adding ~4e-8 (f16) and ~5e-6 (bf16). Together ~1e-7 and
 * ~1e-5; the bounds 2e-6 and 1e-4 leave a factor of ~10-20.
 * A wrong mask or position (a key seen that must not be, an off-by-one window or causal edge,
 * a wrong GQA head) changes the affected rows by O(1) of their size: rows near the causal edge
 * or with short contexts see a handful of keys, so one extra or missing key moves o by tens
 * of percent. Every case has at most ~5000 (query, head) rows, so a single token wrong across
 * its heads already gives NMSE ~ 1 / tokens >= 3e-3, far above either bound. */
static const double g_attn_bound[3] = {1e-10, 2e-6, 1e-4};

static double attn_bound(kite_op op, kite_dtype t) {
  if (op == KITE_OP_STORE_KV) return 1e-20;
  return g_attn_bound[t == KITE_DTYPE_F16 ? 1 : t == KITE_DTYPE_BF16 ? 2 : 0];
}

/* ---- case builders ----------------------------------------------------------------------- */

static kt_case attn_case(kite_op op, kite_dtype t) {
  kt_case c = kt_case_default(op, t, 0, 0);
  c.attn.opts = kite_attn_opts_default();
  return c;
}

/* A paged case over `batch` sequences of lens[b] keys (prefill: the last qlens[b] of them).
 * The pool has 3 blocks no sequence owns; every block-table row one unused entry. */
static kt_case paged_case(kite_op op, kite_dtype t, int64_t hq, int64_t hkv, int64_t D, int64_t bs,
                          int batch, const int32_t *lens, const int32_t *qlens) {
  kt_case c = attn_case(op, t);
  kt_attn_case *a = &c.attn;
  a->hq = hq, a->hkv = hkv, a->head_dim = D, a->block_size = bs;
  kt_attn_set_lens(a, batch, lens);
  for (int b = 0; b < batch && b < KT_MAX_SEQS; b++) {
    a->q_lens[b] = qlens ? qlens[b] : 1;
    a->tokens += a->q_lens[b];
  }
  return c;
}

static kt_case store_kv_case(kite_dtype t, int64_t T, int64_t hkv, int64_t D, int64_t bs) {
  kt_case c = attn_case(KITE_OP_STORE_KV, t);
  kt_attn_case *a = &c.attn;
  a->tokens = T, a->hkv = a->hq = hkv, a->head_dim = D, a->block_size = bs;
  a->num_blocks = kt_cdiv(T, bs) + 2;
  return c;
}

static kt_case sdpa_case(kite_dtype t, int64_t B, int64_t hq, int64_t hkv, int64_t sq, int64_t sk,
                         int64_t D) {
  kt_case c = attn_case(KITE_OP_SDPA, t);
  kt_attn_case *a = &c.attn;
  a->batch = B, a->hq = hq, a->hkv = hkv, a->sq = sq, a->sk = sk, a->head_dim = D;
  return c;
}

/* ---- check cases ------------------------------------------------------------------------- */

typedef struct store_geom {
  int64_t tokens, hkv, head_dim, block_size;
  int fused, skip;
  int64_t pad;
} store_geom;

static const store_geom g_store[] = {
    {0, 8, 128, 16, 0, 0, 0},  {1, 1, 64, 1, 0, 0, 0},     {17, 8, 80, 17, 1, 1, 0},
    {40, 4, 96, 16, 0, 1, 5},  {300, 8, 128, 64, 1, 1, 3}, {64, 2, 256, 256, 0, 1, 0},
    {33, 32, 64, 16, 0, 0, 2},
};
static const int g_quick_store[] = {1, 2, 3};

typedef struct paged_geom {
  int64_t hq, hkv, head_dim, block_size;
  int batch;
  int32_t lens[6], qlens[6]; /* prefill: q_len <= L, the last positions */
} paged_geom;

static const paged_geom g_paged[] = {
    {8, 8, 64, 16, 5, {0, 1, 17, 40, 32}, {0, 1, 17, 3, 1}},
    {16, 1, 80, 1, 3, {5, 12, 1}, {5, 2, 1}},
    {12, 4, 96, 17, 4, {34, 35, 0, 100}, {34, 1, 0, 7}},
    {32, 8, 128, 16, 3, {1, 130, 77}, {1, 9, 20}},
    {8, 8, 256, 64, 3, {65, 1, 200}, {2, 1, 6}},
    {12, 4, 64, 256, 3, {300, 256, 3}, {4, 2, 3}},
    /* more than 32 packed rows per sequence (the Hopper kernel): several query and key tiles,
     * partial tiles, block sizes 16, 7 and 1 */
    {16, 4, 128, 16, 3, {200, 150, 40}, {100, 150, 33}},
    {8, 2, 256, 7, 2, {140, 65}, {70, 65}},
    /* head_dim 256 through TMA boxes: 64-key tiles of 4 blocks, and tiles within a block */
    {4, 1, 256, 16, 2, {150, 70}, {40, 70}},
    {4, 1, 256, 128, 2, {260, 64}, {40, 64}},
    /* head_dim 128 through boxes of both column blocks: 32-slot blocks (4 boxes a tile), and
     * tiles within 256-slot blocks */
    {8, 2, 128, 32, 2, {200, 90}, {120, 90}},
    {8, 2, 128, 256, 2, {300, 130}, {170, 130}},
    {8, 4, 64, 1, 2, {129, 300}, {129, 60}},
    {8, 2, 64, 16, 1, {300}, {300}}, /* the large one: default options, lse */
};
static const int g_quick_paged[] = {0, 2};

/* Option sets tried on each geometry: {scale, softcap, window_left, gqa, causal}, lse. */
typedef struct optset {
  kite_attn_opts opts;
  int with_lse;
} optset;

static const optset g_optsets[] = {
    {{0.0f, 0.0f, -1, KITE_GQA_GROUPED, 1}, 0},    {{0.0f, 2.0f, -1, KITE_GQA_GROUPED, 1}, 1},
    {{0.3f, 0.0f, 5, KITE_GQA_INTERLEAVED, 1}, 1}, {{0.0f, 0.0f, -1, KITE_GQA_INTERLEAVED, 0}, 1},
    {{0.1f, 5.0f, 0, KITE_GQA_GROUPED, 1}, 1},     {{0.0f, 0.0f, 7, KITE_GQA_GROUPED, 0}, 0},
};

typedef struct sdpa_geom {
  int64_t batch, hq, hkv, sq, sk, head_dim;
} sdpa_geom;

static const sdpa_geom g_sdpa[] = {
    {2, 8, 2, 17, 33, 64},
    {1, 12, 4, 1, 100, 80},
    {2, 16, 1, 40, 40, 96},
    {1, 8, 8, 32, 300, 128},
    {1, 4, 4, 5, 9, 256},
    {3, 32, 8, 7, 20, 64},
    {1, 4, 2, 9, 5, 64}, /* Sq > Sk */
    /* more than 32 packed rows (the Hopper kernel): several query and key tiles, partial ones */
    {2, 8, 2, 70, 300, 128},
    {1, 4, 1, 50, 150, 256},
    {1, 6, 2, 100, 90, 64}, /* Sq > Sk */
};
static const int g_quick_sdpa[] = {0, 6};

/* sdpa variants tried on each geometry: mask kind, causal, [B, S, H, D] layout, option set. */
typedef struct sdpa_variant {
  int mask, causal, bshd, optset;
} sdpa_variant;

static const sdpa_variant g_sdpa_variants[] = {
    {MASK_NONE, 1, 0, 0}, {MASK_NONE, 0, 1, 1},     {MASK_BOOL, 0, 0, 2},   {MASK_U8, 1, 0, 1},
    {MASK_F32, 0, 1, 3},  {MASK_QT_BCAST, 0, 0, 4}, {MASK_F32_B1, 1, 0, 5},
};
static const int g_quick_sdpa_variants[] = {0, 2, 5};

static void gen_store_kv(kite_dtype t, int quick, kt_case_list *l) {
  int n = quick ? KT_COUNT(g_quick_store) : KT_COUNT(g_store);
  for (int k = 0; k < n; k++) {
    const store_geom *g = &g_store[quick ? g_quick_store[k] : k];
    kt_case c = store_kv_case(t, g->tokens, g->hkv, g->head_dim, g->block_size);
    c.attn.fused_kv = g->fused, c.attn.skip_slots = g->skip, c.attn.pad = g->pad;
    kt_case_push(l, c);
  }
}

static void gen_paged(kite_op op, kite_dtype t, int quick, kt_case_list *l) {
  int n = quick ? KT_COUNT(g_quick_paged) : KT_COUNT(g_paged);
  for (int k = 0; k < n; k++) {
    int gi = quick ? g_quick_paged[k] : k;
    const paged_geom *g = &g_paged[gi];
    int last = gi == KT_COUNT(g_paged) - 1;
    int nopt = last ? 1 : quick ? 3 : KT_COUNT(g_optsets);
    for (int s = 0; s < nopt; s++) {
      /* decode ignores causal: skip the sets that differ from another only by it */
      if (op == KITE_OP_PAGED_DECODE && !g_optsets[s].opts.causal && s != 3) continue;
      kt_case c =
          paged_case(op, t, g->hq, g->hkv, g->head_dim, g->block_size, g->batch, g->lens, g->qlens);
      c.attn.opts = g_optsets[s].opts;
      c.attn.with_lse = g_optsets[s].with_lse || last;
      c.attn.pad = (gi + s) % 2 ? 3 : 0;
      c.attn.sinks = (gi + s) % 3 == 1;
      kt_case_push(l, c);
    }
  }
}

static void gen_sdpa(kite_dtype t, int quick, kt_case_list *l) {
  int n = quick ? KT_COUNT(g_quick_sdpa) : KT_COUNT(g_sdpa);
  int nv = quick ? KT_COUNT(g_quick_sdpa_variants) : KT_COUNT(g_sdpa_variants);
  for (int k = 0; k < n; k++) {
    const sdpa_geom *g = &g_sdpa[quick ? g_quick_sdpa[k] : k];
    for (int vi = 0; vi < nv; vi++) {
      const sdpa_variant *v = &g_sdpa_variants[quick ? g_quick_sdpa_variants[vi] : vi];
      kt_case c = sdpa_case(t, g->batch, g->hq, g->hkv, g->sq, g->sk, g->head_dim);
      c.attn.opts = g_optsets[v->optset].opts;
      c.attn.opts.causal = v->causal;
      c.attn.with_lse = g_optsets[v->optset].with_lse || v->mask != MASK_NONE;
      c.attn.mask = v->mask;
      c.attn.bshd = v->bshd;
      c.attn.pad = (k + vi) % 3 == 1 ? 3 : 0;
      c.attn.sinks = (k + vi) % 3 == 2;
      kt_case_push(l, c);
    }
  }
}

static void attn_check_cases(kite_op op, kite_dtype t, int quick, kt_case_list *l) {
  switch (op) {
  case KITE_OP_STORE_KV:
    gen_store_kv(t, quick, l);
    break;
  case KITE_OP_PAGED_DECODE:
  case KITE_OP_PAGED_PREFILL:
    gen_paged(op, t, quick, l);
    break;
  case KITE_OP_SDPA:
    gen_sdpa(t, quick, l);
    break;
  default:
    break;
  }
}

/* ---- bench cases ------------------------------------------------------------------------- */

/* B sequences of L keys each (prefill: all of them queries), Llama-like heads Hq 32 / Hkv 8,
 * D 128, block 16. */
static kt_case llm_paged(kite_op op, kite_dtype t, int B, int32_t L) {
  int32_t lens[KT_MAX_SEQS];
  for (int b = 0; b < B && b < KT_MAX_SEQS; b++) lens[b] = L;
  return paged_case(op, t, 32, 8, 128, 16, B, lens, lens);
}

static void attn_bench_cases(kite_op op, kite_dtype t, int llm, kt_case_list *l) {
  static const int batches[] = {1, 8, 32, 64};
  static const int32_t contexts[] = {512, 4096};
  static const int64_t tokens[] = {1, 16, 512, 8192};
  switch (op) {
  case KITE_OP_STORE_KV:
    for (int i = llm ? 0 : 2; i < (llm ? 4 : 3); i++)
      kt_case_push(l, store_kv_case(t, tokens[i], 8, 128, 16));
    break;
  case KITE_OP_PAGED_DECODE:
    if (!llm) {
      kt_case_push(l, llm_paged(op, t, 8, 1024));
      break;
    }
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 2; j++) kt_case_push(l, llm_paged(op, t, batches[i], contexts[j]));
    break;
  case KITE_OP_PAGED_PREFILL:
    kt_case_push(l, llm_paged(op, t, 1, 512));
    if (llm) {
      kt_case_push(l, llm_paged(op, t, 1, 4096));
      kt_case_push(l, llm_paged(op, t, 4, 4096));
      /* a ragged batch: 16 sequences of 256 to 4096 tokens */
      int32_t lens[16];
      for (int b = 0; b < 16; b++) lens[b] = 256 + (int32_t)((b * 7 % 16) * 256);
      kt_case_push(l, paged_case(op, t, 32, 8, 128, 16, 16, lens, lens));
    }
    break;
  case KITE_OP_SDPA:
    kt_case_push(l, llm ? sdpa_case(t, 1, 32, 32, 2048, 2048, 128)
                        : sdpa_case(t, 1, 32, 32, 512, 512, 128));
    if (llm) { /* prefill-sized: B 4, S 4096, Hq 32 / Hkv 8, causal and not; D 64 and 256 */
      static const int64_t dims[] = {128, 64, 256};
      for (int i = 0; i < 3; i++)
        for (int causal = 1; causal >= 0; causal--) {
          kt_case c = sdpa_case(t, 4, 32, 8, 4096, 4096, dims[i]);
          c.attn.opts.causal = causal;
          kt_case_push(l, c);
        }
    }
    break;
  default:
    break;
  }
}

const kt_family_ops kt_family_attn = {KT_FAMILY_FIELDS(attn, kt_attn_has, attn_flops)};
