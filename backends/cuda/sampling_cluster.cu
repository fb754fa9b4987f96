/*
 * argmax, sample and logprobs of long rows on Hopper: each row is spread over a thread block
 * cluster of 8 blocks on 8 multiprocessors. Block k reads its slice of the row from global memory
 * once, 16 bytes a load where the row allows, into shared memory as floats (NaN as -inf); every
 * later pass runs over shared memory, and the blocks combine their partial results (maxima,
 * histograms, sums, race winners, candidate sets) through distributed shared memory.
 *
 * sample follows sampling.cu's passes and rules (the same radix selects, candidate gather and
 * race), with the histograms merged over the cluster: every block reads the 8 histograms in rank
 * order and scans them in parallel, so all blocks take the same decisions without exchanging them.
 * The candidate set of a top-k row is collected in block 0, which finishes the row alone.
 * Probability masses are added in another order than sampling.cu's (shared-memory atomics, then
 * parallel scans in double): the top-p boundary may move by a rounding error, the near-tie that
 * kite.h allows between backends.
 *
 * logprobs: cluster max and log-sum-exp, then the top n as sample's top-k candidates: the radix
 * select of the n-th largest, the gather into block 0 and its sort. When more than 2048 logits tie
 * at the n-th largest, n rounds of "the best pair below the last" over shared memory instead.
 *
 * Shared memory written by one block and read by its peers is double-buffered (histograms and
 * published pairs alternate between two slots): between two writes of one slot lies a cluster
 * barrier that every peer reaches only after its reads of that slot. A barrier ends every row, so
 * that no block starts the next row, or exits, while a peer may still read its shared memory.
 */
#include <cooperative_groups.h>

#include "sampling.cuh"

using namespace kite_cuda;

namespace {

namespace cg = cooperative_groups;

constexpr int kBlocks = 8; /* the portable cluster size */
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMinVocab = 8192;
constexpr int64_t kMaxSlice = 40960; /* floats of one block's slice: 160 KB of shared memory */
static_assert(kBuckets % kThreads == 0, "buckets must split evenly over the threads");
static_assert(kCap <= kBuckets, "the top-p walk of the candidates runs over the buckets");

/* The fixed part of a block's shared memory; the slice of the row follows it. */
struct Shared {
  union {
    uint32_t count[kBuckets];
    float mass[kBuckets];
  } hist[2];
  float cv[kCap];
  int32_t ci[kCap];
  float pub_v[2];
  int64_t pub_i[2];
  double pub_d[2];
  int n;    /* candidates this block gathered */
  int kept; /* block 0: candidates top-k keeps */
  int sel_b;
  double sel_above, sel_count;
  double wsum[kWarps];
};

/* Elements of a block's slice: a multiple of 8, so that every slice starts 16-byte aligned in an
 * aligned row and at a multiple of 4 (one Philox call). */
__host__ __device__ inline int64_t slice_len(int64_t vocab) {
  return ((vocab + kBlocks - 1) / kBlocks + 7) / 8 * 8;
}

/* Device code for sm_90 and later only: the PTX for older GPUs holds empty kernels, never launched
 * (the variant needs CUDA_FEATURE_SM90). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KITE_SAMPLING_CLUSTER 1

constexpr int kPerThread = kBuckets / kThreads; /* buckets a thread scans */

struct Cluster {
  cg::cluster_group g;
  Shared *sh;
  int slot; /* the next publishing slot, the same in every block */

  /* The best (value, index) pair of the cluster, to every thread of every block. */
  __device__ void best(float &v, int64_t &i) {
    block_best(v, i);
    const int s = slot++ & 1;
    if (threadIdx.x == 0) sh->pub_v[s] = v, sh->pub_i[s] = i;
    g.sync();
    float bv = -INFINITY;
    int64_t bi = INT64_MAX;
#pragma unroll
    for (int k = 0; k < kBlocks; k++) {
      const Shared *p = g.map_shared_rank(sh, k);
      const float pv = p->pub_v[s];
      const int64_t pi = p->pub_i[s];
      if (beats(pv, pi, bv, bi)) bv = pv, bi = pi;
    }
    v = bv, i = bi;
  }

  /* The sum of v over the cluster, added block by block in rank order: the same in every block. */
  __device__ double sum(float v) {
    v = block_sum(v);
    const int s = slot++ & 1;
    if (threadIdx.x == 0) sh->pub_d[s] = (double)v;
    g.sync();
    double t = 0.0;
#pragma unroll
    for (int k = 0; k < kBlocks; k++) t += g.map_shared_rank(sh, k)->pub_d[s];
    return t;
  }

  /* Thread t's buckets [kPerThread t, kPerThread (t + 1)) of histogram buffer `buf`, summed over
   * the cluster in rank order. Call after the barrier that follows the histogram. */
  template <bool kMass> __device__ void merged(int buf, double *h) {
#pragma unroll
    for (int j = 0; j < kPerThread; j++) h[j] = 0.0;
#pragma unroll
    for (int k = 0; k < kBlocks; k++) {
      const Shared *p = g.map_shared_rank(sh, k);
#pragma unroll
      for (int j = 0; j < kPerThread; j++) {
        const int b = (int)threadIdx.x * kPerThread + j;
        h[j] += kMass ? (double)p->hist[buf].mass[b] : (double)p->hist[buf].count[b];
      }
    }
  }

  /* The sum of v over the block, added in the same order in every thread. */
  __device__ double block_total(double v) {
    return block_sum_ordered(v, sh->wsum);
  }

  /* sampling.cu's bucket walk, in parallel: the largest bucket b < nb with above + S(b) >= target,
   * S(b) the total of the buckets >= b, or 0 when none is; *above_out = above + S(b + 1) and
   * *count = bucket b's own total. Every thread gets them. */
  __device__ uint32_t select(const double *h, int nb, double target, double above,
                             double *above_out, double *count) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    double incl[kPerThread], run = 0.0;
#pragma unroll
    for (int j = kPerThread - 1; j >= 0; j--) run += h[j], incl[j] = run;
    /* suffix sums over the threads: x = the total of lanes >= lane within the warp */
    double x = run;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const double y = __shfl_down_sync(0xffffffffu, x, o);
      if (lane + o < 32) x += y;
    }
    __syncthreads();
    if (lane == 0) sh->wsum[warp] = x;
    __syncthreads();
    double e = x - run; /* the total of the buckets above this thread's */
    for (int w = warp + 1; w < kWarps; w++) e += sh->wsum[w];
    int cand = -1;
#pragma unroll
    for (int j = kPerThread - 1; j >= 0; j--) {
      const int b = tid * kPerThread + j;
      if (cand < 0 && b < nb && above + e + incl[j] >= target) cand = b;
    }
    const int best = (int)block_max((float)cand); /* bucket numbers are exact as float */
    const int b = best < 0 ? 0 : best;
    if (tid == b / kPerThread) {
      const int j = b % kPerThread;
      sh->sel_b = b;
      sh->sel_above = above + e + incl[j] - h[j];
      sh->sel_count = h[j];
    }
    __syncthreads();
    *above_out = sh->sel_above;
    *count = sh->sel_count;
    return (uint32_t)sh->sel_b;
  }
};

/* Reads this block's slice [begin, begin + len) of row x into sl as floats, NaN as -inf; returns
 * the thread's largest value and its lowest index, and with `hist` counts the top 11 key bits in
 * hist (cleared). kUnroll 16-byte loads of a thread are in flight at once. */
template <typename T>
__device__ void load_slice(const T *x, int64_t begin, int len, float *sl, uint32_t *hist, float &m,
                           int64_t &amax) {
  constexpr int N = vec_elems<T>(), kUnroll = 16 / N; /* 16 floats a thread */
  const int tid = threadIdx.x;
  const T *xs = x + begin;
  m = -INFINITY;
  amax = INT64_MAX;
  int done = 0;
  if (((uintptr_t)xs & 15u) == 0) {
    const int packs = len / N;
    done = packs * N;
    for (int q0 = tid; q0 < packs; q0 += kThreads * kUnroll) {
      float v[kUnroll][N];
#pragma unroll
      for (int u = 0; u < kUnroll; u++)
        if (q0 + u * kThreads < packs) load_floats<N>(xs + (int64_t)(q0 + u * kThreads) * N, v[u]);
#pragma unroll
      for (int u = 0; u < kUnroll; u++) {
        const int q = q0 + u * kThreads;
        if (q >= packs) break;
#pragma unroll
        for (int j = 0; j < N; j++) {
          const float f = v[u][j] != v[u][j] ? -INFINITY : v[u][j];
          sl[q * N + j] = f;
          if (f > m) m = f, amax = begin + q * N + j;
          if (hist) atomicAdd(&hist[order_key(f) >> 21], 1u);
        }
      }
    }
  }
  for (int i = done + tid; i < len; i += kThreads) {
    const float f = logit(xs, i);
    sl[i] = f;
    if (f > m || (f == m && begin + i < amax)) m = f, amax = begin + i;
    if (hist) atomicAdd(&hist[order_key(f) >> 21], 1u);
  }
}

/* Radix select of the k-th largest logit over the cluster, as sampling.cu's: level 0 counts the
 * top 11 key bits (already in hist[0]), levels 1 and 2 the next 11 and 10 within the selected
 * bucket. Once the logits at or above the selected bucket fit in kCap, every block gathers its own
 * into cv / ci (n of them) and it returns true; else false, with *lo the k-th largest when the last
 * level was reached. hb is the histogram buffer of the next pass. */
__device__ bool select_gather(Cluster &c, const float *sl, int len, int64_t begin, int64_t k,
                              int &hb, float *lo) {
  Shared *sh = c.sh;
  const int tid = threadIdx.x;
  uint32_t prefix = 0;
  double above = 0.0;
  for (int level = 0; level < 3; level++) {
    const int shift = level_shift(level);
    const uint32_t mask = level_mask(level);
    const int buf = hb++ & 1;
    if (level > 0) {
      uint32_t *hc = sh->hist[buf].count;
      for (int b = tid; b < kBuckets; b += kThreads) hc[b] = 0;
      __syncthreads();
      for (int i = tid; i < len; i += kThreads) {
        const uint32_t key = order_key(sl[i]);
        if (key >> (shift + level_above(level)) == prefix)
          atomicAdd(&hc[(key >> shift) & mask], 1u);
      }
      c.g.sync();
    }
    double h[kPerThread], ab, cnt;
    c.merged<false>(buf, h);
    const uint32_t b = c.select(h, (int)mask + 1, (double)k, above, &ab, &cnt);
    prefix = level == 0 ? b : (prefix << level_above(level)) | b;
    above = ab;
    if (ab + cnt > kCap) {
      if (level == 2) *lo = key_value(prefix);
      continue;
    }
    /* gather every logit with a key at or above the bucket's smallest */
    const uint32_t lo_key = prefix << shift;
    if (tid == 0) sh->n = 0;
    __syncthreads();
    for (int i = tid; i < len; i += kThreads) {
      const float v = sl[i];
      if (order_key(v) >= lo_key) {
        const int at = atomicAdd(&sh->n, 1);
        if (at < kCap) sh->cv[at] = v, sh->ci[at] = (int32_t)(begin + i);
      }
    }
    c.g.sync();
    return true;
  }
  return false;
}

/* Block 0, after select_gather: appends its peers' candidates to its own; returns their count. */
__device__ int collect_candidates(Cluster &c) {
  Shared *sh = c.sh;
  int n = sh->n < kCap ? sh->n : kCap;
  for (int k = 1; k < kBlocks; k++) {
    const Shared *q = c.g.map_shared_rank(sh, k);
    int nk = q->n < kCap ? q->n : kCap;
    if (nk > kCap - n) nk = kCap - n; /* the merged count fits; never more than kCap */
    for (int j = threadIdx.x; j < nk; j += kThreads)
      sh->cv[n + j] = q->cv[j], sh->ci[n + j] = q->ci[j];
    n += nk;
  }
  __syncthreads();
  return n;
}

template <typename T>
__device__ void sample_row(Cluster &c, const kite_sample_args &a, int64_t r, float *sl) {
  Shared *sh = c.sh;
  const int tid = threadIdx.x;
  const int rank = (int)c.g.block_rank();
  const int64_t V = a.vocab, S = slice_len(V), begin = rank * S;
  const int len = (int)(begin >= V ? 0 : V - begin < S ? V - begin : S);
  const T *x = (const T *)a.logits + r * a.logits_stride;
  const kite_sample_row p = kite_sample_row_get(&a, r);
  const bool topk = !p.greedy && p.top_k > 0;
  int hb = 0; /* histogram buffer of the next pass */
  if (topk) {
    for (int b = tid; b < kBuckets; b += kThreads) sh->hist[0].count[b] = 0;
    __syncthreads();
  }
  float m;
  int64_t amax;
  load_slice(x, begin, len, sl, topk ? sh->hist[0].count : nullptr, m, amax);
  c.best(m, amax); /* also the barrier after the level-0 histogram */
  if (m == -INFINITY) amax = 0;
  if (p.greedy || isinf(m)) {
    if (rank == 0 && tid == 0) a.tokens[r] = (int32_t)amax;
    return;
  }
  const float t = p.temperature;
  float lo = -INFINITY;
  bool gathered = false;
  if (topk) gathered = select_gather(c, sl, len, begin, p.top_k, hb, &lo);
  if (gathered) {
    if (rank != 0) return;
    const int n = collect_candidates(c);
    float *cv = sh->cv;
    int32_t *ci = sh->ci;
    sort_candidates(cv, ci, n);
    if (tid == 0) { /* top-k keeps the k-th largest and its ties */
      int kept = (int)p.top_k;
      while (kept < n && cv[kept] >= cv[p.top_k - 1]) kept++;
      sh->kept = kept;
    }
    __syncthreads();
    const int kept = sh->kept;
    float lo_s = cv[p.top_k - 1];
    if (p.top_p < 1.0f) {
      /* top-p keeps the candidates up to the first whose running mass reaches top_p of the kept
       * set's, with its equals: select() walks candidate j as bucket kBuckets - 1 - j */
      double h[kPerThread], part = 0.0;
#pragma unroll
      for (int j = 0; j < kPerThread; j++) {
        const int cj = kBuckets - 1 - (tid * kPerThread + j);
        h[j] = cj < kept ? (double)expf((cv[cj] - m) / t) : 0.0;
        part += h[j];
      }
      double ab, cnt;
      const double z = c.block_total(part);
      const int b = (int)c.select(h, kBuckets, (double)p.top_p * z, 0.0, &ab, &cnt);
      const int j = kBuckets - 1 - b < kept ? kBuckets - 1 - b : kept - 1;
      lo_s = cv[j];
    }
    const int64_t tok = race_candidates(p, cv, ci, kept, lo_s, m, t, amax, tid, kThreads);
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
        const int buf = hb++ & 1;
        float *hm = sh->hist[buf].mass;
        for (int b = tid; b < kBuckets; b += kThreads) hm[b] = 0.0f;
        __syncthreads();
        float zsum = 0.0f;
        for (int i = tid; i < len; i += kThreads) {
          const float v = sl[i];
          if (!(v >= lo_k)) continue;
          const uint32_t k = order_key(v);
          if (level > 0 && k >> (shift + level_above(level)) != prefix) continue;
          const float w = expf((v - m) / t);
          zsum += w;
          atomicAdd(&hm[(k >> shift) & mask], w);
        }
        if (level == 0) {
          target = (double)p.top_p * c.sum(zsum); /* its barrier also ends the histogram */
        } else {
          c.g.sync();
        }
        double h[kPerThread], ab, cnt;
        c.merged<true>(buf, h);
        const uint32_t b = c.select(h, (int)mask + 1, target, above_m, &ab, &cnt);
        prefix = level == 0 ? b : (prefix << level_above(level)) | b;
        above_m = ab;
      }
      lo = fmaxf(lo_k, key_value(prefix));
    }
  }
  /* the race over the slice, from the max's own score */
  const float zcut = p.min_p > 0.0f ? logf(p.min_p) : -INFINITY;
  const float s0 = race_score(0.0f, kite_sample_words(&p, amax >> 2).v[amax & 3]);
  float bs = s0;
  int64_t bi = amax;
  for (int q = tid; q < (len + 3) / 4; q += kThreads) {
    float v[4], z[4];
    bool any = false;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      v[j] = 4 * q + j < len ? sl[4 * q + j] : -INFINITY;
      z[j] = (v[j] - m) / t;
      any |= v[j] >= lo && z[j] >= zcut && z[j] + kGumbelMax >= s0;
    }
    if (!any) continue;
    const int64_t i0 = begin + 4 * q; /* a multiple of 4: begin is one of 8 */
    const kite_philox4 w = kite_sample_words(&p, i0 >> 2);
#pragma unroll
    for (int j = 0; j < 4; j++) {
      if (!(v[j] >= lo && z[j] >= zcut)) continue;
      const float sc = race_score(z[j], w.v[j]);
      if (beats(sc, i0 + j, bs, bi)) bs = sc, bi = i0 + j;
    }
  }
  c.best(bs, bi);
  if (rank == 0 && tid == 0) a.tokens[r] = (int32_t)(bi >= 0 && bi < V ? bi : amax);
}

#endif /* __CUDA_ARCH__ >= 900 */

template <typename T>
__global__ __launch_bounds__(kThreads, 2) void sample_cluster_kernel(kite_sample_args a) {
#ifdef KITE_SAMPLING_CLUSTER
  extern __shared__ float4 smem[];
  float *sl = (float *)smem;
  Cluster c{cg::this_cluster(), (Shared *)(sl + slice_len(a.vocab)), 0};
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    sample_row<T>(c, a, r, sl);
    c.g.sync(); /* the row's shared memory is no longer read by any peer */
  }
#endif
}

template <typename T>
__global__ __launch_bounds__(kThreads, 2) void logprobs_cluster_kernel(kite_logprobs_args a) {
#ifdef KITE_SAMPLING_CLUSTER
  extern __shared__ float4 smem[];
  float *sl = (float *)smem;
  Cluster c{cg::this_cluster(), (Shared *)(sl + slice_len(a.vocab)), 0};
  Shared *sh = c.sh;
  const int tid = threadIdx.x;
  const int rank = (int)c.g.block_rank();
  const int64_t V = a.vocab, S = slice_len(V), begin = rank * S;
  const int len = (int)(begin >= V ? 0 : V - begin < S ? V - begin : S);
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    const T *x = (const T *)a.logits + r * a.logits_stride;
    const bool top = a.n > 0;
    if (top) {
      for (int b = tid; b < kBuckets; b += kThreads) sh->hist[0].count[b] = 0;
      __syncthreads();
    }
    float m;
    int64_t mi;
    load_slice(x, begin, len, sl, top ? sh->hist[0].count : nullptr, m, mi);
    c.best(m, mi); /* also the barrier after the level-0 histogram */
    float lse = m;
    if (isfinite(m)) {
      float s = 0.0f;
      for (int i = tid; i < len; i += kThreads) s += expf(sl[i] - m);
      lse = m + logf((float)c.sum(s));
    }
    if (a.tokens && rank == 0 && tid == 0) {
      const int32_t tok = a.tokens[r];
      a.token_logprobs[r] = tok >= 0 && tok < V ? logit(x, tok) - lse : NAN;
    }
    int hb = 0;
    float kth;
    if (top && select_gather(c, sl, len, begin, a.n, hb, &kth)) {
      /* the n largest are the first n of the sorted candidates */
      if (rank == 0) {
        const int n = collect_candidates(c);
        sort_candidates(sh->cv, sh->ci, n);
        for (int j = tid; j < a.n; j += kThreads) {
          a.top_ids[r * a.top_ids_stride + j] = sh->ci[j];
          a.top_logprobs[r * a.top_logprobs_stride + j] = sh->cv[j] - lse;
        }
      }
    } else if (top) {
      /* more than kCap logits tie at the n-th largest: n rounds of the best pair below the last */
      float pv = INFINITY;
      int64_t pi = -1;
      for (int64_t j = 0; j < a.n; j++) {
        float bv = -INFINITY;
        int64_t bi = INT64_MAX;
        for (int i = tid; i < len; i += kThreads) {
          const float v = sl[i];
          const int64_t gi = begin + i;
          const bool below = v < pv || (v == pv && gi > pi);
          if (below && beats(v, gi, bv, bi)) bv = v, bi = gi;
        }
        c.best(bv, bi);
        if (bi == INT64_MAX) bi = 0; /* n <= V: never, but no id outside [0, V) */
        if (rank == 0 && tid == 0) {
          a.top_ids[r * a.top_ids_stride + j] = (int32_t)bi;
          a.top_logprobs[r * a.top_logprobs_stride + j] = bv - lse;
        }
        pv = bv, pi = bi;
      }
    }
    c.g.sync(); /* the row's shared memory is no longer read by any peer */
  }
#endif
}

size_t smem_bytes(int64_t vocab) {
  return (size_t)slice_len(vocab) * sizeof(float) + sizeof(Shared);
}

template <typename Args> cudaError_t launch(void (*kernel)(Args), const Args *a, cudaStream_t s) {
  const size_t bytes = smem_bytes(a->vocab);
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
  if (e != cudaSuccess) return e;
  return launch_clusters(kernel, kBlocks, (unsigned)(a->rows < 65535 ? a->rows : 65535), kThreads,
                         bytes, s, *a);
}

bool vocab_fits(kite_dtype dtype, int64_t vocab, const char **why) {
  if (!float_dtype(dtype, why)) return false;
  return ok_unless(vocab < kMinVocab || slice_len(vocab) > kMaxSlice,
                   "only for vocabularies of 8192 to 8 * 40960 logits", why);
}

kite_status launched(const char *op, cudaError_t e) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return kite_set_error(KITE_ERR_DEVICE, "%s: cuda.cluster: launch failed: %s", op,
                          cudaGetErrorString(e));
  }
  return cuda_check_launch(op, "cluster");
}

} // namespace

/* Rows whose filters gather a top-k / top-p candidate set finish it in one CTA of the cluster
 * while the other seven wait: with many such rows the one-block kernel, which keeps every SM
 * busy on whole rows, is faster (H100: B = 64 and 256 with top-k + top-p, docs/performance.md).
 * argmax and unfiltered sampling take the cluster at any B. */
constexpr int64_t kClusterFilteredRows = 32;

extern "C" CUDA_SUPPORTS(cuda_sample_cluster_supports) {
  const kite_sample_args *a = (const kite_sample_args *)args;
  const bool filtered = a->op == KITE_OP_SAMPLE && (a->top_k || a->top_p || a->min_p);
  if (filtered && a->rows > kClusterFilteredRows) {
    *why = "more than 32 rows with top-k / top-p / min-p: the one-block kernel is faster there";
    return false;
  }
  return vocab_fits(a->dtype, a->vocab, why);
}

extern "C" CUDA_SUPPORTS(cuda_logprobs_cluster_supports) {
  const kite_logprobs_args *a = (const kite_logprobs_args *)args;
  return vocab_fits(a->dtype, a->vocab, why);
}

extern "C" CUDA_RUN(cuda_sample_cluster_run) {
  const kite_sample_args *a = (const kite_sample_args *)args;
  const char *op = a->op == KITE_OP_ARGMAX ? "argmax" : "sample";
  if (a->rows <= 0) return KITE_OK;
  return launch_typed(ctx, op, nullptr, a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    return launched(op, launch(sample_cluster_kernel<T>, a, s));
  });
}

extern "C" CUDA_RUN(cuda_logprobs_cluster_run) {
  const kite_logprobs_args *a = (const kite_logprobs_args *)args;
  if (a->rows <= 0) return KITE_OK;
  return launch_typed(ctx, "logprobs", nullptr, a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    return launched("logprobs", launch(logprobs_cluster_kernel<T>, a, s));
  });
}
