/*
 * The candidate buffer of cuda.select / cuda.select16 (sampling_select.cu, its only user): a
 * block's shared state (two buffers of kCand logits and their indices, the histogram, tau), the
 * warp- aggregated appends, the shrink to a higher tau by a 256-bin histogram, and the stream of a
 * slice through tau. The file comment of sampling_select.cu says how they keep a superset of
 * top-k's set.
 */
#ifndef KITE_CUDA_SAMPLING_SELECT_CUH
#define KITE_CUDA_SAMPLING_SELECT_CUH

#include "sampling.cuh"
#include "sampling_select_trace.cuh"

/* the unnamed namespace of sampling_select.cu, its one includer */
namespace {

using namespace kite_cuda;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kCand = 4096; /* candidates a block holds */
constexpr int kBins = 256;
constexpr int kPortable = 8;    /* the portable cluster size */
constexpr int kMaxCluster = 16; /* the non-portable one, where the device places it */

struct Shared {
  float v[2][kCand];
  int32_t i[2][kCand];
  uint32_t hist[kBins];
  int n;   /* slots taken in the current buffer; above kCand when some did not fit */
  int cur; /* the current buffer */
  int fail;
  int bin;
  int kept;
  uint32_t min_key;
  uint32_t bound_key; /* the first step's bound on tau (cuda.select16) */
  float tau;
  float m; /* published max and its index, for block 0 */
  int64_t amax;
  int off[kMaxCluster + 1]; /* block 0: where each peer's candidates start in the merged stream */
  int fits; /* block 0: its candidates and every peer's fit in one buffer (the gathered merge) */
  double wsum[kWarps];
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr int64_t kMaxK = 1024; /* the largest top-k the candidate buffers serve */

/* The c-th largest (1 <= c <= 32) of the warp's x; every lane gets it. Each lane's rank (larger
 * values first, lower lanes first among equal ones) is distinct, so one lane holds rank c - 1. */
__device__ __forceinline__ float warp_kth(float x, int c) {
  const int lane = threadIdx.x & 31;
  int rank = 0;
#pragma unroll
  for (int l = 0; l < 32; l++) {
    const float y = __shfl_sync(0xffffffffu, x, l);
    rank += y > x || (y == x && l < lane);
  }
  const unsigned who = __ballot_sync(0xffffffffu, rank == c - 1);
  return __shfl_sync(0xffffffffu, x, __ffs(who) - 1);
}

/* Appends (v, i) where `want`, a warp at a time (every lane calls it); true when it was stored. */
__device__ __forceinline__ bool append(Shared *sh, bool want, float v, int32_t i) {
  const unsigned ball = __ballot_sync(0xffffffffu, want);
  if (!ball) return false;
  const int lane = threadIdx.x & 31, leader = __ffs(ball) - 1;
  int base = 0;
  if (lane == leader) base = atomicAdd(&sh->n, __popc(ball));
  base = __shfl_sync(0xffffffffu, base, leader);
  const int at = base + __popc(ball & ((1u << lane) - 1u));
  if (!want || at >= kCand) return false;
  sh->v[sh->cur][at] = v;
  sh->i[sh->cur][at] = i;
  return true;
}

/* Appends this lane's v[j] (index id(j)) whose bit j of pend is set, for the whole warp at once:
 * one slot reservation, each lane's slots after the lanes below it (every lane calls it). Returns
 * the bits of those that did not fit (slots from kCand on). */
template <int kN, typename Id>
__device__ __forceinline__ unsigned append_all(Shared *sh, unsigned pend, const float (&v)[kN],
                                               Id id) {
  const int lane = threadIdx.x & 31, cnt = __popc(pend);
  int incl = cnt; /* an inclusive scan of the lanes' counts */
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  const int total = __shfl_sync(0xffffffffu, incl, 31);
  if (!total) return 0;
  int at = 0;
  if (lane == 0) at = atomicAdd(&sh->n, total);
  at = __shfl_sync(0xffffffffu, at, 0) + incl - cnt;
  const int cur = sh->cur;
  unsigned left = 0;
#pragma unroll
  for (int j = 0; j < kN; j++)
    if ((pend >> j) & 1u) {
      if (at < kCand) {
        sh->v[cur][at] = v[j];
        sh->i[cur][at] = id(j);
      } else {
        left |= 1u << j;
      }
      at++;
    }
  return left;
}

/* The bin of v among kBins: 0 for values below lo (only -inf), then 1 + the equal-width bin of
 * [lo, hi] (scale = 254 / (hi - lo), 0 when that is not finite). Monotonic in v: fl(v - lo) and its
 * product by scale are, NaN (+inf times 0) lands in the last bin, and so does +inf. */
__device__ __forceinline__ int bin_of(float v, float lo, float scale) {
  if (v < lo) return 0;
  const float d = (v - lo) * scale;
  return 1 + (d < 254.0f ? (int)d : 254);
}

/* Shrinks the buffer to the logits >= a higher tau while more than `goal` remain, keeping at least
 * k (the buffer holds more than k). false when a pass cannot drop any (ties). Ends with a barrier.
 */
__device__ bool shrink(Shared *sh, int64_t k, int goal) {
  const int tid = threadIdx.x;
  for (int round = 0; round < 8; round++) {
    __syncthreads(); /* every thread has read sh->n */
    const int n = sh->n < kCand ? sh->n : kCand, cur = sh->cur;
    if (n <= goal) return true;
    trace_count(3, 1, true);
    const float *bv = sh->v[cur];
    float lo = INFINITY, hi = -INFINITY;
    for (int e = tid; e < n; e += kThreads) {
      const float v = bv[e];
      if (v > -INFINITY) lo = fminf(lo, v);
      hi = fmaxf(hi, v);
    }
    for (int b = tid; b < kBins; b += kThreads) sh->hist[b] = 0;
    lo = -block_max(-lo);
    hi = block_max(hi);
    float scale = 254.0f / (hi - lo);
    if (!(scale <= 1e30f)) scale = 0.0f; /* hi = lo, infinite or denormal spans */
    for (int e = tid; e < n; e += kThreads) atomicAdd(&sh->hist[bin_of(bv[e], lo, scale)], 1u);
    __syncthreads();
    if (tid < 32) { /* the highest bin b with k or more logits in bins >= b */
      constexpr int per = kBins / 32;
      uint32_t own = 0;
#pragma unroll
      for (int j = 0; j < per; j++) own += sh->hist[tid * per + j];
      uint32_t above = 0; /* the lanes above this one, added in the same order in every lane */
      for (int l = 31; l > 0; l--) {
        const uint32_t y = __shfl_sync(0xffffffffu, own, l);
        if (l > tid) above += y;
      }
      int best = -1;
      uint32_t s = above, cnt = 0;
      for (int j = per - 1; j >= 0; j--) {
        s += sh->hist[tid * per + j];
        if (best < 0 && s >= (uint64_t)k) best = tid * per + j, cnt = s;
      }
      const unsigned has = __ballot_sync(0xffffffffu, best >= 0);
      const int top = has ? 31 - __clz(has) : 0; /* the highest lane holding such a bin */
      if (tid == top) {
        sh->bin = best < 0 ? 0 : best, sh->kept = best < 0 ? n : (int)cnt;
        sh->min_key = 0xffffffffu;
      }
    }
    __syncthreads();
    const int b0 = sh->bin, kept = sh->kept;
    if (kept >= n) return false; /* nothing to drop: ties at the top */
    const int nxt = cur ^ 1;
    if (tid == 0) sh->n = 0;
    __syncthreads();
    /* the logits of bins >= b0, into the other buffer; tau = the smallest of them */
    uint32_t mk = 0xffffffffu;
    for (int e0 = 0; e0 < n; e0 += kThreads) {
      const int e = e0 + tid;
      const float v = e < n ? bv[e] : -INFINITY;
      const bool keep = e < n && bin_of(v, lo, scale) >= b0;
      const unsigned ball = __ballot_sync(0xffffffffu, keep);
      if (ball) {
        const int lane = tid & 31, leader = __ffs(ball) - 1;
        int base = 0;
        if (lane == leader) base = atomicAdd(&sh->n, __popc(ball));
        base = __shfl_sync(0xffffffffu, base, leader);
        if (keep) {
          const int at = base + __popc(ball & ((1u << lane) - 1u));
          sh->v[nxt][at] = v;
          sh->i[nxt][at] = sh->i[cur][e];
          mk = min(mk, order_key(v));
        }
      }
    }
    atomicMin(&sh->min_key, mk);
    __syncthreads();
    if (tid == 0) sh->cur = nxt, sh->tau = key_value(sh->min_key);
  }
  __syncthreads();
  return true;
}

/* Streams count logits, value(q) and index(q), through tau into the buffer, kPer a thread per step;
 * with kMax, tracks the largest and its lowest index in m / amax (per thread; index(q) grows with
 * q). With want false only the max. With kBound, the first step raises tau to the smallest over
 * the warps of each warp's ceil(k / kWarps)-th largest thread maximum when k <= 32 kWarps: every
 * warp has that many logits at or above it, k in all, so it stays <= the k-th largest (reads
 * sh->bound_key, all ones at the start). Returns false when the buffer could not be shrunk
 * (sh->fail set; the max still covers every logit); every thread returns the same. index(q) is
 * read for appended logits only. kOne: a warp appends a step's logits with one reservation
 * (append_all), not one a logit slot (append). */
template <int kPer, bool kMax, bool kBound, bool kOne, typename Value, typename Index>
__device__ bool stream(Shared *sh, int64_t count, int64_t k, const bool want, Value value,
                       Index index, float &m, int64_t &amax) {
  constexpr int kStep = kThreads * kPer; /* logits a block streams per step */
  const int tid = threadIdx.x;
  bool filter = want;
  for (int64_t base = 0; base < count; base += kStep) {
    float v[kPer];
#pragma unroll
    for (int j = 0; j < kPer; j++) {
      const int64_t q = base + j * kThreads + tid;
      v[j] = q < count ? value(q) : -INFINITY;
    }
    if (kMax)
#pragma unroll
      for (int j = 0; j < kPer; j++)
        if (v[j] > m) m = v[j], amax = index(base + j * kThreads + tid);
    if (kMax && base == 0) trace(1);
    if (!filter) continue;
    float tau = sh->tau;
    bool publish = false; /* tau raised by the bound: sh->tau takes it after the next barrier */
    if (kBound && base == 0 && k <= 32 * kWarps) {
      float tm = -INFINITY; /* out-of-range logits are -inf */
#pragma unroll
      for (int j = 0; j < kPer; j++) tm = fmaxf(tm, v[j]);
      const float b = warp_kth(tm, (int)((k + kWarps - 1) / kWarps));
      if ((tid & 31) == 0) atomicMin(&sh->bound_key, order_key(b));
      __syncthreads();
      tau = fmaxf(tau, key_value(sh->bound_key));
      publish = true;
      trace(2);
    }
    unsigned pend = 0;
#pragma unroll
    for (int j = 0; j < kPer; j++)
      if (base + j * kThreads + tid < count && v[j] >= tau) pend |= 1u << j;
    for (;;) {
      if (kOne) {
        pend = append_all(sh, pend, v,
                          [&](int j) { return (int32_t)index(base + j * kThreads + tid); });
      } else {
#pragma unroll
        for (int j = 0; j < kPer; j++) {
          const bool w = (pend >> j) & 1u;
          const int32_t id = w ? (int32_t)index(base + j * kThreads + tid) : 0;
          if (append(sh, w, v[j], id)) pend &= ~(1u << j);
        }
      }
      __syncthreads();
      if (publish) {
        if (tid == 0) sh->tau = tau; /* every thread read sh->tau before the barrier */
        publish = false;
      }
      const bool over = sh->n > kCand;
      if (!over) break;
      if (!shrink(sh, k, kCand / 2)) { /* ties: the max alone from here on */
        if (tid == 0) sh->fail = 1;
        filter = false;
        break;
      }
      const float t2 = sh->tau;
#pragma unroll
      for (int j = 0; j < kPer; j++)
        if (!(v[j] >= t2)) pend &= ~(1u << j);
    }
    __syncthreads(); /* every thread has read sh->n before the next appends */
  }
  return filter || !want;
}
#endif /* __CUDA_ARCH__ >= 900 */

} // namespace

#endif /* KITE_CUDA_SAMPLING_SELECT_CUH */
