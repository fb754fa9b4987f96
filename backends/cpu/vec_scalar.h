/*
 * The vector layer the cpu kernels are written against, portable C version.
 *
 * Every ISA header (this one, vec_avx2.h, vec_avx512.h) provides the same names:
 *   VL                     lanes of a vf (a vector of floats)
 *   vf_set1 add sub mul div fma(a, b, c) = a * b + c, neg (a sign flip), abs
 *   vf_min(a, b) vf_max(a, b)      x86 rule: b when either is NaN (put the data in b to keep NaN)
 *   vf_lt_select(a, b, x, y)       lane-wise a < b ? x : y
 *   vf_tail(v, m, fill)            lanes >= m replaced by fill (identity when m >= VL)
 *   vf_swap_pairs(v)               lanes (0 1 2 3 ...) -> (1 0 3 2 ...)
 *   vf_reduce_add / vf_reduce_max  horizontal, to a float
 *   vf_load(t, p, i, m)            m <= VL elements of type t from p[i...], rest of lanes 0
 *   vf_store(t, p, i, v, m, st)    m lanes to p[i...], rounded to nearest even; st (streaming)
 *                                  only for full, vector-aligned chunks
 *   vf_round_to(t, v)              v rounded to t and back, what a store then a load would give
 *   vf_exp, vf_erfc                accurate to a few ulp of f32 (vec_math.h gives the figures)
 *   vf_exp_nonpos(x)               e^x for x <= 0 (or NaN), 0 below -87.68
 *   vf_normal_cdf(x)               Phi(x) = (1 + erf(x / sqrt 2)) / 2, for gelu
 *   vf_sigmoid_den(x)              1 + e^-x, sigmoid's denominator
 *   vf_div_pos(a, b)               a / b for b in [1, 2^126], within about 1 ulp
 *   vf_exp16, vf_exp16_nonpos, vf_sigmoid_den16, vf_div_pos16, vf_normal_cdf16
 *                                  the same within ~3e-6 relative, for results that are
 *                                  rounded to bf16 or f16
 *   vb_copy_stream(d, s, n)        copies n bytes, the aligned body with streaming stores
 *   vf_stream_end()                orders streaming stores before a task reports completion
 *   CPU_VEC_STREAMS                1 when streaming stores exist
 *   CPU_VEC_UNROLL2                1 to walk full chunks by pairs (CPU_ROW)
 *   CPU_VEC_REDUCE8                defined when vf_reduce_add8(a[8], out[8]) (8 sums) exists
 *
 * and, for integer work (the Philox generator of sampling), a vu of VL uint32_t lanes:
 *   vu_set1(a), vu_iota(a)         every lane a; lane l = a + l (wrapping)
 *   vu_xor(a, b)
 *   vu_mulhilo(a, b, &hi, &lo)     the 64-bit products a * b per lane, split in high and low
 *                                  32-bit halves
 *   vu_store(p, v)                 VL lanes to p[0...]
 *   CPU_VEC_INT32                  1 when vu's lanes are vector registers (0 here: a template
 *                                  then prefers plain scalar code where that is faster)
 *
 * Here a vf is a struct of 8 floats and every operation a loop over lanes: plain C that the
 * compiler turns into whatever vectors the target has, and that runs anywhere. exp and erfc are
 * libm's.
 */
#ifndef KITE_CPU_VEC_SCALAR_H
#define KITE_CPU_VEC_SCALAR_H

#include <math.h>
#include <string.h>

#include "kite/dtype.h"

#define VL 8
#define CPU_VEC_UNROLL2 0
#define CPU_VEC_STREAMS 0
#define CPU_VEC_INT32 0
#define CPU_INLINE static inline __attribute__((always_inline))

typedef struct vf {
  float v[VL];
} vf;

/* The body of a lane-wise operation: returns the T whose lane l is expr. */
#define VEC_MAP(T, expr)                                                                           \
  T r_;                                                                                            \
  for (int l = 0; l < VL; l++) r_.v[l] = (expr);                                                   \
  return r_
#define VF_MAP(expr) VEC_MAP(vf, expr)

CPU_INLINE vf vf_set1(float a) {
  VF_MAP(a);
}
CPU_INLINE vf vf_add(vf a, vf b) {
  VF_MAP(a.v[l] + b.v[l]);
}
CPU_INLINE vf vf_sub(vf a, vf b) {
  VF_MAP(a.v[l] - b.v[l]);
}
CPU_INLINE vf vf_mul(vf a, vf b) {
  VF_MAP(a.v[l] * b.v[l]);
}
CPU_INLINE vf vf_div(vf a, vf b) {
  VF_MAP(a.v[l] / b.v[l]);
}
CPU_INLINE vf vf_div_pos(vf a, vf b) {
  return vf_div(a, b);
}
/* Not fmaf: without FMA hardware that is a slow library call, and one rounding more is fine. */
CPU_INLINE vf vf_fma(vf a, vf b, vf c) {
  VF_MAP(a.v[l] * b.v[l] + c.v[l]);
}
CPU_INLINE vf vf_neg(vf a) {
  VF_MAP(-a.v[l]);
}
CPU_INLINE vf vf_abs(vf a) {
  VF_MAP(fabsf(a.v[l]));
}
CPU_INLINE vf vf_min(vf a, vf b) {
  VF_MAP(a.v[l] < b.v[l] ? a.v[l] : b.v[l]);
}
CPU_INLINE vf vf_max(vf a, vf b) {
  VF_MAP(a.v[l] > b.v[l] ? a.v[l] : b.v[l]);
}
CPU_INLINE vf vf_lt_select(vf a, vf b, vf x, vf y) {
  VF_MAP(a.v[l] < b.v[l] ? x.v[l] : y.v[l]);
}
CPU_INLINE vf vf_tail(vf v, int64_t m, float fill) {
  VF_MAP(l < m ? v.v[l] : fill);
}
CPU_INLINE vf vf_swap_pairs(vf a) {
  VF_MAP(a.v[l ^ 1]);
}
CPU_INLINE vf vf_exp(vf a) {
  VF_MAP(expf(a.v[l]));
}
CPU_INLINE vf vf_exp_nonpos(vf a) {
  return vf_exp(a);
}
CPU_INLINE vf vf_sigmoid_den(vf a) {
  VF_MAP(1.0f + expf(-a.v[l]));
}
CPU_INLINE vf vf_erfc(vf a) {
  VF_MAP(erfcf(a.v[l]));
}
CPU_INLINE vf vf_normal_cdf(vf a) {
  VF_MAP(0.5f * erfcf(a.v[l] * -0.70710678118654752f));
}
/* libm serves the 16-bit outputs too. */
CPU_INLINE vf vf_exp16(vf a) {
  return vf_exp(a);
}
CPU_INLINE vf vf_exp16_nonpos(vf a) {
  return vf_exp(a);
}
CPU_INLINE vf vf_sigmoid_den16(vf a) {
  return vf_sigmoid_den(a);
}
CPU_INLINE vf vf_normal_cdf16(vf a) {
  return vf_normal_cdf(a);
}
CPU_INLINE vf vf_div_pos16(vf a, vf b) {
  return vf_div(a, b);
}
/* The 16-bit conversions stay out of line: inlined, eight lanes of them into every kernel body
 * and dtype, they made this file ten times the size of the AVX2 one for no speed. f32 stays
 * inline, where the compiler turns the lane loops into vector code. */
static __attribute__((noinline)) vf scalar_round16(kite_dtype t, vf a) {
  VF_MAP(t == KITE_DTYPE_BF16 ? kite_bf16_to_f32(kite_f32_to_bf16(a.v[l]))
                              : kite_f16_to_f32(kite_f32_to_f16(a.v[l])));
}
static __attribute__((noinline)) vf scalar_load16(kite_dtype t, const void *p, int64_t i,
                                                  int64_t m) {
  const uint16_t *h = (const uint16_t *)p + i;
  vf r = vf_set1(0.0f);
  if (m >= VL) /* full chunks in a loop the compiler can vectorize */
    for (int l = 0; l < VL; l++)
      r.v[l] = t == KITE_DTYPE_BF16 ? kite_bf16_to_f32(h[l]) : kite_f16_to_f32(h[l]);
  else
    for (int l = 0; l < m; l++)
      r.v[l] = t == KITE_DTYPE_BF16 ? kite_bf16_to_f32(h[l]) : kite_f16_to_f32(h[l]);
  return r;
}
static __attribute__((noinline)) void scalar_store16(kite_dtype t, void *p, int64_t i, vf v,
                                                     int64_t m) {
  uint16_t *h = (uint16_t *)p + i;
  for (int l = 0; l < VL && l < m; l++)
    h[l] = t == KITE_DTYPE_BF16 ? kite_f32_to_bf16(v.v[l]) : kite_f32_to_f16(v.v[l]);
}

CPU_INLINE vf vf_round_to(kite_dtype t, vf a) {
  return t == KITE_DTYPE_F32 ? a : scalar_round16(t, a);
}

CPU_INLINE float vf_reduce_add(vf a) {
  /* pairwise, as the SIMD versions do */
  for (int w = VL / 2; w > 0; w /= 2)
    for (int l = 0; l < w; l++) a.v[l] += a.v[l + w];
  return a.v[0];
}

CPU_INLINE float vf_reduce_max(vf a) {
  float m = a.v[0];
  for (int l = 1; l < VL; l++) m = a.v[l] > m ? a.v[l] : m;
  return m;
}

CPU_INLINE vf vf_load(kite_dtype t, const void *p, int64_t i, int64_t m) {
  if (t != KITE_DTYPE_F32) return scalar_load16(t, p, i, m);
  VF_MAP(l < m ? ((const float *)p)[i + l] : 0.0f);
}

CPU_INLINE void vf_store(kite_dtype t, void *p, int64_t i, vf v, int64_t m, bool stream) {
  if (t != KITE_DTYPE_F32) {
    scalar_store16(t, p, i, v, m);
    return;
  }
  for (int l = 0; l < VL && l < m; l++) ((float *)p)[i + l] = v.v[l];
}

CPU_INLINE void vb_copy_stream(void *d, const void *s, size_t n) {
  memcpy(d, s, n);
}

CPU_INLINE void vf_stream_end(void) {}

typedef struct vu {
  uint32_t v[VL];
} vu;

#define VU_MAP(expr) VEC_MAP(vu, expr)

/* Lane l = a + l s: every lane a (vu_set1) or a, a + 1, ... (vu_iota). */
CPU_INLINE vu vu_ramp(uint32_t a, uint32_t s) {
  VU_MAP(a + (uint32_t)l * s);
}
#define vu_set1(a) vu_ramp((a), 0)
#define vu_iota(a) vu_ramp((a), 1)
CPU_INLINE vu vu_xor(vu a, vu b) {
  VU_MAP(a.v[l] ^ b.v[l]);
}
CPU_INLINE void vu_mulhilo(vu a, vu b, vu *hi, vu *lo) {
  for (int l = 0; l < VL; l++) {
    const uint64_t p = (uint64_t)a.v[l] * b.v[l];
    hi->v[l] = (uint32_t)(p >> 32);
    lo->v[l] = (uint32_t)p;
  }
}
CPU_INLINE void vu_store(uint32_t *p, vu v) {
  memcpy(p, v.v, sizeof v.v);
}

#endif /* KITE_CPU_VEC_SCALAR_H */
