/*
 * Device helpers of the GGUF block kernels (gguf.cu: per-element decoding; gguf_mma.cu: the
 * tensor-core GEMM): the e8m0 scale field (the f16 ones and Q4_0 / Q4_1 blocks: q4.cuh), the packed
 * 6-bit scales of Q4_K / Q5_K and the code tables of IQ4_NL and MXFP4 (kite.h's formulas).
 */
#ifndef KITE_CUDA_GGUF_CUH
#define KITE_CUDA_GGUF_CUH

#include "common.cuh"
#include "q4.cuh"

namespace kite_cuda {

static __constant__ int c_iq4_nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};
/* MXFP4: the e2m1 codes doubled (kite.h's F) */
static __constant__ int c_e2m1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* MXFP4's block scale 2^(e - 128), built from its bits (exact; e < 2 is an f32 subnormal). */
__device__ __forceinline__ float mxfp4_scale(unsigned e) {
  return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

/* The 6-bit scale (want_min false) or min of sub-block s of Q4_K / Q5_K. */
__device__ __forceinline__ int k4_scale(const uint8_t *sc, int s, bool want_min) {
  if (s < 4) return want_min ? sc[s + 4] & 63 : sc[s] & 63;
  if (want_min) return (sc[s + 4] >> 4) | (sc[s] >> 6) << 4;
  return (sc[s + 4] & 15) | (sc[s - 4] >> 6) << 4;
}

} // namespace kite_cuda

#endif /* KITE_CUDA_GGUF_CUH */
