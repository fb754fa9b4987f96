/*
 * The 32-value 4-bit blocks of GGUF Q4_0 and Q4_1, which are linear_wq4's SYM and MIN blocks
 * (kite.h): the one decoder of linear_wq4 (cpu_wq4.c, cpu_wq4.h's x86 block) and of linear_gguf /
 * dequant_gguf (kernels/gguf.inc).
 *
 * Value i of a block is (q_i - 8) d (Q4_0 / SYM) or q_i d + m (Q4_1 / MIN): q_i its nibble (the
 * low nibbles of the 16 bytes are values 0-15, the high ones 16-31), d the f16 scale, m the f16
 * min. (q_i - 8) d is exact in f32 (an f16 times a small integer; -0 where q_i = 8 and d < 0).
 */
#ifndef KITE_CPU_Q4_H
#define KITE_CPU_Q4_H

#include <stdint.h>
#include <string.h>

#include "kite/dtype.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

/* The f16 at p (little-endian), exactly. */
static inline float cpu_q4_half(const uint8_t *p) {
#if defined(__F16C__)
  uint16_t h;
  memcpy(&h, p, 2);
  return _cvtsh_ss(h);
#else
  return kite_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
#endif
}

/* A block's d and m (has_min: Q4_1 / MIN; else m = 0); returns its 16 bytes of nibbles. */
static inline const uint8_t *cpu_q4_scales(const uint8_t *blk, int has_min, float *d, float *m) {
  *d = cpu_q4_half(blk);
  *m = has_min ? cpu_q4_half(blk + 2) : 0.0f;
  return blk + (has_min ? 4 : 2);
}

/* The 32 nibbles of qs as floats, in value order. */
static inline void cpu_q4_nibbles(const uint8_t *qs, float *q) {
  for (int i = 0; i < 16; i++) {
    q[i] = (float)(qs[i] & 15);
    q[i + 16] = (float)(qs[i] >> 4);
  }
}

#endif /* KITE_CPU_Q4_H */
