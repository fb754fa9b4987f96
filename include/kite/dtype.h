/*
 * Scalar conversions between f32 and the 16-bit float types, for host code (ref kernels, the
 * harness, CPU tails). Round to nearest even; NaN stays NaN; overflow to f16 gives +-inf.
 */
#ifndef KITE_DTYPE_H
#define KITE_DTYPE_H

#include <stdint.h>
#include <string.h>

#include "kite/backend.h"

static inline uint32_t kite_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float kite_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline float kite_bf16_to_f32(uint16_t h) {
  return kite_bits_f32((uint32_t)h << 16);
}

static inline uint16_t kite_f32_to_bf16(float f) {
  uint32_t u = kite_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float kite_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1fu) return kite_bits_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return kite_bits_f32(sign);
    /* subnormal: man * 2^-24 */
    float f = (float)man * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  return kite_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t kite_f32_to_f16(float f) {
  uint32_t u = kite_f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
  if (a < 0x38800000u) {                                   /* below 2^-14: subnormal or 0 */
    /* value * 2^24 rounded to nearest even gives the subnormal mantissa */
    float v = kite_bits_f32(a) * 16777216.0f;
    uint32_t m = (uint32_t)v;
    float rem = v - (float)m;
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) m++;
    return (uint16_t)(sign | m);
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
  return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

/* Element i of a buffer of type t as float (f32/f16/bf16 only). */
static inline float kite_load_f32(kite_dtype t, const void *p, int64_t i) {
  switch (t) {
  case KITE_DTYPE_F16:
    return kite_f16_to_f32(((const uint16_t *)p)[i]);
  case KITE_DTYPE_BF16:
    return kite_bf16_to_f32(((const uint16_t *)p)[i]);
  default:
    return ((const float *)p)[i];
  }
}

/* Stores v, rounded once, as element i of a buffer of type t (f32/f16/bf16 only). */
static inline void kite_store_f32(kite_dtype t, void *p, int64_t i, float v) {
  switch (t) {
  case KITE_DTYPE_F16:
    ((uint16_t *)p)[i] = kite_f32_to_f16(v);
    break;
  case KITE_DTYPE_BF16:
    ((uint16_t *)p)[i] = kite_f32_to_bf16(v);
    break;
  default:
    ((float *)p)[i] = v;
    break;
  }
}

/* v rounded to f32 "to odd": truncated towards zero, the last mantissa bit set when bits were
 * lost. Rounding that to any format at least two bits narrower (f16, bf16) gives the same as
 * rounding v there directly, so a double -> f16 / bf16 conversion through it rounds once. */
static inline float kite_f64_to_f32_odd(double v) {
  float f = (float)v; /* nearest even; exact, inf (overflow) or NaN otherwise */
  if (f != f || (double)f == v) return f;
  uint32_t u = kite_f32_bits(f);
  if (u & 1u) return f; /* the odd one of the two neighbours of v */
  /* the other neighbour, on v's side of f: away from zero when |v| > |f| */
  const double af = f < 0 ? -(double)f : (double)f, av = v < 0 ? -v : v;
  u = av > af ? u + 1u : u - 1u;
  return kite_bits_f32(u);
}

/* Stores v, rounded once, as element i of a buffer of type t (f32/f16/bf16 only): what float64
 * code (the ref backend) writes its results with. */
static inline void kite_store_f64(kite_dtype t, void *p, int64_t i, double v) {
  switch (t) {
  case KITE_DTYPE_F16:
    ((uint16_t *)p)[i] = kite_f32_to_f16(kite_f64_to_f32_odd(v));
    break;
  case KITE_DTYPE_BF16:
    ((uint16_t *)p)[i] = kite_f32_to_bf16(kite_f64_to_f32_odd(v));
    break;
  default:
    ((float *)p)[i] = (float)v;
    break;
  }
}

/* ---- fp8 e4m3fn (OCP): 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; max 448, no inf,
 * NaN = S.1111.111. f32 -> e4m3 rounds to nearest even and saturates to +-448 (inf included);
 * NaN stays NaN. */
static inline uint8_t kite_f32_to_fp8_e4m3(float f) {
  uint32_t u = kite_f32_bits(f);
  uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint8_t)(sign | 0x7fu);  /* NaN */
  if (a >= 0x43e00000u) return (uint8_t)(sign | 0x7eu); /* >= 448 (inf too): saturate */
  if (a < 0x3c800000u) {                                /* below 2^-6: subnormal or 0 */
    /* value * 2^9 rounded to nearest even is the subnormal mantissa (8 means 2^-6, the smallest
     * normal, whose encoding 0x08 follows on from the subnormals) */
    float v = kite_bits_f32(a) * 512.0f;
    uint32_t m = (uint32_t)v;
    float rem = v - (float)m;
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) m++;
    return (uint8_t)(sign | m);
  }
  /* keep 3 of the 23 mantissa bits, ties to even; a carry correctly bumps the exponent, and
   * the largest value below 448 rounds at most to 448 (0x7e) */
  uint32_t r = (a + 0x7ffffu + ((a >> 20) & 1u)) >> 20;
  return (uint8_t)(sign | (r - (120u << 3))); /* exponent bias 127 -> 7 */
}

static inline float kite_fp8_e4m3_to_f32(uint8_t v) {
  uint32_t sign = (uint32_t)(v & 0x80u) << 24;
  uint32_t exp = (v >> 3) & 0xfu;
  uint32_t man = v & 0x7u;
  if (exp == 0xfu && man == 0x7u) return kite_bits_f32(sign | 0x7fc00000u);
  if (exp == 0) {
    float f = (float)man * 0.001953125f; /* man * 2^-9 */
    return sign ? -f : f;
  }
  return kite_bits_f32(sign | ((exp + 120u) << 23) | (man << 20));
}

#endif /* KITE_DTYPE_H */
