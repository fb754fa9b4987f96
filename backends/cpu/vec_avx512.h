/*
 * The vector layer (interface in vec_scalar.h) on AVX-512 F/BW/VL/DQ: 16 floats in a __m512.
 * Partial chunks use masked loads and stores. With CPU_VEC_NATIVE_BF16 defined (cpu_avx512bf16.c,
 * built with -mavx512bf16) bf16 stores use the hardware conversion VCVTNEPS2BF16, which rounds
 * to nearest even like the integer path (it flushes f32 denormals to zero, far below what bf16
 * users can see).
 */
#ifndef KITE_CPU_VEC_AVX512_H
#define KITE_CPU_VEC_AVX512_H

#include <immintrin.h>
#include <string.h>

#include "kite/backend.h"

#define VL 16
#define CPU_VEC_UNROLL2 1
#define CPU_VEC_STREAMS 1
#define CPU_VEC_INT32 1
#define CPU_INLINE static inline __attribute__((always_inline))

typedef __m512 vf;

CPU_INLINE vf vf_set1(float a) {
  return _mm512_set1_ps(a);
}
CPU_INLINE vf vf_add(vf a, vf b) {
  return _mm512_add_ps(a, b);
}
CPU_INLINE vf vf_sub(vf a, vf b) {
  return _mm512_sub_ps(a, b);
}
CPU_INLINE vf vf_mul(vf a, vf b) {
  return _mm512_mul_ps(a, b);
}
CPU_INLINE vf vf_div(vf a, vf b) {
  return _mm512_div_ps(a, b);
}
CPU_INLINE vf vf_fma(vf a, vf b, vf c) {
  return _mm512_fmadd_ps(a, b, c);
}
CPU_INLINE vf vf_fnma(vf a, vf b, vf c) {
  return _mm512_fnmadd_ps(a, b, c);
}
CPU_INLINE vf vf_fnms(vf a, vf b, vf c) {
  return _mm512_fnmsub_ps(a, b, c);
}
CPU_INLINE vf vf_rcp_est(vf a) {
  return _mm512_rcp14_ps(a);
} /* 14 bits */
CPU_INLINE vf vf_neg(vf a) {
  return _mm512_castsi512_ps(
      _mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32((int)0x80000000u)));
}
CPU_INLINE vf vf_abs(vf a) {
  return _mm512_abs_ps(a);
}
CPU_INLINE vf vf_min(vf a, vf b) {
  return _mm512_min_ps(a, b);
}
CPU_INLINE vf vf_max(vf a, vf b) {
  return _mm512_max_ps(a, b);
}
CPU_INLINE vf vf_bits_shl23(vf a) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(a), 23));
}
CPU_INLINE vf vf_select_neg(vf s, vf x, vf y) {
  return _mm512_mask_blend_ps(_mm512_movepi32_mask(_mm512_castps_si512(s)), y, x);
}
CPU_INLINE bool vf_all_le(vf a, vf b) {
  return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ) == 0xffff;
}
CPU_INLINE vf vf_lt_select(vf a, vf b, vf x, vf y) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), y, x);
}

/* Lanes [0, m) of a chunk. */
CPU_INLINE __mmask16 avx512_mask(int64_t m) {
  return m >= VL ? (__mmask16)0xffff : (__mmask16)((1u << m) - 1);
}

CPU_INLINE vf vf_tail(vf v, int64_t m, float fill) {
  return _mm512_mask_blend_ps(avx512_mask(m), vf_set1(fill), v);
}
CPU_INLINE vf vf_swap_pairs(vf a) {
  return _mm512_permute_ps(a, 0xb1);
}
CPU_INLINE float vf_reduce_add(vf a) {
  return _mm512_reduce_add_ps(a);
}
CPU_INLINE float vf_reduce_max(vf a) {
  return _mm512_reduce_max_ps(a);
}

/* f32 -> bf16 bits, rounded to nearest even, NaN kept quiet. */
CPU_INLINE __m256i avx512_bf16_bits(vf v) {
#if defined(CPU_VEC_NATIVE_BF16)
  return (__m256i)_mm512_cvtneps_pbh(v);
#else
  const __m512i u = _mm512_castps_si512(v);
  const __m512i hi = _mm512_srli_epi32(u, 16);
  const __m512i odd = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd);
  r = _mm512_srli_epi32(r, 16);
  const __m512i qnan = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
  r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), r, qnan);
  return _mm512_cvtepi32_epi16(r);
#endif
}

CPU_INLINE vf avx512_bf16_to_f32(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

CPU_INLINE vf vf_round_to(kite_dtype t, vf v) {
  switch (t) {
  case KITE_DTYPE_F16:
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  case KITE_DTYPE_BF16:
    return avx512_bf16_to_f32(avx512_bf16_bits(v));
  default:
    return v;
  }
}

CPU_INLINE vf vf_load(kite_dtype t, const void *p, int64_t i, int64_t m) {
  const __mmask16 k = avx512_mask(m);
  switch (t) {
  case KITE_DTYPE_F16:
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const short *)p + i));
  case KITE_DTYPE_BF16:
    return avx512_bf16_to_f32(_mm256_maskz_loadu_epi16(k, (const short *)p + i));
  default:
    return _mm512_maskz_loadu_ps(k, (const float *)p + i);
  }
}

CPU_INLINE void vf_store(kite_dtype t, void *p, int64_t i, vf v, int64_t m, bool stream) {
  const __mmask16 k = avx512_mask(m);
  __m256i h;
  switch (t) {
  case KITE_DTYPE_F16:
    h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    break;
  case KITE_DTYPE_BF16:
    h = avx512_bf16_bits(v);
    break;
  default:
    if (stream && m >= VL)
      _mm512_stream_ps((float *)p + i, v);
    else
      _mm512_mask_storeu_ps((float *)p + i, k, v);
    return;
  }
  if (stream && m >= VL)
    _mm256_stream_si256((__m256i *)((short *)p + i), h);
  else
    _mm256_mask_storeu_epi16((short *)p + i, k, h);
}

CPU_INLINE void vf_stream_end(void) {
  _mm_sfence();
}

/* memcpy up to the first 64-byte boundary of d, then 64-byte streaming stores, then the rest. */
CPU_INLINE void vb_copy_stream(void *d, const void *s, size_t n) {
  char *dc = d;
  const char *sc = s;
  size_t head = (64 - (uintptr_t)dc % 64) % 64;
  if (head > n) head = n;
  memcpy(dc, sc, head);
  size_t i = head;
  for (; i + 64 <= n; i += 64)
    _mm512_stream_si512((__m512i *)(dc + i), _mm512_loadu_si512((const void *)(sc + i)));
  memcpy(dc + i, sc + i, n - i);
}

/* 32-bit integer lanes. vu_mulhilo: each 32 x 32 -> 64-bit product is two even-lane multiplies,
 * the odd lanes shifted down first. */
typedef __m512i vu;

CPU_INLINE vu vu_set1(uint32_t a) {
  return _mm512_set1_epi32((int)a);
}
CPU_INLINE vu vu_iota(uint32_t a) {
  return _mm512_add_epi32(_mm512_set1_epi32((int)a),
                          _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}
CPU_INLINE vu vu_xor(vu a, vu b) {
  return _mm512_xor_si512(a, b);
}
CPU_INLINE void vu_mulhilo(vu a, vu b, vu *hi, vu *lo) {
  const __m512i pe = _mm512_mul_epu32(a, b);
  const __m512i po = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), b);
  *lo = _mm512_mask_blend_epi32(0xaaaa, pe, _mm512_slli_epi64(po, 32));
  *hi = _mm512_mask_blend_epi32(0xaaaa, _mm512_srli_epi64(pe, 32), po);
}
CPU_INLINE void vu_store(uint32_t *p, vu v) {
  _mm512_storeu_si512(p, v);
}

#include "vec_math.h"

#endif /* KITE_CPU_VEC_AVX512_H */
