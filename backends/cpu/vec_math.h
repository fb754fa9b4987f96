/*
 * Division, exp and erfc over the vector layer, for the SIMD headers (vec_avx2.h, vec_avx512.h),
 * which include this after their primitives. Besides those of vec_scalar.h's list they provide
 *   vf_fnma(a, b, c) = c - a * b, vf_rcp_est (reciprocal estimate), vf_bits_shl23 (the float
 *   whose bits are the argument's shifted left by 23), vf_select_neg(s, x, y) (sign of s ? x : y).
 * The polynomial coefficients are Chebyshev fits made for kite in extended precision.
 */
#ifndef KITE_CPU_VEC_MATH_H
#define KITE_CPU_VEC_MATH_H

/* a / b for b in [1, 2^126] (sigmoid's 1 + e^-x, erfc's 1 + 0.4 |x|) without the divider, which
 * takes 5 to 16 cycles per vector: the reciprocal estimate, one Newton step, then one correction
 * of the quotient, q + r (a - b q). About 1 ulp; 2^126 < b gives 0 (the estimate flushes). */
CPU_INLINE vf vf_div_pos(vf a, vf b) {
  const vf r0 = vf_rcp_est(b);
  const vf r = vf_fma(r0, vf_fnma(b, r0, vf_set1(1.0f)), r0);
  const vf q = vf_mul(a, r);
  return vf_fma(vf_fnma(b, q, a), r, q);
}

/* e^x = 2^n e^r with n = round(x / ln2) and |r| <= ln2 / 2, where e^r = 1 + r q(r), q a degree 5
 * fit of expm1(r) / r (error 4e-9). n comes from adding 1.5 * 2^23 + 127: the sum rounds to an
 * integer, its low mantissa bits hold n + 127, and shifting them into the exponent field gives
 * 2^n. Results below 2^-126 (x < -87.33) flush to 0 (so exp(-inf) = 0); above x = 88.37
 * (n = 127) the result saturates near 2^127 instead of reaching inf, which no caller needs:
 * sigmoid only sees 1 / (1 + huge) there. NaN stays NaN. */
CPU_INLINE vf vf_exp(vf x) {
  const vf lo = vf_set1(-87.33f), magic = vf_set1(12583039.0f); /* 1.5 * 2^23 + 127 */
  const vf xc = vf_max(lo, vf_min(vf_set1(88.37f), x));
  const vf k = vf_fma(xc, vf_set1(1.44269504089f), magic);
  const vf n = vf_sub(k, magic);
  /* r = x - n ln2 with ln2 split in two (the high part has 9 trailing zero bits) */
  vf r = vf_fma(n, vf_set1(-0.693145751953125f), xc);
  r = vf_fma(n, vf_set1(-1.428606820309e-6f), r);
  vf q = vf_set1(1.3933641032e-03f);
  q = vf_fma(q, r, vf_set1(8.3691484909e-03f));
  q = vf_fma(q, r, vf_set1(4.1666465006e-02f));
  q = vf_fma(q, r, vf_set1(1.6666505260e-01f));
  q = vf_fma(q, r, vf_set1(5.0000000135e-01f));
  q = vf_fma(q, r, vf_set1(1.0000000108e+00f));
  const vf e = vf_mul(vf_fma(r, q, vf_set1(1.0f)), vf_bits_shl23(k));
  return vf_lt_select(x, lo, vf_set1(0.0f), e);
}

/* erfc(a) = t exp(-a^2 + P(t - 0.6)) for a = |x|, t = 1 / (1 + 0.4 a), with P a degree 9 fit
 * over a in [0, 10] (relative error 5e-8 before rounding); erfc(-a) = 2 - erfc(a). The same
 * formula keeps its relative accuracy far into the tail, where 1 - erf(a) would cancel. Past
 * a = 10 the exponent is below -87 and exp flushes the result to 0, as it should. */
CPU_INLINE vf vf_erfc(vf x) {
  const vf one = vf_set1(1.0f);
  const vf a = vf_abs(x);
  const vf t = vf_div_pos(one, vf_fma(vf_min(vf_set1(1e30f), a), vf_set1(0.4f), one));
  const vf u = vf_sub(t, vf_set1(0.6f));
  vf p = vf_set1(7.169374137e-02f);
  p = vf_fma(p, u, vf_set1(-2.124336348e-01f));
  p = vf_fma(p, u, vf_set1(-9.669428632e-02f));
  p = vf_fma(p, u, vf_set1(3.075179865e-01f));
  p = vf_fma(p, u, vf_set1(1.329682620e-01f));
  p = vf_fma(p, u, vf_set1(-3.626233406e-01f));
  p = vf_fma(p, u, vf_set1(-2.959379423e-01f));
  p = vf_fma(p, u, vf_set1(4.908538267e-01f));
  p = vf_fma(p, u, vf_set1(1.632359065e+00f));
  p = vf_fma(p, u, vf_set1(-7.055994216e-01f));
  const vf e = vf_mul(t, vf_exp(vf_fma(vf_sub(vf_set1(0.0f), a), a, p)));
  return vf_select_neg(x, vf_sub(vf_set1(2.0f), e), e);
}

#endif /* KITE_CPU_VEC_MATH_H */
