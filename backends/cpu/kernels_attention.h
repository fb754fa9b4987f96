/*
 * Attention kernels of the cpu backend (store_kv, paged_decode, paged_prefill, sdpa), written
 * once over the vector layer (vec_<isa>.h) and compiled once per ISA: cpu_attention.c (scalar)
 * and cpu_attention_<isa>.c include their vec header, define CPU_ATTN_ISA (the suffix of their
 * run functions: cpu_attn_paged_avx2, ...) and include this file.
 *
 * Every op is a set of "rows" (one query of one q head each). The q heads that share a kv head
 * attend together to that head's keys, so each K/V row is read once per kv head. Keys come in
 * tiles of at most ATT_KB rows that are contiguous in memory (part of a paged block, or a slab of
 * a dense k); for each tile and head group:
 *   s = q.k  (ATT_RB rows x 2 keys register tiles, K converted to f32 in registers),
 *   softcap, masks, then the online softmax: m' = max(m, max s); acc *= e^(m - m'); l likewise;
 *   p = e^(s - m'); l += sum p;  acc += p V  (ATT_RB rows x 2 vectors register tiles).
 * With more than ATT_RB rows in a group, the K/V tile is first widened to f32 once instead of
 * once per row group.
 * Work items: decode, (sequence, key chunk) with every q head, walking each block through all its
 * kv heads (long contiguous runs); prefill and sdpa, (tile of up to ATT_ROWS rows, kv head).
 * Blocks are scattered in memory, so no hardware prefetcher follows the block table: while one
 * tile is computed, the next one's K/V lines are prefetched (decode reads each byte once and is
 * bound by memory, where these requests are what keeps it streaming).
 * Items are claimed from an atomic counter, so ragged sequences balance across threads. Decode
 * with fewer than ~16 sequences per thread splits the keys into chunks and merges the chunks'
 * (m, l, acc) by the log-sum-exp rule in a second pass.
 *
 * Indices read from the caller's memory are never trusted: seq_len is clamped to the block
 * table, block ids outside the cache make their keys absent, cu_q_lens is checked first.
 */
#ifndef CPU_ATTN_ISA
#error "define CPU_ATTN_ISA (the run functions' suffix) and include a vec_<isa>.h first"
#endif

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "cpu.h"
#include "kite/dtype.h"

#ifndef KITE_CPU_ATTN_DECL
#define KITE_CPU_ATTN_DECL
/* The run functions of each ISA build (paged: paged_decode and paged_prefill); cpu_attention.c
 * makes the kernel entries. */
#define CPU_ATTN_DECLARE(isa)                                                                      \
  kite_status cpu_attn_store_kv_##isa(const kite_kernel *k, kite_ctx *ctx, const void *args);      \
  kite_status cpu_attn_paged_##isa(const kite_kernel *k, kite_ctx *ctx, const void *args);         \
  kite_status cpu_attn_sdpa_##isa(const kite_kernel *k, kite_ctx *ctx, const void *args)
CPU_ATTN_DECLARE(scalar);
#if defined(__x86_64__)
CPU_ATTN_DECLARE(avx2);
#endif
#endif
#define ATT_PASTE2(a, b) a##b
#define ATT_PASTE(a, b) ATT_PASTE2(a, b)
#define ATT_EXPORT(name) ATT_PASTE(name, CPU_ATTN_ISA)

#define ATT_KB 32   /* keys per score tile */
#define ATT_RB 4    /* rows per register tile */
#define ATT_ROWS 64 /* rows per prefill/sdpa work item (at least the q heads of one kv head) */
#define ATT_ALIGN 64

/* Scratch of one thread: the rows of the work item in progress. */
typedef struct att_rows {
  int64_t n;        /* rows in use */
  float *q;         /* [n, Dp] scaled queries in f32, zero past D */
  float *acc;       /* [n, Dp] sum of p * v, not yet divided by l */
  float *s;         /* [n, ATT_KB] scores of the tile, then their p */
  float *m, *l;     /* [n] running max of the scores and sum of e^(s - m) */
  float *alpha;     /* [n] e^(m_old - m) of the tile in progress, applied to acc as p V adds */
  int64_t *lo, *hi; /* [n] the keys a row sees: positions [lo, hi] */
  int64_t *mask;    /* [n] sdpa: element offset of the row's mask */
  float *kt, *vt;   /* [ATT_KB, Dp] the K/V tile in f32, when n > ATT_RB */
} att_rows;

typedef struct att_job att_job;
typedef void (*att_item_fn)(const att_job *j, att_rows *R, int64_t item);

struct att_job {
  kite_dtype t;
  kite_attn_opts opts;
  int64_t D, Dp, hq, hkv, G; /* G = hq / hkv q heads per kv head */
  const kite_paged_attn_args *pa;
  const kite_sdpa_args *sa;
  att_item_fn item;
  int64_t items;
  atomic_llong *next;    /* the next unclaimed item */
  int64_t splits, chunk; /* decode: key chunks per sequence and their length */
  float *partial;        /* decode with splits > 1: per item hq x (m, l, acc[Dp]) */
  const int64_t *tiles;  /* prefill/sdpa: (batch, first query, queries) per tile */
  char *scratch;         /* per thread part: scratch_bytes each */
  size_t scratch_bytes;
  int64_t rows_max;
};

static inline size_t att_round(size_t n) {
  return (n + ATT_ALIGN - 1) / ATT_ALIGN * ATT_ALIGN;
}

/* Bytes of one part's scratch for up to `rows` rows of Dp floats; with out != NULL, carves it. */
static size_t att_rows_layout(char *base, int64_t rows, int64_t Dp, att_rows *out) {
  const size_t r = (size_t)rows, dp = (size_t)Dp;
  const size_t sizes[] = {r * dp * 4, r * dp * 4,      r * ATT_KB * 4, r * 4,
                          r * 4,      r * 8,           r * 8,          r * 8,
                          r * 4,      ATT_KB * dp * 4, ATT_KB * dp * 4};
  char *p[11];
  size_t off = 0;
  for (int i = 0; i < 11; i++) {
    p[i] = base ? base + off : NULL;
    off += att_round(sizes[i]);
  }
  if (out)
    *out = (att_rows){.q = (float *)p[0],
                      .acc = (float *)p[1],
                      .s = (float *)p[2],
                      .m = (float *)p[3],
                      .l = (float *)p[4],
                      .lo = (int64_t *)p[5],
                      .hi = (int64_t *)p[6],
                      .mask = (int64_t *)p[7],
                      .alpha = (float *)p[8],
                      .kt = (float *)p[9],
                      .vt = (float *)p[10]};
  return off;
}

/* q head i (< G) of kv head g, by the GQA layout (DESIGN.md "Attention"). */
static inline int64_t att_head(const att_job *j, int64_t g, int64_t i) {
  return j->opts.gqa == KITE_GQA_INTERLEAVED ? g + i * j->hkv : g * j->G + i;
}

/* Row r starts: its query (dtype t at q) scaled into f32, sees keys [lo, hi], nothing summed. */
static void att_row_begin(const att_job *j, att_rows *R, int64_t r, const void *q, int64_t lo,
                          int64_t hi) {
  float *qr = R->q + r * j->Dp, *ar = R->acc + r * j->Dp;
  const vf scale = vf_set1(j->opts.scale), zero = vf_set1(0.0f);
  for (int64_t d = 0; d < j->Dp; d += VL) {
    const int64_t m = j->D - d < VL ? j->D - d : VL;
    vf_store(KITE_DTYPE_F32, qr, d, vf_mul(vf_load(j->t, q, d, m), scale), VL, false);
    vf_store(KITE_DTYPE_F32, ar, d, zero, VL, false);
  }
  R->m[r] = -INFINITY;
  R->l[r] = 0.0f;
  R->lo[r] = lo > 0 ? lo : 0;
  R->hi[r] = hi;
}

/* The keys a query at position pos sees among [0, len): causal and the window bound them above
 * by pos, the window below by pos - window_left. */
static inline void att_visible(const att_job *j, int64_t pos, int64_t len, int causal, int64_t *lo,
                               int64_t *hi) {
  const int64_t wl = j->opts.window_left;
  *lo = wl >= 0 ? pos - wl : 0;
  *hi = causal || wl >= 0 ? pos : len - 1;
  if (*hi > len - 1) *hi = len - 1;
}

/* ---- register tiles ------------------------------------------------------------------------ */

/* The sums of a[0..7] (VL = 8) as one vector, by a transpose of pairwise adds: cheaper than
 * eight separate horizontal reductions. */
#if defined(__AVX2__) && !defined(KITE_CPU_VEC_SCALAR_H) && VL == 8
#define ATT_HSUM8 1
CPU_INLINE __m256 att_hsum8(const __m256 *a) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
#endif

/* One step of att_qk_tile over m (<= VL) elements from d. */
#define ATT_QK_STEP(m)                                                                             \
  do {                                                                                             \
    vf kv[2];                                                                                      \
    for (int c = 0; c < NK; c++) kv[c] = vf_load(t, k + c * ks, d, (m));                           \
    for (int r = 0; r < NR; r++) {                                                                 \
      const vf qv = vf_load(KITE_DTYPE_F32, q + r * Dp, d, VL);                                    \
      for (int c = 0; c < NK; c++) acc[r][c] = vf_fma(qv, kv[c], acc[r][c]);                       \
    }                                                                                              \
  } while (0)

/* s[r][c] = q_r . k_c for NR rows and NK keys; K rows of dtype t, ks bytes apart. */
CPU_INLINE void att_qk_tile(kite_dtype t, int NR, int NK, const float *q, int64_t Dp, const char *k,
                            int64_t ks, int64_t D, float *s) {
  vf acc[ATT_RB][2];
  for (int r = 0; r < NR; r++)
    for (int c = 0; c < NK; c++) acc[r][c] = vf_set1(0.0f);
  int64_t d = 0;
  for (; d + VL <= D; d += VL) ATT_QK_STEP(VL);
  if (d < D) ATT_QK_STEP(D - d);
#ifdef ATT_HSUM8
  if (NR == 4 && NK == 2) {
    float sums[8];
    _mm256_storeu_ps(sums, att_hsum8(&acc[0][0]));
    for (int r = 0; r < 4; r++) s[r * ATT_KB] = sums[2 * r], s[r * ATT_KB + 1] = sums[2 * r + 1];
    return;
  }
#endif
  for (int r = 0; r < NR; r++)
    for (int c = 0; c < NK; c++) s[r * ATT_KB + c] = vf_reduce_add(acc[r][c]);
}
#undef ATT_QK_STEP

/* acc[r][d0 .. d0 + NC*VL) = alpha[r] acc[r][...] + sum_j p[r][j] v_j[...] over n keys, for NR
 * rows (p[r * ATT_KB + j], broadcast as the FMAs need it: a load, no shuffle); V rows of dtype t,
 * vs bytes apart; the last chunk has `last` (<= VL) elements. The online softmax's rescale rides
 * on the load of acc here instead of a pass of its own. (4 x 3 accumulators would fill all 16
 * AVX2 registers and spill.) */
CPU_INLINE void att_pv_tile(kite_dtype t, int NR, int NC, const float *p, const float *alpha,
                            const char *v, int64_t vs, int64_t n, int64_t d0, int64_t last,
                            float *acc, int64_t Dp) {
  vf a[ATT_RB][2];
  for (int r = 0; r < NR; r++)
    for (int c = 0; c < NC; c++)
      a[r][c] = vf_mul(vf_load(KITE_DTYPE_F32, acc + r * Dp, d0 + c * VL, VL), vf_set1(alpha[r]));
  for (int64_t j = 0; j < n; j++) {
    vf vv[2];
    for (int c = 0; c < NC; c++)
      vv[c] = vf_load(t, v + j * vs, d0 + c * VL, c == NC - 1 ? last : VL);
    for (int r = 0; r < NR; r++) {
      const vf pr = vf_set1(p[r * ATT_KB + j]);
      for (int c = 0; c < NC; c++) a[r][c] = vf_fma(pr, vv[c], a[r][c]);
    }
  }
  for (int r = 0; r < NR; r++)
    for (int c = 0; c < NC; c++)
      vf_store(KITE_DTYPE_F32, acc + r * Dp, d0 + c * VL, a[r][c], VL, false);
}

/* The register tiles with their shape as constants, so that their arrays live in registers. */
CPU_INLINE void att_qk_any(kite_dtype t, int nr, int nk, const float *q, int64_t Dp, const char *k,
                           int64_t ks, int64_t D, float *s) {
#define ATT_QK(NR, NK)                                                                             \
  case NR * 2 + NK - 1:                                                                            \
    att_qk_tile(t, NR, NK, q, Dp, k, ks, D, s);                                                    \
    break
  switch (nr * 2 + nk - 1) {
    ATT_QK(1, 1);
    ATT_QK(1, 2);
    ATT_QK(2, 1);
    ATT_QK(2, 2);
    ATT_QK(3, 1);
    ATT_QK(3, 2);
    ATT_QK(4, 1);
    ATT_QK(4, 2);
  default:
    break;
  }
#undef ATT_QK
}

/* Up to 2 column chunks from d0; full ones get VL as a constant width, so that their loads need
 * no length check. */
CPU_INLINE void att_pv_any(kite_dtype t, int nr, const float *p, const float *alpha, const char *v,
                           int64_t vs, int64_t n, int64_t d0, int64_t D, float *acc, int64_t Dp) {
  const int64_t rem = D - d0, nc = rem >= 2 * VL ? 2 : (rem + VL - 1) / VL;
  const int64_t last = rem - (nc - 1) * VL;
#define ATT_PV(NR)                                                                                 \
  case NR:                                                                                         \
    if (nc == 2 && last == VL)                                                                     \
      att_pv_tile(t, NR, 2, p, alpha, v, vs, n, d0, VL, acc, Dp);                                  \
    else if (nc == 2)                                                                              \
      att_pv_tile(t, NR, 2, p, alpha, v, vs, n, d0, last, acc, Dp);                                \
    else                                                                                           \
      att_pv_tile(t, NR, 1, p, alpha, v, vs, n, d0, last, acc, Dp);                                \
    break
  switch (nr) {
    ATT_PV(1);
    ATT_PV(2);
    ATT_PV(3);
    ATT_PV(4);
  default:
    break;
  }
#undef ATT_PV
}

/* ---- one tile of keys ---------------------------------------------------------------------- */

/* tanh(x) = 1 - 2 / (e^2x + 1): exact limits at +-inf, absolute error ~1e-7 near 0, which is
 * what a score needs. */
CPU_INLINE vf att_tanh(vf x) {
  const vf one = vf_set1(1.0f);
  return vf_sub(one, vf_div(vf_set1(2.0f), vf_add(vf_exp(vf_add(x, x)), one)));
}

/* Row r's scores of keys j0 .. j0 + n: softcap, masks, then the online softmax step; s[r] then
 * holds p = e^(s - m) (0 for keys not seen) and alpha[r] the factor for what acc summed under the
 * old max (the p V step applies it). */
static void att_softmax_row(const att_job *j, att_rows *R, int64_t r, int64_t j0, int64_t n) {
  float *s = R->s + r * ATT_KB;
  const kite_sdpa_args *sa = j->sa;
  const bool has_mask = sa && sa->mask;
  float add[ATT_KB];
  if (has_mask) { /* gathered as floats: a bool mask becomes 0 / -inf */
    const int64_t es = (int64_t)kite_dtype_size(sa->mask_dtype), st = sa->mask_stride[3];
    const char *mrow = (const char *)sa->mask + R->mask[r] * es;
    for (int64_t c = 0; c < n; c++) {
      const char *e = mrow + (j0 + c) * st * es;
      add[c] = sa->mask_dtype == KITE_DTYPE_U8 ? (*(const uint8_t *)e ? 0.0f : -INFINITY)
                                               : kite_load_f32(sa->mask_dtype, e, 0);
    }
    for (int64_t c = n; c < ATT_KB; c++) add[c] = 0.0f;
  }

  const float cap = j->opts.softcap;
  const bool all_seen = j0 >= R->lo[r] && j0 + n - 1 <= R->hi[r];
  vf mx = vf_set1(-INFINITY);
  for (int64_t c = 0; c < n; c += VL) {
    vf x = vf_load(KITE_DTYPE_F32, s, c, VL);
    if (cap > 0.0f) x = vf_mul(vf_set1(cap), att_tanh(vf_mul(x, vf_set1(1.0f / cap))));
    if (has_mask) x = vf_add(x, vf_load(KITE_DTYPE_F32, add, c, VL));
    if (!all_seen || c + VL > n) {
      /* keys outside [lo, hi], and lanes past n, are not seen: they become -inf by a select,
       * not by adding -inf, since lanes past n hold whatever the scratch held (NaN and inf
       * included, which an add would keep or make) */
      float seen[VL];
      for (int l = 0; l < VL; l++) {
        const int64_t pos = j0 + c + l;
        seen[l] = c + l < n && pos >= R->lo[r] && pos <= R->hi[r] ? 1.0f : 0.0f;
      }
      x = vf_lt_select(vf_load(KITE_DTYPE_F32, seen, 0, VL), vf_set1(0.5f), vf_set1(-INFINITY), x);
    }
    vf_store(KITE_DTYPE_F32, s, c, x, VL, false);
    mx = vf_max(mx, x);
  }
  const float m_tile = vf_reduce_max(mx), m_old = R->m[r];
  R->alpha[r] = 1.0f;
  const float m_new = m_tile > m_old ? m_tile : m_old;
  if (m_new == -INFINITY) { /* nothing seen yet: p = 0, unless a NaN hid behind the max */
    for (int64_t c = 0; c < n; c++)
      if (isnan(s[c])) R->m[r] = R->l[r] = NAN;
    memset(s, 0, ATT_KB * sizeof *s);
    return;
  }
  if (m_new > m_old) { /* rescale what was summed under the old max (e^-inf = 0 at first) */
    const float alpha = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
    R->alpha[r] = alpha;
    R->l[r] *= alpha;
    R->m[r] = m_new;
  }
  vf sum = vf_set1(0.0f);
  for (int64_t c = 0; c < n; c += VL) {
    const vf p = vf_exp_nonpos(vf_sub(vf_load(KITE_DTYPE_F32, s, c, VL), vf_set1(m_new)));
    vf_store(KITE_DTYPE_F32, s, c, p, VL, false);
    sum = vf_add(sum, p);
  }
  R->l[r] += vf_reduce_add(sum);
}

/* Widens n rows of dtype t (stride bytes apart) into f32 rows of Dp floats. */
CPU_INLINE void att_widen(kite_dtype t, const char *src, int64_t stride, int64_t n, int64_t D,
                          int64_t Dp, float *dst) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t d = 0; d < Dp; d += VL) {
      const int64_t m = D - d < VL ? D - d : VL;
      vf_store(KITE_DTYPE_F32, dst + i * Dp, d, vf_load(t, src + i * stride, d, m), VL, false);
    }
}

/* Asks for rows [c, c + 2) of the next tile's K and V (nk, nv: NULL for none; rows of `row`
 * bytes, ks / vs apart). Blocks are scattered, so no hardware prefetcher follows the block table:
 * without this each tile starts with a row of demand misses. Two rows per key pair spread the
 * requests over the tile instead of queueing them all at once. */
CPU_INLINE void att_prefetch_rows(const char *nk, int64_t ks, const char *nv, int64_t vs, int64_t c,
                                  int64_t n, int64_t row) {
  if (!nk) return;
  for (int64_t r = c; r < c + 2 && r < n; r++)
    for (int64_t off = 0; off < row; off += 64) {
      __builtin_prefetch(nk + r * ks + off);
      __builtin_prefetch(nv + r * vs + off);
    }
}

/* Every row attends to keys j0 .. j0 + n (n <= ATT_KB): K rows at k, V rows at v, of dtype t,
 * ks and vs bytes apart; nk, nv: the next tile's (n rows, same strides) to prefetch, or NULL. */
CPU_INLINE void att_tile_t(const att_job *j, att_rows *R, int64_t rb, int64_t re, kite_dtype t,
                           int64_t j0, int64_t n, const char *k, int64_t ks, const char *v,
                           int64_t vs, const char *nk, const char *nv, int64_t row) {
  const int64_t D = j->D, Dp = j->Dp;
  for (int64_t r0 = rb; r0 < re; r0 += ATT_RB) {
    const int nr = (int)(re - r0 < ATT_RB ? re - r0 : ATT_RB);
    for (int64_t c = 0; c < n; c += 2) {
      att_qk_any(t, nr, n - c < 2 ? 1 : 2, R->q + r0 * Dp, Dp, k + c * ks, ks, D,
                 R->s + r0 * ATT_KB + c);
      if (r0 == rb) att_prefetch_rows(nk, ks, nv, vs, c, n, row);
    }
  }
  for (int64_t r = rb; r < re; r++) att_softmax_row(j, R, r, j0, n);
  for (int64_t r0 = rb; r0 < re; r0 += ATT_RB) {
    const int nr = (int)(re - r0 < ATT_RB ? re - r0 : ATT_RB);
    for (int64_t d = 0; d < D; d += 2 * VL)
      att_pv_any(t, nr, R->s + r0 * ATT_KB, R->alpha + r0, v, vs, n, d, D, R->acc + r0 * Dp, Dp);
  }
}

static void att_tile(const att_job *j, att_rows *R, int64_t rb, int64_t re, int64_t j0, int64_t n,
                     const char *k, int64_t ks, const char *v, int64_t vs, const char *nk,
                     const char *nv) {
  const int64_t row = j->D * cpu_esize(j->t);
  if (re - rb > ATT_RB && j->t != KITE_DTYPE_F32) { /* widen once, not once per row group */
    if (j->t == KITE_DTYPE_BF16) {
      att_widen(KITE_DTYPE_BF16, k, ks, n, j->D, j->Dp, R->kt);
      att_widen(KITE_DTYPE_BF16, v, vs, n, j->D, j->Dp, R->vt);
    } else {
      att_widen(KITE_DTYPE_F16, k, ks, n, j->D, j->Dp, R->kt);
      att_widen(KITE_DTYPE_F16, v, vs, n, j->D, j->Dp, R->vt);
    }
    for (int64_t c = 0; c < n; c += 2) att_prefetch_rows(nk, ks, nv, vs, c, n, row);
    att_tile_t(j, R, rb, re, KITE_DTYPE_F32, j0, n, (const char *)R->kt, j->Dp * 4,
               (const char *)R->vt, j->Dp * 4, NULL, NULL, row);
    return;
  }
  switch (j->t) {
  case KITE_DTYPE_F16:
    att_tile_t(j, R, rb, re, KITE_DTYPE_F16, j0, n, k, ks, v, vs, nk, nv, row);
    break;
  case KITE_DTYPE_BF16:
    att_tile_t(j, R, rb, re, KITE_DTYPE_BF16, j0, n, k, ks, v, vs, nk, nv, row);
    break;
  default:
    att_tile_t(j, R, rb, re, KITE_DTYPE_F32, j0, n, k, ks, v, vs, nk, nv, row);
    break;
  }
}

/* Keys [k0, k1) of sequence b for kv heads g0 .. g0 + ng, block by block through the block
 * table; head g's rows are [(g - g0) * rows_per_head, ...). A physical block holds every kv head
 * ([Hkv, bs, D] contiguous): walking all its heads before the next block reads K and V as long
 * runs, where one head at a time would jump to another page every bs * D elements. */
/* Prefetches one line of every page of heads g0 .. g0 + ng of block blk, some blocks ahead of the
 * one being computed: blocks are scattered, so each new page would otherwise start with a TLB
 * miss. A prefetch walks the page tables as a load does, but does not hold up the instructions
 * behind it when it misses (a plain load here did: it stalled the core on every page). */
static inline void att_touch_block(const kite_paged_attn_args *a, int64_t blk, int64_t g0,
                                   int64_t ng, int64_t row) {
  if (blk < 0 || blk >= a->num_blocks) return;
  const int64_t first = blk * a->hkv + g0, bytes = ng * a->block_size * row;
  const char *kc = (const char *)a->key_cache + first * a->block_size * row;
  const char *vc = (const char *)a->value_cache + first * a->block_size * row;
  for (int64_t off = 0; off < bytes; off += 4096) {
    __builtin_prefetch(kc + off);
    __builtin_prefetch(vc + off);
  }
}

#define ATT_TOUCH 2 /* blocks ahead */

/* Byte offset in the caches of the tile `ahead` tiles after the one at key t of head g (in the
 * order att_paged_keys walks them: tiles of a block's head, heads, blocks), or -1 past k1 or in a
 * block outside the cache. */
static int64_t att_tile_ahead(const kite_paged_attn_args *a, const int32_t *table, int64_t row,
                              int64_t g0, int64_t ng, int64_t k0, int64_t k1, int64_t g, int64_t t,
                              int ahead) {
  const int64_t bs = a->block_size;
  int64_t jb = t / bs;
  for (int s = 0; s < ahead; s++) {
    const int64_t end = (jb + 1) * bs < k1 ? (jb + 1) * bs : k1;
    if ((t += ATT_KB) < end) continue;
    t = jb * bs > k0 ? jb * bs : k0; /* the next head's first tile in this block */
    if (++g < g0 + ng) continue;
    g = g0, t = ++jb * bs;
    if (t >= k1) return -1;
  }
  const int64_t blk = table[jb];
  if (blk < 0 || blk >= a->num_blocks) return -1;
  return ((blk * a->hkv + g) * bs + (t - jb * bs)) * row;
}

#define ATT_AHEAD 1 /* tiles ahead that att_tile prefetches */

static void att_paged_keys(const att_job *j, att_rows *R, int64_t b, int64_t g0, int64_t ng,
                           int64_t rows_per_head, int64_t k0, int64_t k1) {
  const kite_paged_attn_args *a = j->pa;
  const int64_t bs = a->block_size, es = cpu_esize(j->t), row = j->D * es;
  const int32_t *table = a->block_table + b * a->block_table_stride;
  for (int64_t k = k0; k < k1;) {
    const int64_t jb = k / bs, end = (jb + 1) * bs < k1 ? (jb + 1) * bs : k1;
    const int64_t blk = table[jb];
    if (ATT_TOUCH && (jb + ATT_TOUCH) * bs < k1)
      att_touch_block(a, table[jb + ATT_TOUCH], g0, ng, row);
    if (blk >= 0 && blk < a->num_blocks)
      for (int64_t g = g0; g < g0 + ng; g++) {
        const int64_t base = ((blk * a->hkv + g) * bs + (k - jb * bs)) * row;
        const char *kc = (const char *)a->key_cache + base;
        const char *vc = (const char *)a->value_cache + base;
        const int64_t rb = (g - g0) * rows_per_head;
        for (int64_t t = k; t < end; t += ATT_KB) {
          const int64_t n = end - t < ATT_KB ? end - t : ATT_KB;
          const int64_t next = att_tile_ahead(a, table, row, g0, ng, k0, k1, g, t, ATT_AHEAD);
          att_tile(j, R, rb, rb + rows_per_head, t, n, kc + (t - k) * row, row, vc + (t - k) * row,
                   row, next >= 0 ? (const char *)a->key_cache + next : NULL,
                   next >= 0 ? (const char *)a->value_cache + next : NULL);
        }
      }
    k = end;
  }
}

/* Writes row r's result: o = acc / l over D elements of dtype t, lse = m + ln l; a row that saw
 * no key gets zeros and -inf. */
static void att_row_finish(const att_job *j, const att_rows *R, int64_t r, void *o, float *lse) {
  const bool none = R->m[r] == -INFINITY;
  const vf inv = vf_set1(none ? 0.0f : 1.0f / R->l[r]);
  const float *ar = R->acc + r * j->Dp;
  for (int64_t d = 0; d < j->D; d += VL) {
    const int64_t m = j->D - d < VL ? j->D - d : VL;
    vf_store(j->t, o, d, vf_mul(vf_load(KITE_DTYPE_F32, ar, d, VL), inv), m, false);
  }
  if (lse) *lse = none ? -INFINITY : R->m[r] + logf(R->l[r]);
}

/* ---- ops ----------------------------------------------------------------------------------- */

static int64_t att_seq_len(const kite_paged_attn_args *a, int64_t b) {
  const int64_t len = a->seq_lens[b], max = a->max_blocks * a->block_size;
  return len < 0 ? 0 : len > max ? max : len;
}

/* Decode item (sequence, key chunk): every q head at position len - 1, head group by head
 * group (row g * G + i is q head i of kv head g). */
static void att_decode_item(const att_job *j, att_rows *R, int64_t item) {
  const kite_paged_attn_args *a = j->pa;
  const int64_t split = item % j->splits, b = item / j->splits;
  const int64_t len = att_seq_len(a, b), pos = len - 1, es = cpu_esize(j->t);
  int64_t lo, hi;
  att_visible(j, pos, len, 0, &lo, &hi);
  R->n = j->hq;
  for (int64_t g = 0; g < j->hkv; g++)
    for (int64_t i = 0; i < j->G; i++) {
      const int64_t h = att_head(j, g, i);
      att_row_begin(j, R, g * j->G + i,
                    (const char *)a->q + (b * a->q_stride_t + h * a->q_stride_h) * es, lo, hi);
    }
  int64_t k0 = split * j->chunk, k1 = k0 + j->chunk;
  if (k0 < lo) k0 = lo;
  if (k1 > hi + 1) k1 = hi + 1;
  att_paged_keys(j, R, b, 0, j->hkv, j->G, k0 > 0 ? k0 : 0, k1);

  if (j->splits == 1) {
    for (int64_t g = 0; g < j->hkv; g++)
      for (int64_t i = 0; i < j->G; i++) {
        const int64_t h = att_head(j, g, i);
        att_row_finish(j, R, g * j->G + i,
                       (char *)a->o + (b * a->o_stride_t + h * a->o_stride_h) * es,
                       a->lse ? &a->lse[b * j->hq + h] : NULL);
      }
    return;
  }
  float *part = j->partial + item * j->hq * (j->Dp + 2);
  for (int64_t r = 0; r < j->hq; r++, part += j->Dp + 2) {
    part[0] = R->m[r], part[1] = R->l[r];
    memcpy(part + 2, R->acc + r * j->Dp, (size_t)j->Dp * sizeof(float));
  }
}

/* Merge item (sequence) of a split decode, per row: M = max m_i, L = sum l_i e^(m_i - M),
 * o = sum acc_i e^(m_i - M) / L, lse = M + ln L. */
static void att_merge_item(const att_job *j, att_rows *R, int64_t b) {
  const kite_paged_attn_args *a = j->pa;
  const int64_t es = cpu_esize(j->t), stride = j->hq * (j->Dp + 2);
  const float *first = j->partial + b * j->splits * stride;
  R->n = 1;
  for (int64_t r = 0; r < j->hq; r++) {
    float M = -INFINITY;
    for (int64_t sp = 0; sp < j->splits; sp++) {
      const float mi = first[sp * stride + r * (j->Dp + 2)];
      if (mi > M || isnan(mi)) M = mi;
    }
    float L = 0.0f, *acc = R->acc;
    for (int64_t d = 0; d < j->Dp; d += VL) vf_store(KITE_DTYPE_F32, acc, d, vf_set1(0.0f), VL, 0);
    if (M != -INFINITY)
      for (int64_t sp = 0; sp < j->splits; sp++) {
        const float *part = first + sp * stride + r * (j->Dp + 2);
        if (part[0] == -INFINITY) continue;
        const float w = expf(part[0] - M);
        L += part[1] * w;
        for (int64_t d = 0; d < j->Dp; d += VL)
          vf_store(KITE_DTYPE_F32, acc, d,
                   vf_fma(vf_load(KITE_DTYPE_F32, part + 2, d, VL), vf_set1(w),
                          vf_load(KITE_DTYPE_F32, acc, d, VL)),
                   VL, false);
      }
    R->m[0] = M, R->l[0] = L;
    const int64_t h = att_head(j, r / j->G, r % j->G);
    att_row_finish(j, R, 0, (char *)a->o + (b * a->o_stride_t + h * a->o_stride_h) * es,
                   a->lse ? &a->lse[b * j->hq + h] : NULL);
  }
}

/* Prefill item (tile of queries of one sequence, kv head): rows (query i, q head gi). */
static void att_prefill_item(const att_job *j, att_rows *R, int64_t item) {
  const kite_paged_attn_args *a = j->pa;
  const int64_t *tile = j->tiles + item / j->hkv * 3, g = item % j->hkv;
  const int64_t b = tile[0], i0 = tile[1], nq = tile[2], es = cpu_esize(j->t);
  const int64_t len = att_seq_len(a, b), t0 = a->cu_q_lens[b];
  const int64_t q_len = a->cu_q_lens[b + 1] - t0;
  int64_t k0 = INT64_MAX, k1 = INT64_MIN;
  R->n = nq * j->G;
  for (int64_t i = 0; i < nq; i++)
    for (int64_t gi = 0; gi < j->G; gi++) {
      const int64_t t = t0 + i0 + i, h = att_head(j, g, gi), pos = len - q_len + i0 + i;
      int64_t lo, hi;
      att_visible(j, pos, len, j->opts.causal, &lo, &hi);
      att_row_begin(j, R, i * j->G + gi,
                    (const char *)a->q + (t * a->q_stride_t + h * a->q_stride_h) * es, lo, hi);
      k0 = lo < k0 ? lo : k0, k1 = hi + 1 > k1 ? hi + 1 : k1;
    }
  att_paged_keys(j, R, b, g, 1, R->n, k0 > 0 ? k0 : 0, k1);
  for (int64_t i = 0; i < nq; i++)
    for (int64_t gi = 0; gi < j->G; gi++) {
      const int64_t t = t0 + i0 + i, h = att_head(j, g, gi);
      att_row_finish(j, R, i * j->G + gi,
                     (char *)a->o + (t * a->o_stride_t + h * a->o_stride_h) * es,
                     a->lse ? &a->lse[t * j->hq + h] : NULL);
    }
}

/* sdpa item (tile of queries of one batch entry, kv head) over the dense k/v. */
static void att_sdpa_item(const att_job *j, att_rows *R, int64_t item) {
  const kite_sdpa_args *a = j->sa;
  const int64_t *tile = j->tiles + item / j->hkv * 3, g = item % j->hkv;
  const int64_t b = tile[0], i0 = tile[1], nq = tile[2], es = cpu_esize(j->t);
  int64_t k0 = INT64_MAX, k1 = INT64_MIN;
  R->n = nq * j->G;
  for (int64_t i = i0; i < i0 + nq; i++)
    for (int64_t gi = 0; gi < j->G; gi++) {
      const int64_t h = att_head(j, g, gi), r = (i - i0) * j->G + gi;
      int64_t lo, hi;
      att_visible(j, i + a->sk - a->sq, a->sk, j->opts.causal, &lo, &hi);
      att_row_begin(j, R, r,
                    (const char *)a->q +
                        (b * a->q_stride[0] + h * a->q_stride[1] + i * a->q_stride[2]) * es,
                    lo, hi);
      R->mask[r] = b * a->mask_stride[0] + h * a->mask_stride[1] + i * a->mask_stride[2];
      k0 = lo < k0 ? lo : k0, k1 = hi + 1 > k1 ? hi + 1 : k1;
    }
  const char *k = (const char *)a->k + (b * a->k_stride[0] + g * a->k_stride[1]) * es;
  const char *v = (const char *)a->v + (b * a->v_stride[0] + g * a->v_stride[1]) * es;
  const int64_t ks = a->k_stride[2] * es, vs = a->v_stride[2] * es;
  for (int64_t t = k0 > 0 ? k0 : 0; t < k1; t += ATT_KB) {
    const int64_t n = k1 - t < ATT_KB ? k1 - t : ATT_KB;
    att_tile(j, R, 0, R->n, t, n, k + t * ks, ks, v + t * vs, vs, NULL, NULL);
  }
  for (int64_t i = i0; i < i0 + nq; i++)
    for (int64_t gi = 0; gi < j->G; gi++) {
      const int64_t h = att_head(j, g, gi);
      att_row_finish(j, R, (i - i0) * j->G + gi,
                     (char *)a->o +
                         (b * a->o_stride[0] + h * a->o_stride[1] + i * a->o_stride[2]) * es,
                     a->lse ? &a->lse[(b * j->hq + h) * a->sq + i] : NULL);
    }
}

/* One thread part: claims items until none is left. */
static void att_task(const void *job, int64_t begin, int64_t end, int part) {
  const att_job *j = job;
  att_rows R;
  att_rows_layout(j->scratch + (size_t)part * j->scratch_bytes, j->rows_max, j->Dp, &R);
  for (int64_t it; (it = (int64_t)atomic_fetch_add(j->next, 1)) < j->items;) j->item(j, &R, it);
}

/* Runs j->item over j->items with up to `parts` threads. */
static void att_run_items(att_job *j, int parts) {
  atomic_llong next = 0;
  j->next = &next;
  cpu_parallel_run(parts, parts, att_task, j);
}

/* The workspace: per-part scratch, then `extra` bytes (tiles or partials) at *extra_out. */
static kite_status att_workspace(kite_ctx *ctx, att_job *j, int parts, size_t extra,
                                 void **extra_out, const char *op) {
  j->scratch_bytes = att_rows_layout(NULL, j->rows_max, j->Dp, NULL);
  const size_t bytes = j->scratch_bytes * (size_t)parts + att_round(extra);
  void *ws;
  kite_status s = kite_ctx_workspace(ctx, bytes, &ws);
  if (s != KITE_OK) return s;
  j->scratch = ws;
  *extra_out = (char *)ws + j->scratch_bytes * (size_t)parts;
  return KITE_OK;
}

/* Elements a call touches, for cpu_parallel_parts; computed in double, as the product of valid
 * sizes can pass int64. */
static int64_t att_work(double elements) {
  return elements < 1e18 ? (int64_t)elements : (int64_t)1e18;
}

static void att_job_init(att_job *j, kite_dtype t, const kite_attn_opts *opts, int64_t hq,
                         int64_t hkv, int64_t D) {
  memset(j, 0, sizeof *j);
  j->t = t, j->opts = *opts, j->hq = hq, j->hkv = hkv, j->G = hq / hkv, j->D = D;
  j->Dp = (D + VL - 1) / VL * VL;
}

kite_status ATT_EXPORT(cpu_attn_paged_)(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_paged_attn_args *a = args;
  const bool prefill = a->op == KITE_OP_PAGED_PREFILL;
  const char *op = prefill ? "paged_prefill" : "paged_decode";
  if (!cpu_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cpu: dtype not supported", op);
  att_job j;
  att_job_init(&j, a->dtype, &a->opts, a->hq, a->hkv, a->head_dim);
  j.pa = a;
  const int threads = kite_ctx_num_threads(ctx);
  int64_t keys = 0; /* keys read per kv head, for the thread count */
  for (int64_t b = 0; b < a->batch; b++) keys += att_seq_len(a, b);
  const int64_t work =
      att_work(((double)keys + (double)a->tokens) * (double)(a->hkv * j.D * (prefill ? j.G : 2)));
  void *extra;
  kite_status s;

  if (!prefill) {
    /* Fewer sequences than about 16 per thread: split the keys into chunks of whole blocks, at
     * least 256 keys, merged afterwards. Many items per thread let the claiming even out ragged
     * lengths and threads that the OS preempts; a merge costs about one chunk row per head. */
    int64_t max_len = 0;
    for (int64_t b = 0; b < a->batch; b++)
      max_len = att_seq_len(a, b) > max_len ? att_seq_len(a, b) : max_len;
    j.splits = 1, j.chunk = max_len > 0 ? max_len : 1;
    if (threads > 1 && a->batch < 16 * threads && max_len > 256) {
      int64_t want = (16 * threads + a->batch - 1) / a->batch, chunk = (max_len + want - 1) / want;
      if (chunk < 256) chunk = 256;
      chunk = (chunk + a->block_size - 1) / a->block_size * a->block_size;
      j.chunk = chunk, j.splits = (max_len + chunk - 1) / chunk;
    }
    j.items = a->batch * j.splits, j.item = att_decode_item, j.rows_max = j.hq;
    const int parts = cpu_parallel_parts(ctx, j.items, work);
    const size_t partial = j.splits > 1 ? (size_t)j.items * (size_t)(j.hq * (j.Dp + 2)) * 4 : 0;
    if ((s = att_workspace(ctx, &j, parts, partial, &extra, op)) != KITE_OK) return s;
    j.partial = extra;
    att_run_items(&j, parts);
    if (j.splits > 1) {
      j.item = att_merge_item, j.items = a->batch;
      att_run_items(&j, cpu_parallel_parts(ctx, a->batch, (int64_t)(partial / 4)));
    }
    return KITE_OK;
  }

  const int32_t *cu = a->cu_q_lens;
  bool ok = cu[0] == 0 && cu[a->batch] == a->tokens;
  for (int64_t b = 0; ok && b < a->batch; b++) ok = cu[b] <= cu[b + 1];
  if (!ok)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "paged_prefill: cu_q_lens must start at 0, not decrease and end at "
                          "T = %lld",
                          (long long)a->tokens);
  const int64_t qt = j.G >= ATT_ROWS ? 1 : ATT_ROWS / j.G; /* queries per tile */
  int64_t ntiles = 0;
  for (int64_t b = 0; b < a->batch; b++) ntiles += (cu[b + 1] - cu[b] + qt - 1) / qt;
  j.items = ntiles * a->hkv, j.item = att_prefill_item, j.rows_max = qt * j.G;
  const int parts = cpu_parallel_parts(ctx, j.items, work);
  if ((s = att_workspace(ctx, &j, parts, (size_t)ntiles * 3 * 8, &extra, op)) != KITE_OK) return s;
  /* Tiles last-first: under causal the last queries of a sequence see the most keys, and
   * claiming them first evens out the threads' ends. */
  int64_t *tiles = extra, n = ntiles;
  for (int64_t b = 0; b < a->batch; b++)
    for (int64_t i0 = 0; i0 < cu[b + 1] - cu[b]; i0 += qt) {
      n--;
      tiles[n * 3] = b, tiles[n * 3 + 1] = i0;
      tiles[n * 3 + 2] = cu[b + 1] - cu[b] - i0 < qt ? cu[b + 1] - cu[b] - i0 : qt;
    }
  j.tiles = tiles;
  att_run_items(&j, parts);
  return KITE_OK;
}

kite_status ATT_EXPORT(cpu_attn_sdpa_)(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_sdpa_args *a = args;
  if (!cpu_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "sdpa: cpu: dtype not supported");
  att_job j;
  att_job_init(&j, a->dtype, &a->opts, a->hq, a->hkv, a->head_dim);
  j.sa = a;
  const int64_t qt = j.G >= ATT_ROWS ? 1 : ATT_ROWS / j.G;
  const int64_t per_b = (a->sq + qt - 1) / qt, ntiles = a->batch * per_b;
  j.items = ntiles * a->hkv, j.item = att_sdpa_item, j.rows_max = qt * j.G;
  const int parts = cpu_parallel_parts(
      ctx, j.items,
      att_work((double)a->batch * (double)a->hq * (double)a->sq * (double)a->sk * j.D));
  void *extra;
  kite_status s = att_workspace(ctx, &j, parts, (size_t)ntiles * 3 * 8, &extra, "sdpa");
  if (s != KITE_OK) return s;
  int64_t *tiles = extra, n = ntiles;
  for (int64_t b = 0; b < a->batch; b++)
    for (int64_t i0 = 0; i0 < a->sq; i0 += qt) {
      n--;
      tiles[n * 3] = b, tiles[n * 3 + 1] = i0;
      tiles[n * 3 + 2] = a->sq - i0 < qt ? a->sq - i0 : qt;
    }
  j.tiles = tiles;
  att_run_items(&j, parts);
  return KITE_OK;
}

/* store_kv: kv heads over threads, each writing its head's rows in token order, so that of two
 * tokens with one slot the later one stays (as in ref). Slots are checked before any write. */
typedef struct att_store_job {
  const kite_store_kv_args *a;
} att_store_job;

static void att_store_task(const void *job, int64_t begin, int64_t end, int part) {
  const kite_store_kv_args *a = ((const att_store_job *)job)->a;
  const int64_t es = cpu_esize(a->dtype), row = a->head_dim * es, bs = a->block_size;
  for (int64_t h = begin; h < end; h++)
    for (int64_t i = 0; i < a->tokens; i++) {
      const int64_t slot = a->slots[i];
      if (slot < 0) continue;
      const int64_t dst = ((slot / bs * a->hkv + h) * bs + slot % bs) * row;
      memcpy((char *)a->key_cache + dst,
             (const char *)a->k + (i * a->k_stride_t + h * a->k_stride_h) * es, (size_t)row);
      memcpy((char *)a->value_cache + dst,
             (const char *)a->v + (i * a->v_stride_t + h * a->v_stride_h) * es, (size_t)row);
    }
}

kite_status ATT_EXPORT(cpu_attn_store_kv_)(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_store_kv_args *a = args;
  if (!cpu_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "store_kv: cpu: dtype not supported");
  const int64_t capacity = a->num_blocks * a->block_size;
  for (int64_t i = 0; i < a->tokens; i++)
    if (a->slots[i] >= capacity)
      return kite_set_error(KITE_ERR_INVALID_ARG,
                            "store_kv: slots[%lld] = %d is past the cache's %lld slots",
                            (long long)i, (int)a->slots[i], (long long)capacity);
  const att_store_job job = {a};
  cpu_parallel_run(cpu_parallel_parts(ctx, a->hkv, 2 * a->tokens * a->hkv * a->head_dim), a->hkv,
                   att_store_task, &job);
  return KITE_OK;
}
