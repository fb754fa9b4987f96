/*
 * Division, exp and erfc over the vector layer, for the SIMD headers (vec_avx2.h, vec_avx512.h),
 * which include this after their primitives. Besides those of vec_scalar.h's list they provide
 *   vf_fnma(a, b, c) = c - a * b, vf_fnms(a, b, c) = -(a * b) - c, vf_rcp_est (reciprocal
 * estimate), vf_bits_shl23 (the float whose bits are the argument's shifted left by 23),
 * vf_select_neg(s, x, y) (sign of s ? x : y), vf_all_le(a, b) (a <= b in every lane; false for
 * NaN). The polynomial coefficients are Chebyshev fits made for kite in extended precision.
 */
#ifndef KITE_CPU_VEC_MATH_H
#define KITE_CPU_VEC_MATH_H

/* The polynomials are evaluated by Estrin's scheme: coefficient pairs first, then combined by
 * x^2, x^4, x^8. Their dependency chains are 3 or 4 FMAs long instead of 5 or 9 (Horner), which
 * matters more than the two extra multiplies: a core overlaps only a few vectors' worth of a
 * long chain (Zen 3's FP scheduler holds about 64 operations). */
#define VF_PAIR(x, c0, c1) vf_fma(x, vf_set1(c1), vf_set1(c0)) /* c0 + c1 x */

/* a / b for b in [1, 2^126] (sigmoid's 1 + e^-x, erfc's 1 + 0.4 |x|) without the divider, which
 * takes 5 to 16 cycles per vector: from the reciprocal estimate r and e = 1 - b r (|e| < 4e-4),
 * a / b = a r / (1 - e) = a r (1 + e + e^2 + ...), kept to second order (e^3 < 1e-10): about
 * 1 ulp, in a chain of four operations. 2^126 < b gives 0 (the estimate flushes to 0). */
CPU_INLINE vf vf_div_pos(vf a, vf b) {
  const vf r = vf_rcp_est(b);
  const vf e = vf_fnma(b, r, vf_set1(1.0f)), q0 = vf_mul(a, r);
  return vf_fma(q0, vf_fma(e, e, e), q0);
}

/* x clamped so that s (x, or -x when neg) is in [-87.33, 88.37], where vm_exp_plus's 2^n is a
 * normal float. */
CPU_INLINE vf vm_exp_clamp(vf x, bool neg) {
  return neg ? vf_max(vf_set1(-88.37f), vf_min(vf_set1(87.33f), x))
             : vf_max(vf_set1(-87.33f), vf_min(vf_set1(88.37f), x));
}

/* e^s + c with s = x, or s = -x when `neg` (a constant: sigmoid's 1 + e^-x without negating x
 * first), the core of vf_exp and vf_sigmoid_den. xc comes clamped (vm_exp_clamp, or at -88 from
 * below for s <= 0: there n = -127 makes 2^n's bits, and the result, exactly 0).
 * e^s = 2^n e^r with n = round(s / ln2): n comes from adding 1.5 * 2^23 + 127, whose sum rounds
 * to an integer and holds n + 127 in its low mantissa bits, which shifted into the exponent
 * field give 2^n. e^r = 1 + r q(r), q a degree 5 fit of expm1(r) / r on |r| <= ln2 / 2 (error
 * 4e-9). q is evaluated at r0 = s - n ln2_f, ln2_f the float nearest ln2, so that only one FMA
 * precedes it; r = r0 + n (ln2_f - ln2), exact to f32, is formed beside the polynomial and used
 * in its last step, where it counts (q's own argument error is 1e-8 relative). Within
 * 1.5 ulp. */
CPU_INLINE vf vm_exp_plus(vf xc, vf c, bool neg) {
  const vf magic = vf_set1(12583039.0f); /* 1.5 * 2^23 + 127 */
  const vf k = vf_fma(xc, vf_set1(neg ? -1.44269504089f : 1.44269504089f), magic);
  const vf n = vf_sub(k, magic);
  const vf ln2_f = vf_set1(0.693147182464599609375f);
  const vf r0 = neg ? vf_fnms(n, ln2_f, xc) : vf_fnma(n, ln2_f, xc);
  const vf r = vf_fma(n, vf_set1(1.904654299957768e-09f), r0);
  const vf r2 = vf_mul(r0, r0);
  const vf q01 = VF_PAIR(r0, 1.0000000108e+00f, 5.0000000135e-01f);
  const vf q23 = VF_PAIR(r0, 1.6666505260e-01f, 4.1666465006e-02f);
  const vf q45 = VF_PAIR(r0, 8.3691484909e-03f, 1.3933641032e-03f);
  const vf q = vf_fma(vf_mul(r2, r2), q45, vf_fma(r2, q23, q01));
  return vf_fma(vf_fma(r, q, vf_set1(1.0f)), vf_bits_shl23(k), c);
}

/* e^x. Below 2^-126 (x < -87.33) the result flushes to 0, so exp(-inf) = 0; above x = 88.37
 * (n = 127) it saturates near 2^127 instead of reaching inf, which no caller needs. NaN stays
 * NaN. */
CPU_INLINE vf vf_exp(vf x) {
  const vf lo = vf_set1(-87.33f), zero = vf_set1(0.0f);
  return vf_lt_select(x, lo, zero, vm_exp_plus(vm_exp_clamp(x, false), zero, false));
}

/* e^x for x <= 0 (or NaN), as softmax's exp(z - max): one clamp instead of two and the select;
 * 0 below x = -87.68. */
CPU_INLINE vf vf_exp_nonpos(vf x) {
  return vm_exp_plus(vf_max(vf_set1(-88.0f), x), vf_set1(0.0f), false);
}

/* 1 + e^-x, sigmoid's denominator, with the add fused into exp's last step. */
CPU_INLINE vf vf_sigmoid_den(vf x) {
  return vm_exp_plus(vm_exp_clamp(x, true), vf_set1(1.0f), true);
}

/* erfc(a) = t exp(-a^2 + P(t - 0.6)) for a = |x|, t = 1 / (1 + 0.4 a), with P a degree 9 fit
 * over a in [0, 10] (relative error 5e-8 before rounding); erfc(-a) = 2 - erfc(a). The same
 * formula keeps its relative accuracy far into the tail, where 1 - erf(a) would cancel. Past
 * a = 10 the exponent is below -87 and exp flushes the result to 0, as it should. Relative error
 * below 5e-7 for |x| < 2, growing to 4e-6 at |x| = 9 as the rounding of a^2 (~81) takes over. */
CPU_INLINE vf vf_erfc(vf x) {
  const vf one = vf_set1(1.0f);
  const vf a = vf_abs(x);
  const vf t = vf_div_pos(one, vf_fma(vf_min(vf_set1(1e30f), a), vf_set1(0.4f), one));
  const vf u = vf_sub(t, vf_set1(0.6f));
  const vf u2 = vf_mul(u, u), u4 = vf_mul(u2, u2);
  const vf p01 = VF_PAIR(u, -7.055994216e-01f, 1.632359065e+00f);
  const vf p23 = VF_PAIR(u, 4.908538267e-01f, -2.959379423e-01f);
  const vf p45 = VF_PAIR(u, -3.626233406e-01f, 1.329682620e-01f);
  const vf p67 = VF_PAIR(u, 3.075179865e-01f, -9.669428632e-02f);
  const vf p89 = VF_PAIR(u, -2.124336348e-01f, 7.169374137e-02f);
  const vf p0_3 = vf_fma(u2, p23, p01), p4_7 = vf_fma(u2, p67, p45);
  const vf p = vf_fma(vf_mul(u4, u4), p89, vf_fma(u4, p4_7, p0_3));
  const vf e = vf_mul(t, vf_exp(vf_fnma(a, a, p)));
  return vf_select_neg(x, vf_sub(vf_set1(2.0f), e), e);
}

/* Phi(x) = (1 + erf(x / sqrt 2)) / 2, the standard normal CDF (gelu is x Phi(x)). When every
 * lane is in [-3, 3.5], as activations nearly always are, Phi(x) = 1/2 + x Q(w) with
 * w = x^2 / 6.125 - 1 in [-1, 1] and Q a degree 11 fit of erf(x / sqrt 2) / (2x) (error 3.5e-9):
 * no exp, no division, a quarter of the erfc form's work. There Phi has the absolute error of
 * erf (~6e-8), as 1 + erf has in every framework; -3 bounds its relative error at 5e-5 where Phi
 * is smallest. Other vectors take the erfc form (out of line: it would crowd the registers of
 * the loop around the polynomial), which stays accurate into the far tails. */
__attribute__((noinline, cold)) static vf vm_normal_cdf_tails(vf x) {
  return vf_mul(vf_set1(0.5f), vf_erfc(vf_mul(x, vf_set1(-0.70710678118654752f))));
}

CPU_INLINE bool vm_in_central_range(vf x) {
  return __builtin_expect(vf_all_le(vf_abs(vf_sub(x, vf_set1(0.25f))), vf_set1(3.25f)), 1);
}

/* 1/2 + x Q(w), Q of degree 2 pairs - 1 with coefficients c (lowest first), by Estrin. */
CPU_INLINE vf vm_normal_cdf_central(vf x, const float *c, int pairs) {
  const vf w = vf_fma(vf_mul(x, x), vf_set1(0.163265306122449f), vf_set1(-1.0f));
  const vf w2 = vf_mul(w, w), w4 = vf_mul(w2, w2);
  vf p[6];
  for (int j = 0; j < pairs; j++) p[j] = VF_PAIR(w, c[2 * j], c[2 * j + 1]);
  const vf q0_3 = vf_fma(w2, p[1], p[0]), q4_7 = vf_fma(w2, p[3], p[2]);
  const vf q8 = pairs > 5 ? vf_fma(w2, p[5], p[4]) : p[4];
  const vf q = vf_fma(vf_mul(w4, w4), q8, vf_fma(w4, q4_7, q0_3));
  return vf_fma(x, q, vf_set1(0.5f));
}

CPU_INLINE vf vf_normal_cdf(vf x) {
  static const float c[12] = {1.993377791e-01f,  -9.033950040e-02f, 5.346905245e-02f,
                              -2.997426505e-02f, 1.506154116e-02f,  -6.717079675e-03f,
                              2.669524691e-03f,  -9.497740395e-04f, 3.001495066e-04f,
                              -8.830090465e-05f, 2.843120350e-05f,  -6.881264635e-06f};
  return vm_in_central_range(x) ? vm_normal_cdf_central(x, c, 6) : vm_normal_cdf_tails(x);
}

/* ---- cheaper forms for 16-bit outputs ---------------------------------------------------------
 * A bf16 (f16) result is rounded to 2^-9 (2^-12) relative, so these keep ~1e-6 relative error
 * and drop the terms that took the f32 forms to an ulp: fewer operations in kernels that are
 * compute-bound on AVX2. The f32 paths keep the forms above. */

/* e^s + c (s = x, or -x when neg) within 3e-6 relative: as vm_exp_plus with e^r = 1 + r q(r),
 * q a degree 3 fit (2.8e-6), and r = s - n ln2 in one step (its error, n * 2e-9, is below
 * 3e-7). */
CPU_INLINE vf vm_exp16_plus(vf xc, vf c, bool neg) {
  const vf magic = vf_set1(12583039.0f); /* 1.5 * 2^23 + 127 */
  const vf k = vf_fma(xc, vf_set1(neg ? -1.44269504089f : 1.44269504089f), magic);
  const vf ln2 = vf_set1(0.693147180559945f);
  const vf r = neg ? vf_fnms(vf_sub(k, magic), ln2, xc) : vf_fnma(vf_sub(k, magic), ln2, xc);
  const vf q = vf_fma(vf_mul(r, r), VF_PAIR(r, 1.6787473857e-01f, 4.1513849050e-02f),
                      VF_PAIR(r, 9.9996685982e-01f, 5.0003015995e-01f));
  return vf_fma(vf_fma(r, q, vf_set1(1.0f)), vf_bits_shl23(k), c);
}

/* e^x for 16-bit outputs; 0 below x = -87.33, as vf_exp. */
CPU_INLINE vf vf_exp16(vf x) {
  const vf e = vm_exp16_plus(vm_exp_clamp(x, false), vf_set1(0.0f), false);
  return vf_lt_select(x, vf_set1(-87.33f), vf_set1(0.0f), e);
}

CPU_INLINE vf vf_exp16_nonpos(vf x) {
  return vm_exp16_plus(vf_max(vf_set1(-88.0f), x), vf_set1(0.0f), false);
}

CPU_INLINE vf vf_sigmoid_den16(vf x) {
  return vm_exp16_plus(vm_exp_clamp(x, true), vf_set1(1.0f), true);
}

/* a / b for b in [1, 2^126], first order: the estimate's error e (< 4e-4) leaves e^2 < 2e-7. */
CPU_INLINE vf vf_div_pos16(vf a, vf b) {
  const vf r = vf_rcp_est(b);
  const vf q0 = vf_mul(a, r);
  return vf_fma(q0, vf_fnma(b, r, vf_set1(1.0f)), q0);
}

/* Phi(x) within 7e-7 absolute: as vf_normal_cdf with Q of degree 9, two fewer FMAs. */
CPU_INLINE vf vf_normal_cdf16(vf x) {
  static const float c[10] = {1.993378252e-01f,  -9.033974260e-02f, 5.346674472e-02f,
                              -2.997023240e-02f, 1.508104615e-02f,  -6.735517643e-03f,
                              2.612203360e-03f,  -9.160930058e-04f, 3.685336269e-04f,
                              -1.142935507e-04f};
  return vm_in_central_range(x) ? vm_normal_cdf_central(x, c, 5) : vm_normal_cdf_tails(x);
}

#endif /* KITE_CPU_VEC_MATH_H */
