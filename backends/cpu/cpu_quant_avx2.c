/* quant and dequant (per-token int8, fp8 e4m3) on AVX2, 8 lanes at a time. */
#include "cpu_gemm_avx2.h"

/* ---- quant / dequant ------------------------------------------------------------------------- */
/* f32 -> e4m3 codes in the low byte of each lane: the scalar kite_f32_to_fp8_e4m3, lane-wise. */
INLINE __m256i fp8_codes(vf v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
  const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  /* normal: keep 3 mantissa bits, ties to even, rebias the exponent */
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, 20), _mm256_set1_epi32(1));
  __m256i code =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32(0x7ffff)), odd), 20);
  code = _mm256_sub_epi32(code, _mm256_set1_epi32(120 << 3));
  /* below 2^-6: value * 2^9 rounded to nearest even (exact product, MXCSR's default rounding) */
  const __m256i sub =
      _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(512.0f)));
  code = _mm256_blendv_epi8(code, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3c800000), a));
  code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7e),
                            _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x43dfffff)));
  code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7f),
                            _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000)));
  return _mm256_or_si256(code, sign);
}

/* The low bytes of 8 int32 lanes (each in [-128, 255]) stored to p. */
INLINE void store_bytes(void *p, __m256i v, int64_t m) {
  const __m256i sel = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                       0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i b = _mm256_shuffle_epi8(v, sel);
  const uint32_t lo = (uint32_t)_mm256_extract_epi32(b, 0),
                 hi = (uint32_t)_mm256_extract_epi32(b, 4);
  const uint64_t both = (uint64_t)lo | (uint64_t)hi << 32;
  memcpy(p, &both, (size_t)m);
}

static void quant_task(const void *job, int64_t begin, int64_t end, int part) {
  const kite_quant_args *a = job;
  const int64_t es = esize(a->dtype);
  const bool fp8 = a->qdtype == KITE_DTYPE_FP8_E4M3;
  for (int64_t r = begin; r < end; r++) {
    uint8_t *q = (uint8_t *)a->q + r * a->q_stride;
    if (a->op == KITE_OP_DEQUANT) {
      const vf s = _mm256_set1_ps(a->scales[r]);
      for (int64_t i = 0; i < a->cols; i += 8) {
        const int64_t m = MIN(8, a->cols - i);
        const vf v = m == 8 ? load8(a->qdtype, q + i) : load_part(a->qdtype, q + i, m);
        vf_store(a->dtype, a->y, r * a->y_stride + i, _mm256_mul_ps(v, s), m, false);
      }
      continue;
    }
    const char *x = (const char *)a->x + r * a->x_stride * es;
    vf amax = _mm256_setzero_ps();
    for (int64_t i = 0; i < a->cols; i += 8) /* max(v, amax) keeps amax when v is NaN */
      amax = _mm256_max_ps(vf_abs(vf_load(a->dtype, x, i, MIN(8, a->cols - i))), amax);
    const float scale = vf_reduce_max(amax) / (fp8 ? 448.0f : 127.0f);
    a->scales[r] = scale;
    const vf s = _mm256_set1_ps(scale), lim = _mm256_set1_ps(127.0f);
    for (int64_t i = 0; i < a->cols; i += 8) {
      const int64_t m = MIN(8, a->cols - i);
      __m256i c;
      if (scale == 0.0f) {
        c = _mm256_setzero_si256();
      } else {
        const vf v = _mm256_div_ps(vf_load(a->dtype, x, i, m), s);
        if (fp8) {
          c = fp8_codes(v);
        } else {
          const vf n = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q)); /* NaN -> 0 */
          const vf rn = _mm256_round_ps(n, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
          c = _mm256_cvtps_epi32(
              _mm256_min_ps(_mm256_max_ps(rn, _mm256_sub_ps(_mm256_setzero_ps(), lim)), lim));
        }
      }
      store_bytes(q + i, c, m);
    }
  }
}

kite_status cpu_quant_avx2(const kite_kernel *kk, kite_ctx *ctx, const void *args) {
  const kite_quant_args *a = args;
  cpu_parallel_run(cpu_parallel_parts(ctx, a->rows, a->rows * a->cols), a->rows, quant_task, a);
  return KITE_OK;
}
