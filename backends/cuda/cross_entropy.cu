/*
 * cross_entropy forward and backward (kite.h "Cross-entropy"): one block per row of
 * logits[N, V]; a row of a vocabulary (V = 128256 bf16 is 256 KB) is streamed, never held.
 *   forward:  one pass: each thread keeps an online max and sum of exp (base 2) and the sum of z
 *             over its elements; the block combines them into lse, and the row's loss goes to
 *             loss[i] (reduction none) or to a scratch row that one block then sums in a fixed
 *             order (sum / mean): no float atomics, the same bits run after run.
 *   backward: one pass reading the logits and writing dlogits (the same elements by the same
 *             thread, so dlogits may be the logits themselves).
 * "vec" takes 16-byte accesses (rows 16-byte aligned; a tail of V % 8 elements goes one at a
 * time), "generic" one element at a time for any layout. Two packs are in flight per thread and
 * step so that a block keeps enough bytes moving to stream at memory speed.
 * A target outside [0, V) that is not ignore_index cannot be reported from the device: its row
 * gets a NaN loss and a zero gradient, and the target is never used as an index.
 */
#include <cooperative_groups.h>

#include "cross_entropy.cuh"

using namespace kite_cuda;

namespace {

constexpr int kCeThreads = 512, kCeUnroll = 2, kReduceThreads = 256;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ float ce_cap(float x, float c) {
  return c > 0.0f ? c * tanhf(x / c) : x;
}

/* Adds N logits to a thread's statistics: online max / sum of 2^(z log2 e), and the sum of z. */
template <int N>
__device__ __forceinline__ void ce_add(float *v, float c, OnlineSoftmax &st, float &sz) {
#pragma unroll
  for (int e = 0; e < N; e++) {
    const float z = ce_cap(v[e], c);
    sz += z;
    v[e] = __fmul_rn(z, kLog2e); /* rounded, never fused into a later subtraction */
  }
  st.add<N>(v);
}

/* The gradient of one logit x at column j (row constants precomputed by the caller). */
/* 2^x by the multi-function unit alone (ex2.approx.ftz: 2 ulp, a result under 2^-126 is 0;
 * -inf gives 0, NaN stays NaN): the gradient's one transcendental per logit. */
__device__ __forceinline__ float ce_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/* The gradient of one logit x (row constants precomputed by ce_row_grad). lse2 is the lse in
 * log2 units as the statistics formed it, and z log2 e is rounded as there (ce_add): a row of one
 * class gets p = 2^0 = 1 and a gradient of exactly 0. */
struct CeGrad {
  float c, zf, off, hit, lse2;
  int64_t tg;
  __device__ __forceinline__ float value(float x, bool target) const {
    const float z = ce_cap(x, c);
    float d = zf * ce_exp2(__fmul_rn(z, kLog2e) - lse2) - off - (target ? hit : 0.0f);
    if (c > 0.0f) {
      const float t = z / c;
      d *= 1.0f - t * t;
    }
    return d;
  }
  __device__ __forceinline__ float operator()(float x, int64_t j) const {
    return value(x, j == tg);
  }
};

/* Row r's loss (to row_loss) and lse (to lse when wanted) from its statistics: m2 the max of
 * z log2 e, sum the sum of 2^(z log2 e - m2), sz the sum of z, zt the target's z. */
__device__ __forceinline__ void ce_row_out(const CeRows &p, int64_t r, float m2, float sum,
                                           float sz, float zt, bool ignored, bool bad) {
  const float ls = p.o.label_smoothing, lse = (m2 + log2f(sum)) * kLn2;
  /* lse - z taken as differences from the row max first (as ref does), in log2 units where m2
   * was formed: no cancellation of large terms when the loss is small */
  /* __fmul_rn: rounded like ce_add's products (an fma would leave 2^-24 of z behind) */
  const float dt = m2 - __fmul_rn(zt, kLog2e);
  const float dm = m2 - __fmul_rn(sz / (float)p.vocab, kLog2e);
  /* the smoothing term only where it is on: 0 * dm is NaN for a -inf logit */
  const float smooth = ls > 0.0f ? ls * dm : 0.0f;
  float loss = (log2f(sum) + (1.0f - ls) * dt + smooth) * kLn2 + p.o.z_loss * lse * lse;
  if (ignored) loss = 0.0f;
  if (bad) loss = __int_as_float(0x7fc00000); /* NaN */
  p.row_loss[r] = loss;
  if (p.lse) p.lse[r] = lse;
}

/* The gradient scale of row r (0 for an ignored or bad row) and the constants of its CeGrad. */
__device__ __forceinline__ CeGrad ce_row_grad(const CeRows &p, int64_t r, float lse, float lse2,
                                              int32_t tg, bool zero) {
  float g = 0.0f;
  if (!zero) {
    g = !p.dloss ? 1.0f : p.o.reduction == KITE_REDUCTION_NONE ? p.dloss[r] : p.dloss[0];
    if (p.o.reduction == KITE_REDUCTION_MEAN) {
      const int64_t n = *p.valid;
      g = n > 0 ? g / (float)n : 0.0f;
    }
  }
  const float ls = p.o.label_smoothing;
  return {p.o.softcap,
          g * (1.0f + 2.0f * p.o.z_loss * lse),
          g * ls / (float)p.vocab,
          g * (1.0f - ls),
          lse2,
          zero ? -1 : (int64_t)tg};
}

template <typename T, int W, CeMode M>
__global__ __launch_bounds__(kCeThreads) void ce_rows_kernel(CeRows p) {
  const float c = p.o.softcap;
  const int64_t V = p.vocab, vmain = V / W * W, step = (int64_t)blockDim.x * W;
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const T *x = (const T *)p.logits + r * p.logits_stride;
    const int32_t tg = p.targets[r];
    const bool ignored = tg == p.o.ignore_index;
    const bool bad = !ignored && (tg < 0 || (int64_t)tg >= V);
    float lse, lse2; /* lse2: in log2 units */
    if (M != CeMode::bwd) {
      /* the target's z is read before the reductions' barriers: the fused mode overwrites the
       * row after them */
      float zt = 0.0f;
      if (threadIdx.x == 0 && !ignored && !bad) zt = ce_cap(to_float(x[tg]), c);
      OnlineSoftmax st;
      float sz = 0.0f;
      for (int64_t j0 = (int64_t)threadIdx.x * W; j0 < vmain; j0 += step * kCeUnroll) {
        float v[kCeUnroll][W];
#pragma unroll
        for (int u = 0; u < kCeUnroll; u++)
          if (j0 + u * step < vmain) load_floats<W>(x + j0 + u * step, v[u]);
#pragma unroll
        for (int u = 0; u < kCeUnroll; u++)
          if (j0 + u * step < vmain) ce_add<W>(v[u], c, st, sz);
      }
      for (int64_t j = vmain + threadIdx.x; j < V; j += blockDim.x) {
        float v = to_float(x[j]);
        ce_add<1>(&v, c, st, sz);
      }
      st.reduce_block();
      sz = block_sum(sz);
      lse2 = st.m + log2f(st.sum);
      lse = lse2 * kLn2;
      if (threadIdx.x == 0) ce_row_out(p, r, st.m, st.sum, sz, zt, ignored, bad);
    }
    if (M == CeMode::fwd) continue;
    if (M == CeMode::bwd) lse = p.lse[r], lse2 = lse * kLog2e;
    const bool zero = ignored || bad;
    const CeGrad grad = ce_row_grad(p, r, lse, lse2, tg, zero);
    T *d = (T *)p.dlogits + r * p.dlogits_stride;
    for (int64_t j0 = (int64_t)threadIdx.x * W; j0 < vmain; j0 += step * kCeUnroll) {
      float v[kCeUnroll][W];
#pragma unroll
      for (int u = 0; u < kCeUnroll; u++) {
        const int64_t j = j0 + u * step;
        if (j >= vmain) continue;
        if (zero) {
#pragma unroll
          for (int e = 0; e < W; e++) v[u][e] = 0.0f;
        } else {
          load_floats<W>(x + j, v[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < kCeUnroll; u++) {
        const int64_t j = j0 + u * step;
        if (j >= vmain) continue;
        if (!zero)
#pragma unroll
          for (int e = 0; e < W; e++) v[u][e] = grad(v[u][e], j + e);
        store_floats<W>(d + j, v[u]);
      }
    }
    for (int64_t j = vmain + threadIdx.x; j < V; j += blockDim.x)
      d[j] = from_float<T>(zero ? 0.0f : grad(to_float(x[j]), j));
  }
}

/* ---- cross_entropy_with_grad in one pass: a row per thread block cluster (sm_90) ---------
 * Block k of a cluster of K holds its share of the row's 16-byte packs in shared memory (pack
 * q = u K B + k B + t for thread t, u < VPT: coalesced, every block within a pack of the
 * others), copied there by cp.async without passing through registers. The grid is persistent
 * (as many clusters as are resident at once, each taking every G-th row), and the next row's
 * copies are issued into a second buffer before the current row is worked on, so that each block
 * keeps its loads in flight through its reductions, barriers and stores. Each thread reads back
 * only the packs it copied (no block barrier for them). A thread takes its max, then its sum of
 * 2^(z log2 e - max) and of z, from shared memory; a block publishes its (max, sum, sum of z) in
 * shared memory, and after a cluster barrier every thread combines the K triples in a fixed
 * order (the same bits in every block) and writes the gradient of its packs. Each logit is read
 * once and its gradient written once: 4 bytes per bf16 logit, against 6 for the forward and
 * backward apart. The published triples alternate between two slots: between two writes of one
 * slot lies a cluster barrier that every block passes only after reading the other. */
constexpr int kClusterMaxBlocks = 8; /* the portable cluster size */
constexpr int kClusterThreads = 256, kClusterMaxVpt = 8;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 /* used by the cluster kernel only */
/* (m, s) and (m2, s2): the max of two sets of base-2 exponents and the sum of 2^(v - max) over
 * both (a zero sum, as of a set of -inf, adds nothing; a NaN sum stays NaN). */
__device__ __forceinline__ void ce_merge(float &m, float &s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  s = (s == 0.0f ? 0.0f : s * exp2f(m - mx)) + (s2 == 0.0f ? 0.0f : s2 * exp2f(m2 - mx));
  m = mx;
}

/* (m, s, sz) over the warp, by shuffles in a fixed pattern: every lane gets the result. */
__device__ __forceinline__ void ce_warp_stats(float &m, float &s, float &sz) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    sz += __shfl_xor_sync(0xffffffffu, sz, o);
    ce_merge(m, s, m2, s2);
  }
}

/* 16 bytes from global src to shared dst, asynchronously (sm_80 and later). */
__device__ __forceinline__ void ce_copy16(void *dst, const void *src) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}
#endif

template <typename T, int VPT>
__global__ __launch_bounds__(kClusterThreads, 3) void ce_cluster_kernel(CeRows p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 /* the PTX for older GPUs is never launched */
  namespace cg = cooperative_groups;
  constexpr int W = vec_elems<T>();
  using P = Pack<T, W>;
  cg::cluster_group cluster = cg::this_cluster();
  extern __shared__ float4 ce_dyn[]; /* two buffers of VPT B packs: pack u of thread t at u B + t */
  __shared__ float4 published[2];    /* this block's (max, sum, sum of z) of a row, read by all */
  __shared__ float4 warps[kClusterThreads / 32];
  const int K = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
  const int B = (int)blockDim.x, t = (int)threadIdx.x, lane = t & 31, warp = t >> 5;
  const int packs = (int)(p.vocab / W); /* at most 8 * 256 * 8 */
  const float c = p.o.softcap;
  P *const buf0 = reinterpret_cast<P *>(ce_dyn);
  /* row r's packs into buffer b, as one commit group (empty past the last row) */
  auto fetch = [&](int64_t r, int b) {
    if (r < p.rows) {
      const P *x = (const P *)((const T *)p.logits + r * p.logits_stride);
#pragma unroll
      for (int u = 0; u < VPT; u++) {
        const int q = (u * K + rank) * B + t;
        if (q < packs) ce_copy16(&buf0[(b * VPT + u) * B + t], x + q);
      }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  };
  int slot = 0, b = 0;
  fetch(blockIdx.y, 0);
  for (int64_t r = blockIdx.y; r < p.rows; r += gridDim.y, slot ^= 1, b ^= 1) {
    fetch(r + gridDim.y, b ^ 1); /* the next row streams in while this one is worked on */
    const T *x = (const T *)p.logits + r * p.logits_stride;
    const P *h = buf0 + b * VPT * B;
    const int32_t tg = p.targets[r];
    const bool ignored = tg == p.o.ignore_index;
    const bool bad = !ignored && (tg < 0 || (int64_t)tg >= p.vocab);
    /* read before the cluster barrier: the gradient may overwrite the row after it */
    float zt = 0.0f;
    if (rank == 0 && t == 0 && !ignored && !bad) zt = ce_cap(to_float(x[tg]), c);
    asm volatile("cp.async.wait_group 1;\n" ::: "memory"); /* this row's copies are in */
    /* the thread's max z (softcap is monotonic: the cap of the max x) and sum of z */
    float xm = -INFINITY, sz = 0.0f;
#pragma unroll 1 /* one pack at a time from shared memory: few registers */
    for (int u = 0; u < VPT; u++) {
      const int q = (u * K + rank) * B + t;
      if (q >= packs) continue;
      const P v = h[u * B + t];
#pragma unroll
      for (int e = 0; e < W; e++) {
        const float xv = to_float(v.v[e]);
        xm = fmaxf(xm, xv);
        sz += ce_cap(xv, c);
      }
    }
    float m = __fmul_rn(ce_cap(xm, c), kLog2e), sum = 0.0f;
    const float ref = m == -INFINITY ? 0.0f : m; /* -inf - -inf would be NaN */
#pragma unroll 1
    for (int u = 0; u < VPT; u++) {
      const int q = (u * K + rank) * B + t;
      if (q >= packs) continue;
      const P v = h[u * B + t];
#pragma unroll
      for (int e = 0; e < W; e++)
        sum += ce_exp2(__fmul_rn(ce_cap(to_float(v.v[e]), c), kLog2e) - ref);
    }
    ce_warp_stats(m, sum, sz);
    if (lane == 0) warps[warp] = make_float4(m, sum, sz, 0.0f);
    __syncthreads();
    if (warp == 0) {
      const float4 w = lane < B / 32 ? warps[lane] : make_float4(-INFINITY, 0.0f, 0.0f, 0.0f);
      m = w.x, sum = w.y, sz = w.z;
      ce_warp_stats(m, sum, sz);
      if (lane == 0) published[slot] = make_float4(m, sum, sz, 0.0f);
    }
    cluster.sync();
    /* lane k of every warp reads block k's triple; lanes 0..7 merge them in a fixed pattern and
     * lane 0 hands the result to the warp: every thread of every block gets the same bits */
    {
      const float4 w = lane < K ? *cluster.map_shared_rank(&published[slot], lane)
                                : make_float4(-INFINITY, 0.0f, 0.0f, 0.0f);
      m = w.x, sum = w.y, sz = w.z;
#pragma unroll
      for (int o = kClusterMaxBlocks / 2; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, sum, o);
        sz += __shfl_xor_sync(0xffffffffu, sz, o);
        ce_merge(m, sum, m2, s2);
      }
      m = __shfl_sync(0xffffffffu, m, 0);
      sum = __shfl_sync(0xffffffffu, sum, 0);
      sz = __shfl_sync(0xffffffffu, sz, 0);
    }
    if (rank == 0 && t == 0) ce_row_out(p, r, m, sum, sz, zt, ignored, bad);
    const bool zero = ignored || bad;
    const float lse2 = m + log2f(sum);
    const CeGrad grad = ce_row_grad(p, r, lse2 * kLn2, lse2, tg, zero);
    P *d = (P *)((T *)p.dlogits + r * p.dlogits_stride);
#pragma unroll 1
    for (int u = 0; u < VPT; u++) {
      const int q = (u * K + rank) * B + t;
      if (q >= packs) continue;
      const P v = h[u * B + t];
      const int te = zero ? -1 : tg - q * W; /* the target's place in this pack, if there */
      P out;
#pragma unroll
      for (int e = 0; e < W; e++)
        out.v[e] = from_float<T>(zero ? 0.0f : grad.value(to_float(v.v[e]), e == te));
      d[q] = out;
    }
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  cluster.sync(); /* no block leaves, freeing its shared memory, while others may still read it */
#endif
}

/* The cluster's shape for a row of `packs` packs: K blocks of B threads holding VPT packs each
 * (K <= 8, B <= 256, VPT <= 8); false when the row does not fit. */
struct CeClusterShape {
  int blocks, threads, vpt;
};
bool ce_cluster_shape(int64_t packs, CeClusterShape *sh) {
  const int64_t per_cluster_block = (int64_t)kClusterThreads * kClusterMaxVpt;
  const int64_t k = (packs + per_cluster_block - 1) / per_cluster_block;
  if (packs < 1 || k > kClusterMaxBlocks) return false;
  const int64_t per_block = (packs + k - 1) / k;
  int vpt = 1;
  while ((per_block + vpt - 1) / vpt > kClusterThreads) vpt *= 2;
  sh->blocks = (int)k, sh->vpt = vpt;
  sh->threads = (int)(((per_block + vpt - 1) / vpt + 31) / 32 * 32);
  return true;
}

__global__ void ce_count_kernel(const int32_t *targets, int64_t rows, int32_t ignore,
                                int64_t *valid) {
  __shared__ unsigned long long total;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  unsigned long long n = 0;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) n += targets[i] != ignore;
  atomicAdd(&total, n); /* an integer sum: the same whatever the order */
  __syncthreads();
  if (threadIdx.x == 0) *valid = (int64_t)total;
}

__global__ __launch_bounds__(kReduceThreads) void ce_reduce_kernel(const float *row_loss,
                                                                   int64_t rows, int mean,
                                                                   const int64_t *valid,
                                                                   float *loss) {
  __shared__ double part[kReduceThreads];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < rows; i += kReduceThreads) s += (double)row_loss[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int h = kReduceThreads / 2; h > 0; h >>= 1) {
    if ((int)threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    double t = part[0];
    if (mean) t = *valid > 0 ? t / (double)*valid : 0.0;
    loss[0] = (float)t;
  }
}

template <typename T, int W> void ce_rows_launch_t(CeMode mode, const CeRows &p, cudaStream_t s) {
  const int64_t units = (p.vocab + W - 1) / W;
  const unsigned threads = (unsigned)(units >= kCeThreads ? kCeThreads
                                      : units <= 32       ? 32
                                                          : (units + 31) / 32 * 32);
  const unsigned grid = grid_for_rows(p.rows);
  switch (mode) {
  case CeMode::fwd:
    ce_rows_kernel<T, W, CeMode::fwd><<<grid, threads, 0, s>>>(p);
    break;
  case CeMode::bwd:
    ce_rows_kernel<T, W, CeMode::bwd><<<grid, threads, 0, s>>>(p);
    break;
  case CeMode::fused:
    ce_rows_kernel<T, W, CeMode::fused><<<grid, threads, 0, s>>>(p);
    break;
  }
}

} // namespace

namespace kite_cuda {

kite_status ce_rows_launch(kite_dtype t, CeMode mode, bool vec, const CeRows &p, cudaStream_t s) {
  if (p.rows <= 0) return KITE_OK;
  return with_float_type(t, "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (vec)
      ce_rows_launch_t<T, vec_elems<T>()>(mode, p, s);
    else
      ce_rows_launch_t<T, 1>(mode, p, s);
    return KITE_OK;
  });
}

void ce_count_launch(const int32_t *targets, int64_t rows, int32_t ignore_index, int64_t *valid,
                     cudaStream_t s) {
  ce_count_kernel<<<1, 1024, 0, s>>>(targets, rows, ignore_index, valid);
}

void ce_reduce_launch(const float *row_loss, int64_t rows, kite_reduction reduction,
                      const int64_t *valid, float *loss, cudaStream_t s) {
  ce_reduce_kernel<<<1, kReduceThreads, 0, s>>>(
      row_loss, rows, reduction == KITE_REDUCTION_MEAN ? 1 : 0, valid, loss);
}

} // namespace kite_cuda

namespace {

template <typename T, int VPT>
cudaError_t ce_cluster_launch_t(const CeRows &p, const CeClusterShape &sh, cudaStream_t s) {
  void (*kernel)(CeRows) = ce_cluster_kernel<T, VPT>;
  const size_t smem = 2 * (size_t)VPT * (size_t)sh.threads * 16;
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) return e;
  /* a persistent grid: the clusters resident at once (all rows' clusters when the runtime cannot
   * say), each taking every G-th row */
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)sh.blocks, 1);
  cfg.blockDim = dim3((unsigned)sh.threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = (unsigned)sh.blocks;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int resident = 0;
  if (cudaOccupancyMaxActiveClusters(&resident, kernel, &cfg) != cudaSuccess || resident < 1) {
    (void)cudaGetLastError();
    resident = 65535;
  }
  const int64_t g = p.rows < resident ? p.rows : resident;
  return launch_clusters(kernel, (unsigned)sh.blocks, (unsigned)(g < 65535 ? g : 65535),
                         (unsigned)sh.threads, smem, s, p);
}

/* The one-pass kernel of cross_entropy_with_grad (supports() checked the shape). */
kite_status ce_cluster_launch(kite_dtype t, const CeRows &p, cudaStream_t s) {
  if (p.rows <= 0) return KITE_OK;
  return with_float_type(t, "cross_entropy_with_grad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    CeClusterShape sh;
    if (!ce_cluster_shape(p.vocab / vec_elems<T>(), &sh))
      return kite_set_error(KITE_ERR_INTERNAL,
                            "cross_entropy_with_grad: cuda.cluster: V = %lld "
                            "does not fit a cluster",
                            (long long)p.vocab);
    const cudaError_t e = sh.vpt == 1   ? ce_cluster_launch_t<T, 1>(p, sh, s)
                          : sh.vpt == 2 ? ce_cluster_launch_t<T, 2>(p, sh, s)
                          : sh.vpt == 4 ? ce_cluster_launch_t<T, 4>(p, sh, s)
                                        : ce_cluster_launch_t<T, 8>(p, sh, s);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return kite_set_error(KITE_ERR_DEVICE,
                            "cross_entropy_with_grad: cuda.cluster: launch "
                            "failed: %s",
                            cudaGetErrorString(e));
    }
    return KITE_OK;
  });
}

/* Scratch: the count of rows not ignored, then (sum / mean forward) the row losses. */
constexpr size_t kLossOffset = 256;

kite_status ce_run(kite_ctx *ctx, const kite_ce_args *a, bool vec, bool cluster = false) {
  const char *op = cuda_op_str(a->op), *variant = cluster ? "cluster" : vec ? "vec" : "generic";
  cudaStream_t s;
  kite_status st = begin(ctx, op, &s);
  if (st != KITE_OK) return st;
  const bool bwd = a->op == KITE_OP_CROSS_ENTROPY_BACKWARD;
  const bool with_grad = a->op == KITE_OP_CROSS_ENTROPY_WITH_GRAD;
  const kite_reduction red = a->opts.reduction;
  const bool mean = red == KITE_REDUCTION_MEAN, reduce = !bwd && red != KITE_REDUCTION_NONE;
  int64_t *valid = nullptr;
  float *row_loss = a->loss;
  if (mean || reduce) {
    void *ws;
    const size_t bytes = kLossOffset + (reduce ? (size_t)a->rows * sizeof(float) : 0);
    if ((st = kite_ctx_workspace(ctx, bytes, &ws)) != KITE_OK) return st;
    valid = (int64_t *)ws;
    if (reduce) row_loss = (float *)((char *)ws + kLossOffset);
  }
  if (mean) ce_count_launch(a->targets, a->rows, a->opts.ignore_index, valid, s);
  CeRows p = {};
  p.rows = a->rows, p.vocab = a->vocab;
  p.logits = a->logits, p.logits_stride = a->logits_stride;
  p.targets = a->targets;
  p.o = a->opts;
  p.valid = valid;
  if (bwd) {
    p.lse = a->lse, p.dloss = a->dloss;
  } else {
    p.row_loss = row_loss, p.lse = a->lse;
  }
  p.dlogits = a->dlogits, p.dlogits_stride = a->dlogits_stride;
  const CeMode mode = bwd ? CeMode::bwd : with_grad ? CeMode::fused : CeMode::fwd;
  if (cluster)
    st = ce_cluster_launch(a->dtype, p, s);
  else
    st = ce_rows_launch(a->dtype, mode, vec, p, s);
  if (st != KITE_OK) return st;
  if (reduce) ce_reduce_launch(row_loss, a->rows, red, valid, a->loss, s);
  return cuda_check_launch(op, variant);
}

} // namespace

extern "C" CUDA_SUPPORTS(cuda_ce_vec_supports) {
  const kite_ce_args *a = (const kite_ce_args *)args;
  if (!float_dtype(a->dtype, why)) return false;
  const size_t es = kite_dtype_size(a->dtype);
  return ok_unless(!rows_aligned16(a->logits, a->rows, a->logits_stride, es) ||
                       (a->op != KITE_OP_CROSS_ENTROPY &&
                        !rows_aligned16(a->dlogits, a->rows, a->dlogits_stride, es)),
                   "rows of logits (and dlogits) must start 16-byte aligned", why);
}

extern "C" CUDA_RUN(cuda_ce_vec_run) {
  return ce_run(ctx, (const kite_ce_args *)args, true);
}

extern "C" CUDA_RUN(cuda_ce_generic_run) {
  return ce_run(ctx, (const kite_ce_args *)args, false);
}

extern "C" CUDA_SUPPORTS(cuda_ce_cluster_supports) {
  const kite_ce_args *a = (const kite_ce_args *)args;
  if (!cuda_ce_vec_supports(k, args, why)) return false;
  const int n = vec_elems_of(a->dtype);
  CeClusterShape sh;
  return ok_unless(a->vocab % n != 0 || !ce_cluster_shape(a->vocab / n, &sh),
                   "V must be a multiple of 16 bytes and at most 8 * 256 * 8 packs of them", why);
}

extern "C" CUDA_RUN(cuda_ce_cluster_run) {
  return ce_run(ctx, (const kite_ce_args *)args, true, true);
}
