/*
 * The f16 fields of the block formats, and the 32-value 4-bit blocks of GGUF Q4_0 and Q4_1, which
 * are linear_wq4's SYM and MIN blocks (kite.h): the one decoder of linear_wq4 (wq4.cu) and of
 * linear_gguf / dequant_gguf's per-element path (gguf.cu).
 *
 * Value i of a block is (q_i - 8) d (Q4_0 / SYM) or q_i d + m (Q4_1 / MIN): q_i its nibble (the
 * low nibbles of the 16 bytes are values 0-15, the high ones 16-31), d the f16 scale, m the f16
 * min. (q_i - 8) d is exact in f32 (-0 where q_i = 8 and d < 0); q_i d is exact, so q_i d + m
 * rounds once, as an FMA does.
 */
#ifndef KITE_CUDA_Q4_CUH
#define KITE_CUDA_Q4_CUH

#include "common.cuh"

namespace kite_cuda {

/* The f16 at p (little-endian), exactly. */
__device__ __forceinline__ float f16_at(const uint8_t *p) {
  return __half2float(__ushort_as_half((unsigned short)(p[0] | (p[1] << 8))));
}

/* A block's d and m (has_min: Q4_1 / MIN; else m = 0); returns its 16 bytes of nibbles. */
__device__ __forceinline__ const uint8_t *q4_scales(const uint8_t *blk, bool has_min, float &d,
                                                    float &m) {
  d = f16_at(blk);
  m = has_min ? f16_at(blk + 2) : 0.0f;
  return blk + (has_min ? 4 : 2);
}

/* Nibble i (< 32) of a block's qs. */
__device__ __forceinline__ int q4_nibble(const uint8_t *qs, int i) {
  return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
}

} // namespace kite_cuda

#endif /* KITE_CUDA_Q4_CUH */
