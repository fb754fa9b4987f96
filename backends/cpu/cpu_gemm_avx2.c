/*
 * GEMM-family kernels on AVX2 + FMA + F16C (compiled with -mavx2 -mfma -mf16c; registered with
 * those feature bits, so they only run where CPUID reports them).
 *
 * linear, y[M, N] = x[M, K] w[N, K]^T + bias, takes one of two paths:
 *  - few rows (M <= GEMV_MAX_M, decode): the weights are streamed once from their own rows; each
 *    block of 6 weight rows meets every x row (converted to f32 once) while it sits in L1/L2, so
 *    the cost is reading the weight bytes: bandwidth-bound, as it must be.
 *  - otherwise a packed GEMM: a KC x NC block of w^T is packed into 16-column panels of f32
 *    (bf16/f16/fp8 converted there), an MC x KC block of x into 6-row panels, and a 6x16
 *    micro-kernel (12 ymm accumulators, 2 loads + 6 broadcasts per 12 FMAs) walks them, the
 *    w panel in L1 and the x block in L2.
 * int8 linear_quant packs both sides as pairs of int16 (exact for every int8 value, -128
 * included) and uses VPMADDWD: 16 multiply-adds per instruction into int32, twice the f32 FMA.
 * Threads split N (or M when N is narrow) into contiguous ranges; each packs its own panels.
 * Partial sums live in y when y is f32, else in an f32/int32 workspace that the epilogue rounds
 * once into y (with bias and scales) while the block is still in cache.
 *
 * fused_moe groups the (token, expert) pairs by expert and runs each expert's two GEMMs over its
 * gathered rows (the packing reads rows through an index list), not one GEMV per token.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vec_avx2.h"
#include "cpu_gemm.h"
#include "kite/dtype.h"

#define MR 6
#define NR 16
#define KC 256  /* f32 depth of one packed block: a 16 KB w panel stays in L1 */
#define KC2 256 /* int8: int16 pairs per block (512 values) */
#define MC 144  /* x rows per packed block (multiple of MR): 144 KB in L2 */
#define NC 1024 /* w rows per packed block (multiple of NR) */
#define GEMV_MAX_M CPU_GEMV_MAX_M
#define GEMV_NB 6   /* weight rows per GEMV block */
#define GEMV_MB 4   /* most x rows per GEMV tile */
#define GEMV_PAD 16 /* floats added to xf's row stride: rows off 4 KB multiples (L1 sets) */
#define ALIGN 64

#define INLINE static inline __attribute__((always_inline))
#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* ---- element access ------------------------------------------------------------------------ */
static inline int64_t esize(kite_dtype t) {
  switch (t) {
  case KITE_DTYPE_F32:
  case KITE_DTYPE_I32:
    return 4;
  case KITE_DTYPE_F16:
  case KITE_DTYPE_BF16:
    return 2;
  default:
    return 1;
  }
}

/* A row-major source operand: row i is at p + idx[i] * ld elements (idx NULL: row i). */
typedef struct src {
  const void *p;
  int64_t ld;
  kite_dtype t;
  const int32_t *idx;
} src;

static inline const char *src_row(const src *s, int64_t i) {
  const int64_t r = s->idx ? s->idx[i] : i;
  return (const char *)s->p + r * s->ld * esize(s->t);
}

/* e4m3 codes to f32: the 7 magnitude bits shifted into an f32 exponent/mantissa read as a float
 * 2^120 too small (subnormals included, exactly), then NaN and the sign put back. */
INLINE vf fp8x8(const void *p) {
  const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
  const __m256i mag = _mm256_and_si256(v, _mm256_set1_epi32(0x7f));
  vf f = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(mag, 20)), _mm256_set1_ps(0x1p120f));
  const vf nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f)));
  f = _mm256_blendv_ps(f, _mm256_set1_ps(NAN), nan);
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x80)), 24);
  return _mm256_or_ps(f, _mm256_castsi256_ps(sign));
}

/* 8 elements of any input type as f32. */
INLINE vf load8(kite_dtype t, const void *p) {
  switch (t) {
  case KITE_DTYPE_I8:
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
  case KITE_DTYPE_FP8_E4M3:
    return fp8x8(p);
  default:
    return avx2_load8(t, p);
  }
}

static inline float load1(kite_dtype t, const void *p, int64_t i) {
  switch (t) {
  case KITE_DTYPE_I8:
    return (float)((const int8_t *)p)[i];
  case KITE_DTYPE_FP8_E4M3:
    return kite_fp8_e4m3_to_f32(((const uint8_t *)p)[i]);
  default:
    return kite_load_f32(t, p, i);
  }
}

/* The first n < 8 elements (the rest 0). */
INLINE vf load_part(kite_dtype t, const void *p, int64_t n) {
  char buf[32] = {0};
  memcpy(buf, p, (size_t)(n * esize(t)));
  return load8(t, buf);
}

/* In-register 8x8 transpose: r[i] becomes column i. */
INLINE void transpose8(vf r[8]) {
  const vf t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const vf t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const vf t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const vf t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const vf s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const vf s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const vf s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const vf s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* ---- packing --------------------------------------------------------------------------------
 * f32 panels: bp[k * NR + j] = w[n0 + j][k0 + k], ap[k * MR + r] = x[m0 + r][k0 + k]; rows past
 * the matrix are zeros so the micro-kernel never branches. int8 panels hold int32 words of two
 * int16: (v[2p], v[2p + 1]) for pair p, a zero completing an odd depth. */
static void pack_b_f32(const src *b, int64_t n0, int64_t nr, int64_t k0, int64_t kc, float *bp) {
  const int64_t es = esize(b->t);
  for (int h = 0; h < NR / 8; h++) {
    const char *row[8];
    int have = 0;
    for (int j = 0; j < 8; j++) {
      row[j] = h * 8 + j < nr ? src_row(b, n0 + h * 8 + j) + k0 * es : NULL;
      have += row[j] != NULL;
    }
    int64_t k = 0;
    if (have == 8) {
      for (; k + 8 <= kc; k += 8) {
        vf r[8];
        for (int j = 0; j < 8; j++) r[j] = load8(b->t, row[j] + k * es);
        transpose8(r);
        for (int i = 0; i < 8; i++) _mm256_store_ps(bp + (k + i) * NR + h * 8, r[i]);
      }
    }
    for (; k < kc; k++)
      for (int j = 0; j < 8; j++) bp[k * NR + h * 8 + j] = row[j] ? load1(b->t, row[j], k) : 0.0f;
  }
}

static void pack_a_f32(const src *a, int64_t m0, int64_t mr, int64_t k0, int64_t kc, float *ap) {
  const int64_t es = esize(a->t);
  const char *row[MR];
  for (int r = 0; r < MR; r++) row[r] = r < mr ? src_row(a, m0 + r) + k0 * es : NULL;
  int64_t k = 0;
  if (mr == MR) {
    /* 8 k at a time: transpose 6 rows (+2 zero rows), store each column of 8 over the slot of 6;
     * the 2 extra floats land where the next store (or the next panel) writes, and past the
     * last panel in the buffer's slack */
    for (; k + 8 <= kc; k += 8) {
      vf r[8];
      for (int i = 0; i < MR; i++) r[i] = load8(a->t, row[i] + k * es);
      r[6] = r[7] = _mm256_setzero_ps();
      transpose8(r);
      for (int i = 0; i < 8; i++) _mm256_storeu_ps(ap + (k + i) * MR, r[i]);
    }
  }
  for (; k + 8 <= kc; k += 8) {
    float tmp[MR][8];
    for (int r = 0; r < MR; r++)
      _mm256_storeu_ps(tmp[r], row[r] ? load8(a->t, row[r] + k * es) : _mm256_setzero_ps());
    for (int i = 0; i < 8; i++)
      for (int r = 0; r < MR; r++) ap[(k + i) * MR + r] = tmp[r][i];
  }
  for (; k < kc; k++)
    for (int r = 0; r < MR; r++) ap[k * MR + r] = row[r] ? load1(a->t, row[r], k) : 0.0f;
}

static inline uint32_t i16_pair(const int8_t *v, int64_t k, int64_t kc) {
  const uint16_t lo = (uint16_t)(int16_t)v[k];
  const uint16_t hi = k + 1 < kc ? (uint16_t)(int16_t)v[k + 1] : 0;
  return (uint32_t)lo | (uint32_t)hi << 16;
}

/* int8 panels over pairs p < ceil(kc / 2): bp[p * NR + j], ap[p * MR + r]. */
static void pack_b_i8(const src *b, int64_t n0, int64_t nr, int64_t k0, int64_t kc, float *out) {
  uint32_t *bp = (uint32_t *)out;
  const int64_t kp = (kc + 1) / 2;
  for (int j = 0; j < NR; j++) {
    if (j >= nr) {
      for (int64_t p = 0; p < kp; p++) bp[p * NR + j] = 0;
      continue;
    }
    const int8_t *w = (const int8_t *)src_row(b, n0 + j) + k0;
    for (int64_t p = 0; p < kp; p++) bp[p * NR + j] = i16_pair(w, 2 * p, kc);
  }
}

static void pack_a_i8(const src *a, int64_t m0, int64_t mr, int64_t k0, int64_t kc, float *out) {
  uint32_t *ap = (uint32_t *)out;
  const int64_t kp = (kc + 1) / 2;
  for (int r = 0; r < MR; r++) {
    if (r >= mr) {
      for (int64_t p = 0; p < kp; p++) ap[p * MR + r] = 0;
      continue;
    }
    const int8_t *x = (const int8_t *)src_row(a, m0 + r) + k0;
    for (int64_t p = 0; p < kp; p++) ap[p * MR + r] = i16_pair(x, 2 * p, kc);
  }
}

/* ---- micro-kernels: c[MR x NR] (=|+=) a-panel . b-panel over kc steps ------------------------ */
/* Writes the 12 accumulators to c (row stride ldc), adding what is there when acc; a tile at the
 * matrix edge (mr < MR or nr < NR) goes through a local buffer. */
#define STORE_TILE(T, LOADU, STOREU, ADD, ZERO)                                                    \
  do {                                                                                             \
    if (mr == MR && nr == NR) {                                                                    \
      for (int r = 0; r < MR; r++) {                                                               \
        T *cr = c + r * ldc;                                                                       \
        if (acc) {                                                                                 \
          v[r][0] = ADD(v[r][0], LOADU(cr));                                                       \
          v[r][1] = ADD(v[r][1], LOADU(cr + 8));                                                   \
        }                                                                                          \
        STOREU(cr, v[r][0]);                                                                       \
        STOREU(cr + 8, v[r][1]);                                                                   \
      }                                                                                            \
    } else {                                                                                       \
      T tile[MR][NR];                                                                              \
      for (int r = 0; r < MR; r++) {                                                               \
        STOREU(tile[r], v[r][0]);                                                                  \
        STOREU(tile[r] + 8, v[r][1]);                                                              \
      }                                                                                            \
      for (int64_t r = 0; r < mr; r++)                                                             \
        for (int64_t j = 0; j < nr; j++)                                                           \
          c[r * ldc + j] = (acc ? c[r * ldc + j] : ZERO) + tile[r][j];                             \
    }                                                                                              \
  } while (0)

/* The mr rows of a tile's C (NR 4-byte elements each, ldc apart) lie out of L2 by the time a
 * micro-kernel comes back to them (the C block of a thread is MC x NC x 4 = 576 KB): fetched at
 * the kernel's start, under its k steps, not as 12 cache misses on the way out. */
INLINE void prefetch_c_tile(const void *c, int64_t ldc, int64_t mr) {
  for (int64_t r = 0; r < mr; r++) {
    _mm_prefetch((const char *)c + r * ldc * 4, _MM_HINT_T0);
    _mm_prefetch((const char *)c + (r * ldc + NR - 1) * 4, _MM_HINT_T0);
  }
}

static void kernel_f32(int64_t kc, const float *a, const float *b, void *cv, int64_t ldc, int acc,
                       int64_t mr, int64_t nr) {
  float *c = cv;
  prefetch_c_tile(c, ldc, mr);
  vf c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  vf c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  /* unrolled by 4: 14% faster on the f32 2048^3 case on Zen 3 (loop overhead, scheduling) */
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; k++) {
    const vf b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    vf x = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(x, b0, c00);
    c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(x, b0, c10);
    c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(x, b0, c20);
    c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(x, b0, c30);
    c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(x, b0, c40);
    c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(x, b0, c50);
    c51 = _mm256_fmadd_ps(x, b1, c51);
    a += MR;
    b += NR;
  }
  vf v[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  STORE_TILE(float, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_add_ps, 0.0f);
}

#define LOADU_I(p) _mm256_loadu_si256((const __m256i *)(p))
#define STOREU_I(p, x) _mm256_storeu_si256((__m256i *)(p), x)

static void kernel_i8(int64_t kp, const float *av, const float *bv, void *cv, int64_t ldc, int acc,
                      int64_t mr, int64_t nr) {
  const int32_t *a = (const int32_t *)av, *b = (const int32_t *)bv;
  int32_t *c = cv;
  prefetch_c_tile(c, ldc, mr);
  __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256i c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
#pragma GCC unroll 4
  for (int64_t p = 0; p < kp; p++) {
    const __m256i b0 = _mm256_load_si256((const __m256i *)b);
    const __m256i b1 = _mm256_load_si256((const __m256i *)(b + 8));
    __m256i x = _mm256_set1_epi32(a[0]);
    c00 = _mm256_add_epi32(c00, _mm256_madd_epi16(x, b0));
    c01 = _mm256_add_epi32(c01, _mm256_madd_epi16(x, b1));
    x = _mm256_set1_epi32(a[1]);
    c10 = _mm256_add_epi32(c10, _mm256_madd_epi16(x, b0));
    c11 = _mm256_add_epi32(c11, _mm256_madd_epi16(x, b1));
    x = _mm256_set1_epi32(a[2]);
    c20 = _mm256_add_epi32(c20, _mm256_madd_epi16(x, b0));
    c21 = _mm256_add_epi32(c21, _mm256_madd_epi16(x, b1));
    x = _mm256_set1_epi32(a[3]);
    c30 = _mm256_add_epi32(c30, _mm256_madd_epi16(x, b0));
    c31 = _mm256_add_epi32(c31, _mm256_madd_epi16(x, b1));
    x = _mm256_set1_epi32(a[4]);
    c40 = _mm256_add_epi32(c40, _mm256_madd_epi16(x, b0));
    c41 = _mm256_add_epi32(c41, _mm256_madd_epi16(x, b1));
    x = _mm256_set1_epi32(a[5]);
    c50 = _mm256_add_epi32(c50, _mm256_madd_epi16(x, b0));
    c51 = _mm256_add_epi32(c51, _mm256_madd_epi16(x, b1));
    a += MR;
    b += NR;
  }
  __m256i v[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  STORE_TILE(int32_t, LOADU_I, STOREU_I, _mm256_add_epi32, 0);
}

/* ---- the packed GEMM driver ------------------------------------------------------------------ */
typedef enum epilogue {
  EPI_NONE,  /* c is the result (f32) */
  EPI_BIAS,  /* c is y (f32): add bias */
  EPI_STORE, /* y (dtype) = c (+ f32 of int32) * row_scale * col_scale + bias */
} epilogue;

typedef struct gemm {
  int64_t m, n, k;
  src a, b; /* a: [m, k] rows, b: [n, k] rows */
  bool i8;  /* int16-pair panels, int32 accumulators */
  void *c;  /* accumulators [m, n], row stride ldc: f32 (int32 when i8) */
  int64_t ldc;
  epilogue epi;
  kite_dtype yt; /* EPI_STORE: y's dtype; bias has it too (EPI_BIAS: f32) */
  void *y;
  int64_t ldy;
  const void *bias;
  const float *row_scale, *col_scale; /* NULL = 1 */
  /* scheduling: item i of `items` covers [i * span, (i + 1) * span) of M or N */
  bool split_n;
  int64_t span;
  char *scratch; /* per part: packed a block then packed b block */
  size_t part_bytes;
} gemm;

#define AP_BYTES ((size_t)MC * KC * 4 + ALIGN) /* + slack for pack_a_f32's overhang */
#define BP_BYTES ((size_t)NC * KC * 4)
#define PART_BYTES (AP_BYTES + BP_BYTES)

/* Rows [r0, r1) x cols [c0, c1) of the accumulators are final: bias, scales, rounding. */
static void epilogue_block(const gemm *g, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  if (g->epi == EPI_NONE || (g->epi == EPI_BIAS && !g->bias)) return;
  const int64_t n = c1 - c0;
  for (int64_t r = r0; r < r1; r++) {
    if (g->epi == EPI_BIAS) {
      float *y = (float *)g->c + r * g->ldc + c0;
      const float *bias = (const float *)g->bias + c0;
      int64_t j = 0;
      for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(y + j, _mm256_add_ps(_mm256_loadu_ps(y + j), _mm256_loadu_ps(bias + j)));
      for (; j < n; j++) y[j] += bias[j];
      continue;
    }
    const vf rs = _mm256_set1_ps(g->row_scale ? g->row_scale[r] : 1.0f);
    const char *crow = (const char *)g->c + (r * g->ldc + c0) * 4;
    for (int64_t j = 0; j < n; j += 8) {
      const int64_t m = MIN(8, n - j);
      vf v;
      if (!g->i8) {
        v = vf_load(KITE_DTYPE_F32, crow, j, m);
      } else {
        int32_t buf[8] = {0};
        memcpy(buf, crow + j * 4, (size_t)m * 4);
        v = _mm256_cvtepi32_ps(LOADU_I(buf));
      }
      if (g->row_scale) v = _mm256_mul_ps(v, rs);
      if (g->col_scale) v = _mm256_mul_ps(v, vf_load(KITE_DTYPE_F32, g->col_scale, c0 + j, m));
      if (g->bias) v = _mm256_add_ps(v, vf_load(g->yt, g->bias, c0 + j, m));
      vf_store(g->yt, g->y, r * g->ldy + c0 + j, v, m, false);
    }
  }
}

static void gemm_block(const gemm *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, float *ap,
                       float *bp) {
  const int64_t kcmax = g->i8 ? 2 * KC2 : KC;
  void (*pack_a)(const src *, int64_t, int64_t, int64_t, int64_t, float *) =
      g->i8 ? pack_a_i8 : pack_a_f32;
  void (*pack_b)(const src *, int64_t, int64_t, int64_t, int64_t, float *) =
      g->i8 ? pack_b_i8 : pack_b_f32;
  void (*kernel)(int64_t, const float *, const float *, void *, int64_t, int, int64_t, int64_t) =
      g->i8 ? kernel_i8 : kernel_f32;
  for (int64_t jc = n0; jc < n1; jc += NC) {
    const int64_t nc = MIN(NC, n1 - jc);
    for (int64_t pc = 0; pc < g->k; pc += kcmax) {
      const int64_t kc = MIN(kcmax, g->k - pc);
      const int64_t steps = g->i8 ? (kc + 1) / 2 : kc; /* panel rows: k values or int16 pairs */
      const bool last = pc + kc >= g->k;
      if (m1 - m0 <= MC) {
        /* one x block (MoE experts, short prefill): pack each w panel right before its kernels,
         * while it is in L1, rather than the whole NC x KC block first (1 MB of f32: past L2
         * by the time the kernels reach its later panels) */
        const int64_t mc = m1 - m0;
        for (int64_t ir = 0; ir < mc; ir += MR)
          pack_a(&g->a, m0 + ir, MIN(MR, mc - ir), pc, kc, ap + ir * steps);
        for (int64_t jr = 0; jr < nc; jr += NR) {
          pack_b(&g->b, jc + jr, MIN(NR, nc - jr), pc, kc, bp);
          for (int64_t ir = 0; ir < mc; ir += MR)
            kernel(steps, ap + ir * steps, bp, (char *)g->c + ((m0 + ir) * g->ldc + jc + jr) * 4,
                   g->ldc, pc > 0, MIN(MR, mc - ir), MIN(NR, nc - jr));
        }
        if (last) epilogue_block(g, m0, m1, jc, jc + nc);
        continue;
      }
      for (int64_t jr = 0; jr < nc; jr += NR)
        pack_b(&g->b, jc + jr, MIN(NR, nc - jr), pc, kc, bp + jr * steps);
      for (int64_t ic = m0; ic < m1; ic += MC) {
        const int64_t mc = MIN(MC, m1 - ic);
        for (int64_t ir = 0; ir < mc; ir += MR)
          pack_a(&g->a, ic + ir, MIN(MR, mc - ir), pc, kc, ap + ir * steps);
        for (int64_t jr = 0; jr < nc; jr += NR)
          for (int64_t ir = 0; ir < mc; ir += MR)
            kernel(steps, ap + ir * steps, bp + jr * steps,
                   (char *)g->c + ((ic + ir) * g->ldc + jc + jr) * 4, g->ldc, pc > 0,
                   MIN(MR, mc - ir), MIN(NR, nc - jr));
        if (last) epilogue_block(g, ic, ic + mc, jc, jc + nc);
      }
    }
  }
}

static void gemm_task(const void *job, int64_t begin, int64_t end, int part) {
  const gemm *g = job;
  float *ap = (float *)(g->scratch + (size_t)part * g->part_bytes);
  float *bp = (float *)((char *)ap + AP_BYTES);
  const int64_t dim = g->split_n ? g->n : g->m;
  const int64_t lo = begin * g->span, hi = MIN(end * g->span, dim);
  if (lo >= hi) return;
  if (g->split_n)
    gemm_block(g, 0, g->m, lo, hi, ap, bp);
  else
    gemm_block(g, lo, hi, 0, g->n, ap, bp);
}

/* Scratch bytes gemm_run needs for `parts` threads. */
static size_t gemm_scratch_bytes(int parts) {
  return (size_t)parts * PART_BYTES;
}

/* Runs g over `parts` threads; g->k >= 1. scratch: gemm_scratch_bytes(parts), 64-byte aligned. */
static void gemm_run(gemm *g, int parts, char *scratch) {
  const cpu_gemm_plan p = cpu_gemm_plan_make(parts, g->m, g->n, MR, NR);
  g->split_n = p.split_n;
  g->span = p.span;
  g->scratch = scratch;
  g->part_bytes = PART_BYTES;
  cpu_parallel_run(p.parts, p.items, gemm_task, g);
}

/* ---- GEMV: few rows against streamed weights -------------------------------------------------
 * xf holds the x rows as f32 (row stride ldx); w rows are read once, GEMV_NB at a time, and each
 * such block meets every x row while it sits in L1/L2.
 * psum[i * GEMV_NB + j]: x row i . w row j, 8 lanes, reduced across lanes once at the end. */
typedef struct gemv {
  int64_t m, n, k;
  const float *xf;
  int64_t ldx;
  src w;
  kite_dtype yt; /* y (and bias) dtype, or F32 with y an f32 result buffer */
  void *y;
  int64_t ldy;
  const void *bias;
} gemv;

/* x rows [mb] . weight rows [nb] (compile-time constants at every call, mb * nb <= 12), into
 * psum rows of stride GEMV_NB. With mb <= 2 each weight vector is converted and used at once
 * (12 accumulators + 2 x + 1 w registers); with more rows the nb weight vectors are converted
 * first and each x row is loaded once (12 + 3 + 1). */
INLINE void gemv_tile(kite_dtype t, int mb, int nb, const float *const *x, const char *const *w,
                      int64_t k1, vf *psum) {
  vf acc[GEMV_MB][GEMV_NB];
  for (int i = 0; i < mb; i++)
    for (int j = 0; j < nb; j++) acc[i][j] = _mm256_setzero_ps();
  const int64_t es = esize(t);
  int64_t k = 0;
#pragma GCC unroll 2
  for (; k + 8 <= k1; k += 8) {
    if (mb <= 2) {
      vf xv[2];
      for (int i = 0; i < mb; i++) xv[i] = _mm256_loadu_ps(x[i] + k);
      for (int j = 0; j < nb; j++) {
        const vf wv = load8(t, w[j] + k * es);
        for (int i = 0; i < mb; i++) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
      }
    } else {
      vf wv[GEMV_NB];
      for (int j = 0; j < nb; j++) wv[j] = load8(t, w[j] + k * es);
      for (int i = 0; i < mb; i++) {
        const vf xv = _mm256_loadu_ps(x[i] + k);
        for (int j = 0; j < nb; j++) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
      }
    }
  }
  if (k < k1) {
    const int64_t r = k1 - k;
    vf wv[GEMV_NB];
    for (int j = 0; j < nb; j++) wv[j] = load_part(t, w[j] + k * es, r);
    for (int i = 0; i < mb; i++) {
      const vf xv = load_part(KITE_DTYPE_F32, x[i] + k, r);
      for (int j = 0; j < nb; j++) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < mb; i++)
    for (int j = 0; j < nb; j++)
      psum[i * GEMV_NB + j] = _mm256_add_ps(psum[i * GEMV_NB + j], acc[i][j]);
}

/* A block of GEMV_NB = 6 weight rows against all m x rows.
 * m <= 2: one tile of m x 6, each weight vector converted (bf16/f16 -> f32) once.
 * m > 2: tiles of 4 x rows x 3 weight rows, so each weight vector is converted once per 4 x rows
 * (it was once per 2 with 2 x 4 tiles) and, for m <= 4, the block is read in a single pass: with
 * two passes the second one runs from cache while nothing streams from DRAM. */
INLINE void gemv_tiles(kite_dtype t, int64_t m, const float *xf, int64_t ldx, const char *const *w,
                       int64_t k1, vf *psum) {
  if (m <= 2) {
    const float *x[2] = {xf, xf + (m - 1) * ldx};
    if (m == 2)
      gemv_tile(t, 2, GEMV_NB, x, w, k1, psum);
    else
      gemv_tile(t, 1, GEMV_NB, x, w, k1, psum);
    return;
  }
  for (int64_t i0 = 0; i0 < m; i0 += GEMV_MB) {
    const float *x[GEMV_MB];
    for (int i = 0; i < GEMV_MB; i++) x[i] = xf + MIN(i0 + i, m - 1) * ldx;
    for (int j0 = 0; j0 < GEMV_NB; j0 += 3) {
      vf *ps = psum + i0 * GEMV_NB + j0;
      switch (MIN(GEMV_MB, m - i0)) {
      case 4:
        gemv_tile(t, 4, 3, x, w + j0, k1, ps);
        break;
      case 3:
        gemv_tile(t, 3, 3, x, w + j0, k1, ps);
        break;
      case 2:
        gemv_tile(t, 2, 3, x, w + j0, k1, ps);
        break;
      default:
        gemv_tile(t, 1, 3, x, w + j0, k1, ps);
        break;
      }
    }
  }
}

static void gemv_task(const void *job, int64_t begin, int64_t end, int part) {
  const gemv *g = job;
  vf psum[GEMV_MAX_M * GEMV_NB];
  for (int64_t blk = begin; blk < end; blk++) {
    const int64_t n0 = blk * GEMV_NB, nb = MIN(GEMV_NB, g->n - n0);
    const char *w[GEMV_NB];
    for (int j = 0; j < GEMV_NB; j++) w[j] = src_row(&g->w, n0 + (j < nb ? j : 0));
    for (int64_t i = 0; i < g->m * GEMV_NB; i++) psum[i] = _mm256_setzero_ps();
    switch (g->w.t) {
    case KITE_DTYPE_BF16:
      gemv_tiles(KITE_DTYPE_BF16, g->m, g->xf, g->ldx, w, g->k, psum);
      break;
    case KITE_DTYPE_F16:
      gemv_tiles(KITE_DTYPE_F16, g->m, g->xf, g->ldx, w, g->k, psum);
      break;
    default:
      gemv_tiles(KITE_DTYPE_F32, g->m, g->xf, g->ldx, w, g->k, psum);
      break;
    }
    for (int64_t i = 0; i < g->m; i++)
      for (int64_t j = 0; j < nb; j++) {
        float v = vf_reduce_add(psum[i * GEMV_NB + j]);
        if (g->bias) v += kite_load_f32(g->yt, g->bias, n0 + j);
        kite_store_f32(g->yt, g->y, i * g->ldy + n0 + j, v);
      }
  }
}

/* ---- linear on floats: the entry shared by linear, group_gemm and fused_moe ------------------ */
typedef struct lin {
  int64_t m, n, k;
  src x, w;      /* x may gather rows; both f32/f16/bf16 */
  kite_dtype yt; /* y and bias dtype */
  void *y;
  int64_t ldy;
  const void *bias;
} lin;

/* Workspace bytes lin_run needs for m rows, and for any row count up to m (the largest of the
 * GEMV and GEMM needs: each grows with m). */
static size_t lin_bytes(const kite_ctx *ctx, int64_t m, int64_t n, int64_t k, kite_dtype yt);
static size_t lin_bytes_upto(const kite_ctx *ctx, int64_t m, int64_t n, int64_t k, kite_dtype yt) {
  const size_t a = lin_bytes(ctx, MIN(m, GEMV_MAX_M), n, k, yt), b = lin_bytes(ctx, m, n, k, yt);
  return a > b ? a : b;
}

/* Workspace bytes lin_run needs. */
static size_t lin_bytes(const kite_ctx *ctx, int64_t m, int64_t n, int64_t k, kite_dtype yt) {
  if (k == 0) return 0;
  if (m <= GEMV_MAX_M) return (size_t)(m * (k + GEMV_PAD)) * 4 + ALIGN;
  size_t c = yt == KITE_DTYPE_F32 ? 0 : (size_t)(m * n) * 4;
  return c + ALIGN + gemm_scratch_bytes(cpu_gemm_parts(ctx, m, n, k)) + ALIGN;
}

static char *align_up(char *p) {
  return (char *)(((uintptr_t)p + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1));
}

static void lin_run(const kite_ctx *ctx, const lin *l, char *ws) {
  if (l->k == 0) {
    cpu_linear_bias_only(l->yt, l->m, l->n, l->bias, l->y, l->ldy);
    return;
  }
  if (l->m <= GEMV_MAX_M) {
    float *xf = (float *)align_up(ws);
    for (int64_t r = 0; r < l->m; r++) {
      const char *row = src_row(&l->x, r);
      for (int64_t i = 0; i < l->k; i++)
        xf[r * (l->k + GEMV_PAD) + i] = kite_load_f32(l->x.t, row, i);
    }
    gemv g = {.m = l->m,
              .n = l->n,
              .k = l->k,
              .xf = xf,
              .ldx = l->k + GEMV_PAD,
              .w = l->w,
              .yt = l->yt,
              .y = l->y,
              .ldy = l->ldy,
              .bias = l->bias};
    const int64_t items = (l->n + GEMV_NB - 1) / GEMV_NB;
    cpu_parallel_run(cpu_parallel_parts(ctx, items, l->n * l->k), items, gemv_task, &g);
    return;
  }
  const int parts = cpu_gemm_parts(ctx, l->m, l->n, l->k);
  gemm g = {.m = l->m,
            .n = l->n,
            .k = l->k,
            .a = l->x,
            .b = l->w,
            .yt = l->yt,
            .y = l->y,
            .ldy = l->ldy,
            .bias = l->bias};
  char *p = align_up(ws);
  if (l->yt == KITE_DTYPE_F32) {
    g.c = l->y;
    g.ldc = l->ldy;
    g.epi = EPI_BIAS;
  } else {
    g.c = p;
    g.ldc = l->n;
    g.epi = EPI_STORE;
    p = align_up(p + (size_t)(l->m * l->n) * 4);
  }
  gemm_run(&g, parts, p);
}

static kite_status workspace(kite_ctx *ctx, const char *op, size_t bytes, char **out) {
  void *p = NULL;
  if (bytes == 0) bytes = ALIGN;
  kite_status s = kite_ctx_workspace(ctx, bytes, &p);
  if (s != KITE_OK) return s;
  if (!p) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: cpu.avx2: no workspace", op);
  *out = p;
  return KITE_OK;
}

kite_status cpu_linear_avx2(const kite_kernel *kk, kite_ctx *ctx, const void *args) {
  const kite_linear_args *a = args;
  lin l = {.m = a->m,
           .n = a->n,
           .k = a->k,
           .x = {a->x, a->x_stride, a->dtype, NULL},
           .w = {a->w, a->w_stride, a->dtype, NULL},
           .yt = a->dtype,
           .y = a->y,
           .ldy = a->y_stride,
           .bias = a->bias};
  char *ws = NULL;
  kite_status s = workspace(ctx, "linear", lin_bytes(ctx, l.m, l.n, l.k, l.yt), &ws);
  if (s != KITE_OK) return s;
  lin_run(ctx, &l, ws);
  return KITE_OK;
}

kite_status cpu_group_gemm_avx2(const kite_kernel *kk, kite_ctx *ctx, const void *args) {
  const kite_group_gemm_args *a = args;
  const int64_t es = esize(a->dtype);
  /* the largest group sizes the workspace once */
  int64_t row = 0, most = 0;
  for (int64_t g = 0; g < a->groups && row < a->m; g++) {
    const int64_t rows = MIN(a->group_sizes[g] > 0 ? a->group_sizes[g] : 0, a->m - row);
    most = rows > most ? rows : most;
    row += rows;
  }
  char *ws = NULL;
  kite_status s =
      workspace(ctx, "group_gemm", lin_bytes_upto(ctx, most, a->n, a->k, a->dtype), &ws);
  if (s != KITE_OK) return s;
  row = 0;
  for (int64_t g = 0; g < a->groups && row < a->m; g++) {
    const int64_t rows = MIN(a->group_sizes[g] > 0 ? a->group_sizes[g] : 0, a->m - row);
    if (rows == 0) continue;
    lin l = {.m = rows,
             .n = a->n,
             .k = a->k,
             .x = {(const char *)a->x + row * a->x_stride * es, a->x_stride, a->dtype, NULL},
             .w = {(const char *)a->w + g * a->w_stride_g * es, a->w_stride_n, a->dtype, NULL},
             .yt = a->dtype,
             .y = (char *)a->y + row * a->y_stride * es,
             .ldy = a->y_stride};
    lin_run(ctx, &l, ws);
    row += rows;
  }
  for (; row < a->m; row++) memset((char *)a->y + row * a->y_stride * es, 0, (size_t)(a->n * es));
  return KITE_OK;
}

/* ---- fused MoE -------------------------------------------------------------------------------
 * Pairs (t, j) with a valid id are bucketed by expert (counting sort, token order kept). Per
 * expert with rows: h = x[rows] w13[e]^T ([n_e, 2I] f32), a = act(gate) * up rounded to the
 * dtype, o = a w2[e]^T ([n_e, H]), and yacc[t] += weight * o. y = yacc rounded once. */
typedef struct act_job {
  const float *h;
  float *a;
  int64_t inter;
  kite_moe_act act;
  kite_dtype t;
} act_job;

static void act_task(const void *job, int64_t begin, int64_t end, int part) {
  const act_job *j = job;
  for (int64_t r = begin; r < end; r++) {
    const float *g = j->h + r * 2 * j->inter, *u = g + j->inter;
    float *o = j->a + r * j->inter;
    for (int64_t i = 0; i < j->inter; i += 8) {
      const int64_t m = MIN(8, j->inter - i);
      const vf x = vf_load(KITE_DTYPE_F32, g, i, m), up = vf_load(KITE_DTYPE_F32, u, i, m);
      vf act;
      if (j->act == KITE_MOE_GELU) /* x Phi(x) */
        act = _mm256_mul_ps(x, vf_normal_cdf(x));
      else /* x / (1 + e^-x) */
        act = vf_div_pos(x, vf_sigmoid_den(x));
      vf_store(KITE_DTYPE_F32, o, i, vf_round_to(j->t, _mm256_mul_ps(act, up)), m, false);
    }
  }
}

typedef struct scatter_job {
  const float *o;
  const int32_t *tok;
  const float *wt;
  int64_t rows, h;
  float *yacc;
} scatter_job;

/* Columns [begin, end) of every row: rows sharing a token never race. */
static void scatter_task(const void *job, int64_t begin, int64_t end, int part) {
  const scatter_job *j = job;
  for (int64_t r = 0; r < j->rows; r++) {
    const float *o = j->o + r * j->h;
    float *y = j->yacc + (int64_t)j->tok[r] * j->h;
    const vf w = _mm256_set1_ps(j->wt[r]);
    int64_t c = begin;
    for (; c + 8 <= end; c += 8)
      _mm256_storeu_ps(y + c, _mm256_fmadd_ps(w, _mm256_loadu_ps(o + c), _mm256_loadu_ps(y + c)));
    for (; c < end; c++) y[c] += j->wt[r] * o[c];
  }
}

typedef struct store_job {
  const float *src;
  int64_t cols;
  kite_dtype t;
  void *y;
  int64_t ldy;
} store_job;

static void store_task(const void *job, int64_t begin, int64_t end, int part) {
  const store_job *j = job;
  for (int64_t r = begin; r < end; r++)
    for (int64_t c = 0; c < j->cols; c += 8) {
      const int64_t m = MIN(8, j->cols - c);
      vf_store(j->t, j->y, r * j->ldy + c, vf_load(KITE_DTYPE_F32, j->src + r * j->cols, c, m), m,
               false);
    }
}

kite_status cpu_fused_moe_avx2(const kite_kernel *kk, kite_ctx *ctx, const void *args) {
  const kite_moe_args *a = args;
  const int64_t T = a->tokens, H = a->hidden, I = a->inter, E = a->experts, K = a->topk;
  const int64_t es = esize(a->dtype);

  /* count pairs per expert: the largest bucket sizes the buffers */
  int64_t pairs = 0;
  for (int64_t t = 0; t < T; t++)
    for (int64_t j = 0; j < K; j++) {
      const int32_t e = a->ids[t * a->ids_stride + j];
      pairs += e >= 0 && e < E;
    }
  int64_t *count = calloc((size_t)(E + 1), sizeof *count);
  if (!count) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "fused_moe: cpu.avx2: no memory");
  for (int64_t t = 0; t < T; t++)
    for (int64_t j = 0; j < K; j++) {
      const int32_t e = a->ids[t * a->ids_stride + j];
      if (e >= 0 && e < E) count[e + 1]++;
    }
  int64_t most = 0;
  for (int64_t e = 0; e < E; e++) {
    most = count[e + 1] > most ? count[e + 1] : most;
    count[e + 1] += count[e]; /* now bucket starts */
  }

  const size_t g1 = lin_bytes_upto(ctx, most, 2 * I, H, KITE_DTYPE_F32),
               g2 = lin_bytes_upto(ctx, most, H, I, KITE_DTYPE_F32);
  const size_t sz_yacc = (size_t)(T * H) * 4, sz_h = (size_t)(most * 2 * I) * 4,
               sz_a = (size_t)(most * I) * 4, sz_o = (size_t)(most * H) * 4,
               sz_list = (size_t)(pairs > 0 ? pairs : 1) * 4;
  const size_t total = sz_yacc + sz_h + sz_a + sz_o + 2 * sz_list + (g1 > g2 ? g1 : g2) + 8 * ALIGN;
  char *ws = NULL;
  kite_status s = workspace(ctx, "fused_moe", total, &ws);
  if (s != KITE_OK) {
    free(count);
    return s;
  }
  char *p = align_up(ws);
  float *yacc = (float *)p;
  p = align_up(p + sz_yacc);
  float *h = (float *)p;
  p = align_up(p + sz_h);
  float *act = (float *)p;
  p = align_up(p + sz_a);
  float *o = (float *)p;
  p = align_up(p + sz_o);
  int32_t *tok = (int32_t *)p;
  p = align_up(p + sz_list);
  float *wt = (float *)p;
  p = align_up(p + sz_list);
  char *gws = p;

  memset(yacc, 0, sz_yacc);
  for (int64_t t = 0; t < T; t++) /* counting sort: token order within each bucket */
    for (int64_t j = 0; j < K; j++) {
      const int32_t e = a->ids[t * a->ids_stride + j];
      if (e < 0 || e >= E) continue;
      const int64_t at = count[e]++;
      tok[at] = (int32_t)t;
      wt[at] = a->weights[t * a->weights_stride + j];
    }
  /* count[e] is now the end of bucket e, which is where bucket e + 1 starts */
  int64_t start = 0;
  for (int64_t e = 0; e < E && I > 0; e++) {
    const int64_t end = count[e], rows = end - start;
    if (rows == 0) continue;
    lin up = {.m = rows,
              .n = 2 * I,
              .k = H,
              .x = {a->x, a->x_stride, a->dtype, tok + start},
              .w = {(const char *)a->w13 + e * 2 * I * H * es, H, a->dtype, NULL},
              .yt = KITE_DTYPE_F32,
              .y = h,
              .ldy = 2 * I};
    lin_run(ctx, &up, gws);
    act_job aj = {.h = h, .a = act, .inter = I, .act = a->act, .t = a->dtype};
    cpu_parallel_run(cpu_parallel_parts(ctx, rows, rows * I), rows, act_task, &aj);
    lin down = {.m = rows,
                .n = H,
                .k = I,
                .x = {act, I, KITE_DTYPE_F32, NULL},
                .w = {(const char *)a->w2 + e * H * I * es, I, a->dtype, NULL},
                .yt = KITE_DTYPE_F32,
                .y = o,
                .ldy = H};
    lin_run(ctx, &down, gws);
    scatter_job sj = {
        .o = o, .tok = tok + start, .wt = wt + start, .rows = rows, .h = H, .yacc = yacc};
    const int64_t blocks = (H + 255) / 256;
    cpu_parallel_run(cpu_parallel_parts(ctx, blocks, rows * H), H, scatter_task, &sj);
    start = end;
  }
  free(count);
  store_job st = {.src = yacc, .cols = H, .t = a->dtype, .y = a->y, .ldy = a->y_stride};
  cpu_parallel_run(cpu_parallel_parts(ctx, T, T * H), T, store_task, &st);
  return KITE_OK;
}

/* ---- topk_gating: choose on the logits (NaN below everything, ties to the lower id), weights
 * from an f32 softmax over the whole row ------------------------------------------------------ */
typedef struct topk_job {
  const kite_topk_args *a;
} topk_job;

static void topk_task(const void *job, int64_t begin, int64_t end, int part) {
  const kite_topk_args *a = ((const topk_job *)job)->a;
  const int64_t E = a->experts, K = a->k;
  const int64_t es = esize(a->dtype);
  for (int64_t r = begin; r < end; r++) {
    const char *l = (const char *)a->logits + r * a->logits_stride * es;
    float *w = a->weights + r * a->weights_stride;
    int32_t *id = a->ids + r * a->ids_stride;
    /* insertion into the sorted top-k held in w (keys) and id: strict > keeps earlier ids first */
    int64_t have = 0;
    float m = -INFINITY;
    for (int64_t e = 0; e < E; e++) {
      const float v = kite_load_f32(a->dtype, l, e);
      if (v > m || isnan(v)) m = isnan(m) ? m : v;
      const float key = isnan(v) ? -INFINITY : v;
      if (have == K && !(key > w[K - 1])) continue;
      int64_t at = have < K ? have++ : K - 1;
      while (at > 0 && key > w[at - 1]) {
        w[at] = w[at - 1];
        id[at] = id[at - 1];
        at--;
      }
      w[at] = key;
      id[at] = (int32_t)e;
    }
    float sum = 0.0f;
    for (int64_t e = 0; e < E; e++) sum += expf(kite_load_f32(a->dtype, l, e) - m);
    float chosen = 0.0f;
    for (int64_t j = 0; j < K; j++) {
      w[j] = expf(kite_load_f32(a->dtype, l, id[j]) - m) / sum;
      chosen += w[j];
    }
    if (a->renormalize)
      for (int64_t j = 0; j < K; j++) w[j] /= chosen;
  }
}

kite_status cpu_topk_gating_avx2(const kite_kernel *kk, kite_ctx *ctx, const void *args) {
  const kite_topk_args *a = args;
  topk_job j = {a};
  cpu_parallel_run(cpu_parallel_parts(ctx, a->tokens, a->tokens * a->experts), a->tokens, topk_task,
                   &j);
  return KITE_OK;
}

/* ---- quant / dequant ------------------------------------------------------------------------- */
/* f32 -> e4m3 codes in the low byte of each lane: the scalar kite_f32_to_fp8_e4m3, lane-wise. */
INLINE __m256i fp8_codes(vf v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
  const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  /* normal: keep 3 mantissa bits, ties to even, rebias the exponent */
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, 20), _mm256_set1_epi32(1));
  __m256i code =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32(0x7ffff)), odd), 20);
  code = _mm256_sub_epi32(code, _mm256_set1_epi32(120 << 3));
  /* below 2^-6: value * 2^9 rounded to nearest even (exact product, MXCSR's default rounding) */
  const __m256i sub =
      _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(512.0f)));
  code = _mm256_blendv_epi8(code, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3c800000), a));
  code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7e),
                            _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x43dfffff)));
  code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7f),
                            _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000)));
  return _mm256_or_si256(code, sign);
}

/* The low bytes of 8 int32 lanes (each in [-128, 255]) stored to p. */
INLINE void store_bytes(void *p, __m256i v, int64_t m) {
  const __m256i sel = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                       0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i b = _mm256_shuffle_epi8(v, sel);
  const uint32_t lo = (uint32_t)_mm256_extract_epi32(b, 0),
                 hi = (uint32_t)_mm256_extract_epi32(b, 4);
  const uint64_t both = (uint64_t)lo | (uint64_t)hi << 32;
  memcpy(p, &both, (size_t)m);
}

/* a * b rounded to odd in f32 (truncated, last bit set when inexact; FMA gives the exact error):
 * the f16 / bf16 store then rounds it to nearest even exactly as the exact product would round,
 * so dequant rounds once, like ref's float64 product. */
INLINE vf mul_round_odd(vf a, vf b) {
  const vf p = _mm256_mul_ps(a, b);
  const vf e = _mm256_fmsub_ps(a, b, p);
  const __m256i u = _mm256_castps_si256(p), one = _mm256_set1_epi32(1);
  const vf inexact = _mm256_and_ps(_mm256_cmp_ps(e, _mm256_setzero_ps(), _CMP_NEQ_OQ),
                                   _mm256_cmp_ps(vf_abs(p), _mm256_set1_ps(INFINITY), _CMP_LT_OQ));
  const __m256i even = _mm256_cmpeq_epi32(_mm256_and_si256(u, one), _mm256_setzero_si256());
  /* +1 moves away from zero (e has p's sign), -1 towards it */
  const __m256i step =
      _mm256_or_si256(_mm256_srai_epi32(_mm256_xor_si256(_mm256_castps_si256(e), u), 31), one);
  const __m256i fix = _mm256_and_si256(_mm256_and_si256(_mm256_castps_si256(inexact), even), step);
  return _mm256_castsi256_ps(_mm256_add_epi32(u, fix));
}

static void quant_task(const void *job, int64_t begin, int64_t end, int part) {
  const kite_quant_args *a = job;
  const int64_t es = esize(a->dtype);
  const bool fp8 = a->qdtype == KITE_DTYPE_FP8_E4M3;
  for (int64_t r = begin; r < end; r++) {
    uint8_t *q = (uint8_t *)a->q + r * a->q_stride;
    if (a->op == KITE_OP_DEQUANT) {
      const vf s = _mm256_set1_ps(a->scales[r]);
      for (int64_t i = 0; i < a->cols; i += 8) {
        const int64_t m = MIN(8, a->cols - i);
        const vf v = m == 8 ? load8(a->qdtype, q + i) : load_part(a->qdtype, q + i, m);
        const vf y = a->dtype == KITE_DTYPE_F32 ? _mm256_mul_ps(v, s) : mul_round_odd(v, s);
        vf_store(a->dtype, a->y, r * a->y_stride + i, y, m, false);
      }
      continue;
    }
    const char *x = (const char *)a->x + r * a->x_stride * es;
    vf amax = _mm256_setzero_ps();
    for (int64_t i = 0; i < a->cols; i += 8) { /* finite |x| only: NaN and inf count as 0 */
      const vf ax = vf_abs(vf_load(a->dtype, x, i, MIN(8, a->cols - i)));
      amax = _mm256_max_ps(
          _mm256_and_ps(ax, _mm256_cmp_ps(ax, _mm256_set1_ps(INFINITY), _CMP_LT_OQ)), amax);
    }
    const float scale = vf_reduce_max(amax) / (fp8 ? 448.0f : 127.0f);
    a->scales[r] = scale;
    const vf s = _mm256_set1_ps(scale), lim = _mm256_set1_ps(127.0f);
    for (int64_t i = 0; i < a->cols; i += 8) {
      const int64_t m = MIN(8, a->cols - i);
      __m256i c;
      if (scale == 0.0f) {
        c = _mm256_setzero_si256();
      } else {
        const vf v = _mm256_div_ps(vf_load(a->dtype, x, i, m), s);
        if (fp8) {
          c = fp8_codes(v);
        } else {
          const vf n = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q)); /* NaN -> 0 */
          const vf rn = _mm256_round_ps(n, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
          c = _mm256_cvtps_epi32(
              _mm256_min_ps(_mm256_max_ps(rn, _mm256_sub_ps(_mm256_setzero_ps(), lim)), lim));
        }
      }
      store_bytes(q + i, c, m);
    }
  }
}

kite_status cpu_quant_avx2(const kite_kernel *kk, kite_ctx *ctx, const void *args) {
  const kite_quant_args *a = args;
  cpu_parallel_run(cpu_parallel_parts(ctx, a->rows, a->rows * a->cols), a->rows, quant_task, a);
  return KITE_OK;
}

/* ---- linear_quant: int8 through int16-pair panels, e4m3 through f32 panels ------------------ */
kite_status cpu_linear_quant_avx2(const kite_kernel *kk, kite_ctx *ctx, const void *args) {
  const kite_linear_quant_args *a = args;
  if (a->k == 0) {
    cpu_linear_bias_only(a->dtype, a->m, a->n, a->bias, a->y, a->y_stride);
    return KITE_OK;
  }
  const int parts = cpu_gemm_parts(ctx, a->m, a->n, a->k);
  char *ws = NULL;
  kite_status s = workspace(ctx, "linear_quant",
                            (size_t)(a->m * a->n) * 4 + gemm_scratch_bytes(parts) + 2 * ALIGN, &ws);
  if (s != KITE_OK) return s;
  char *c = align_up(ws);
  gemm g = {.m = a->m,
            .n = a->n,
            .k = a->k,
            .a = {a->xq, a->x_stride, a->qdtype, NULL},
            .b = {a->wq, a->w_stride, a->qdtype, NULL},
            .i8 = a->qdtype == KITE_DTYPE_I8,
            .c = c,
            .ldc = a->n,
            .epi = EPI_STORE,
            .yt = a->dtype,
            .y = a->y,
            .ldy = a->y_stride,
            .bias = a->bias,
            .row_scale = a->x_scales,
            .col_scale = a->w_scales};
  gemm_run(&g, parts, align_up(c + (size_t)(a->m * a->n) * 4));
  return KITE_OK;
}
