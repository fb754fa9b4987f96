/*
 * What the AVX2 GEMM-family files share (cpu_gemm_avx2.c, cpu_gemv_avx2.c, cpu_moe_avx2.c,
 * cpu_quant_avx2.c, cpu_topk_avx2.c): element access over any input type, and the linear entry
 * (packed GEMM or GEMV) that linear, group_gemm and fused_moe run. Only for files compiled with
 * -mavx2 -mfma -mf16c.
 */
#ifndef KITE_CPU_GEMM_AVX2_H
#define KITE_CPU_GEMM_AVX2_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vec_avx2.h"
#include "cpu_gemm.h"
#include "cpu_kernels.h"
#include "kite/dtype.h"

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

/* A row-major source operand: row i is at p + idx[i] * ld elements (idx NULL: row i).
 * kn (weights only, f32/f16/bf16): the [n, k] operand is stored as its transpose [k, n], row k
 * at p + k * ld, and read in place (fused_moe_ex's transposed experts): the GEMM packs its panels
 * from those rows, the GEMV runs cpu_avx2_gemvt_task. */
typedef struct src {
  const void *p;
  int64_t ld;
  kite_dtype t;
  const int32_t *idx;
  bool kn;
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

static inline char *cpu_avx2_align_up(char *p) {
  return (char *)(((uintptr_t)p + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1));
}

/* ---- GEMV (cpu_gemv_avx2.c) ------------------------------------------------------------------
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

/* Weight-row blocks [begin, end) of GEMV_NB rows: a cpu_task_fn over a gemv. */
void cpu_avx2_gemv_task(const void *job, int64_t begin, int64_t end, int part);
/* The same over a w stored [k, n] (w.kn): output blocks [begin, end) of GEMVT_NB columns. */
#define GEMVT_NB 32
void cpu_avx2_gemvt_task(const void *job, int64_t begin, int64_t end, int part);

/* ---- linear on floats (cpu_gemm_avx2.c): the entry shared by linear, group_gemm and fused_moe */
typedef struct lin {
  int64_t m, n, k;
  src x, w;      /* x may gather rows; both f32/f16/bf16 */
  kite_dtype yt; /* y and bias dtype */
  void *y;
  int64_t ldy;
  const void *bias;
} lin;

/* Workspace bytes cpu_avx2_lin_run needs for m rows, and for any row count up to m. */
size_t cpu_avx2_lin_bytes(const kite_ctx *ctx, int64_t m, int64_t n, int64_t k, kite_dtype yt);
size_t cpu_avx2_lin_bytes_upto(const kite_ctx *ctx, int64_t m, int64_t n, int64_t k, kite_dtype yt);
/* y = x w^T + bias through the GEMV (m <= GEMV_MAX_M) or the packed GEMM, in workspace ws. */
void cpu_avx2_lin_run(const kite_ctx *ctx, const lin *l, char *ws);
/* The ctx workspace of at least `bytes`, or an error naming op. */
kite_status cpu_avx2_workspace(kite_ctx *ctx, const char *op, size_t bytes, char **out);

#endif /* KITE_CPU_GEMM_AVX2_H */
