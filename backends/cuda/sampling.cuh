/*
 * Device helpers of the sampling family shared by its CUDA kernels (sampling.cu: a block per row;
 * sampling_cluster.cu: a cluster of blocks per row): the order-preserving key of a logit, the
 * (value, index) order, block reductions of pairs, race scores and the candidate sort.
 */
#ifndef KITE_CUDA_SAMPLING_CUH
#define KITE_CUDA_SAMPLING_CUH

#include "common.cuh"
#include "kite/sampling.h"

namespace kite_cuda {

constexpr int kBuckets = 2048;
constexpr int kCap = 2048; /* candidates gathered in shared memory */
constexpr float kGumbelMax = 17.0f;

__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return u & 0x80000000u ? ~u : u | 0x80000000u;
}
__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float(k & 0x80000000u ? k & 0x7fffffffu : ~k);
}

/* The radix select's levels over a key: 11, 11 and 10 bits from the top. */
__device__ __forceinline__ int level_shift(int level) {
  return level == 0 ? 21 : level == 1 ? 10 : 0;
}
__device__ __forceinline__ uint32_t level_mask(int level) {
  return level == 2 ? 0x3ffu : 0x7ffu;
}
__device__ __forceinline__ int level_above(int level) { /* bits of the prefix below the shift */
  return level == 1 ? 11 : 10;
}

template <typename T> __device__ __forceinline__ float logit(const T *x, int64_t i) {
  const float v = to_float(x[i]);
  return v != v ? -INFINITY : v;
}

/* (value, index) pairs: the larger value wins, the lower index on equal values. */
__device__ __forceinline__ bool beats(float v, int64_t i, float bv, int64_t bi) {
  return v > bv || (v == bv && i < bi);
}

/* Block-wide best pair; every thread gets it. */
__device__ inline void block_best(float &v, int64_t &i) {
  __shared__ float sv[32];
  __shared__ int64_t si[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (beats(ov, oi, v, i)) v = ov, i = oi;
  }
  __syncthreads();
  if (lane == 0) sv[warp] = v, si[warp] = i;
  __syncthreads();
  v = lane < (int)(blockDim.x >> 5) ? sv[lane] : -INFINITY;
  i = lane < (int)(blockDim.x >> 5) ? si[lane] : INT64_MAX;
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (beats(ov, oi, v, i)) v = ov, i = oi;
  }
}

/* The score of token i: z - log(-log(u_i)). */
__device__ __forceinline__ float race_score(float z, uint32_t word) {
  return z - logf(-logf(kite_philox_uniform(word)));
}

/* Bitonic sort of cv/ci[0, n) in shared memory by value descending, index ascending; n <= kCap. */
__device__ inline void sort_candidates(float *cv, int32_t *ci, int n) {
  int size = 1;
  while (size < n) size <<= 1;
  for (int j = n + (int)threadIdx.x; j < size; j += blockDim.x)
    cv[j] = -INFINITY, ci[j] = INT32_MAX;
  __syncthreads();
  for (int k = 2; k <= size; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int t = threadIdx.x; t < size; t += blockDim.x) {
        const int o = t ^ j;
        if (o > t) {
          const bool first = (t & k) == 0; /* this half sorts descending */
          const bool o_before = beats(cv[o], ci[o], cv[t], ci[t]);
          if (o_before == first) {
            const float fv = cv[t];
            const int32_t fi = ci[t];
            cv[t] = cv[o], ci[t] = ci[o], cv[o] = fv, ci[o] = fi;
          }
        }
      }
      __syncthreads();
    }
}

/* The exponential race among the gathered candidates cv/ci[0, kept) that top-p's threshold lo
 * and min-p keep (m: the row max, t: the temperature). The block's threads stride by nt; every
 * thread gets the winner, or amax when no candidate scores above -inf. */
__device__ inline int64_t race_candidates(const kite_sample_row &p, const float *cv,
                                          const int32_t *ci, int kept, float lo, float m, float t,
                                          int64_t amax, int tid, int nt) {
  const float zcut = p.min_p > 0.0f ? logf(p.min_p) : -INFINITY;
  float bs = -INFINITY;
  int64_t bi = amax;
  for (int j = tid; j < kept; j += nt) {
    const float v = cv[j], z = (v - m) / t;
    if (!(v >= lo && z >= zcut)) continue;
    const float sc = race_score(z, kite_sample_words(&p, ci[j] >> 2).v[ci[j] & 3]);
    if (beats(sc, ci[j], bs, bi)) bs = sc, bi = ci[j];
  }
  block_best(bs, bi);
  return bs == -INFINITY ? amax : bi;
}

} // namespace kite_cuda

#endif /* KITE_CUDA_SAMPLING_CUH */
