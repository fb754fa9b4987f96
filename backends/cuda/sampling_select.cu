/*
 * sample with top-k on Hopper, without a sort and without a histogram of the row: each block
 * streams its part of a row once and keeps, in shared memory, every logit at or above a running
 * threshold tau that never exceeds the row's k-th largest, so that the kept logits are a superset
 * of top-k's set. A row is split over a cluster of 1 to 8 blocks (8 at B = 1, 1 at B >= 2 x the
 * multiprocessors): each block streams a slice, block 0 merges its peers' candidates through
 * distributed shared memory and finishes the row. One launch per call.
 *
 * Streaming: a block loads 8 logits a thread per step (4096 a step, all loads in flight), tracks
 * the max and its lowest index, and appends those >= tau to a buffer of 4096 (warp-aggregated
 * slots). When the buffer overflows, it shrinks: a 256-bin histogram of the buffer (bin 0 for
 * -inf, 255 equal bins between its smallest finite value and its max; the bin of a value is
 * monotonic in it) picks the highest bin b whose bins >= b hold k or more; the logits of those
 * bins are exactly those >= the smallest of them, which becomes tau (still <= the k-th largest:
 * the buffer holds k logits >= it). The logits that did not fit are still in registers and are
 * appended again against the new tau. Real rows shrink once or twice per row.
 *
 * Finishing (block 0, n candidates, shrunk towards 2k): top-k keeps candidate i when fewer than k
 * candidates are strictly larger (ties with the k-th are kept: kite.h's rule); every logit larger
 * than a candidate is itself a candidate, so the counts are the row's. top-p keeps a top-k survivor
 * when the mass (softmax at temperature t over the survivors, in double) of the strictly larger
 * survivors is < top_p of their total, the largest always; min-p, then the exponential race with
 * kite/sampling.h's draws, as every backend. The mass sums run over the candidates in the order
 * they were appended, which varies from run to run: the top-p boundary may move by a rounding error
 * of a double sum, within the near-tie kite.h allows.
 *
 * Rows without top-k (or k > 1024), greedy rows aside, and rows whose ties keep more than half the
 * buffer above any threshold (e.g. 4096 equal logits at the k-th largest) go to block_sample_row in
 * block 0: the one-block kernel, exact for every row, slower.
 */
#include <cooperative_groups.h>

#include "sampling.cuh"

using namespace kite_cuda;

namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kPer = 8;     /* logits a thread has in flight per step */
constexpr int kCand = 4096; /* candidates a block holds */
constexpr int kBins = 256;
constexpr int kMaxCluster = 8; /* the portable cluster size */
static_assert(kPer <= 32, "a thread's pending logits are a 32-bit mask");

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
  float tau;
  float m; /* published max and its index, for block 0 */
  int64_t amax;
  int off[kMaxCluster + 1]; /* block 0: where each peer's candidates start in the merged stream */
  double wsum[kWarps];
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KITE_SAMPLING_SELECT 1

constexpr int kStep = kThreads * kPer; /* logits a block streams per step */
constexpr int64_t kMaxK = 1024;        /* the largest top-k the candidate buffers serve */

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

/* Streams count logits, value(q) and index(q), through tau into the buffer; with kMax, tracks the
 * largest and its lowest index in m / amax (per thread; index(q) grows with q). With want false
 * only the max. Returns false when the buffer could not be shrunk (sh->fail set; the max still
 * covers every logit); every thread returns the same. index(q) is read for appended logits only. */
template <bool kMax, typename Value, typename Index>
__device__ bool stream(Shared *sh, int64_t count, int64_t k, const bool want, Value value,
                       Index index, float &m, int64_t &amax) {
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
    if (!filter) continue;
    const float tau = sh->tau;
    unsigned pend = 0;
#pragma unroll
    for (int j = 0; j < kPer; j++)
      if (base + j * kThreads + tid < count && v[j] >= tau) pend |= 1u << j;
    for (;;) {
#pragma unroll
      for (int j = 0; j < kPer; j++) {
        const bool w = (pend >> j) & 1u;
        const int32_t id = w ? (int32_t)index(base + j * kThreads + tid) : 0;
        if (append(sh, w, v[j], id)) pend &= ~(1u << j);
      }
      __syncthreads();
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

/* Block 0's end of a top-k row: the kept set among the candidates, then the race. */
__device__ int64_t finish(Shared *sh, const kite_sample_row &p, float m, int64_t amax) {
  const int tid = threadIdx.x;
  const int64_t k = p.top_k;
  shrink(sh, k, (int)(2 * k > 64 ? 2 * k : 64)); /* fewer pairs below; false only on ties */
  const int n = sh->n < kCand ? sh->n : kCand, cur = sh->cur;
  const float *cv = sh->v[cur];
  const int32_t *ci = sh->i[cur];
  float *w = sh->v[cur ^ 1]; /* top-k survivors' weights, -1 for the others */
  const float t = p.temperature;
  double part = 0.0;
  for (int e = tid; e < n; e += kThreads) {
    const float v = cv[e];
    int64_t gt = 0;
    for (int f = 0; f < n; f++) gt += cv[f] > v;
    w[e] = gt < k ? expf((v - m) / t) : -1.0f;
    if (gt < k) part += (double)w[e];
  }
  const double target =
      (double)p.top_p * block_sum_ordered(part, sh->wsum); /* its barriers publish w */
  const float zcut = p.min_p > 0.0f ? logf(p.min_p) : -INFINITY;
  float bs = -INFINITY;
  int64_t bi = amax;
  for (int e = tid; e < n; e += kThreads) {
    if (w[e] < 0.0f) continue;
    const float v = cv[e], z = (v - m) / t;
    if (p.top_p < 1.0f && v != m) {
      double above = 0.0;
      for (int f = 0; f < n; f++)
        if (w[f] >= 0.0f && cv[f] > v) above += (double)w[f];
      if (!(above < target)) continue;
    }
    if (!(z >= zcut)) continue;
    const float sc = race_score(z, kite_sample_words(&p, ci[e] >> 2).v[ci[e] & 3]);
    if (beats(sc, ci[e], bs, bi)) bs = sc, bi = ci[e];
  }
  block_best(bs, bi);
  return bs == -INFINITY ? amax : bi;
}

template <typename T>
__device__ void select_row(cg::cluster_group &g, Shared *sh, const kite_sample_args &a, int64_t r) {
  const int tid = threadIdx.x;
  const int rank = (int)g.block_rank(), blocks = (int)g.num_blocks();
  const int64_t V = a.vocab, S = (V + blocks - 1) / blocks, begin = rank * S;
  const int64_t len = begin >= V ? 0 : V - begin < S ? V - begin : S;
  const T *x = (const T *)a.logits + r * a.logits_stride;
  const kite_sample_row p = kite_sample_row_get(&a, r);
  const bool topk = !p.greedy && p.top_k > 0 && p.top_k <= kMaxK;
  if (!p.greedy && !topk) { /* no top-k: the one-block kernel's passes */
    if (rank == 0) block_sample_row<T>(a, r);
    return;
  }
  if (tid == 0) sh->n = 0, sh->cur = 0, sh->fail = 0, sh->tau = -INFINITY;
  __syncthreads();
  float m = -INFINITY;
  int64_t amax = INT64_MAX;
  const bool ok = stream<true>(
      sh, len, p.top_k, topk, [&](int64_t q) { return logit(x, begin + q); },
      [&](int64_t q) { return begin + q; }, m, amax);
  if (ok && topk) shrink(sh, p.top_k, (int)(2 * p.top_k > 64 ? 2 * p.top_k : 64));
  block_best(m, amax);
  if (tid == 0) sh->m = m, sh->amax = amax;
  g.sync();
  if (rank == 0) {
    bool fail = false;
    for (int b = 1; b < blocks; b++) {
      const Shared *q = g.map_shared_rank(sh, b);
      if (beats(q->m, q->amax, m, amax)) m = q->m, amax = q->amax;
      fail |= q->fail != 0;
    }
    fail |= sh->fail != 0;
    if (m == -INFINITY) amax = 0;
    if (p.greedy || isinf(m)) {
      if (tid == 0) a.tokens[r] = (int32_t)amax;
    } else if (fail) {
      block_sample_row<T>(a, r);
    } else {
      /* the peers' candidates, one stream over their buffers in rank order */
      if (tid <= blocks) {
        int off = 0;
        for (int b = 1; b < tid; b++) {
          const Shared *q = g.map_shared_rank(sh, b);
          off += q->n < kCand ? q->n : kCand;
        }
        sh->off[tid] = off; /* sh->off[b]: the first of peer b's; off[blocks]: the total */
      }
      __syncthreads();
      const auto at = [&](int64_t q, int &b) {
        b = 1;
        while (b + 1 < blocks && q >= sh->off[b + 1]) b++;
        return (int)(q - sh->off[b]);
      };
      float m2 = m;
      int64_t a2 = amax;
      const bool merged = stream<false>(
          sh, sh->off[blocks], p.top_k, true,
          [&](int64_t q) {
            int b;
            const int e = at(q, b);
            const Shared *o = g.map_shared_rank(sh, b);
            return o->v[o->cur][e];
          },
          [&](int64_t q) {
            int b;
            const int e = at(q, b);
            const Shared *o = g.map_shared_rank(sh, b);
            return (int64_t)o->i[o->cur][e];
          },
          m2, a2);
      if (merged) {
        const int64_t tok = finish(sh, p, m, amax);
        if (tid == 0) a.tokens[r] = (int32_t)(tok >= 0 && tok < V ? tok : amax);
      } else {
        block_sample_row<T>(a, r);
      }
    }
  }
  g.sync(); /* the peers' buffers are no longer read */
}

#endif /* __CUDA_ARCH__ >= 900 */

template <typename T>
__global__ __launch_bounds__(kThreads, 2) void sample_select_kernel(kite_sample_args a) {
#ifdef KITE_SAMPLING_SELECT
  extern __shared__ float4 smem[];
  Shared *sh = (Shared *)smem;
  cg::cluster_group g = cg::this_cluster();
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    select_row<T>(g, sh, a, r);
    __syncthreads();
  }
#endif
}

/* Blocks per row: enough clusters to give every multiprocessor two blocks, 1 to 8 a row. */
unsigned cluster_blocks(int64_t rows) {
  const int64_t want = 2 * (int64_t)sm_count() / (rows > 0 ? rows : 1);
  unsigned b = 1;
  while (b * 2 <= (unsigned)kMaxCluster && (int64_t)b * 2 <= want) b *= 2;
  return b;
}

} // namespace

extern "C" CUDA_SUPPORTS(cuda_sample_select_supports) {
  const kite_sample_args *a = (const kite_sample_args *)args;
  if (!float_dtype(a->dtype, why)) return false;
  return ok_unless(a->op != KITE_OP_SAMPLE || !a->top_k,
                   "sample with a top_k tensor only (other rows: cuda.cluster / cuda.block)", why);
}

extern "C" CUDA_RUN(cuda_sample_select_run) {
  const kite_sample_args *a = (const kite_sample_args *)args;
  if (a->rows <= 0) return KITE_OK;
  return launch_typed(ctx, "sample", nullptr, a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    const size_t bytes = sizeof(Shared);
    cudaError_t e = cudaFuncSetAttribute(sample_select_kernel<T>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess)
      e = launch_clusters(sample_select_kernel<T>, cluster_blocks(a->rows),
                          (unsigned)(a->rows < 65535 ? a->rows : 65535), kThreads, bytes, s, *a);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return kite_set_error(KITE_ERR_DEVICE, "sample: cuda.select: launch failed: %s",
                            cudaGetErrorString(e));
    }
    return cuda_check_launch("sample", "select");
  });
}
