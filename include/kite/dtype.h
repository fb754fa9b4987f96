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

static inline float kite_bf16_to_f32(uint16_t h) { return kite_bits_f32((uint32_t)h << 16); }

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
  case KITE_DTYPE_F16: return kite_f16_to_f32(((const uint16_t *)p)[i]);
  case KITE_DTYPE_BF16: return kite_bf16_to_f32(((const uint16_t *)p)[i]);
  default: return ((const float *)p)[i];
  }
}

/* Stores v, rounded once, as element i of a buffer of type t (f32/f16/bf16 only). */
static inline void kite_store_f32(kite_dtype t, void *p, int64_t i, float v) {
  switch (t) {
  case KITE_DTYPE_F16: ((uint16_t *)p)[i] = kite_f32_to_f16(v); break;
  case KITE_DTYPE_BF16: ((uint16_t *)p)[i] = kite_f32_to_bf16(v); break;
  default: ((float *)p)[i] = v; break;
  }
}

#endif /* KITE_DTYPE_H */
