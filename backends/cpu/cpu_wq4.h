/*
 * linear_wq4 on the CPU, what its ISA files share: cpu_wq4.c (the scalar kernel and the common
 * driver), cpu_wq4_avx2.c and cpu_wq4_avx512.c (compiled with their ISA's flags, backend.cmake).
 *
 * The driver converts x to f32 once, with the sum of each 32-value block (sx[m, K/32]), then runs
 * a task over output columns n. A block's contribution to y[m, n] is
 *   d * sum_j x_j q_j + c * sx[m, b],   c = m_block (min format) or -8 d (sym format),
 * so the nibbles are only widened, never offset or scaled per value.
 */
#ifndef KITE_CPU_WQ4_H
#define KITE_CPU_WQ4_H

#include <string.h>

#include "cpu.h"
#include "cpu_q4.h"
#include "kite/dtype.h"

typedef struct wq4_job {
  const kite_linear_wq4_args *a;
  const float *x;  /* [m, k] f32 */
  const float *sx; /* [m, k / 32] */
  int64_t bb;      /* bytes of a block */
} wq4_job;

/* x and sx filled in the ctx's workspace, then task over the n output columns. */
kite_status cpu_wq4_run(kite_ctx *ctx, const kite_linear_wq4_args *a, cpu_task_fn task);

/* y[r, n] for rows [r0, r0 + nr) once acc[r] holds sum_b (d * xq + c * sx). */
static inline void wq4_store(const wq4_job *j, int64_t n, int64_t r0, int nr, const float *acc) {
  const kite_linear_wq4_args *a = j->a;
  const float b = a->bias ? kite_load_f32(a->dtype, a->bias, n) : 0.0f;
  for (int r = 0; r < nr; r++)
    kite_store_f32(a->dtype, a->y, (r0 + r) * a->y_stride + n, acc[r] + b);
}

/* A kernel's work on output column n (its weights `row`) for the rows [r0, r0 + nr) of x. */
typedef void (*wq4_cols_fn)(const wq4_job *j, const uint8_t *row, int64_t n, int64_t r0, int nr);

/* The body of a kernel's task: columns [begin, end), rows of x in groups of up to R. Inlined with
 * the kernel's always-inline cols, so that the call is direct. */
static inline __attribute__((always_inline)) void wq4_walk(const void *job, int64_t begin,
                                                           int64_t end, int R, wq4_cols_fn cols) {
  const wq4_job *j = job;
  const kite_linear_wq4_args *a = j->a;
  for (int64_t n = begin; n < end; n++) {
    const uint8_t *row = a->w + n * a->w_stride;
    for (int64_t r0 = 0; r0 < a->m; r0 += R)
      cols(j, row, n, r0, a->m - r0 < R ? (int)(a->m - r0) : R);
  }
}

#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>

/* A block's scale d, its c (minimum, or -8 d), and its 32 nibbles: lo = weights 0-15, hi = 16-31.
 */
static inline void wq4_block_x86(const wq4_job *j, const uint8_t *blk, float *d, float *c,
                                 __m128i *lo, __m128i *hi) {
  const uint8_t *qs = cpu_q4_scales(blk, j->a->format == KITE_WQ4_MIN, d, c);
  if (j->a->format == KITE_WQ4_SYM) *c = -8.0f * *d;
  const __m128i raw = _mm_loadu_si128((const __m128i *)qs), mask = _mm_set1_epi8(15);
  *lo = _mm_and_si128(raw, mask);
  *hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
}
#endif

#endif /* KITE_CPU_WQ4_H */
