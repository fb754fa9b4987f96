/*
 * Device helpers of the sampling family shared by its CUDA kernels (sampling.cu: a block per row;
 * sampling_cluster.cu: a cluster of blocks per row): the order-preserving key of a logit, the
 * (value, index) order, block reductions of pairs, race scores, the candidate sort, and the whole
 * row sampled by one block (block_sample_row, shared with sampling_select.cu's fallback).
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

/* The sum of v over the block, added in the same order in every thread (the same total in each);
 * scratch: a double per warp in shared memory. */
__device__ inline double block_sum_ordered(double v, double *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double t = 0.0;
  for (int w = 0; w < (int)(blockDim.x >> 5); w++) t += scratch[w];
  return t;
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

/* One row's radix-select state in block_sample_row. */
struct RowState {
  uint32_t bucket[3];
  int64_t above; /* count above the selected bucket */
  double mass_above;
  float lo;
  int gathered; /* candidates in shared memory */
};

/* sample for row r with the block alone (any block size): sampling.cu's kernel, and the fallback
 * of the kernels that split a row when a row takes no top-k or ties overflow their candidates. */
template <typename T>
__device__ __noinline__ void block_sample_row(const kite_sample_args &a, int64_t r) {
  __shared__ uint32_t hc[kBuckets];
  __shared__ float hm[kBuckets];
  __shared__ float cv[kCap];
  __shared__ int32_t ci[kCap];
  __shared__ RowState st;
  __shared__ int s_n;
  const int tid = threadIdx.x, nt = blockDim.x;
  const int64_t V = a.vocab;
  const T *x = (const T *)a.logits + r * a.logits_stride;
  const kite_sample_row p = kite_sample_row_get(&a, r);
  const bool topk = !p.greedy && p.top_k > 0;
  __syncthreads(); /* the previous row is done with shared memory */
  for (int b = tid; b < kBuckets; b += nt) hc[b] = 0;
  __syncthreads();
  /* pass 1: max, its lowest index, top-11-bit counts */
  float m = -INFINITY;
  int64_t amax = INT64_MAX;
  for (int64_t i = tid; i < V; i += nt) {
    const float v = logit(x, i);
    if (v > m) m = v, amax = i;
    if (topk) atomicAdd(&hc[order_key(v) >> 21], 1u);
  }
  block_best(m, amax);
  if (m == -INFINITY) amax = 0;
  if (p.greedy || isinf(m)) {
    if (tid == 0) a.tokens[r] = (int32_t)amax;
    return;
  }
  const float t = p.temperature;
  float lo = -INFINITY;
  bool gathered = false;
  int n = 0;
  if (topk) {
    /* radix select of the k-th largest: level l narrows the key to bucket[l] */
    uint32_t prefix = 0;
    int64_t above = 0;
    for (int level = 0; level < 3 && !gathered; level++) {
      const int shift = level_shift(level);
      const uint32_t mask = level_mask(level);
      if (level > 0) {
        __syncthreads();
        for (int b = tid; b < kBuckets; b += nt) hc[b] = 0;
        __syncthreads();
        for (int64_t i = tid; i < V; i += nt) {
          const uint32_t k = order_key(logit(x, i));
          if (k >> (shift + level_above(level)) == prefix) atomicAdd(&hc[(k >> shift) & mask], 1u);
        }
      }
      __syncthreads();
      if (tid == 0) {
        uint32_t b = mask;
        int64_t ab = above;
        while (b > 0 && ab + hc[b] < p.top_k) ab += hc[b--];
        st.bucket[level] = b;
        st.above = ab;
        st.gathered = ab + hc[b] <= kCap;
      }
      __syncthreads();
      prefix = level == 0 ? st.bucket[0] : (prefix << level_above(level)) | st.bucket[level];
      above = st.above;
      const uint32_t lo_key = prefix << shift; /* smallest key of the selected bucket */
      if (st.gathered || level == 2) {
        if (level == 2) lo = key_value(prefix);
        if (!st.gathered) break;
        /* gather every logit with a key at or above the bucket's smallest */
        if (tid == 0) s_n = 0;
        __syncthreads();
        for (int64_t i = tid; i < V; i += nt) {
          const float v = logit(x, i);
          if (order_key(v) >= lo_key) {
            const int at = atomicAdd(&s_n, 1);
            if (at < kCap) cv[at] = v, ci[at] = (int32_t)i;
          }
        }
        __syncthreads();
        n = s_n < kCap ? s_n : kCap;
        gathered = true;
      }
    }
  }
  if (gathered) {
    sort_candidates(cv, ci, n);
    if (tid == 0) {
      /* top-k keeps the k-th largest and its ties; top-p walks groups of equal logits */
      const float kth = cv[p.top_k - 1];
      int kept = (int)p.top_k;
      while (kept < n && cv[kept] >= kth) kept++;
      float lo_s = kth;
      if (p.top_p < 1.0f) {
        double z = 0.0;
        for (int j = 0; j < kept; j++) z += (double)expf((cv[j] - m) / t);
        const double target = (double)p.top_p * z;
        double above_m = 0.0;
        int j = 0;
        while (j < kept) {
          if (j > 0 && !(above_m < target)) break;
          const float g = cv[j];
          lo_s = g;
          while (j < kept && cv[j] == g) above_m += (double)expf((cv[j++] - m) / t);
        }
      }
      st.lo = lo_s;
      s_n = kept;
    }
    __syncthreads();
    lo = st.lo;
    const int kept = s_n;
    const int64_t tok = race_candidates(p, cv, ci, kept, lo, m, t, amax, tid, nt);
    if (tid == 0) a.tokens[r] = (int32_t)tok;
    return;
  }
  /* top-p by mass over the tokens >= lo (top-k's threshold, or all) */
  if (p.top_p < 1.0f) {
    if (p.top_p <= 0.0f) {
      lo = m;
    } else {
      const float lo_k = lo;
      uint32_t prefix = 0;
      double above_m = 0.0, target = 0.0;
      for (int level = 0; level < 3; level++) {
        const int shift = level_shift(level);
        const uint32_t mask = level_mask(level);
        __syncthreads();
        for (int b = tid; b < kBuckets; b += nt) hm[b] = 0.0f;
        __syncthreads();
        float zsum = 0.0f;
        for (int64_t i = tid; i < V; i += nt) {
          const float v = logit(x, i);
          if (!(v >= lo_k)) continue;
          const uint32_t k = order_key(v);
          if (level > 0 && k >> (shift + level_above(level)) != prefix) continue;
          const float w = expf((v - m) / t);
          zsum += w;
          atomicAdd(&hm[(k >> shift) & mask], w);
        }
        if (level == 0) {
          zsum = block_sum(zsum);
          target = (double)p.top_p * (double)zsum;
        }
        __syncthreads();
        if (tid == 0) {
          uint32_t b = mask;
          double ab = above_m;
          while (b > 0 && !(ab + (double)hm[b] >= target)) ab += (double)hm[b--];
          st.bucket[level] = b;
          st.mass_above = ab;
        }
        __syncthreads();
        prefix = level == 0 ? st.bucket[0] : (prefix << level_above(level)) | st.bucket[level];
        above_m = st.mass_above;
      }
      lo = fmaxf(lo_k, key_value(prefix));
    }
  }
  /* the race over the row, from the max's own score */
  const float zcut = p.min_p > 0.0f ? logf(p.min_p) : -INFINITY;
  const float s0 = race_score(0.0f, kite_sample_words(&p, amax >> 2).v[amax & 3]);
  float bs = s0;
  int64_t bi = amax;
  for (int64_t q = tid; q < (V + 3) / 4; q += nt) {
    float v[4], z[4];
    bool any = false;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int64_t i = 4 * q + j;
      v[j] = i < V ? logit(x, i) : -INFINITY;
      z[j] = (v[j] - m) / t;
      any |= v[j] >= lo && z[j] >= zcut && z[j] + kGumbelMax >= s0;
    }
    if (!any) continue;
    const kite_philox4 w = kite_sample_words(&p, q);
#pragma unroll
    for (int j = 0; j < 4; j++) {
      if (!(v[j] >= lo && z[j] >= zcut)) continue;
      const float sc = race_score(z[j], w.v[j]);
      if (beats(sc, 4 * q + j, bs, bi)) bs = sc, bi = 4 * q + j;
    }
  }
  block_best(bs, bi);
  if (tid == 0) a.tokens[r] = (int32_t)(bi >= 0 && bi < V ? bi : amax);
}

} // namespace kite_cuda

#endif /* KITE_CUDA_SAMPLING_CUH */
