/*
 * Philox-4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3",
 * SC 2011): a counter-based generator, so any thread of any backend computes the draw of any
 * (key, counter) on its own and every backend draws the same 32-bit words. Plain C usable from
 * host code and from CUDA device code (KITE_HD).
 */
#ifndef KITE_PHILOX_H
#define KITE_PHILOX_H

#include <stdint.h>

#if defined(__CUDACC__)
#define KITE_HD __host__ __device__ __forceinline__
#else
#define KITE_HD static inline
#endif

typedef struct kite_philox4 {
  uint32_t v[4];
} kite_philox4;

#define KITE_PHILOX_M0 0xD2511F53u
#define KITE_PHILOX_M1 0xCD9E8D57u
#define KITE_PHILOX_W0 0x9E3779B9u /* golden ratio */
#define KITE_PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

/* 10 rounds of the Philox-4x32 bijection of counter c under key (k0, k1). */
KITE_HD kite_philox4 kite_philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                        uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; r++) {
    const uint64_t p0 = (uint64_t)KITE_PHILOX_M0 * c0;
    const uint64_t p1 = (uint64_t)KITE_PHILOX_M1 * c2;
    const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += KITE_PHILOX_W0;
    k1 += KITE_PHILOX_W1;
  }
  kite_philox4 out = {{c0, c1, c2, c3}};
  return out;
}

/* A 32-bit word as a uniform in (0, 1): its top 23 bits b give (b + 0.5) / 2^23, an odd multiple
 * of 2^-24 that a float holds exactly, never 0 or 1 (so both logarithms of a Gumbel draw are
 * finite). */
KITE_HD float kite_philox_uniform(uint32_t x) {
  return ((float)(x >> 9) + 0.5f) * (1.0f / 8388608.0f);
}

#endif /* KITE_PHILOX_H */
