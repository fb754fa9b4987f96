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
 * The variants: cuda.select streams 8 logits a thread per step over a portable cluster of up to 8
 * blocks; cuda.select16 (the small-batch one) allows a cluster of 16 where the device can place it
 * (an H100 can: 8016 logits a block at V 128256), loads 16 logits a thread per step (one step for
 * such a slice: one memory latency), starts tau at a bound read off the first step's registers
 * (each warp's ceil(k / 16)-th largest thread maximum; the smallest over the warps has k logits of
 * the slice at or above it, so the buffer rarely overflows), and splits the finish's counts and
 * mass sums over up to 32 threads a candidate. Its block 0 gathers the merge: where its candidates
 * and all the peers' fit in its buffer, each warp pulls one peer's (remote loads in flight
 * together, no search of the merged stream per logit) and keeps those at or above the largest of
 * the blocks' taus; otherwise the stream over the peers. It appends a warp's kept logits of a step
 * with one slot reservation, not one a logit.
 *
 * Building with KITE_SAMPLE_SELECT_TRACE defined prints, for row 0 of each launch, clock64 stamps
 * at the phase boundaries of block 0 and the cluster's last block, and the candidate counts
 * (sampling_select_trace.cuh).
 *
 * Rows without top-k (or k > 1024), greedy rows aside, and rows whose ties keep more than half the
 * buffer above any threshold (e.g. 4096 equal logits at the k-th largest) go to block_sample_row in
 * block 0: the one-block kernel, exact for every row, slower.
 */
#include <atomic>
#include <cooperative_groups.h>

#include "sampling_select.cuh"

using namespace kite_cuda;

namespace {

namespace cg = cooperative_groups;

/* A variant: the most blocks a row, logits a thread has in flight per step, the small-batch paths
 * (the first step's bound on tau, the finish split over threads, the gathered merge: block 0's
 * warps pull a peer each, see gather, and a warp's appends of a step in one reservation,
 * append_all), and blocks a multiprocessor (1 leaves 128 registers a thread: 16 logits in flight
 * do not spill). */
template <int Blocks, int Per, bool Fast, int PerSm> struct Variant {
  static constexpr int kBlocks = Blocks, kPer = Per, kPerSm = PerSm;
  static constexpr bool kFast = Fast;
  /* (stated on the members: a pass without the sm_90 device code reads no other use of them) */
  static_assert(kPer <= 32, "a thread's pending logits are a 32-bit mask");
  static_assert(kBlocks <= kMaxCluster, "Shared::off holds kMaxCluster + 1 offsets");
  static_assert(!kFast || kPerSm == 1, "the small-batch paths keep 16 logits a thread in flight: "
                                       "one block a multiprocessor, 128 registers");
};
using Select = Variant<kPortable, 8, false, 2>;
using Select16 = Variant<kMaxCluster, 16, true, 1>;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KITE_SAMPLING_SELECT 1

/* Block 0's end of a top-k row: the kept set among the candidates, then the race. With split,
 * g threads a candidate (the largest power of two <= 32 with g n <= kThreads) each count and sum
 * a g-th of the pairs, joined by shuffles; the loops run the same rounds in every thread. */
__device__ int64_t finish(Shared *sh, const kite_sample_row &p, float m, int64_t amax, bool split) {
  const int tid = threadIdx.x;
  const int64_t k = p.top_k;
  shrink(sh, k, (int)(2 * k > 64 ? 2 * k : 64)); /* fewer pairs below; false only on ties */
  trace(7);
  const int n = sh->n < kCand ? sh->n : kCand, cur = sh->cur;
  trace_count(2, n);
  const float *cv = sh->v[cur];
  const int32_t *ci = sh->i[cur];
  float *w = sh->v[cur ^ 1]; /* top-k survivors' weights, -1 for the others */
  const float t = p.temperature;
  int g = 1;
  if (split)
    while (g < 32 && 2 * g * n <= kThreads) g *= 2;
  const int sub = tid & (g - 1), per = kThreads / g, rounds = (n + per - 1) / per;
  double part = 0.0;
  for (int r = 0; r < rounds; r++) {
    const int e = r * per + tid / g;
    const float v = e < n ? cv[e] : 0.0f;
    int gt = 0;
    if (e < n)
      for (int f = sub; f < n; f += g) gt += cv[f] > v;
    for (int o = 1; o < g; o <<= 1) gt += __shfl_xor_sync(0xffffffffu, gt, o);
    if (e < n && sub == 0) {
      w[e] = gt < k ? expf((v - m) / t) : -1.0f;
      if (gt < k) part += (double)w[e];
    }
  }
  const double target =
      (double)p.top_p * block_sum_ordered(part, sh->wsum); /* its barriers publish w */
  trace(8);
  const float zcut = p.min_p > 0.0f ? logf(p.min_p) : -INFINITY;
  float bs = -INFINITY;
  int64_t bi = amax;
  for (int r = 0; r < rounds; r++) {
    const int e = r * per + tid / g;
    const bool live = e < n && w[e] >= 0.0f;
    const float v = live ? cv[e] : 0.0f;
    const bool mass = live && p.top_p < 1.0f && v != m; /* the largest is always kept */
    double above = 0.0;
    if (mass)
      for (int f = sub; f < n; f += g)
        if (w[f] >= 0.0f && cv[f] > v) above += (double)w[f];
    for (int o = 1; o < g; o <<= 1) above += __shfl_xor_sync(0xffffffffu, above, o);
    if (!live || sub != 0 || (mass && !(above < target))) continue;
    const float z = (v - m) / t;
    if (!(z >= zcut)) continue;
    const float sc = race_score(z, kite_sample_words(&p, ci[e] >> 2).v[ci[e] & 3]);
    if (beats(sc, ci[e], bs, bi)) bs = sc, bi = ci[e];
  }
  block_best(bs, bi);
  trace(9);
  return bs == -INFINITY ? amax : bi;
}

/* Block 0's merge when its candidates and every peer's fit in its buffer (sh->fits): warp w pulls
 * peers 1 + w, 1 + w + kWarps, ..., kU candidates a lane with their remote loads in flight
 * together, and appends those >= tau with one reservation (none overflows). Ends with a barrier. */
__device__ void gather(cg::cluster_group &g, Shared *sh, int blocks, float tau) {
  constexpr int kU = 4;
  const int lane = threadIdx.x & 31;
  for (int b = 1 + (int)(threadIdx.x >> 5); b < blocks; b += kWarps) {
    const Shared *q = g.map_shared_rank(sh, b);
    const int c = sh->off[b + 1] - sh->off[b], cur = q->cur;
    for (int e0 = 0; e0 < c; e0 += 32 * kU) {
      float v[kU];
      int32_t id[kU];
      unsigned pend = 0;
#pragma unroll
      for (int u = 0; u < kU; u++) {
        const int e = e0 + u * 32 + lane;
        v[u] = e < c ? q->v[cur][e] : -INFINITY;
        id[u] = e < c ? q->i[cur][e] : 0;
        if (e < c && v[u] >= tau) pend |= 1u << u;
      }
      append_all(sh, pend, v, [&](int u) { return id[u]; });
    }
  }
  __syncthreads();
}

template <typename T, typename C>
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
  if (tid == 0)
    sh->n = 0, sh->cur = 0, sh->fail = 0, sh->tau = -INFINITY, sh->bound_key = 0xffffffffu;
  __syncthreads();
  trace(0);
  float m = -INFINITY;
  int64_t amax = INT64_MAX;
  const bool ok = stream<C::kPer, true, C::kFast, C::kFast>(
      sh, len, p.top_k, topk, [&](int64_t q) { return logit(x, begin + q); },
      [&](int64_t q) { return begin + q; }, m, amax);
  trace(3);
  trace_count(0, sh->n);
  if (ok && topk) shrink(sh, p.top_k, (int)(2 * p.top_k > 64 ? 2 * p.top_k : 64));
  block_best(m, amax);
  if (tid == 0) sh->m = m, sh->amax = amax;
  trace(4);
  g.sync();
  trace(5);
  if (rank == 0) {
    /* the peers' maxima and failures, a peer a lane in every warp (a shuffle tree: beats is a
     * total order, so the same pair as folding them in rank order), no barrier */
    const int lane = tid & 31;
    float pm = m;
    int64_t pa = amax;
    bool fail = lane == 0 && sh->fail != 0;
    if (lane > 0 && lane < blocks) {
      const Shared *q = g.map_shared_rank(sh, lane);
      pm = q->m, pa = q->amax, fail = q->fail != 0;
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, pm, o);
      const int64_t oi = __shfl_xor_sync(0xffffffffu, pa, o);
      if (beats(ov, oi, pm, pa)) pm = ov, pa = oi;
    }
    m = pm, amax = pa;
    fail = __any_sync(0xffffffffu, fail);
    if (m == -INFINITY) amax = 0;
    if (p.greedy || isinf(m)) {
      if (tid == 0) a.tokens[r] = (int32_t)amax;
    } else if (fail) {
      block_sample_row<T>(a, r);
    } else {
      /* the peers' candidates, one stream over their buffers in rank order: sh->off[b] is where
       * peer b's start, off[blocks] the total (warp 0: a lane a peer, an inclusive scan). With
       * the gathered merge (kFast), tau rises to the largest of the blocks' taus (each block holds
       * k logits at or above its own, so the largest is still <= the row's k-th largest). */
      if (tid < 32) {
        int c = 0;
        float tq = sh->tau;
        if (tid >= 1 && tid < blocks) {
          const Shared *q = g.map_shared_rank(sh, tid);
          c = q->n < kCand ? q->n : kCand;
          tq = q->tau;
        }
        int incl = c;
        for (int o = 1; o < 32; o <<= 1) {
          const int y = __shfl_up_sync(0xffffffffu, incl, o);
          if (tid >= o) incl += y;
        }
        if (tid <= blocks) sh->off[tid] = incl - c;
        if (C::kFast) {
          for (int o = 16; o > 0; o >>= 1) tq = fmaxf(tq, __shfl_xor_sync(0xffffffffu, tq, o));
          const int total = __shfl_sync(0xffffffffu, incl, 31);
          if (tid == 0) sh->tau = tq, sh->fits = sh->n + total <= kCand;
        }
      }
      __syncthreads();
      /* the last peer b with off[b] <= q, and q's place among its candidates */
      const auto at = [&](int64_t q, int &b) {
        int lo = 1, hi = blocks - 1;
        while (lo < hi) {
          const int mid = (lo + hi + 1) >> 1;
          if (q >= sh->off[mid])
            lo = mid;
          else
            hi = mid - 1;
        }
        b = lo;
        return (int)(q - sh->off[b]);
      };
      float m2 = m;
      int64_t a2 = amax;
      trace_count(1, sh->off[blocks]);
      if (C::kFast && sh->fits) gather(g, sh, blocks, sh->tau);
      const bool merged =
          (C::kFast && sh->fits) || stream<C::kPer, false, false, C::kFast>(
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
      trace(6);
      if (merged) {
        const int64_t tok = finish(sh, p, m, amax, C::kFast);
        if (tid == 0) a.tokens[r] = (int32_t)(tok >= 0 && tok < V ? tok : amax);
      } else {
        block_sample_row<T>(a, r);
      }
    }
  }
  g.sync(); /* the peers' buffers are no longer read */
  trace(10);
#ifdef KITE_SAMPLE_SELECT_TRACE
  if (trace_slot() == 0) select_trace[0][kPhases + 5] = global_ns();
#endif
}

#endif /* __CUDA_ARCH__ >= 900 */

template <typename T, typename C>
__global__ __launch_bounds__(kThreads, C::kPerSm) void sample_select_kernel(kite_sample_args a) {
#ifdef KITE_SAMPLING_SELECT
  extern __shared__ float4 smem[];
  Shared *sh = (Shared *)smem;
  cg::cluster_group g = cg::this_cluster();
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    select_row<T, C>(g, sh, a, r);
    __syncthreads();
  }
#ifdef KITE_SAMPLE_SELECT_TRACE
  trace_print((int)g.num_blocks());
#endif
#endif
}

/* Per device: 0 until the kernel's attributes are set, then 1 + the clusters of C::kBlocks blocks
 * that can run at once (0 for 8-block variants). */
constexpr int kDevices = 64;
template <typename T, typename C> std::atomic<int> ready[kDevices];

/* Sets the kernel's shared memory size (and, for 16-block variants, allows non-portable clusters)
 * once per device; *wide: how many clusters of C::kBlocks (> 8) blocks can run at once. */
template <typename T, typename C> cudaError_t prepare(int *wide) {
  const auto kernel = sample_select_kernel<T, C>;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  std::atomic<int> *slot = dev >= 0 && dev < kDevices ? &ready<T, C>[dev] : nullptr;
  const int known = slot ? slot->load(std::memory_order_relaxed) : 0;
  if (known) {
    *wide = known - 1;
    return cudaSuccess;
  }
  *wide = 0;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           (int)sizeof(Shared));
  if (e == cudaSuccess && C::kBlocks > kPortable) {
    int clusters = 0;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = C::kBlocks;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.gridDim = dim3(C::kBlocks);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = sizeof(Shared);
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    /* a device without non-portable clusters, or no room for one: 8 blocks at most */
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
            cudaSuccess &&
        cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) == cudaSuccess)
      *wide = clusters > 0 ? clusters : 0;
    (void)cudaGetLastError();
  }
  if (e == cudaSuccess && slot) slot->store(1 + *wide, std::memory_order_relaxed);
  return e;
}

/* Blocks per row: enough clusters to give every multiprocessor per_sm blocks, 1 to `most` a row. */
unsigned cluster_blocks(int64_t rows, int most, int per_sm) {
  const int64_t want = per_sm * (int64_t)sm_count() / (rows > 0 ? rows : 1);
  unsigned b = 1;
  while (b * 2 <= (unsigned)most && (int64_t)b * 2 <= want) b *= 2;
  return b;
}

template <typename C>
kite_status run_variant(kite_ctx *ctx, const kite_sample_args *a, const char *name) {
  if (a->rows <= 0) return KITE_OK;
  return launch_typed(ctx, "sample", nullptr, a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    int wide = 0;
    cudaError_t e = prepare<T, C>(&wide);
    /* wide clusters where every row's fits at once, else the portable size */
    const int most = a->rows <= wide ? C::kBlocks : C::kBlocks < kPortable ? C::kBlocks : kPortable;
    if (e == cudaSuccess)
      e = launch_clusters(sample_select_kernel<T, C>, cluster_blocks(a->rows, most, C::kPerSm),
                          (unsigned)(a->rows < 65535 ? a->rows : 65535), kThreads, sizeof(Shared),
                          s, *a);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return kite_set_error(KITE_ERR_DEVICE, "sample: cuda.%s: launch failed: %s", name,
                            cudaGetErrorString(e));
    }
    return cuda_check_launch("sample", name);
  });
}

} // namespace

extern "C" CUDA_SUPPORTS(cuda_sample_select_supports) {
  const kite_sample_args *a = (const kite_sample_args *)args;
  if (!float_dtype(a->dtype, why)) return false;
  return ok_unless(a->op != KITE_OP_SAMPLE || !a->top_k,
                   "sample with a top_k tensor only (other rows: cuda.cluster / cuda.block)", why);
}

/* cuda.select16: batches that give each row 8 or more blocks (B <= 16 on an H100) */
extern "C" CUDA_SUPPORTS(cuda_sample_select16_supports) {
  if (!cuda_sample_select_supports(k, args, why)) return false;
  const kite_sample_args *a = (const kite_sample_args *)args;
  return ok_unless(a->rows * kPortable > (int64_t)sm_count(),
                   "sample: logits: more rows than multiprocessors / 8 (cuda.select runs them)",
                   why);
}

extern "C" CUDA_RUN(cuda_sample_select_run) {
  return run_variant<Select>(ctx, (const kite_sample_args *)args, "select");
}

extern "C" CUDA_RUN(cuda_sample_select16_run) {
  return run_variant<Select16>(ctx, (const kite_sample_args *)args, "select16");
}
