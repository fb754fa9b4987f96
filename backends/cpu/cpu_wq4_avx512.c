/*
 * linear_wq4 on AVX-512 (cpu_wq4.h; compiled with the AVX-512 F/BW/VL/DQ flags): a block decoded
 * to w = d q + c once for up to 8 rows of x (the decode, not memory, bounds a 4-bit GEMV on few
 * cores); many rows go to the packed GEMM of cpu_gemm_avx512.c instead.
 */
#include "cpu_gemm.h"
#include "cpu_kernels.h"
#include "cpu_wq4.h"

#define WQ4_GEMM_MIN_M 32

/* Output column n (weights `row`) for rows [r0, r0 + nr) of x, nr <= 8: each block's 32 weights
 * decoded once to w = d q + c as two 16-float vectors, then two FMAs per row; the c * sx term is
 * folded into w. */
static inline __attribute__((always_inline)) void
wq4_cols_avx512(const wq4_job *j, const uint8_t *row, int64_t n, int64_t r0, int nr) {
  const kite_linear_wq4_args *a = j->a;
  const int64_t nb = a->k / 32;
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

static void wq4_task_avx512(const void *job, int64_t begin, int64_t end, int slot) {
  wq4_walk(job, begin, end, 8, wq4_cols_avx512);
}

kite_status cpu_linear_wq4_avx512(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_linear_wq4_args *a = args;
  /* Many rows (a prompt): the packed GEMM, blocks decoded once per panel; few rows (decode):
   * every weight is used by a handful of rows, so decoding in registers wins. */
  if (a->m >= WQ4_GEMM_MIN_M && a->k > 0) return cpu_wq4_gemm_avx512(ctx, a);
  return cpu_wq4_run(ctx, args, wq4_task_avx512);
}
