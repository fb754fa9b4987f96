/*
 * linear_wq4 on AVX2 + FMA + F16C (cpu_wq4.h; compiled with -mavx2 -mfma -mf16c): 16 bytes of a
 * block widened into 4 x 8 floats, per-row vector accumulators with d broadcast per block, up to
 * 4 rows of x sharing one decoded block.
 */
#include "cpu_kernels.h"
#include "cpu_wq4.h"

static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* Output column n (weights `row`) for rows [r0, r0 + nr) of x, nr <= 4. */
static inline __attribute__((always_inline)) void
wq4_cols_avx2(const wq4_job *j, const uint8_t *row, int64_t n, int64_t r0, int nr) {
  const kite_linear_wq4_args *a = j->a;
  const int64_t nb = a->k / 32;
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

static void wq4_task_avx2(const void *job, int64_t begin, int64_t end, int slot) {
  wq4_walk(job, begin, end, 4, wq4_cols_avx2);
}

kite_status cpu_linear_wq4_avx2(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  return cpu_wq4_run(ctx, args, wq4_task_avx2);
}
