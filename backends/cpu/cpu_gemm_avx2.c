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
 * The GEMV is in cpu_gemv_avx2.c; fused_moe, quant and topk_gating in their own files.
 */
#include "cpu_gemm_avx2.h"

#define MR 6
#define NR 16
#define KC 256  /* f32 depth of one packed block: a 16 KB w panel stays in L1 */
#define KC2 256 /* int8: int16 pairs per block (512 values) */
#define MC 144  /* x rows per packed block (multiple of MR): 144 KB in L2 */
#define NC 1024 /* w rows per packed block (multiple of NR) */

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

/* A w stored [k, n] (src.kn): the nc x kc block from (n0, k0) into its nc / NR panels (panel jr
 * at bp + jr kc), read row by row: each row's nc elements in one sequential run (rows ld apart
 * give the prefetcher no stream to follow panel by panel), the panels past nc zero-filled. */
static void pack_b_kn(const src *b, int64_t n0, int64_t nc, int64_t k0, int64_t kc, float *bp) {
  const int64_t es = esize(b->t);
  for (int64_t k = 0; k < kc; k++) {
    const char *row = (const char *)b->p + ((k0 + k) * b->ld + n0) * es;
    for (int64_t j = 0; j < nc; j += 8) {
      const int64_t m = nc - j;
      _mm256_store_ps(bp + (j / NR) * NR * kc + k * NR + j % NR,
                      m >= 8 ? load8(b->t, row + j * es) : load_part(b->t, row + j * es, m));
      if (m < NR && j % NR == 0) /* the second half of a last, partial panel */
        _mm256_store_ps(bp + (j / NR) * NR * kc + k * NR + 8, _mm256_setzero_ps());
    }
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
      if (m1 - m0 <= MC && !g->b.kn) {
        /* one x block (MoE experts, short prefill): pack each w panel right before its kernels,
         * while it is in L1, rather than the whole NC x KC block first (1 MB of f32: past L2
         * by the time the kernels reach its later panels); not for a w stored [k, n], whose
         * panels are cut from whole rows (pack_b_kn) */
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
      if (g->b.kn)
        pack_b_kn(&g->b, jc, nc, pc, kc, bp);
      else
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

/* ---- linear on floats: the entry shared by linear, group_gemm and fused_moe ------------------ */

/* Workspace bytes lin_run needs for m rows, and for any row count up to m (the largest of the
 * GEMV and GEMM needs: each grows with m). */
size_t cpu_avx2_lin_bytes_upto(const kite_ctx *ctx, int64_t m, int64_t n, int64_t k,
                               kite_dtype yt) {
  const size_t a = cpu_avx2_lin_bytes(ctx, MIN(m, GEMV_MAX_M), n, k, yt),
               b = cpu_avx2_lin_bytes(ctx, m, n, k, yt);
  return a > b ? a : b;
}

/* Workspace bytes lin_run needs. */
size_t cpu_avx2_lin_bytes(const kite_ctx *ctx, int64_t m, int64_t n, int64_t k, kite_dtype yt) {
  if (k == 0) return 0;
  if (m <= GEMV_MAX_M) return (size_t)(m * (k + GEMV_PAD)) * 4 + ALIGN;
  size_t c = yt == KITE_DTYPE_F32 ? 0 : (size_t)(m * n) * 4;
  return c + ALIGN + gemm_scratch_bytes(cpu_gemm_parts(ctx, m, n, k)) + ALIGN;
}

void cpu_avx2_lin_run(const kite_ctx *ctx, const lin *l, char *ws) {
  if (l->k == 0) {
    cpu_linear_bias_only(l->yt, l->m, l->n, l->bias, l->y, l->ldy);
    return;
  }
  if (l->m <= GEMV_MAX_M) {
    float *xf = (float *)cpu_avx2_align_up(ws);
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
    if (l->w.kn) {
      const int64_t items = (l->n + GEMVT_NB - 1) / GEMVT_NB;
      cpu_parallel_run(cpu_parallel_parts(ctx, items, l->n * l->k), items, cpu_avx2_gemvt_task, &g);
      return;
    }
    const int64_t items = (l->n + GEMV_NB - 1) / GEMV_NB;
    cpu_parallel_run(cpu_parallel_parts(ctx, items, l->n * l->k), items, cpu_avx2_gemv_task, &g);
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
  char *p = cpu_avx2_align_up(ws);
  if (l->yt == KITE_DTYPE_F32) {
    g.c = l->y;
    g.ldc = l->ldy;
    g.epi = EPI_BIAS;
  } else {
    g.c = p;
    g.ldc = l->n;
    g.epi = EPI_STORE;
    p = cpu_avx2_align_up(p + (size_t)(l->m * l->n) * 4);
  }
  gemm_run(&g, parts, p);
}

kite_status cpu_avx2_workspace(kite_ctx *ctx, const char *op, size_t bytes, char **out) {
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
  kite_status s =
      cpu_avx2_workspace(ctx, "linear", cpu_avx2_lin_bytes(ctx, l.m, l.n, l.k, l.yt), &ws);
  if (s != KITE_OK) return s;
  cpu_avx2_lin_run(ctx, &l, ws);
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
  kite_status s = cpu_avx2_workspace(ctx, "group_gemm",
                                     cpu_avx2_lin_bytes_upto(ctx, most, a->n, a->k, a->dtype), &ws);
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
    cpu_avx2_lin_run(ctx, &l, ws);
    row += rows;
  }
  for (; row < a->m; row++) memset((char *)a->y + row * a->y_stride * es, 0, (size_t)(a->n * es));
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
  kite_status s = cpu_avx2_workspace(
      ctx, "linear_quant", (size_t)(a->m * a->n) * 4 + gemm_scratch_bytes(parts) + 2 * ALIGN, &ws);
  if (s != KITE_OK) return s;
  char *c = cpu_avx2_align_up(ws);
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
  gemm_run(&g, parts, cpu_avx2_align_up(c + (size_t)(a->m * a->n) * 4));
  return KITE_OK;
}
