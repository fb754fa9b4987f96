/*
 * cross_entropy_with_grad in one pass: a row per thread block cluster (sm_90).
 * Block k of a cluster of K holds its share of the row's 16-byte packs (pack q = u K B + k B + t
 * for thread t, u < VPT: coalesced, every block within a pack of the others). Thread t copies its
 * VPT packs of row r into its own slots of a shared buffer of the block by cp.async (no trip
 * through registers on the way), and once they are in, takes them into registers (VPT 16-byte
 * words) and at once issues the copies of a later row into the same slots: only the thread that
 * read a slot writes it again, so no barrier guards the buffer, and the later rows stream in
 * through the statistics, the barriers and the gradient of this one. The grid is persistent (as
 * many clusters as are resident at once, each taking every G-th row).
 * A thread's (max, sum of 2^(z log2 e - max), sum of z) is online in one pass (a pack's max first:
 * the sum is rescaled only when that raises the max); a block publishes its triple in shared
 * memory, and after a cluster barrier every thread combines the K triples in a fixed order (the
 * same bits in every block) and writes the gradient of its packs from its registers, 16 bytes at
 * a time. Each logit is read once and its gradient written once: 4 bytes per bf16 logit, against 6
 * for the forward and backward apart. The published triples alternate between two slots: between
 * two writes of one slot lies a cluster barrier that every block passes only after reading the
 * other. bf16 is widened by a shift or a mask of each 32-bit word, the gradient is packed two
 * elements by one instruction, and the softcap's tanh is compiled in only when it is on.
 * Three blocks per multiprocessor bound the registers (80 a thread: the row's VPT = 8 words and
 * the loop's values without a spill); one buffer a block keeps the next row in flight (96 KB of
 * shared memory for three blocks at VPT 8 with 256 threads).
 */
#include <cooperative_groups.h>
#include <type_traits>

#include "cross_entropy.cuh"

using namespace kite_cuda;

namespace {

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

/* The row's (m, sum, sz) from every thread's: over the warp, over the block (warps[], a block
 * barrier), then over the cluster (this block's triple to *published, a cluster barrier). Lane k
 * of every warp reads block k's triple; lanes 0..7 merge them in a fixed pattern and lane 0 hands
 * the result to the warp: every thread of every block gets the same bits. */
__device__ __forceinline__ void ce_cluster_stats(float &m, float &sum, float &sz, float4 *warps,
                                                 float4 *published) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int K = (int)cluster.num_blocks(), B = (int)blockDim.x;
  const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
  ce_warp_stats(m, sum, sz);
  if (lane == 0) warps[warp] = make_float4(m, sum, sz, 0.0f);
  __syncthreads();
  if (warp == 0) {
    const float4 w = lane < B / 32 ? warps[lane] : make_float4(-INFINITY, 0.0f, 0.0f, 0.0f);
    m = w.x, sum = w.y, sz = w.z;
    ce_warp_stats(m, sum, sz);
    if (lane == 0) *published = make_float4(m, sum, sz, 0.0f);
  }
  cluster.sync();
  {
    const float4 w = lane < K ? *cluster.map_shared_rank(published, lane)
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
}

/* Row r's packs of thread t in block `rank` of a cluster of K blocks of B threads (pack
 * q = (u K + rank) B + t, u < VPT) into dst[u B + t], as one commit group (empty past the last
 * row). */
template <typename T, int VPT>
__device__ __forceinline__ void ce_fetch_row(const CeRows &p, int64_t r, uint4 *dst, int K,
                                             int rank, int packs) {
  const int B = (int)blockDim.x, t = (int)threadIdx.x;
  if (r < p.rows) {
    const uint4 *x = (const uint4 *)((const T *)p.logits + r * p.logits_stride);
#pragma unroll
    for (int u = 0; u < VPT; u++) {
      const int q = (u * K + rank) * B + t;
      if (q < packs) ce_copy16(&dst[u * B + t], x + q);
    }
  }
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* A block's statistics on their way to the cluster: each warp's, then the block's (max, sum, sum
 * of z) of a row, read by all blocks, in two slots that rows take in turn. */
struct CeExchange {
  float4 published[2];
  float4 warps[kClusterThreads / 32];
};

/* A thread's place: K blocks in its cluster, its block's rank, B threads, its index t; the packs of
 * W elements in a row (at most 8 * 256 * 8). */
struct CePlace {
  int K, rank, B, t, packs;
};
__device__ __forceinline__ CePlace ce_place(const CeRows &p, int W) {
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  return {(int)cluster.num_blocks(), (int)cluster.block_rank(), (int)blockDim.x, (int)threadIdx.x,
          (int)(p.vocab / W)};
}

/* Row r's target: ignored, bad (outside [0, V)), and its z, read by the cluster's first thread
 * only (0 elsewhere) and before the cluster barrier: the gradient may overwrite the row after
 * it. */
struct CeTarget {
  int32_t tg;
  bool ignored, bad;
  float zt;
};
template <typename T>
__device__ __forceinline__ CeTarget ce_target(const CeRows &p, int64_t r, bool first) {
  CeTarget g;
  g.tg = p.targets[r];
  g.ignored = g.tg == p.o.ignore_index;
  g.bad = !g.ignored && (g.tg < 0 || (int64_t)g.tg >= p.vocab);
  g.zt = 0.0f;
  if (first && !g.ignored && !g.bad)
    g.zt = ce_cap(to_float(((const T *)p.logits + r * p.logits_stride)[g.tg]), p.o.softcap);
  return g;
}

/* Row r's statistics over the cluster from the thread's (ce_cluster_stats), its loss and lse
 * (written by the cluster's first thread) and the constants of its gradient. */
__device__ __forceinline__ CeGrad ce_cluster_row(const CeRows &p, int64_t r, const CeTarget &g,
                                                 float m, float sum, float sz, float4 *warps,
                                                 float4 *published, bool first) {
  ce_cluster_stats(m, sum, sz, warps, published);
  if (first) ce_row_out(p, r, m, sum, sz, g.zt, g.ignored, g.bad);
  const float lse2 = m + log2f(sum);
  return ce_row_grad(p, r, lse2 * kLn2, lse2, g.tg, g.ignored || g.bad);
}
#endif

/* The elements of a 16-byte pack as float: bf16 is the high half of a float (a shift or a mask,
 * no conversion), f16 by pairs, f32 as it is. */
template <typename T> __device__ __forceinline__ void ce_unpack(const uint4 &w, float *x) {
  const unsigned u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    if constexpr (sizeof(T) == 4) {
      x[i] = __uint_as_float(u[i]);
    } else if constexpr (std::is_same<T, __nv_bfloat16>::value) {
      x[2 * i] = __uint_as_float(u[i] << 16);
      x[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    } else {
      const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&u[i]));
      x[2 * i] = f.x, x[2 * i + 1] = f.y;
    }
  }
}

/* x[0..W) as one 16-byte pack of T, each rounded to nearest even (two by one instruction). */
template <typename T> __device__ __forceinline__ uint4 ce_pack(const float *x) {
  unsigned u[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    if constexpr (sizeof(T) == 4) {
      u[i] = __float_as_uint(x[i]);
    } else if constexpr (std::is_same<T, __nv_bfloat16>::value) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(x[2 * i], x[2 * i + 1]);
      u[i] = *reinterpret_cast<const unsigned *>(&h);
    } else {
      const __half2 h = __floats2half2_rn(x[2 * i], x[2 * i + 1]);
      u[i] = *reinterpret_cast<const unsigned *>(&h);
    }
  }
  return make_uint4(u[0], u[1], u[2], u[3]);
}

template <typename T, int VPT, bool CAP>
__global__ __launch_bounds__(kClusterThreads, 3) void ce_cluster_kernel(CeRows p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 /* the PTX for older GPUs is never launched */
  namespace cg = cooperative_groups;
  constexpr int W = vec_elems<T>();
  cg::cluster_group cluster = cg::this_cluster();
  /* the buffer of VPT B packs: pack u of thread t at u B + t */
  extern __shared__ float4 ce_dyn[];
  __shared__ CeExchange ex;
  const CePlace at = ce_place(p, W);
  const int K = at.K, rank = at.rank, B = at.B, t = at.t, packs = at.packs;
  const float c = p.o.softcap;
  uint4 *const buf = reinterpret_cast<uint4 *>(ce_dyn);
  /* row r's packs into the thread's slots of the buffer */
  auto fetch = [&](int64_t r) { ce_fetch_row<T, VPT>(p, r, buf, K, rank, packs); };
  int slot = 0;
  fetch(blockIdx.y);
  for (int64_t r = blockIdx.y; r < p.rows; r += gridDim.y, slot ^= 1) {
    const CeTarget g = ce_target<T>(p, r, rank == 0 && t == 0);
    const int32_t tg = g.tg;
    /* this row's copies are in */
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    uint4 h[VPT];
#pragma unroll
    for (int u = 0; u < VPT; u++) {
      const int q = (u * K + rank) * B + t;
      h[u] = q < packs ? buf[u * B + t] : make_uint4(0u, 0u, 0u, 0u);
    }
    /* the thread's online max m of z log2 e, sum of 2^(z log2 e - m) and sum of z */
    float m = -INFINITY, sum = 0.0f, sz = 0.0f;
#pragma unroll
    for (int u = 0; u < VPT; u++) {
      if ((u * K + rank) * B + t >= packs) continue;
      float v[W];
      ce_unpack<T>(h[u], v);
      float xm = v[0];
#pragma unroll
      for (int e = 1; e < W; e++) xm = fmaxf(xm, v[e]);
      /* softcap is monotonic: the cap of the max x is the max z */
      const float pm = __fmul_rn(CAP ? ce_cap(xm, c) : xm, kLog2e);
      if (pm > m) {
        if (sum != 0.0f) sum *= ce_exp2(m - pm);
        m = pm;
      }
      const float ref = m == -INFINITY ? 0.0f : m; /* -inf - -inf would be NaN */
#pragma unroll
      for (int e = 0; e < W; e++) {
        const float z = CAP ? ce_cap(v[e], c) : v[e];
        sz += z;
        sum += ce_exp2(__fmul_rn(z, kLog2e) - ref);
      }
    }
    /* the slots are read (h): the next row may land in them while this one is finished */
    fetch(r + gridDim.y);
    const CeGrad grad =
        ce_cluster_row(p, r, g, m, sum, sz, ex.warps, &ex.published[slot], rank == 0 && t == 0);
    const bool zero = g.ignored || g.bad;
    uint4 *d = (uint4 *)((T *)p.dlogits + r * p.dlogits_stride);
#pragma unroll
    for (int u = 0; u < VPT; u++) {
      const int q = (u * K + rank) * B + t;
      if (q >= packs) continue;
      float v[W];
      if (zero) {
#pragma unroll
        for (int e = 0; e < W; e++) v[e] = 0.0f;
      } else {
        ce_unpack<T>(h[u], v);
        const int te = tg - q * W; /* the target's place in this pack, if there */
        if (CAP) {
#pragma unroll
          for (int e = 0; e < W; e++) v[e] = grad.value(v[e], e == te);
        } else {
          /* grad.value without the cap: the target's hit is taken off below, in one pack only */
#pragma unroll
          for (int e = 0; e < W; e++)
            v[e] = grad.zf * ce_exp2(__fmul_rn(v[e], kLog2e) - grad.lse2) - grad.off;
          if ((unsigned)te < (unsigned)W) {
#pragma unroll
            for (int e = 0; e < W; e++)
              if (e == te) v[e] -= grad.hit;
          }
        }
      }
      d[q] = ce_pack<T>(v);
    }
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  cluster.sync(); /* no block leaves, freeing its shared memory, while others may still read it */
#endif
}

/* Launches kernel with `smem` bytes of dynamic shared memory per block as a persistent grid: the
 * clusters resident at once (all rows' clusters when the runtime cannot say), each taking every
 * G-th row. */
cudaError_t ce_cluster_persistent(void (*kernel)(CeRows), const CeRows &p, const CeClusterShape &sh,
                                  size_t smem, cudaStream_t s) {
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) return e;
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

template <typename T, int VPT>
cudaError_t ce_cluster_launch_t(const CeRows &p, const CeClusterShape &sh, cudaStream_t s) {
  const size_t smem = (size_t)VPT * (size_t)sh.threads * 16; /* a block's buffer */
  void (*kernel)(CeRows) =
      p.o.softcap > 0.0f ? ce_cluster_kernel<T, VPT, true> : ce_cluster_kernel<T, VPT, false>;
  return ce_cluster_persistent(kernel, p, sh, smem, s);
}

} // namespace

namespace kite_cuda {

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

kite_status ce_cluster_launch(kite_dtype t, const CeRows &p, cudaStream_t s) {
  if (p.rows <= 0) return KITE_OK;
  return with_float_type(t, "cross_entropy_with_grad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    CeClusterShape sh;
    if (!ce_cluster_shape(p.vocab / vec_elems<T>(), &sh))
      return kite_set_error(
          KITE_ERR_INTERNAL,
          "cross_entropy_with_grad: cuda.cluster: V = %lld does not fit a cluster",
          (long long)p.vocab);
    const cudaError_t e = sh.vpt == 1   ? ce_cluster_launch_t<T, 1>(p, sh, s)
                          : sh.vpt == 2 ? ce_cluster_launch_t<T, 2>(p, sh, s)
                          : sh.vpt == 4 ? ce_cluster_launch_t<T, 4>(p, sh, s)
                                        : ce_cluster_launch_t<T, 8>(p, sh, s);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return kite_set_error(KITE_ERR_DEVICE,
                            "cross_entropy_with_grad: cuda.cluster: launch failed: %s",
                            cudaGetErrorString(e));
    }
    return KITE_OK;
  });
}

} // namespace kite_cuda
