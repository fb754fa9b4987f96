/*
 * linear_wq4 on the CPU: x converted to f32 once with the sum of each 32-value block
 * (sx[m, K/32]), then threads over output rows. A block's contribution to y[m, n] is
 *   d * sum_j x_j q_j + c * sx[m, b],   c = m_block (min format) or -8 d (sym format),
 * so the nibbles are only widened, never offset or scaled per value. Up to 4 rows of x share
 * one decoded block. The AVX2 variant widens 16 bytes into 4 x 8 floats and keeps per-row vector
 * accumulators (d broadcast per block); the scalar variant does the same in plain C. The AVX-512
 * variant decodes a block to w = d q + c once for up to 8 rows (the decode, not memory, bounds a
 * 4-bit GEMV on few cores).
 */
#include "cpu_gemm.h"
#include "cpu_kernels.h"

#include <string.h>

#define WQ4_GEMM_MIN_M 32

#if defined(__x86_64__)
#include <immintrin.h>
#endif

typedef struct wq4_job {
  const kite_linear_wq4_args *a;
  const float *x;  /* [m, k] f32 */
  const float *sx; /* [m, k / 32] */
  int64_t bb, qs_off;
} wq4_job;

static inline float wq4_half(const uint8_t *p) {
  return kite_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* y[r, n] for rows [r0, r0 + nr) once acc[r] holds sum_b (d * xq + c * sx). */
static void wq4_store(const wq4_job *j, int64_t n, int64_t r0, int nr, const float *acc) {
  const kite_linear_wq4_args *a = j->a;
  const float b = a->bias ? kite_load_f32(a->dtype, a->bias, n) : 0.0f;
  for (int r = 0; r < nr; r++)
    kite_store_f32(a->dtype, a->y, (r0 + r) * a->y_stride + n, acc[r] + b);
}

static void wq4_task_scalar(const void *job, int64_t begin, int64_t end, int slot) {
  const wq4_job *j = job;
  const kite_linear_wq4_args *a = j->a;
  const int64_t nb = a->k / 32;
  for (int64_t n = begin; n < end; n++) {
    const uint8_t *row = a->w + n * a->w_stride;
    for (int64_t r0 = 0; r0 < a->m; r0 += 4) {
      const int nr = a->m - r0 < 4 ? (int)(a->m - r0) : 4;
      float acc[4] = {0, 0, 0, 0};
      for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + b * j->bb, *qs = blk + j->qs_off;
        const float d = wq4_half(blk);
        const float c = a->format == KITE_WQ4_SYM ? -8.0f * d : wq4_half(blk + 2);
        float q[32];
        for (int i = 0; i < 16; i++) {
          q[i] = (float)(qs[i] & 15);
          q[i + 16] = (float)(qs[i] >> 4);
        }
        for (int r = 0; r < nr; r++) {
          const float *x = j->x + (r0 + r) * a->k + b * 32;
          float s = 0;
          for (int i = 0; i < 32; i++) s += x[i] * q[i];
          acc[r] += d * s + c * j->sx[(r0 + r) * nb + b];
        }
      }
      wq4_store(j, n, r0, nr, acc);
    }
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma,f16c"))) static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* A block's scale d, its c (minimum, or -8 d), and its 32 nibbles: lo = weights 0-15, hi = 16-31.
 */
__attribute__((target("avx2,fma,f16c"))) static inline void
wq4_block_x86(const wq4_job *j, const uint8_t *blk, float *d, float *c, __m128i *lo, __m128i *hi) {
  uint16_t hd, hm;
  memcpy(&hd, blk, 2);
  memcpy(&hm, blk + 2, 2);
  *d = _cvtsh_ss(hd);
  *c = j->a->format == KITE_WQ4_SYM ? -8.0f * *d : _cvtsh_ss(hm);
  const __m128i raw = _mm_loadu_si128((const __m128i *)(blk + j->qs_off)), mask = _mm_set1_epi8(15);
  *lo = _mm_and_si128(raw, mask);
  *hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
}

__attribute__((target("avx2,fma,f16c"))) static void wq4_task_avx2(const void *job, int64_t begin,
                                                                   int64_t end, int slot) {
  const wq4_job *j = job;
  const kite_linear_wq4_args *a = j->a;
  const int64_t nb = a->k / 32;
  for (int64_t n = begin; n < end; n++) {
    const uint8_t *row = a->w + n * a->w_stride;
    for (int64_t r0 = 0; r0 < a->m; r0 += 4) {
      const int nr = a->m - r0 < 4 ? (int)(a->m - r0) : 4;
      __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                       _mm256_setzero_ps()};
      float extra[4] = {0, 0, 0, 0};
      for (int64_t b = 0; b < nb; b++) {
        __m128i lo, hi;
        float d, c;
        wq4_block_x86(j, row + b * j->bb, &d, &c, &lo, &hi);
        const __m256 q0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
        const __m256 q1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
        const __m256 q2 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
        const __m256 q3 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
        const __m256 dv = _mm256_set1_ps(d);
        for (int r = 0; r < nr; r++) {
          const float *x = j->x + (r0 + r) * a->k + b * 32;
          __m256 s = _mm256_mul_ps(q0, _mm256_loadu_ps(x));
          s = _mm256_fmadd_ps(q1, _mm256_loadu_ps(x + 8), s);
          s = _mm256_fmadd_ps(q2, _mm256_loadu_ps(x + 16), s);
          s = _mm256_fmadd_ps(q3, _mm256_loadu_ps(x + 24), s);
          acc[r] = _mm256_fmadd_ps(dv, s, acc[r]);
          extra[r] += c * j->sx[(r0 + r) * nb + b];
        }
      }
      float out[4];
      for (int r = 0; r < nr; r++) out[r] = hsum8(acc[r]) + extra[r];
      wq4_store(j, n, r0, nr, out);
    }
  }
}

/* AVX-512: the block's 32 weights decoded once to w = d q + c as two 16-float vectors (shared by
 * up to 8 rows of x), then two FMAs per row; the c * sx term is folded into w. */
__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c"))) static void
wq4_task_avx512(const void *job, int64_t begin, int64_t end, int slot) {
  const wq4_job *j = job;
  const kite_linear_wq4_args *a = j->a;
  const int64_t nb = a->k / 32;
  for (int64_t n = begin; n < end; n++) {
    const uint8_t *row = a->w + n * a->w_stride;
    for (int64_t r0 = 0; r0 < a->m; r0 += 8) {
      const int nr = a->m - r0 < 8 ? (int)(a->m - r0) : 8;
      const float *x = j->x + r0 * a->k;
      __m512 acc[8];
#pragma GCC unroll 8
      for (int r = 0; r < 8; r++) acc[r] = _mm512_setzero_ps();
      for (int64_t b = 0; b < nb; b++) {
        __m128i lo, hi;
        float d, c;
        wq4_block_x86(j, row + b * j->bb, &d, &c, &lo, &hi);
        const __m512 dv = _mm512_set1_ps(d), cv = _mm512_set1_ps(c);
        const __m512 w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)), dv, cv);
        const __m512 w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)), dv, cv);
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
          if (r < nr) {
            const float *xr = x + r * a->k + b * 32;
            acc[r] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xr), acc[r]);
            acc[r] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xr + 16), acc[r]);
          }
        }
      }
      float out[8];
      for (int r = 0; r < nr; r++) out[r] = _mm512_reduce_add_ps(acc[r]);
      wq4_store(j, n, r0, nr, out);
    }
  }
}
#endif

static kite_status wq4_run(kite_ctx *ctx, const kite_linear_wq4_args *a, cpu_task_fn task) {
  const int64_t nb = a->k / 32;
  void *ws;
  kite_status s = kite_ctx_workspace(ctx, (size_t)(a->m * a->k + a->m * nb) * sizeof(float), &ws);
  if (s != KITE_OK) return s;
  float *x = ws, *sx = x + a->m * a->k;
  for (int64_t r = 0; r < a->m; r++)
    for (int64_t b = 0; b < nb; b++) {
      float t = 0;
      for (int i = 0; i < 32; i++) {
        const float v = kite_load_f32(a->dtype, a->x, r * a->x_stride + b * 32 + i);
        x[r * a->k + b * 32 + i] = v;
        t += v;
      }
      sx[r * nb + b] = t;
    }
  wq4_job j = {a, x, sx, a->format == KITE_WQ4_SYM ? 18 : 20, a->format == KITE_WQ4_SYM ? 2 : 4};
  const int parts = cpu_parallel_parts(ctx, a->n, a->m * a->k / 8 * a->n);
  cpu_parallel_run(parts, a->n, task, &j);
  return KITE_OK;
}

kite_status cpu_linear_wq4_scalar(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  return wq4_run(ctx, args, wq4_task_scalar);
}

#if defined(__x86_64__)
kite_status cpu_linear_wq4_avx2(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  return wq4_run(ctx, args, wq4_task_avx2);
}

kite_status cpu_linear_wq4_avx512(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_linear_wq4_args *a = args;
  /* Many rows (a prompt): the packed GEMM, blocks decoded once per panel; few rows (decode):
   * every weight is used by a handful of rows, so decoding in registers wins. */
  if (a->m >= WQ4_GEMM_MIN_M) return cpu_wq4_gemm_avx512(ctx, a);
  return wq4_run(ctx, args, wq4_task_avx512);
}
#endif
