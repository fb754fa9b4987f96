/*
 * The vector layer (interface in vec_scalar.h) on AVX2 + FMA + F16C: 8 floats in a __m256.
 * f16 converts in hardware (F16C); bf16 loads are a shift, bf16 stores round to nearest even in
 * integer arithmetic. Partial chunks (m < 8) go through a small stack buffer.
 */
#ifndef KITE_CPU_VEC_AVX2_H
#define KITE_CPU_VEC_AVX2_H

#include <immintrin.h>
#include <string.h>

#include "kite/backend.h"

#define VL 8
#define CPU_VEC_STREAMS 1
#define CPU_INLINE static inline __attribute__((always_inline))

typedef __m256 vf;

CPU_INLINE vf vf_set1(float a) {
  return _mm256_set1_ps(a);
}
CPU_INLINE vf vf_add(vf a, vf b) {
  return _mm256_add_ps(a, b);
}
CPU_INLINE vf vf_sub(vf a, vf b) {
  return _mm256_sub_ps(a, b);
}
CPU_INLINE vf vf_mul(vf a, vf b) {
  return _mm256_mul_ps(a, b);
}
CPU_INLINE vf vf_div(vf a, vf b) {
  return _mm256_div_ps(a, b);
}
CPU_INLINE vf vf_fma(vf a, vf b, vf c) {
  return _mm256_fmadd_ps(a, b, c);
}
CPU_INLINE vf vf_fnma(vf a, vf b, vf c) {
  return _mm256_fnmadd_ps(a, b, c);
}
CPU_INLINE vf vf_rcp_est(vf a) {
  return _mm256_rcp_ps(a);
} /* 12 bits */
CPU_INLINE vf vf_abs(vf a) {
  return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a);
}
CPU_INLINE vf vf_min(vf a, vf b) {
  return _mm256_min_ps(a, b);
}
CPU_INLINE vf vf_max(vf a, vf b) {
  return _mm256_max_ps(a, b);
}
CPU_INLINE vf vf_bits_shl23(vf a) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(a), 23));
}
CPU_INLINE vf vf_select_neg(vf s, vf x, vf y) {
  return _mm256_blendv_ps(y, x, s);
}
CPU_INLINE vf vf_lt_select(vf a, vf b, vf x, vf y) {
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_LT_OQ));
}
CPU_INLINE vf vf_tail(vf v, int64_t m, float fill) {
  if (m >= VL) return v;
  const vf lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
  return vf_lt_select(lane, vf_set1((float)m), v, vf_set1(fill));
}
CPU_INLINE vf vf_swap_pairs(vf a) {
  return _mm256_permute_ps(a, 0xb1);
}

CPU_INLINE float vf_reduce_add(vf a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

CPU_INLINE float vf_reduce_max(vf a) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

/* f32 -> bf16 bits in the low 16 of each 32-bit lane: add 0x7fff plus the lowest kept bit, then
 * truncate (round to nearest even); NaN keeps its top bits with the quiet bit set. */
CPU_INLINE __m256i avx2_bf16_bits(vf v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i hi = _mm256_srli_epi32(u, 16);
  const __m256i odd = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd), 16);
  const __m256i qnan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(rounded, qnan, nan);
}

CPU_INLINE vf vf_round_to(kite_dtype t, vf v) {
  switch (t) {
  case KITE_DTYPE_F16:
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  case KITE_DTYPE_BF16:
    return _mm256_castsi256_ps(_mm256_slli_epi32(avx2_bf16_bits(v), 16));
  default:
    return v;
  }
}

CPU_INLINE vf avx2_load8(kite_dtype t, const void *p) {
  switch (t) {
  case KITE_DTYPE_F16:
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
  case KITE_DTYPE_BF16: {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  default:
    return _mm256_loadu_ps((const float *)p);
  }
}

CPU_INLINE void avx2_store8(kite_dtype t, void *p, vf v, bool stream) {
  __m128i h;
  switch (t) {
  case KITE_DTYPE_F16:
    h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    break;
  case KITE_DTYPE_BF16: {
    /* packus interleaves the 128-bit halves: keep 64-bit words 0 and 2 */
    const __m256i b = avx2_bf16_bits(v);
    h = _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(b, b), 0x08));
    break;
  }
  default:
    if (stream)
      _mm256_stream_ps((float *)p, v);
    else
      _mm256_storeu_ps((float *)p, v);
    return;
  }
  if (stream)
    _mm_stream_si128((__m128i *)p, h);
  else
    _mm_storeu_si128((__m128i *)p, h);
}

CPU_INLINE vf vf_load(kite_dtype t, const void *p, int64_t i, int64_t m) {
  const int64_t es = t == KITE_DTYPE_F32 ? 4 : 2;
  const char *src = (const char *)p + i * es;
  if (m >= VL) return avx2_load8(t, src);
  char buf[32] = {0};
  memcpy(buf, src, (size_t)(m * es));
  return avx2_load8(t, buf);
}

CPU_INLINE void vf_store(kite_dtype t, void *p, int64_t i, vf v, int64_t m, bool stream) {
  const int64_t es = t == KITE_DTYPE_F32 ? 4 : 2;
  char *dst = (char *)p + i * es;
  if (m >= VL) {
    avx2_store8(t, dst, v, stream);
    return;
  }
  char buf[32];
  avx2_store8(t, buf, v, false);
  memcpy(dst, buf, (size_t)(m * es));
}

CPU_INLINE void vf_stream_end(void) {
  _mm_sfence();
}

#include "vec_math.h"

#endif /* KITE_CPU_VEC_AVX2_H */
