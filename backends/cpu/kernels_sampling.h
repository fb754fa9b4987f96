/*
 * argmax, sample and logprobs on the CPU, written once in plain C whose inner loops (conversion,
 * max, the Philox rounds of 16 counters at a time) the compiler vectorizes for each ISA file that
 * includes this with CPU_SAMPLING_ISA defined (cpu_sampling.c: portable; cpu_sampling_avx2.c,
 * cpu_sampling_avx512.c: compiled with their -m flags).
 *
 * sample, per row (kite.h's rules, decoded by kite/sampling.h):
 *   1. one pass: the max, its lowest index, NaN, and with top-k a histogram of the top 11 bits
 *      of an order-preserving key of each logit;
 *   2. top-k: the elements of the buckets at and above the one holding the k-th largest are
 *      gathered (a few thousand at most for real logits) and an exact radix select among them
 *      gives the k-th largest; top-p then walks that small set sorted, as ref does;
 *      top-p alone: a histogram of the probability mass per key bucket finds the bucket where
 *      the mass from the top crosses top_p, and only that bucket is sorted;
 *   3. the exponential race over the kept tokens: a token can only beat the best score S so far
 *      when z + 17 >= S (the Gumbel draw of a 23-bit uniform is below 16.7), and, with
 *      d = S - z > 0, only when (1 - u)(1 + d + d^2/2) < 1 (since -log u >= 1 - u and
 *      e^d >= 1 + d + d^2/2); the two logarithms run only for tokens that pass both, a few per
 *      row. Pruning never changes the winner: a pruned token's score is below S.
 * Rows are spread over threads; with fewer rows than threads each row's passes are cut into
 * column ranges over the threads.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "kite/dtype.h"
#include "kite/sampling.h"

#define SM_CAT2(a, b) a##_##b
#define SM_CAT(a, b) SM_CAT2(a, b)
#define SM(name) SM_CAT(name, CPU_SAMPLING_ISA)

#define SM_BLOCK 64     /* elements per race block: 16 Philox calls */
#define SM_BUCKETS 2048 /* top 11 bits of the key */
#define SM_PARTS 16     /* column ranges of one row at most */
#define SM_GMAX 17.0f   /* above any Gumbel draw of kite_philox_uniform, with rounding margin */

/* Order-preserving key of a float (NaN already replaced by -inf). */
static inline uint32_t SM(sm_key)(float f) {
  uint32_t u = kite_f32_bits(f);
  return u & 0x80000000u ? ~u : u | 0x80000000u;
}

/* Logits [i0, i1) of a row as floats into buf (NaN -> -inf); returns 1 when a NaN was seen. */
static int SM(sm_load)(kite_dtype t, const void *row, int64_t i0, int64_t n, float *buf) {
  int nan = 0;
  if (t == KITE_DTYPE_F32) {
    const float *x = (const float *)row + i0;
    for (int64_t j = 0; j < n; j++) {
      const float v = x[j];
      nan |= v != v;
      buf[j] = v != v ? -INFINITY : v;
    }
  } else if (t == KITE_DTYPE_BF16) {
    const uint16_t *x = (const uint16_t *)row + i0;
    for (int64_t j = 0; j < n; j++) {
      const float v = kite_bits_f32((uint32_t)x[j] << 16);
      nan |= v != v;
      buf[j] = v != v ? -INFINITY : v;
    }
  } else {
    const uint16_t *x = (const uint16_t *)row + i0;
    for (int64_t j = 0; j < n; j++) {
      const float v = kite_f16_to_f32(x[j]);
      nan |= v != v;
      buf[j] = v != v ? -INFINITY : v;
    }
  }
  return nan;
}

/* One column range's results. */
typedef struct SM(sm_part) {
  float max;
  int64_t arg;
  int nan;
  double mass[SM_BUCKETS];
  int64_t n;    /* candidates gathered into cand/cand_i at the range's start */
  float best_s; /* race */
  int64_t best_i;
} SM(sm_part);

/* A candidate token. */
typedef struct SM(sm_pair) {
  float v;
  int32_t i;
} SM(sm_pair);

/* One row in flight. */
typedef struct SM(sm_row) {
  const kite_sample_args *a;
  int64_t r, parts;
  const void *logits; /* the row */
  kite_sample_row p;
  float m;             /* max logit */
  int64_t amax;        /* its lowest index */
  uint32_t bucket;     /* top-k / top-p boundary bucket */
  float lo, zcut, s0;  /* race: kept logits >= lo and z >= zcut; initial best score */
  float *cand;         /* [vocab] scratch values */
  int32_t *cand_i;     /* [vocab] scratch indices */
  float *tmp;          /* [vocab] scratch values */
  SM(sm_pair) * pairs; /* [vocab] */
  float *buf;          /* [parts, SM_BUF] conversion buffers */
  SM(sm_part) * part;
  int phase;
} SM(sm_row);

enum { SM_SCAN, SM_MASS, SM_GATHER_BUCKET, SM_RACE };

#define SM_BUF 1024 /* floats converted at a time (a multiple of SM_BLOCK) */

static void SM(sm_range)(const SM(sm_row) * w, int64_t part, int64_t *i0, int64_t *i1) {
  const int64_t v = w->a->vocab;
  const int64_t per = (v / w->parts + SM_BLOCK - 1) / SM_BLOCK * SM_BLOCK;
  *i0 = part * per < v ? part * per : v;
  *i1 = *i0 + per < v ? *i0 + per : v;
  if (part == w->parts - 1) *i1 = v;
}

/* z of token i: (l - m) / t, the same f32 division on every backend. */
static inline float SM(sm_z)(const SM(sm_row) * w, float l) {
  return (l - w->m) / w->p.temperature;
}

/* The Philox words of tokens [4 q0, 4 q0 + 64): 16 generator calls side by side
 * (kite_philox4x32_10's arithmetic, lane by lane), in 32-bit vector lanes where the ISA has
 * them: each 32 x 32 -> 64-bit product is two even-lane multiplies, the odd lanes shifted down. */
#if defined(__AVX512F__)
#include <immintrin.h>
static inline void SM(sm_mulhilo)(__m512i c, __m512i mult, __m512i *hi, __m512i *lo) {
  const __m512i pe = _mm512_mul_epu32(c, mult);
  const __m512i po = _mm512_mul_epu32(_mm512_srli_epi64(c, 32), mult);
  *lo = _mm512_mask_blend_epi32(0xaaaa, pe, _mm512_slli_epi64(po, 32));
  *hi = _mm512_mask_blend_epi32(0xaaaa, _mm512_srli_epi64(pe, 32), po);
}
#elif defined(__AVX2__)
#include <immintrin.h>
static inline void SM(sm_mulhilo)(__m256i c, __m256i mult, __m256i *hi, __m256i *lo) {
  const __m256i pe = _mm256_mul_epu32(c, mult);
  const __m256i po = _mm256_mul_epu32(_mm256_srli_epi64(c, 32), mult);
  *lo = _mm256_blend_epi32(pe, _mm256_slli_epi64(po, 32), 0xaa);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xaa);
}
#endif

static void SM(sm_philox16)(const kite_sample_row *p, uint32_t q0, uint32_t *words) {
  uint32_t out[4][16];
#if defined(__AVX512F__)
  __m512i c0 =
      _mm512_add_epi32(_mm512_set1_epi32((int)q0),
                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  __m512i c1 = _mm512_set1_epi32((int)p->row), c2 = _mm512_set1_epi32((int)p->step0);
  __m512i c3 = _mm512_set1_epi32((int)p->step1);
  const __m512i m0 = _mm512_set1_epi32((int)KITE_PHILOX_M0),
                m1 = _mm512_set1_epi32((int)KITE_PHILOX_M1);
  uint32_t k0 = p->key0, k1 = p->key1;
  for (int r = 0; r < 10; r++) {
    __m512i h0, l0, h1, l1;
    SM(sm_mulhilo)(c0, m0, &h0, &l0);
    SM(sm_mulhilo)(c2, m1, &h1, &l1);
    c0 = _mm512_xor_si512(_mm512_xor_si512(h1, c1), _mm512_set1_epi32((int)k0));
    c2 = _mm512_xor_si512(_mm512_xor_si512(h0, c3), _mm512_set1_epi32((int)k1));
    c1 = l1, c3 = l0;
    k0 += KITE_PHILOX_W0, k1 += KITE_PHILOX_W1;
  }
  _mm512_storeu_si512(out[0], c0), _mm512_storeu_si512(out[1], c1);
  _mm512_storeu_si512(out[2], c2), _mm512_storeu_si512(out[3], c3);
#elif defined(__AVX2__)
  for (int h = 0; h < 2; h++) {
    __m256i c0 = _mm256_add_epi32(_mm256_set1_epi32((int)(q0 + 8u * (uint32_t)h)),
                                  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i c1 = _mm256_set1_epi32((int)p->row), c2 = _mm256_set1_epi32((int)p->step0);
    __m256i c3 = _mm256_set1_epi32((int)p->step1);
    const __m256i m0 = _mm256_set1_epi32((int)KITE_PHILOX_M0);
    const __m256i m1 = _mm256_set1_epi32((int)KITE_PHILOX_M1);
    uint32_t k0 = p->key0, k1 = p->key1;
    for (int r = 0; r < 10; r++) {
      __m256i h0, l0, h1, l1;
      SM(sm_mulhilo)(c0, m0, &h0, &l0);
      SM(sm_mulhilo)(c2, m1, &h1, &l1);
      c0 = _mm256_xor_si256(_mm256_xor_si256(h1, c1), _mm256_set1_epi32((int)k0));
      c2 = _mm256_xor_si256(_mm256_xor_si256(h0, c3), _mm256_set1_epi32((int)k1));
      c1 = l1, c3 = l0;
      k0 += KITE_PHILOX_W0, k1 += KITE_PHILOX_W1;
    }
    _mm256_storeu_si256((__m256i *)(out[0] + 8 * h), c0);
    _mm256_storeu_si256((__m256i *)(out[1] + 8 * h), c1);
    _mm256_storeu_si256((__m256i *)(out[2] + 8 * h), c2);
    _mm256_storeu_si256((__m256i *)(out[3] + 8 * h), c3);
  }
#else
  for (int l = 0; l < 16; l++) {
    const kite_philox4 o = kite_sample_words(p, q0 + (uint32_t)l);
    out[0][l] = o.v[0], out[1][l] = o.v[1], out[2][l] = o.v[2], out[3][l] = o.v[3];
  }
#endif
  for (int l = 0; l < 16; l++)
    for (int k = 0; k < 4; k++) words[4 * l + k] = out[k][l];
}

/* Race over buf[0, n) = tokens [i0, i0 + n), i0 a multiple of 4. Both prunes are computed for a
 * whole block without branches against the best score at the block's start (a lower bar than
 * the current one, so still safe); only survivors take the two logarithms. */
static void SM(sm_race_block)(const SM(sm_row) * w, const float *x, int64_t i0, int64_t n,
                              float *best_s, int64_t *best_i) {
  const float t = w->p.temperature, m = w->m, lo = w->lo, zcut = w->zcut;
  for (int64_t b = 0; b < n; b += SM_BLOCK) {
    const int64_t nb = n - b < SM_BLOCK ? n - b : SM_BLOCK;
    float z[SM_BLOCK];
    int any = 0;
    const float s = *best_s;
    for (int64_t j = 0; j < nb; j++) {
      const float zj = (x[b + j] - m) / t;
      z[j] = zj;
      any |= (x[b + j] >= lo) & (zj >= zcut) & (zj + SM_GMAX >= s);
    }
    if (!any) continue;
    uint32_t words[SM_BLOCK];
    SM(sm_philox16)(&w->p, (uint32_t)((i0 + b) >> 2), words);
    unsigned char live[SM_BLOCK];
    float u[SM_BLOCK];
    any = 0;
    for (int64_t j = 0; j < nb; j++) {
      const float uj = kite_philox_uniform(words[j]), zj = z[j], d = s - zj;
      u[j] = uj;
      const int keep = (d <= 0.0f) | ((1.0f - uj) * (1.0f + d + 0.5f * d * d) < 1.0001f);
      const int l = (x[b + j] >= lo) & (zj >= zcut) & (zj + SM_GMAX >= s) & keep;
      live[j] = (unsigned char)l;
      any |= l;
    }
    if (!any) continue;
    for (int64_t j = 0; j < nb; j++) {
      if (!live[j]) continue;
      const float sc = z[j] - logf(-logf(u[j]));
      const int64_t i = i0 + b + j;
      if (sc > *best_s || (sc == *best_s && i < *best_i)) *best_s = sc, *best_i = i;
    }
  }
}

/* The k-th largest of v[0, n) (k <= n) by radix select over the keys; v is reordered. */
static float SM(sm_kth)(float *v, int64_t n, int64_t k) {
  static const int shifts[] = {21, 10, 0};
  static const uint32_t masks[] = {0x7ffu, 0x7ffu, 0x3ffu};
  for (int lv = 0; lv < 3; lv++) {
    uint32_t hist[SM_BUCKETS] = {0};
    for (int64_t i = 0; i < n; i++) hist[(SM(sm_key)(v[i]) >> shifts[lv]) & masks[lv]]++;
    int64_t above = 0;
    uint32_t b = masks[lv];
    for (;; b--) {
      if (above + hist[b] >= k || b == 0) break;
      above += hist[b];
    }
    /* keep the elements of bucket b, the k - above-th largest of them is the answer */
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
      if (((SM(sm_key)(v[i]) >> shifts[lv]) & masks[lv]) == b) v[m++] = v[i];
    n = m;
    k -= above;
    if (n <= 0) break;
  }
  return n > 0 ? v[0] : -INFINITY;
}

/* Phase `w->phase` over column range `part` of the row. */
static void SM(sm_phase_part)(SM(sm_row) * w, int64_t part) {
  const kite_sample_args *a = w->a;
  SM(sm_part) *pt = &w->part[part];
  float *buf = w->buf + part * SM_BUF;
  int64_t i0, i1;
  SM(sm_range)(w, part, &i0, &i1);
  if (w->phase == SM_SCAN) {
    pt->max = -INFINITY, pt->arg = i0, pt->nan = 0, pt->n = 0;
    /* top-k: gather every logit >= tau, tau the k-th largest of what was gathered when the
     * gathered set last grew past `trigger` (so nothing of the row's top k is ever dropped) */
    const int64_t k = w->p.top_k;
    float tau = -INFINITY;
    int64_t trigger = 2 * k > 4096 ? 2 * k : 4096;
    float *cv = w->cand + i0;
    int32_t *ci = w->cand_i + i0;
    for (int64_t c = i0; c < i1; c += SM_BUF) {
      const int64_t n = i1 - c < SM_BUF ? i1 - c : SM_BUF;
      pt->nan |= SM(sm_load)(a->dtype, w->logits, c, n, buf);
      vf acc = vf_set1(-INFINITY);
      int64_t j = 0;
      for (; j + VL <= n; j += VL) acc = vf_max(acc, vf_load(KITE_DTYPE_F32, buf, j, VL));
      if (j < n)
        acc = vf_max(acc, vf_tail(vf_load(KITE_DTYPE_F32, buf, j, n - j), n - j, -INFINITY));
      const float mx = vf_reduce_max(acc);
      if (mx > pt->max) {
        j = 0;
        while (buf[j] != mx) j++;
        pt->max = mx, pt->arg = c + j;
      }
      if (k <= 0) continue;
      for (j = 0; j < n; j++)
        if (buf[j] >= tau) cv[pt->n] = buf[j], ci[pt->n] = (int32_t)(c + j), pt->n++;
      if (pt->n >= trigger && pt->n > k) {
        float *tmp = w->tmp + i0;
        memcpy(tmp, cv, (size_t)pt->n * sizeof *tmp);
        tau = SM(sm_kth)(tmp, pt->n, k);
        int64_t m = 0;
        for (j = 0; j < pt->n; j++)
          if (cv[j] >= tau) cv[m] = cv[j], ci[m] = ci[j], m++;
        pt->n = m;
        if (trigger < 2 * m) trigger = 2 * m;
      }
    }
    return;
  }
  if (w->phase == SM_RACE) {
    pt->best_s = w->s0, pt->best_i = w->amax;
    for (int64_t c = i0; c < i1; c += SM_BUF) {
      const int64_t n = i1 - c < SM_BUF ? i1 - c : SM_BUF;
      SM(sm_load)(a->dtype, w->logits, c, n, buf);
      SM(sm_race_block)(w, buf, c, n, &pt->best_s, &pt->best_i);
    }
    return;
  }
  /* gathers and the mass histogram */
  pt->n = 0;
  if (w->phase == SM_MASS) {
    memset(pt->mass, 0, sizeof pt->mass);
  }
  for (int64_t c = i0; c < i1; c += SM_BUF) {
    const int64_t n = i1 - c < SM_BUF ? i1 - c : SM_BUF;
    SM(sm_load)(a->dtype, w->logits, c, n, buf);
    for (int64_t j = 0; j < n; j++) {
      const uint32_t k = SM(sm_key)(buf[j]) >> 21;
      if (w->phase == SM_MASS) {
        pt->mass[k] += (double)expf(SM(sm_z)(w, buf[j]));
      } else if (k == w->bucket) {
        w->cand[i0 + pt->n] = buf[j];
        w->cand_i[i0 + pt->n] = (int32_t)(c + j);
        pt->n++;
      }
    }
  }
}

static void SM(sm_phase_task)(const void *job, int64_t begin, int64_t end, int slot) {
  for (int64_t p = begin; p < end; p++) SM(sm_phase_part)((SM(sm_row) *)job, p);
}

static void SM(sm_phase)(SM(sm_row) * w, int phase) {
  w->phase = phase;
  if (w->parts == 1)
    SM(sm_phase_part)(w, 0);
  else
    cpu_parallel_run((int)w->parts, w->parts, SM(sm_phase_task), w);
}

/* Moves every part's candidates to the front of cand / cand_i; returns their count. */
static int64_t SM(sm_compact)(SM(sm_row) * w) {
  int64_t n = 0;
  for (int64_t p = 0; p < w->parts; p++) {
    int64_t i0, i1;
    SM(sm_range)(w, p, &i0, &i1);
    memmove(w->cand + n, w->cand + i0, (size_t)w->part[p].n * sizeof *w->cand);
    memmove(w->cand_i + n, w->cand_i + i0, (size_t)w->part[p].n * sizeof *w->cand_i);
    n += w->part[p].n;
  }
  return n;
}

/* By value descending, index ascending. */
static int SM(sm_cmp)(const void *pa, const void *pb) {
  const SM(sm_pair) *a = pa, *b = pb;
  if (a->v != b->v) return a->v < b->v ? 1 : -1;
  return (a->i > b->i) - (a->i < b->i);
}

/* Top-p over pairs sorted descending: the smallest kept logit (groups of equal logits go
 * together; a group stays while the mass strictly above it is < target; the first stays). */
static float SM(sm_top_p_walk)(const SM(sm_row) * w, const SM(sm_pair) * s, int64_t n, double above,
                               double target, float lo) {
  int64_t j = 0;
  bool first = above == 0.0;
  while (j < n) {
    if (!first && !(above < target)) break;
    first = false;
    const float g = s[j].v;
    lo = g;
    while (j < n && s[j].v == g) above += (double)expf(SM(sm_z)(w, s[j++].v));
  }
  return lo;
}

/* The token of row r. Returns 1 when the row held NaN. */
static int SM(sm_row_token)(SM(sm_row) * w) {
  const kite_sample_args *a = w->a;
  SM(sm_phase)(w, SM_SCAN);
  int nan = 0;
  w->m = -INFINITY, w->amax = 0;
  for (int64_t p = 0; p < w->parts; p++) {
    nan |= w->part[p].nan;
    if (w->part[p].max > w->m) w->m = w->part[p].max, w->amax = w->part[p].arg;
  }
  if (w->m == -INFINITY) w->amax = 0;
  if (w->p.greedy || isinf(w->m)) {
    a->tokens[w->r] = (int32_t)w->amax;
    return nan;
  }
  w->lo = -INFINITY;
  w->zcut = w->p.min_p > 0.0f ? logf(w->p.min_p) : -INFINITY;
  const kite_sample_row *p = &w->p;
  SM(sm_pair) *pairs = w->pairs;
  int64_t npairs = 0;
  if (p->top_k > 0) {
    const int64_t n = SM(sm_compact)(w);
    /* the k-th largest, on a copy (cand_i keeps the order of cand) */
    memcpy(w->tmp, w->cand, (size_t)n * sizeof *w->tmp);
    w->lo = SM(sm_kth)(w->tmp, n, p->top_k);
    for (int64_t i = 0; i < n; i++)
      if (w->cand[i] >= w->lo) pairs[npairs++] = (SM(sm_pair)){w->cand[i], w->cand_i[i]};
    if (p->top_p < 1.0f) {
      qsort(pairs, (size_t)npairs, sizeof *pairs, SM(sm_cmp));
      double z = 0.0;
      for (int64_t i = 0; i < npairs; i++) z += (double)expf(SM(sm_z)(w, pairs[i].v));
      w->lo = SM(sm_top_p_walk)(w, pairs, npairs, 0.0, (double)p->top_p * z, w->lo);
    }
    /* race over the kept pairs (any order; ties go to the lower index) */
    float bs = -INFINITY;
    int64_t bi = w->amax;
    for (int64_t i = 0; i < npairs; i++) {
      const float x = pairs[i].v, z = SM(sm_z)(w, x);
      if (!(x >= w->lo && z >= w->zcut)) continue;
      const float u = kite_sample_uniform(p, pairs[i].i);
      const float sc = z - logf(-logf(u));
      if (sc > bs || (sc == bs && pairs[i].i < bi)) bs = sc, bi = pairs[i].i;
    }
    a->tokens[w->r] = (int32_t)bi;
    return nan;
  }
  if (p->top_p < 1.0f) {
    if (p->top_p <= 0.0f) {
      w->lo = w->m;
    } else {
      SM(sm_phase)(w, SM_MASS);
      double mass[SM_BUCKETS] = {0}, total = 0.0;
      for (int64_t q = 0; q < w->parts; q++)
        for (int b = 0; b < SM_BUCKETS; b++) mass[b] += w->part[q].mass[b];
      for (int b = 0; b < SM_BUCKETS; b++) total += mass[b];
      const double target = (double)p->top_p * total;
      double above = 0.0;
      uint32_t b = SM_BUCKETS - 1;
      for (; b > 0 && !(above + mass[b] >= target); b--) above += mass[b];
      w->bucket = b;
      SM(sm_phase)(w, SM_GATHER_BUCKET);
      const int64_t n = SM(sm_compact)(w);
      SM(sm_pair) *s = w->pairs;
      for (int64_t i = 0; i < n; i++) s[i] = (SM(sm_pair)){w->cand[i], w->cand_i[i]};
      qsort(s, (size_t)n, sizeof *s, SM(sm_cmp));
      w->lo = SM(sm_top_p_walk)(w, s, n, above, target, -INFINITY);
    }
  }
  /* the race starts from the max's own score, a strong one, so that pruning bites at once */
  const float u0 = kite_sample_uniform(p, w->amax);
  w->s0 = 0.0f - logf(-logf(u0));
  SM(sm_phase)(w, SM_RACE);
  float bs = w->s0;
  int64_t bi = w->amax;
  for (int64_t q = 0; q < w->parts; q++) {
    const SM(sm_part) *pt = &w->part[q];
    if (pt->best_s > bs || (pt->best_s == bs && pt->best_i < bi)) bs = pt->best_s, bi = pt->best_i;
  }
  a->tokens[w->r] = (int32_t)bi;
  return nan;
}

/* ---- the sample / argmax kernel ------------------------------------------------------------ */

typedef struct SM(sm_job) {
  const kite_sample_args *a;
  char *ws;
  size_t slot_bytes;
  int64_t parts;
  int64_t nan_row[SM_PARTS], bad_row[SM_PARTS]; /* per slot: first row with NaN / bad value */
  unsigned bad[SM_PARTS];
} SM(sm_job);

/* Scratch of one slot: parts sm_part, parts conversion buffers, then cand, cand_i, tmp, pairs. */
static size_t SM(sm_slot_bytes)(int64_t parts, int64_t v) {
  return (size_t)parts * (sizeof(SM(sm_part)) + SM_BUF * sizeof(float)) +
         (size_t)v * (3 * sizeof(float) + sizeof(SM(sm_pair))) + 64;
}

static void SM(sm_do_row)(SM(sm_job) * j, int64_t r, int slot) {
  const kite_sample_args *a = j->a;
  char *base = j->ws + (size_t)slot * j->slot_bytes;
  SM(sm_row) w;
  w.a = a, w.r = r, w.parts = j->parts;
  w.logits = (const char *)a->logits + (size_t)(r * a->logits_stride) * kite_dtype_size(a->dtype);
  w.p = kite_sample_row_get(a, r);
  w.part = (SM(sm_part) *)base;
  w.buf = (float *)(w.part + j->parts);
  w.cand = w.buf + j->parts * SM_BUF;
  w.cand_i = (int32_t *)(w.cand + a->vocab);
  w.tmp = (float *)(w.cand_i + a->vocab);
  w.pairs = (SM(sm_pair) *)(w.tmp + a->vocab);
  w.s0 = -INFINITY, w.amax = 0, w.m = -INFINITY;
  if (SM(sm_row_token)(&w) && j->nan_row[slot] < 0) j->nan_row[slot] = r;
  if (w.p.bad && j->bad_row[slot] < 0) j->bad_row[slot] = r, j->bad[slot] = w.p.bad;
}

static void SM(sm_rows_task)(const void *job, int64_t begin, int64_t end, int slot) {
  for (int64_t r = begin; r < end; r++) SM(sm_do_row)((SM(sm_job) *)job, r, slot);
}

kite_status SM(cpu_sample_run)(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status SM(cpu_sample_run)(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_sample_args *a = args;
  const char *op = a->op == KITE_OP_ARGMAX ? "argmax" : "sample";
  const int threads = kite_ctx_num_threads(ctx);
  const int slots = cpu_parallel_parts(ctx, a->rows, a->rows * a->vocab);
  /* fewer rows than threads: each row's passes go over column ranges on every thread */
  int64_t parts = 1;
  if (a->rows < threads && a->vocab >= 4 * SM_BUF) {
    parts = threads < SM_PARTS ? threads : SM_PARTS;
    if (parts > a->vocab / SM_BUF) parts = a->vocab / SM_BUF;
  }
  const int nslots = parts > 1 ? 1 : slots;
  SM(sm_job) j;
  j.a = a, j.parts = parts;
  j.slot_bytes = (SM(sm_slot_bytes)(parts, a->vocab) + 63) / 64 * 64;
  void *ws;
  kite_status s = kite_ctx_workspace(ctx, j.slot_bytes * (size_t)nslots + 64, &ws);
  if (s != KITE_OK) return s;
  j.ws = (char *)(((uintptr_t)ws + 63) / 64 * 64);
  for (int i = 0; i < SM_PARTS; i++) j.nan_row[i] = j.bad_row[i] = -1, j.bad[i] = 0;
  if (parts > 1 || nslots == 1)
    SM(sm_rows_task)(&j, 0, a->rows, 0);
  else
    cpu_parallel_run(nslots, a->rows, SM(sm_rows_task), &j);
  int64_t nan_row = -1, bad_row = -1;
  unsigned bad = 0;
  for (int i = 0; i < nslots && i < SM_PARTS; i++) {
    if (j.nan_row[i] >= 0 && (nan_row < 0 || j.nan_row[i] < nan_row)) nan_row = j.nan_row[i];
    if (j.bad_row[i] >= 0 && (bad_row < 0 || j.bad_row[i] < bad_row))
      bad_row = j.bad_row[i], bad = j.bad[i];
  }
  if (nan_row >= 0)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: logits: row %lld holds NaN", op,
                          (long long)nan_row);
  if (bad_row >= 0) {
    const char *what = bad & KITE_SAMPLE_BAD_TEMPERATURE ? "temperature is negative or not finite"
                       : bad & KITE_SAMPLE_BAD_TOP_P     ? "top_p is NaN"
                                                         : "min_p is NaN";
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: row %lld: %s", op, (long long)bad_row, what);
  }
  return KITE_OK;
}

/* ---- logprobs ------------------------------------------------------------------------------ */

typedef struct SM(lp_job) {
  const kite_logprobs_args *a;
  float *buf; /* [slots, SM_BUF] */
} SM(lp_job);

static void SM(lp_rows_task)(const void *job, int64_t begin, int64_t end, int slot) {
  const SM(lp_job) *j = job;
  const kite_logprobs_args *a = j->a;
  float *buf = j->buf + (size_t)slot * SM_BUF;
  const int64_t v = a->vocab, n = a->n;
  for (int64_t r = begin; r < end; r++) {
    const void *row =
        (const char *)a->logits + (size_t)(r * a->logits_stride) * kite_dtype_size(a->dtype);
    /* pass 1: max and the top n (insertion into a short sorted list; ties keep the lower id) */
    float top_v[KITE_LOGPROBS_MAX_N];
    int32_t top_i[KITE_LOGPROBS_MAX_N];
    int64_t have = 0;
    float m = -INFINITY;
    for (int64_t c = 0; c < v; c += SM_BUF) {
      const int64_t nb = v - c < SM_BUF ? v - c : SM_BUF;
      SM(sm_load)(a->dtype, row, c, nb, buf);
      float mx = -INFINITY;
      for (int64_t q = 0; q < nb; q++) mx = buf[q] > mx ? buf[q] : mx;
      m = mx > m ? mx : m;
      if (n == 0 || (have == n && !(mx > top_v[n - 1]))) continue;
      for (int64_t q = 0; q < nb; q++) {
        const float x = buf[q];
        if (have == n && !(x > top_v[n - 1])) continue;
        int64_t at = have < n ? have++ : n - 1;
        while (at > 0 && x > top_v[at - 1]) {
          top_v[at] = top_v[at - 1], top_i[at] = top_i[at - 1];
          at--;
        }
        top_v[at] = x, top_i[at] = (int32_t)(c + q);
      }
    }
    /* pass 2: log-sum-exp, chunk sums added in double */
    float lse = m;
    if (isfinite(m)) {
      double sum = 0.0;
      for (int64_t c = 0; c < v; c += SM_BUF) {
        const int64_t nb = v - c < SM_BUF ? v - c : SM_BUF;
        SM(sm_load)(a->dtype, row, c, nb, buf);
        const vf mm = vf_set1(-m);
        vf acc = vf_set1(0.0f);
        int64_t q = 0;
        for (; q + VL <= nb; q += VL)
          acc = vf_add(acc, vf_exp_nonpos(vf_add(vf_load(KITE_DTYPE_F32, buf, q, VL), mm)));
        if (q < nb)
          acc = vf_add(acc,
                       vf_tail(vf_exp_nonpos(vf_add(vf_load(KITE_DTYPE_F32, buf, q, nb - q), mm)),
                               nb - q, 0.0f));
        sum += (double)vf_reduce_add(acc);
      }
      lse = (float)((double)m + log(sum));
    }
    if (a->tokens) {
      const int32_t t = a->tokens[r];
      a->token_logprobs[r] = t >= 0 && t < v ? kite_load_f32(a->dtype, row, t) - lse : NAN;
      if (t >= 0 && t < v && isnan(kite_load_f32(a->dtype, row, t)))
        a->token_logprobs[r] = -INFINITY - lse;
    }
    for (int64_t q = 0; q < n; q++) {
      a->top_ids[r * a->top_ids_stride + q] = top_i[q];
      a->top_logprobs[r * a->top_logprobs_stride + q] = top_v[q] - lse;
    }
  }
}

kite_status SM(cpu_logprobs_run)(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status SM(cpu_logprobs_run)(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_logprobs_args *a = args;
  const int slots = cpu_parallel_parts(ctx, a->rows, a->rows * a->vocab);
  void *ws;
  kite_status s = kite_ctx_workspace(ctx, (size_t)slots * SM_BUF * sizeof(float), &ws);
  if (s != KITE_OK) return s;
  SM(lp_job) j = {a, ws};
  cpu_parallel_run(slots, a->rows, SM(lp_rows_task), &j);
  return KITE_OK;
}
