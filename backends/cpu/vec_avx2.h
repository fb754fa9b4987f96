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
#define CPU_VEC_UNROLL2 1
#define CPU_VEC_STREAMS 1
#define CPU_VEC_INT32 1
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
CPU_INLINE vf vf_fnms(vf a, vf b, vf c) {
  return _mm256_fnmsub_ps(a, b, c);
}
CPU_INLINE vf vf_rcp_est(vf a) {
  return _mm256_rcp_ps(a);
} /* 12 bits */
CPU_INLINE vf vf_neg(vf a) {
  return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f));
}
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
CPU_INLINE bool vf_all_le(vf a, vf b) {
  return _mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_LE_OQ)) == 0xff;
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

/* f32 -> bf16 in the high 16 bits of each 32-bit lane (the low 16 are garbage): add 0x7fff plus
 * the lowest kept bit, so that truncation rounds to nearest even; NaN keeps its top bits with
 * the quiet bit set. The kept bit is tested with a compare rather than shifted down: Zen's
 * shifts and shuffles share two pipes, which bf16 loops keep busy already. */
CPU_INLINE __m256i avx2_bf16_high_num(vf v) { /* v not NaN */
  const __m256i u = _mm256_castps_si256(v);
  const __m256i even =
      _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x10000)), _mm256_setzero_si256());
  /* 0x8000 - 1 when the kept bit is even: ties go down to it */
  return _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x8000)), even);
}

CPU_INLINE __m256i avx2_bf16_high(vf v) {
  const __m256i qnan = _mm256_or_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x400000));
  return _mm256_blendv_epi8(avx2_bf16_high_num(v), qnan,
                            _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}

/* The 8 bf16 of v: the high halves gathered into each 128-bit lane's low 8 bytes by a byte
 * shuffle, then the two lanes' low quadwords joined. */
CPU_INLINE __m128i avx2_bf16_pack(vf v) {
  const __m256i pick = _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1,
                                        2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i h = _mm256_shuffle_epi8(avx2_bf16_high(v), pick);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(h, 0x08));
}

CPU_INLINE vf vf_round_to(kite_dtype t, vf v) {
  switch (t) {
  case KITE_DTYPE_F16:
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  case KITE_DTYPE_BF16:
    return _mm256_castsi256_ps(
        _mm256_and_si256(avx2_bf16_high(v), _mm256_set1_epi32((int)0xffff0000u)));
  default:
    return v;
  }
}

CPU_INLINE vf avx2_load8(kite_dtype t, const void *p) {
  switch (t) {
  case KITE_DTYPE_F16:
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
  case KITE_DTYPE_BF16: {
    /* both 128-bit lanes get the 8 bf16 (a load), one byte shuffle puts lane k's four into the
     * high halves of its 32-bit lanes: one shuffle instead of a widening plus a shift */
    const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    const __m256i spread =
        _mm256_setr_epi8(-1, -1, 0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7, -1, -1, 8, 9, -1,
                         -1, 10, 11, -1, -1, 12, 13, -1, -1, 14, 15);
    return _mm256_castsi256_ps(_mm256_shuffle_epi8(both, spread));
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
  case KITE_DTYPE_BF16:
    h = avx2_bf16_pack(v);
    break;
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

/* bf16 pairs: 16 elements in one 32-byte access, the even ones in a and the odd ones in b: a
 * shift and a mask per vector instead of a byte shuffle (and, storing, a lane permute), which
 * Zen runs on the two pipes its shuffles share. */
#define CPU_VEC_PAIRS 1
CPU_INLINE void vf_load2(kite_dtype t, const void *p, int64_t i, vf *a, vf *b) {
  if (t != KITE_DTYPE_BF16) {
    *a = vf_load(t, p, i, VL);
    *b = vf_load(t, p, i + VL, VL);
    return;
  }
  const __m256i v = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i));
  *a = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  *b = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000u)));
}

/* Whether vf_load2(t) puts a pair's lanes in another order than two vf_load would. */
#define VF_PAIR_LANES_SPLIT(t) ((t) == KITE_DTYPE_BF16)
/* 2 VL floats from p[i...] in the lanes vf_load2(t) puts a pair of t elements in: for bf16, the
 * even ones (p[i], p[i + 2] ...) in a and the odd ones in b. */
CPU_INLINE void vf_load2_f32_as(kite_dtype t, const float *p, int64_t i, vf *a, vf *b) {
  const vf lo = _mm256_loadu_ps(p + i), hi = _mm256_loadu_ps(p + i + VL);
  if (t != KITE_DTYPE_BF16) {
    *a = lo, *b = hi;
    return;
  }
  /* (0 2 8 10 | 4 6 12 14), then its 64-bit quarters back in order */
  *a = _mm256_castpd_ps(
      _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xd8));
  *b = _mm256_castpd_ps(
      _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xdd)), 0xd8));
}

CPU_INLINE void vf_store2(kite_dtype t, void *p, int64_t i, vf a, vf b, bool stream) {
  if (t != KITE_DTYPE_BF16) {
    vf_store(t, p, i, a, VL, stream);
    vf_store(t, p, i + VL, b, VL, stream);
    return;
  }
  /* one compare finds a NaN in either vector; without one, the rounding needs no NaN fix */
  const vf nan = _mm256_cmp_ps(a, b, _CMP_UNORD_Q);
  __m256i ha, hb;
  if (__builtin_expect(_mm256_testz_ps(nan, nan), 1)) {
    ha = avx2_bf16_high_num(a), hb = avx2_bf16_high_num(b);
  } else {
    ha = avx2_bf16_high(a), hb = avx2_bf16_high(b);
  }
  /* the odd words from b's high halves, the even ones from a's shifted down: one blend */
  const __m256i v = _mm256_blend_epi16(_mm256_srli_epi32(ha, 16), hb, 0xaa);
  __m128i *dst = (__m128i *)((uint16_t *)p + i);
  if (stream) { /* streaming stores are aligned to 16 bytes (cpu_stream_head), not 32 */
    _mm_stream_si128(dst, _mm256_castsi256_si128(v));
    _mm_stream_si128(dst + 1, _mm256_extracti128_si256(v, 1));
  } else {
    _mm256_storeu_si256((__m256i *)dst, v);
  }
}

CPU_INLINE void vf_stream_end(void) {
  _mm_sfence();
}

/* memcpy up to the first 32-byte boundary of d, then 32-byte streaming stores, then the rest. */
CPU_INLINE void vb_copy_stream(void *d, const void *s, size_t n) {
  char *dc = d;
  const char *sc = s;
  size_t head = (32 - (uintptr_t)dc % 32) % 32;
  if (head > n) head = n;
  memcpy(dc, sc, head);
  size_t i = head;
  for (; i + 32 <= n; i += 32)
    _mm256_stream_si256((__m256i *)(dc + i), _mm256_loadu_si256((const __m256i *)(sc + i)));
  memcpy(dc + i, sc + i, n - i);
}

/* The sums of a[0..7] stored to out[0..7], by a transpose of pairwise adds: cheaper than eight
 * separate horizontal reductions. */
#define CPU_VEC_REDUCE8 1
CPU_INLINE void vf_reduce_add8(const vf *a, float *out) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                                      _mm256_permute2f128_ps(u0, u1, 0x31)));
}

/* 32-bit integer lanes. vu_mulhilo: each 32 x 32 -> 64-bit product is two even-lane multiplies,
 * the odd lanes shifted down first. */
typedef __m256i vu;

CPU_INLINE vu vu_set1(uint32_t a) {
  return _mm256_set1_epi32((int)a);
}
CPU_INLINE vu vu_iota(uint32_t a) {
  return _mm256_add_epi32(_mm256_set1_epi32((int)a), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
CPU_INLINE vu vu_xor(vu a, vu b) {
  return _mm256_xor_si256(a, b);
}
CPU_INLINE void vu_mulhilo(vu a, vu b, vu *hi, vu *lo) {
  const __m256i pe = _mm256_mul_epu32(a, b);
  const __m256i po = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), b);
  *lo = _mm256_blend_epi32(pe, _mm256_slli_epi64(po, 32), 0xaa);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xaa);
}
CPU_INLINE void vu_store(uint32_t *p, vu v) {
  _mm256_storeu_si256((__m256i *)p, v);
}

#include "vec_math.h"

#endif /* KITE_CPU_VEC_AVX2_H */
