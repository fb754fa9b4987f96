/*
 * Driver of the MLA ops: mla_store_kv and mla_decode (kite.h, DeepSeek-V2/V3's latent cache).
 *
 * The cases reuse the paged attention cases' fields (kt_attn_case: hq = heads, head_dim =
 * kv_lora_rank R, rope_dim P) and fills: physical blocks handed out in a seeded random order,
 * ragged sequence lengths with 0 and 1, one unused block-table entry per row and blocks no
 * sequence owns; store slots distinct and random, some negative (padding).
 * Layouts: q_nope / q_pe / o with head stride R + pad (P + pad), c_kv / k_pe as the two slices of
 * one [T, R + P + pad] row (kv_a_proj_with_mqa's output) or as separate padded rows.
 */
#include <math.h>
#include <stdio.h>

#include "driver_attn.h"
#include "util.h"

static int kt_mla_has(kite_op op) {
  return op == KITE_OP_MLA_STORE_KV || op == KITE_OP_MLA_DECODE;
}

static void mla_shape(const kt_case *c, char *buf, size_t n) {
  const kt_attn_case *a = &c->attn;
  if (c->op == KITE_OP_MLA_STORE_KV)
    snprintf(buf, n, "T%lld %lld+%lld bs%lld", (long long)a->tokens, (long long)a->head_dim,
             (long long)a->rope_dim, (long long)a->block_size);
  else
    snprintf(buf, n, "B%lld L%d H%lld %lld+%lld", (long long)a->batch, (int)kt_attn_max_len(a),
             (long long)a->hq, (long long)a->head_dim, (long long)a->rope_dim);
}

static void mla_describe(const kt_case *c, char *buf, size_t n) {
  const kt_attn_case *a = &c->attn;
  size_t len = 0;
  buf[0] = '\0';
  kt_cat(buf, n, &len, "R=%lld P=%lld bs=%lld blocks=%lld", (long long)a->head_dim,
         (long long)a->rope_dim, (long long)a->block_size, (long long)a->num_blocks);
  if (c->op == KITE_OP_MLA_STORE_KV) {
    kt_cat(buf, n, &len, " T=%lld", (long long)a->tokens);
    if (a->fused_kv) kt_cat(buf, n, &len, " fused");
    if (a->skip_slots) kt_cat(buf, n, &len, " skipped-slots");
  } else {
    kt_cat(buf, n, &len, " B=%lld H=%lld L=", (long long)a->batch, (long long)a->hq);
    for (int64_t b = 0; b < a->batch && b < 8; b++)
      kt_cat(buf, n, &len, "%s%d", b ? "," : "", (int)a->seq_lens[b]);
    if (a->batch > 8) kt_cat(buf, n, &len, ",...");
    kt_cat(buf, n, &len, " scale=%g", (double)a->opts.scale);
    if (a->with_lse) kt_cat(buf, n, &len, " lse");
  }
  if (a->pad) kt_cat(buf, n, &len, " pad=%lld", (long long)a->pad);
}

/* ---- plans ------------------------------------------------------------------------------- */

/* ckv_cache[num_blocks, bs, R] and kpe_cache[num_blocks, bs, P], values in [-1, 1]. */
static void plan_caches(kt_run *r, const kt_case *c, kt_role role) {
  const kt_attn_case *a = &c->attn;
  int64_t cs[3] = {a->num_blocks, a->block_size, a->head_dim};
  int64_t ps[3] = {a->num_blocks, a->block_size, a->rope_dim};
  kt_bind(r, "ckv_cache",
          kt_add_tensor(r, "ckv_cache", c->dtype, role, 3, cs, KT_FILL_UNIFORM, -1, 1));
  kt_bind(r, "kpe_cache",
          kt_add_tensor(r, "kpe_cache", c->dtype, role, 3, ps, KT_FILL_UNIFORM, -1, 1));
}

static void plan_store(kt_run *r, const kt_case *c) {
  const kt_attn_case *a = &c->attn;
  const kite_dtype t = c->dtype;
  const int64_t T = a->tokens, R = a->head_dim, P = a->rope_dim;
  if (a->fused_kv) { /* c_kv and k_pe: slices of one [T, R + P + pad] buffer */
    const int64_t row = R + P + a->pad, cs[2] = {T, R}, ps[2] = {T, P}, st[2] = {row, 1};
    const int b = kt_add_buf(r, "kv_a", t, T * row);
    kt_bind(r, "c_kv", kt_add_view(r, "c_kv", b, t, KT_IN, 2, cs, st, 0, KT_FILL_UNIFORM, -1, 1));
    kt_bind(r, "k_pe", kt_add_view(r, "k_pe", b, t, KT_IN, 2, ps, st, R, KT_FILL_UNIFORM, -1, 1));
  } else {
    kt_bind(r, "c_kv", kt_add_matrix(r, "c_kv", t, KT_IN, T, R, a->pad, -1, 1));
    kt_bind(r, "k_pe", kt_add_matrix(r, "k_pe", t, KT_IN, T, P, a->pad, -1, 1));
  }
  plan_caches(r, c, KT_INOUT); /* slots not written keep their values */
  kt_bind(r, "slots", kt_attn_add_ints(r, "slots", T, kt_attn_fill_slots));
}

static void plan_decode(kt_run *r, const kt_case *c) {
  const kt_attn_case *a = &c->attn;
  const kite_dtype t = c->dtype;
  if (a->batch < 0 || a->batch > KT_MAX_SEQS) {
    r->bad = 1;
    return;
  }
  kt_bind(r, "q_nope",
          kt_attn_add_heads(r, "q_nope", t, KT_IN, a->batch, a->hq, a->head_dim, a->pad, -1, 1));
  kt_bind(r, "q_pe",
          kt_attn_add_heads(r, "q_pe", t, KT_IN, a->batch, a->hq, a->rope_dim, a->pad, -1, 1));
  plan_caches(r, c, KT_IN);
  kt_attn_plan_table(r, a);
  kt_bind(r, "o", kt_attn_add_heads(r, "o", t, KT_OUT, a->batch, a->hq, a->head_dim, a->pad, 0, 0));
  if (a->with_lse) {
    int64_t ls[2] = {a->batch, a->hq};
    kt_bind(r, "lse",
            kt_add_tensor(r, "lse", KITE_DTYPE_F32, KT_OUT, 2, ls, KT_FILL_UNIFORM, 0, 0));
  }
}

static void mla_plan(kt_run *r, const kt_case *c) {
  if (c->op == KITE_OP_MLA_STORE_KV)
    plan_store(r, c);
  else if (c->op == KITE_OP_MLA_DECODE)
    plan_decode(r, c);
  else
    r->bad = 1;
}

KT_SCALARS(mla_scalar, KT_FIELD("scale", 'f', attn.opts.scale))

/* ---- bytes, FLOPs, bounds ---------------------------------------------------------------- *
 * mla_store_kv: the latents read and written, 2 T (R + P) e, + 4 T (slots).
 * mla_decode: q_nope, q_pe and o once, every latent row of every sequence once (all heads share
 * it): (B H (2 R + P) + sum(L) (R + P)) e, + block-table entries, seq_lens, lse. FLOPs per
 * (head, key): 2 (R + P) for the score and 2 R for the value sum. */
static double mla_bytes(const kt_case *c) {
  const kt_attn_case *a = &c->attn;
  const double e = (double)kite_dtype_size(c->dtype), R = (double)a->head_dim,
               P = (double)a->rope_dim;
  if (c->op == KITE_OP_MLA_STORE_KV)
    return 2 * (double)a->tokens * (R + P) * e + 4 * (double)a->tokens;
  double keys, blocks;
  kt_attn_count_keys(a, &keys, &blocks);
  const double BH = (double)a->batch * (double)a->hq;
  return BH * (2 * R + P) * e + keys * (R + P) * e + 4 * blocks + 4 * (double)a->batch +
         (a->with_lse ? 4 * BH : 0);
}

static double mla_flops(const kt_case *c) {
  const kt_attn_case *a = &c->attn;
  if (c->op != KITE_OP_MLA_DECODE) return 0;
  double keys = 0;
  for (int64_t b = 0; b < a->batch; b++) keys += a->seq_lens[b];
  return keys * (double)a->hq * (4 * (double)a->head_dim + 2 * (double)a->rope_dim);
}

/* NMSE bounds [f32, f16, bf16]: store copies (exact, 1e-20 keeps the ratio finite). Decode has
 * paged_decode's sources of error (driver_attn.c: one rounding of o, and on tensor cores P
 * rounded to the 16-bit type before P V); the latent sums run over R + P = 576 products instead
 * of D, which f32 accumulation keeps far below those. A key seen that must not be (or a wrong
 * block) moves o by O(1) on the rows it touches. */
static double mla_bound(kite_op op, kite_dtype t) {
  static const double bound[3] = {1e-10, 2e-6, 1e-4};
  if (op == KITE_OP_MLA_STORE_KV) return 1e-20;
  return bound[t == KITE_DTYPE_F16 ? 1 : t == KITE_DTYPE_BF16 ? 2 : 0];
}

/* ---- cases ------------------------------------------------------------------------------- */

static kt_case store_case(kite_dtype t, int64_t T, int64_t R, int64_t P, int64_t bs, int fused,
                          int skip, int64_t pad) {
  kt_case c = kt_case_default(KITE_OP_MLA_STORE_KV, t, 0, 0);
  kt_attn_case *a = &c.attn;
  a->tokens = T, a->head_dim = R, a->rope_dim = P, a->block_size = bs, a->hq = 1;
  a->num_blocks = (T + bs - 1) / bs + 2;
  a->fused_kv = fused, a->skip_slots = skip, a->pad = pad;
  return c;
}

/* batch sequences of lens[b] keys; 3 blocks no sequence owns, one unused entry per table row. */
static kt_case decode_case(kite_dtype t, int64_t H, int64_t R, int64_t P, int64_t bs, int batch,
                           const int32_t *lens, float scale) {
  kt_case c = kt_case_default(KITE_OP_MLA_DECODE, t, 0, 0);
  kt_attn_case *a = &c.attn;
  a->hq = H, a->head_dim = R, a->rope_dim = P, a->block_size = bs;
  a->opts = kite_attn_opts_default();
  a->opts.scale = scale;
  kt_attn_set_lens(a, batch, lens);
  return c;
}

typedef struct mla_geom {
  int64_t heads, rank, rope, block_size;
  int batch;
  int32_t lens[5];
} mla_geom;

/* DeepSeek's 512 + 64 (block sizes 64 and 1, 16 and 128 heads), odd sizes for the generic
 * kernels, a long sequence among short ones. */
static const mla_geom g_decode[] = {
    {16, 512, 64, 64, 4, {0, 1, 100, 257}},
    {128, 512, 64, 16, 2, {300, 33}},
    {8, 512, 64, 1, 3, {17, 64, 2}},
    {5, 96, 16, 7, 3, {20, 0, 50}},
    {3, 40, 8, 16, 2, {1, 90}},
    {20, 256, 32, 32, 5, {700, 3, 64, 65, 1}},
    /* long sequences: the tensor-core kernel splits their keys over CTAs and merges */
    {16, 512, 64, 64, 1, {3000}},
    {128, 512, 64, 32, 1, {1200}},
};
enum { FIRST_LONG = 6 }; /* the long ones run with one option set (ref's time) */
static const int g_quick_decode[] = {0, 3};

static void mla_check_cases(kite_op op, kite_dtype t, int quick, kt_case_list *l) {
  if (op == KITE_OP_MLA_STORE_KV) {
    kt_case_push(l, store_case(t, 0, 512, 64, 64, 0, 0, 0));
    kt_case_push(l, store_case(t, 1, 512, 64, 1, 1, 0, 0));
    kt_case_push(l, store_case(t, 37, 512, 64, 16, 1, 1, 3));
    if (!quick) {
      kt_case_push(l, store_case(t, 130, 96, 16, 64, 0, 1, 5));
      kt_case_push(l, store_case(t, 9, 40, 8, 4, 1, 1, 0));
    }
    return;
  }
  if (op != KITE_OP_MLA_DECODE) return;
  const int n = quick ? KT_COUNT(g_quick_decode) : KT_COUNT(g_decode);
  for (int k = 0; k < n; k++) {
    const int gi = quick ? g_quick_decode[k] : k;
    const mla_geom *g = &g_decode[gi];
    for (int v = 0; v < (gi >= FIRST_LONG ? 1 : 2);
         v++) { /* the DeepSeek-V3 scale (1/sqrt(192) times yarn's mscale^2)
and a large one that sharpens the softmax */
      const float scale = v == 0 ? 0.1352f : 0.5f;
      kt_case c =
          decode_case(t, g->heads, g->rank, g->rope, g->block_size, g->batch, g->lens, scale);
      c.attn.with_lse = v == 1 || gi == 0;
      c.attn.pad = (gi + v) % 2 ? 8 : 0;
      kt_case_push(l, c);
    }
  }
}

/* DeepSeek-V3: 128 heads (one tensor-parallel rank holds 128 / tp of them: 16 at tp 8), kv_lora
 * 512, rope 64, block 64; batches of 1 to 64 sequences of 4096 keys. */
static void mla_bench_cases(kite_op op, kite_dtype t, int llm, kt_case_list *l) {
  if (op == KITE_OP_MLA_STORE_KV) {
    kt_case_push(l, store_case(t, llm ? 8192 : 512, 512, 64, 64, 1, 0, 0));
    if (llm) kt_case_push(l, store_case(t, 64, 512, 64, 64, 1, 0, 0));
    return;
  }
  if (op != KITE_OP_MLA_DECODE) return;
  static const int batches[] = {1, 8, 64};
  int32_t lens[KT_MAX_SEQS];
  for (int b = 0; b < KT_MAX_SEQS; b++) lens[b] = 4096;
  if (!llm) {
    kt_case_push(l, decode_case(t, 128, 512, 64, 64, 8, lens, 0.1352f));
    return;
  }
  for (int i = 0; i < 3; i++) {
    kt_case_push(l, decode_case(t, 128, 512, 64, 64, batches[i], lens, 0.1352f));
    kt_case_push(l, decode_case(t, 16, 512, 64, 64, batches[i], lens, 0.1352f));
  }
}

const kt_family_ops kt_family_mla = {KT_FAMILY_FIELDS(mla, kt_mla_has, mla_flops)};
