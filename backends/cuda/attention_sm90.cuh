/*
 * The pieces of the Hopper attention kernels (attention_sm90.cu: cuda.sm90, head_dim 256, one
 * dependent chain per tile; attention_sm90pp.cu: cuda.sm90pp, head_dim 64 and 128, the next tile's
 * Q K^T in flight during the softmax): the shared-memory plan, the producer warpgroup
 * that fills the K/V ring, and the consumer steps (Q tile, Q K^T, masks and online softmax, P V,
 * the epilogue). The file comment of attention_sm90.cu describes the design.
 */
#ifndef KITE_CUDA_ATTENTION_SM90_CUH
#define KITE_CUDA_ATTENTION_SM90_CUH

#include "attention.cuh"
#include "sm90.cuh"

#include <cuda_fp8.h>

namespace kite_cuda {
namespace sm90 {

constexpr int kThreads = 384, kBM = 128;

/* How the producer fills a K/V stage: cp.async row by row from dense strides or through the block
 * table (any block_size), or TMA: dense K/V with 16-byte aligned strides, or the caches seen as
 * [block][kv head][slot][d] when block_size is a multiple of 16 that divides the tile or that the
 * tile divides (a box per block, or per tile within a block). LOAD_TMA_FP8 (sdpa_fp8): dense e4m3
 * K by TMA as wgmma reads it, and V by TMA from its dequantized bf16 copy (attention_fp8_sm90.cu
 * makes it before the kernel), as LOAD_TMA loads a 16-bit V. */
enum Load { LOAD_DENSE, LOAD_PAGED, LOAD_TMA, LOAD_PAGED_TMA, LOAD_TMA_FP8 };

/* The K and V tiles of a stage in shared memory: per 128-byte column block (64 elements) cb,
 * BN rows of 128 bytes at cb BN 128 (a column block's 8-row groups 1024 bytes apart), or, with
 * the column blocks interleaved (paged TMA at head_dim 128: one box carries a cache block's two
 * column blocks, paged_tensor_map), 8-row group i of column block cb at 2048 i + 1024 cb. */
template <int D, int LOAD> __host__ __device__ constexpr bool interleaved_cols() {
  return LOAD == LOAD_PAGED_TMA && D == 128;
}

/* Keys per K/V tile: 128, or 64 for head_dim 256 (the shared memory of 2 stages). */
template <int D> constexpr int tile_keys() {
  return D == 256 ? 64 : 128;
}

/* The shared memory of a CTA with kStages K/V stages: Q tile, the ring (a stage: K, then V), the
 * key offsets of the cp.async producer (two tiles; none where TMA loads), the key flags of each
 * stage, the barriers (full and empty per stage). QK: bytes of a Q or K element (2; 1 for e4m3,
 * whose V is 16-bit in the stage all the same). */
template <int D, int kStages_, bool CPASYNC, int QK = 2> struct Smem {
  static constexpr int BN = tile_keys<D>(), kStages = kStages_;
  static constexpr size_t q_bytes = (size_t)kBM * D * QK;
  static constexpr size_t kv_bytes = (size_t)BN * D * 2;            /* one 16-bit K or V tile */
  static constexpr size_t k_bytes = (size_t)BN * D * QK;            /* a stage's K tile */
  static constexpr size_t stage_bytes = k_bytes + kv_bytes;         /* QK 2: 2 kv_bytes */
  static constexpr size_t off_bytes = CPASYNC ? 2 * 2 * BN * 8 : 0; /* [buf][k/v][key] */
  static constexpr size_t ok_bytes = (size_t)kStages * BN;
  static constexpr size_t bar_bytes = 2 * kStages * 8;
  static constexpr size_t total =
      1024 /* alignment */ + q_bytes + kStages * stage_bytes + off_bytes + ok_bytes + bar_bytes;
};

/* A kernel of either design and its dynamic shared memory (host side). */
using KernelFn = void (*)(AttnParams, const CUtensorMap, const CUtensorMap);
struct Kernel {
  KernelFn fn;
  size_t smem;
};
/* attention_sm90pp.cu: the pipelined kernel of T (bf16/f16), head_dim D (64, 128), Load mode
 * `load` (cuda.sm90pp). */
template <typename T, int D> Kernel pipelined_kernel(int load);
/* attention_sm90pp.cu: that kernel on sdpa_fp8 (LOAD_TMA_FP8, head_dim 128) with o of To
 * (bf16/f16; cuda.sm90fp8). */
template <typename To> Kernel fp8_pipelined_kernel();

/* attention_sm90.cu: the tensor map of dense K or V (element strides [b, h, j], rows of head_dim
 * elements of esize bytes: 2 for p.dtype's bf16 / f16, 1 for e4m3 codes) as a 4-d tensor
 * [b][h][j][d] read in boxes of one 128-byte column block x bn keys, 128-byte swizzled: one
 * column block of a tile. False where TMA cannot address it (strides not positive multiples of
 * 16 bytes). */
bool dense_tensor_map(CUtensorMap *map, const AttnParams &p, const void *base,
                      const int64_t stride[3], int bn, int esize);

#ifdef KITE_SM90_DEVICE
/* The CTA's shared memory carved as in Smem, and the K/V tiles it reads. */
struct Shared {
  unsigned char *q, *kv; /* stage st at st stage_bytes: K, then V at k_bytes */
  int64_t *off;
  uint8_t *ok;
  uint32_t bar; /* full[kStages], then empty[kStages] */
};
template <typename SM> __device__ __forceinline__ Shared carve(unsigned char *raw) {
  Shared sh;
  sh.q = raw + ((1024 - (smem_addr(raw) & 1023)) & 1023);
  sh.kv = sh.q + SM::q_bytes;
  sh.off = (int64_t *)(sh.kv + SM::kStages * SM::stage_bytes);
  sh.ok = (uint8_t *)sh.off + SM::off_bytes;
  sh.bar = smem_addr(sh.ok + SM::ok_bytes);
  return sh;
}

/* Barrier counts: dense TMA: one arrival with the expected bytes; paged TMA: the producer warp,
 * each lane after its key flags (lane 0's arrival carries the bytes); cp.async: every producer
 * thread, once its copies landed. Empty: every consumer warp, once its P V completed; paged:
 * every consumer thread (each read the stage's key flags). */
template <int LOAD, int kStages> __device__ __forceinline__ void init_barriers(uint32_t bar0) {
#pragma unroll
  for (int st = 0; st < kStages; st++) {
    mbar_init(bar0 + st * 8, LOAD == LOAD_TMA || LOAD == LOAD_TMA_FP8 ? 1
                             : LOAD == LOAD_PAGED_TMA                 ? 32
                                                                      : 128);
    mbar_init(bar0 + (kStages + st) * 8, LOAD == LOAD_PAGED || LOAD == LOAD_PAGED_TMA ? 256 : 8);
  }
}

/* The producer warpgroup (tid < 128): K/V tiles t = 0 .. ntiles - 1 (keys klo + t BN) of kv head g
 * into stage t % kStages, each once both consumers released the stage's previous tile. */
template <typename T, int D, int LOAD, int BN, int kStages>
__device__ __forceinline__ void produce(const AttnParams &p, const Seq &s, int g, int klo, int khi,
                                        int ntiles, const CUtensorMap *tmap_k,
                                        const CUtensorMap *tmap_v, const Shared &sh, int tid) {
  /* KB: a stage's K tile (e4m3 K: a byte per element); V is 16-bit (KV) and follows it */
  constexpr int CH = D / 8, KV = BN * D * 2, KB = BN * D * (int)sizeof(T), STAGE = KB + KV;
  constexpr bool PAGED = LOAD == LOAD_PAGED || LOAD == LOAD_PAGED_TMA;
  static_assert((BN * CH) % 128 == 0 && BN % 32 == 0, "whole copies per producer thread");
  const uint32_t bar0 = sh.bar;
  if constexpr (LOAD == LOAD_TMA || LOAD == LOAD_TMA_FP8) {
    /* a box is a 128-byte column block of the tile: 128 / sizeof(T) elements of K, 64 of V */
    constexpr int KE = 128 / (int)sizeof(T);
    if (tid != 0) return;
    for (int t = 0; t < ntiles; t++) {
      const int st = t % kStages, j = klo + t * BN;
      const uint32_t full = bar0 + st * 8;
      mbar_wait(bar0 + (kStages + st) * 8, ((t / kStages) & 1) ^ 1);
      mbar_expect_tx(full, STAGE);
      const uint32_t dk = smem_addr(sh.kv + (size_t)st * STAGE), dv = dk + KB;
#pragma unroll
      for (int cb = 0; cb < D / KE; cb++)
        tma_load_4d(dk + cb * BN * 128, tmap_k, cb * KE, j, g, s.b, full);
#pragma unroll
      for (int cb = 0; cb < D / 64; cb++)
        tma_load_4d(dv + cb * BN * 128, tmap_v, cb * 64, j, g, s.b, full);
    }
  } else if constexpr (LOAD == LOAD_PAGED_TMA) {
    if (tid >= 32) return;
    /* a box of `rows` keys: lane i < nbox resolves the cache block of box i of the tile */
    const int bs = (int)p.block_size, rows = bs < BN ? bs : BN, nbox = BN / rows;
    for (int t = 0; t < ntiles; t++) {
      const int st = t % kStages, j0 = klo + t * BN;
      const uint32_t full = bar0 + st * 8;
      /* the tile's block ids are read before the wait for its stage: their latency runs while the
       * consumers still hold the stage, not between its release and the copies */
      int blk = -1;
      if (tid < nbox && j0 + tid * rows < khi) {
        const int j = j0 + tid * rows;
        const int64_t b = p.block_table[(int64_t)s.b * p.block_table_stride + j / bs];
        if (b >= 0 && b < p.num_blocks) blk = (int)b;
      }
      mbar_wait(bar0 + (kStages + st) * 8, ((t / kStages) & 1) ^ 1);
      /* a key is present when its box's block is and it is below khi (an absent box's
       * coordinates are out of bounds: TMA fills zeros and still counts the bytes); each lane
       * writes its flags and then arrives itself, which publishes them to the consumers */
#pragma unroll
      for (int e = 0; e < BN / 32; e++) {
        const int jl = tid * (BN / 32) + e;
        const int bb = __shfl_sync(0xffffffffu, blk, jl / rows);
        sh.ok[st * BN + jl] = bb >= 0 && j0 + jl < khi;
      }
      /* lane 0's arrival carries the stage's bytes; then lane i < nbox issues the copies of box
       * i (an absent block's coordinates are out of bounds), so a stage's copies leave from nbox
       * threads instead of one after another from one: 2 D / 64 per box, or 2 where a box
       * carries every column block (interleaved_cols: block blk's kv head g is slab blk hkv + g,
       * a negative slab where the block is absent) */
      if (tid == 0) mbar_expect_tx(full, STAGE);
      __syncwarp();
      if (tid < nbox) {
        const int row0 = j0 % bs;
        if constexpr (interleaved_cols<D, LOAD>()) {
          const uint32_t dk = smem_addr(sh.kv + (size_t)st * STAGE) + tid * rows * (D * 2),
                         dv = dk + KB;
          const int slab = blk * (int)p.hkv + g;
          tma_load_5d(dk, tmap_k, 0, 0, 0, row0 / 8, slab, full);
          tma_load_5d(dv, tmap_v, 0, 0, 0, row0 / 8, slab, full);
        } else {
          const uint32_t dk = smem_addr(sh.kv + (size_t)st * STAGE) + tid * rows * 128,
                         dv = dk + KB;
#pragma unroll
          for (int cb = 0; cb < D / 64; cb++) {
            tma_load_4d(dk + cb * BN * 128, tmap_k, cb * 64, row0, g, blk, full);
            tma_load_4d(dv + cb * BN * 128, tmap_v, cb * 64, row0, g, blk, full);
          }
        }
      }
      if (tid != 0) mbar_arrive(full);
      __syncwarp();
    }
  } else {
    const T *kc = (const T *)p.k, *vc = (const T *)p.v;
    for (int t = 0; t < ntiles; t++) {
      const int st = t % kStages, buf = t & 1;
      mbar_wait(bar0 + (kStages + st) * 8, ((t / kStages) & 1) ^ 1);
      if (tid < BN) {
        int64_t ko, vo;
        key_offsets<PAGED>(p, s, g, klo + t * BN + tid, khi, &ko, &vo);
        sh.off[(buf * 2 + 0) * BN + tid] = ko;
        sh.off[(buf * 2 + 1) * BN + tid] = vo;
        sh.ok[st * BN + tid] = ko >= 0;
      }
      /* off[buf] was last read two tiles ago, before every producer thread passed the previous
       * barrier */
      named_sync(1, 128);
      const uint32_t dk = smem_addr(sh.kv + (size_t)st * STAGE), dv = dk + KB;
#pragma unroll 8
      for (int i = 0; i < BN * CH / 128; i++) {
        const int idx = tid + i * 128, r = idx / CH, c = idx % CH;
        const int64_t ko = sh.off[(buf * 2 + 0) * BN + r], vo = sh.off[(buf * 2 + 1) * BN + r];
        const bool ok = ko >= 0;
        cp_async16(dk + swz(BN, r, c), ok ? kc + ko + c * 8 : kc, ok);
        cp_async16(dv + swz(BN, r, c), ok ? vc + vo + c * 8 : vc, ok);
      }
      cp_async_commit();
      cp_async_wait<0>();
      fence_async_shared();
      mbar_arrive(bar0 + st * 8);
    }
  }
}

/* The head of a kernel of plan SM (its parameters p, tmap_k, tmap_v): the shared memory (sh,
 * bar0), the thread's ids (tid, wg, lane), kv head g, the CTA's query tile (KITE_CTA_TILE; the
 * longest tiles first: the last tiles of a sequence see the most keys under causal) and its key
 * tiles: ntiles of BN keys from klo, at multiples of BN (the keys below lo_first are masked) so
 * that a TMA box never straddles a cache block. Warpgroup 0 then runs the producer with
 * PRODUCER_REGS registers a thread and returns. */
#define KITE_SM90_HEAD(T, D, LOAD, SM, PRODUCER_REGS)                                              \
  extern __shared__ unsigned char smem_raw[];                                                      \
  const Shared sh = carve<SM>(smem_raw);                                                           \
  const uint32_t bar0 = sh.bar;                                                                    \
  const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, g = blockIdx.y;                     \
  const int64_t x_ = (p.kind == ATTN_PREFILL || p.causal) ? (int64_t)gridDim.x - 1 - blockIdx.x    \
                                                          : (int64_t)blockIdx.x;                   \
  KITE_CTA_TILE(kBM, p, x_);                                                                       \
  const int klo = lo_first / SM::BN * SM::BN, khi = hi_last > lo_first ? hi_last : lo_first;       \
  const int ntiles = (khi - klo + SM::BN - 1) / SM::BN;                                            \
  if (tid == 0) init_barriers<LOAD, SM::kStages>(bar0);                                            \
  __syncthreads();                                                                                 \
  if (wg == 0) {                                                                                   \
    reg_dealloc<PRODUCER_REGS>();                                                                  \
    produce<T, D, LOAD, SM::BN, SM::kStages>(p, s, g, klo, khi, ntiles, &tmap_k, &tmap_v, sh,      \
                                             tid);                                                 \
    return;                                                                                        \
  }

/* Consumer warpgroup cw's 64 Q rows (packed row -> (token, head); padding rows are zeros) into the
 * swizzled Q tile, visible to wgmma and to the whole warpgroup. A thread's 16-byte chunks (D / 16
 * of them) are all loaded before any is stored: the stores go through a byte pointer that may
 * alias the loads, so interleaved they would leave one global load in flight at a time, and the
 * CTA's first Q K^T waits for the whole tile. */
template <typename T, int D>
__device__ __forceinline__ void load_q(const AttnParams &p, const Seq &s, int g, int m0,
                                       int rows_here, unsigned char *sQ, int cw, int ctid) {
  constexpr int EPC = 16 / (int)sizeof(T), CH = D / EPC, N = 64 * CH / 128; /* EPC: per chunk */
  const int group = (int)p.group;
  const T *qbase = (const T *)p.q;
  const int64_t qb = (int64_t)s.b * p.q_stride[0];
  uint4 v[N];
#pragma unroll
  for (int i = 0; i < N; i++) {
    const int idx = ctid + 128 * i, r = 64 * cw + idx / CH, c = idx % CH, m = m0 + r;
    v[i] = make_uint4(0, 0, 0, 0);
    if (r < rows_here) {
      const int qi = m % group, t = m / group;
      const int64_t head = p.gqa_interleaved ? g + (int64_t)qi * p.hkv : (int64_t)g * group + qi;
      v[i] = *(const uint4 *)(qbase + qb + head * p.q_stride[1] +
                              (int64_t)(s.first + t) * p.q_stride[2] + c * EPC);
    }
  }
#pragma unroll
  for (int i = 0; i < N; i++) {
    const int idx = ctid + 128 * i;
    *(uint4 *)(sQ + swz(kBM, 64 * cw + idx / CH, idx % CH)) = v[i];
  }
  fence_async_shared();
  named_sync(2 + cw, 128);
}

/* A consumer thread's rows and score rules. rlo/rhi: the visible keys of its two rows (h = 0, 1);
 * wlo/whi: the warpgroup's key span (has_rows: it has a row that is not padding). Scores go to
 * base 2: with softcap cap2 tanh(s qk_scale); else s qk_scale, or, when the scale is positive,
 * folded into the exponent's FMA (pscale = qk_scale: max(c s) = c max(s) for c > 0). */
struct Rows {
  int rlo[2], rhi[2], wlo, whi;
  bool has_rows, capped, fold;
  float qk_scale, cap2, pscale;
};
__device__ __forceinline__ Rows consumer_rows(const AttnParams &p, const Seq &s, int m0,
                                              int rows_here, int cw, int warp, int qg) {
  Rows r;
  const int group = (int)p.group;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = 64 * cw + 16 * warp + 8 * h + qg;
    r.rlo[h] = 0, r.rhi[h] = 0x7fffffff; /* padding rows are never stored */
    if (row < rows_here) key_range(p, s, (m0 + row) / group, &r.rlo[h], &r.rhi[h]);
  }
  r.has_rows = 64 * cw < rows_here;
  r.wlo = 0, r.whi = 0;
  if (r.has_rows) {
    int unused;
    const int last = 64 * cw + 63 < rows_here - 1 ? 64 * cw + 63 : rows_here - 1;
    key_range(p, s, (m0 + 64 * cw) / group, &r.wlo, &unused);
    key_range(p, s, (m0 + last) / group, &unused, &r.whi);
  }
  r.capped = p.softcap > 0.0f;
  r.qk_scale = r.capped ? p.scale / p.softcap : p.scale * kLog2e;
  r.cap2 = p.softcap * kLog2e;
  r.fold = !r.capped && r.qk_scale > 0.0f;
  r.pscale = r.fold ? r.qk_scale : 1.0f;
  return r;
}

/* sdpa_fp8's scales of a consumer thread: the q_scale of its two rows (0 for padding rows, which
 * are never stored), its kv head's row of k_scale and that of the key tile in flight (kt:
 * fp8_tile_scales). v_scale is in the bf16 V the kernel reads (attention_fp8_sm90.cu). */
struct Fp8Scales {
  float q[2];
  const float *k;
  float kt;
};
__device__ __forceinline__ Fp8Scales fp8_scales(const AttnParams &p, const Seq &s, int g, int m0,
                                                int rows_here, int cw, int warp, int qg) {
  Fp8Scales f = {{0.0f, 0.0f}, nullptr, 0.0f};
  const int group = (int)p.group;
  const int64_t nbq = (p.sq + KITE_FP8_ATTN_BLOCK - 1) / KITE_FP8_ATTN_BLOCK;
  const int64_t nbk = (p.sk + KITE_FP8_ATTN_BLOCK - 1) / KITE_FP8_ATTN_BLOCK;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = 64 * cw + 16 * warp + 8 * h + qg;
    if (row >= rows_here) continue;
    const int m = m0 + row, qi = m % group, tq = m / group;
    const int64_t head = p.gqa_interleaved ? g + (int64_t)qi * p.hkv : (int64_t)g * group + qi;
    f.q[h] = p.q_scale[((int64_t)s.b * p.hq + head) * nbq + (s.first + tq) / KITE_FP8_ATTN_BLOCK];
  }
  f.k = p.k_scale + ((int64_t)s.b * p.hkv + g) * nbk;
  return f;
}
/* FP8: the k_scale of the key tile from j0 (a multiple of 128: one scale block), read before the
 * tile's Q K^T is issued so that the load runs beside it, not after its wait. */
template <bool FP8> __device__ __forceinline__ void fp8_tile_scales(Fp8Scales &f, int j0) {
  if constexpr (FP8) f.kt = f.k[j0 / KITE_FP8_ATTN_BLOCK];
}
/* The factor softmax_tile takes a row's scores by in the exponent's FMA (ps[h], row h): r.pscale.
 * FP8: also the row's q_scale times the tile's k_scale, x, folded in as r.pscale x where both are
 * positive (max(c s) = c max(s) for c > 0: no multiply per score); else the scores are multiplied
 * by x here. */
template <bool FP8, int BN>
__device__ __forceinline__ void row_pscale(float (&sc)[BN / 2], const Rows &r, const Fp8Scales &f,
                                           float (&ps)[2]) {
  ps[0] = ps[1] = r.pscale;
  if constexpr (FP8) {
    static_assert(BN == KITE_FP8_ATTN_BLOCK, "a key tile is one scale block");
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const float x = f.q[h] * f.kt;
      if (r.fold && x > 0.0f) {
        ps[h] = r.pscale * x;
      } else {
#pragma unroll
        for (int nb = 0; nb < BN / 8; nb++) sc[4 * nb + 2 * h] *= x, sc[4 * nb + 2 * h + 1] *= x;
      }
    }
  }
}
/* The tile of keys [j0, j0 + BN) has a key some row of the warpgroup sees. */
template <int BN> __device__ __forceinline__ bool tile_active(const Rows &r, int j0) {
  return r.has_rows && j0 < r.whi && j0 + BN > r.wlo;
}

/* Issues S = Q K^T (wgmma m64nBNk16, or m64nBNk32 of e4m3 T, from shared memory, K-major
 * descriptors) and commits it: k-step kk is 32 bytes into a 128-byte swizzle row of column block
 * kk / 4. IL: K's column blocks interleaved (interleaved_cols). */
template <typename T, int D, int BN, bool IL = false>
__device__ __forceinline__ void issue_qk(float (&sc)[BN / 2], uint32_t q_addr, uint32_t k_addr) {
  constexpr uint32_t kcb = IL ? 1024 : BN * 128, kgroup = IL ? 2048 : 1024;
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D * (int)sizeof(T) / 32; kk++) {
    const uint64_t da = smem_desc(q_addr + (kk >> 2) * kBM * 128 + (kk & 3) * 32, 16, 1024);
    const uint64_t db = smem_desc(k_addr + (kk >> 2) * kcb + (kk & 3) * 32, 16, kgroup);
    if constexpr (sizeof(T) == 1) {
      static_assert(BN == 128, "e4m3 tiles of 128 keys");
      wgmma_ss_e4m3_n128(sc, da, db, kk > 0);
    } else if constexpr (BN == 128)
      wgmma_ss_n128<T>(sc, da, db, kk > 0);
    else
      wgmma_ss_n64<T>(sc, da, db, kk > 0);
  }
  wgmma_commit();
}

/* How far (base 2) a tile's max may pass a row's running max before the max moves, in the lazy
 * rescale: the probabilities against the stale max stay below 2^8 (exact in f32 sums, bf16 and f16
 * P keep their relative precision), and o and l are rescaled only when a max moved. */
constexpr float kLazySlack = 8.0f;

/* Scores of keys [j0, j0 + BN) (ok: the stage's key flags) to unnormalized probabilities in place,
 * in base 2 (row h's times ps[h]: row_pscale); masks only on tiles that cross a row's range or hold
 * absent keys. The running max and sum of both rows move on; corr: the factor the rows' o must
 * take (exactly 1 where the max stayed). LAZY: the max moves only when the tile's passes it by more
 * than kLazySlack, so that after the first tiles o is rarely rescaled (rescale_o). */
template <int BN, bool PAGED, bool LAZY>
__device__ __forceinline__ void
softmax_tile(float (&sc)[BN / 2], const Rows &r, const float (&ps)[2], int j0, int khi, int lo_last,
             int hi_first, const uint8_t *ok, int lane, float (&m_run)[2], float (&l_run)[2],
             float (&corr)[2]) {
  const int qt = lane & 3;
  bool full = j0 + BN <= khi && j0 >= lo_last && j0 + BN <= hi_first;
  if (PAGED && full) {
    bool all = true;
#pragma unroll
    for (int e = 0; e < BN / 32; e++) all = all && ok[lane * (BN / 32) + e] != 0;
    full = __all_sync(0xffffffffu, all) != 0;
  }
  if (r.capped) {
#pragma unroll
    for (int i = 0; i < BN / 2; i++) sc[i] = r.cap2 * tanhf(sc[i] * r.qk_scale);
  } else if (!r.fold) {
#pragma unroll
    for (int i = 0; i < BN / 2; i++) sc[i] *= r.qk_scale;
  }
  if (!full) {
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
      for (int nb = 0; nb < BN / 8; nb++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const int jl = nb * 8 + 2 * qt + e, j = j0 + jl;
          if (j < r.rlo[h] || j >= r.rhi[h] || (PAGED && !ok[jl]))
            sc[4 * nb + 2 * h + e] = -INFINITY;
        }
  }
  /* per row (h): the fragment holds 2 rows per thread, reduced over the 4 lanes of a quad */
#pragma unroll
  for (int h = 0; h < 2; h++) {
    float mx0 = sc[2 * h], mx1 = sc[2 * h + 1];
#pragma unroll
    for (int nb = 1; nb < BN / 8; nb++)
      mx0 = fmaxf(mx0, sc[4 * nb + 2 * h]), mx1 = fmaxf(mx1, sc[4 * nb + 2 * h + 1]);
    float mx = fmaxf(mx0, mx1) * ps[h];
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    bool moved = true;
    float m_new;
    if constexpr (LAZY) {
      moved = mx > m_run[h] + kLazySlack;
      m_new = moved ? mx : m_run[h];
    } else {
      m_new = fmaxf(m_run[h], mx);
    }
    const float base = m_new == -INFINITY ? 0.0f : m_new; /* every key so far masked */
    corr[h] = moved ? fast_exp2(m_run[h] - base) : 1.0f;
    m_run[h] = m_new;
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int nb = 0; nb < BN / 8; nb++) {
      sc[4 * nb + 2 * h] = fast_exp2(fmaf(sc[4 * nb + 2 * h], ps[h], -base));
      sc[4 * nb + 2 * h + 1] = fast_exp2(fmaf(sc[4 * nb + 2 * h + 1], ps[h], -base));
      s0 += sc[4 * nb + 2 * h], s1 += sc[4 * nb + 2 * h + 1];
    }
    l_run[h] = l_run[h] * corr[h] + (s0 + s1);
  }
}

/* o times each row's corr; LAZY: skipped where no row of the warp moved its max (softmax_tile). */
template <int D, bool LAZY>
__device__ __forceinline__ void rescale_o(float (&o)[D / 2], const float (&corr)[2]) {
  if (LAZY && !__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) return;
#pragma unroll
  for (int h = 0; h < 2; h++)
#pragma unroll
    for (int dn = 0; dn < D / 8; dn++)
      o[4 * dn + 2 * h] *= corr[h], o[4 * dn + 2 * h + 1] *= corr[h];
}

/* P rounded to T: the register A fragment of P V's k-step kj is the S fragment's n-blocks 2 kj and
 * 2 kj + 1. */
template <typename T, int BN>
__device__ __forceinline__ void pack_p(uint32_t (&pa)[BN / 16][4], const float (&sc)[BN / 2]) {
#pragma unroll
  for (int kj = 0; kj < BN / 16; kj++)
#pragma unroll
    for (int e = 0; e < 4; e++) pa[kj][e] = pack2<T>(sc[8 * kj + 2 * e], sc[8 * kj + 2 * e + 1]);
}

/* Issues O += P V (wgmma m64nNk16, P from registers, V by an MN-major descriptor: column blocks
 * LBO apart, 8-key groups SBO apart) and commits it: V's 16 keys of k-step kj are 2 groups into
 * each column block; the n-halves of D 256 are 2 column blocks apart. IL: V's column blocks
 * interleaved (interleaved_cols). */
template <typename T, int D, int BN, bool IL = false>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2], const uint32_t (&pa)[BN / 16][4],
                                         uint32_t v_addr) {
  static_assert(!IL || D == 128, "interleaved column blocks at head_dim 128");
  constexpr uint32_t lbo = IL ? 1024 : BN * 128, sbo = IL ? 2048 : 1024;
  wgmma_fence();
#pragma unroll
  for (int kj = 0; kj < BN / 16; kj++) {
    if constexpr (D == 64) {
      wgmma_rs_n64<T>(o, pa[kj], smem_desc(v_addr + kj * 2048, BN * 128, 1024));
    } else {
#pragma unroll
      for (int nh = 0; nh < D / 128; nh++)
        wgmma_rs_n128<T>(*reinterpret_cast<float(*)[64]>(&o[64 * nh]), pa[kj],
                         smem_desc(v_addr + nh * 2 * BN * 128 + kj * 2 * sbo, lbo, sbo));
    }
  }
  wgmma_commit();
}

/* Every warp of the consumer gives stage st back to the producer. PAGED: every thread arrives
 * itself, after its own reads of the stage's key flags, which the producer rewrites for a later
 * tile once the stage is back (a warp's arrival after __syncwarp orders them as well, but the race
 * checker does not follow the warp barrier into the arrival). */
template <bool PAGED> __device__ __forceinline__ void release_stage(uint32_t empty, int lane) {
  if (PAGED) {
    mbar_arrive(empty);
  } else {
    __syncwarp();
    if (lane == 0) mbar_arrive(empty);
  }
}

/* The epilogue: o normalized and stored as pairs; lse in natural log. */
template <typename T, int D>
__device__ __forceinline__ void
store_rows(const AttnParams &p, const Seq &s, int g, int m0, int rows_here, int cw, int warp,
           int lane, const float (&o)[D / 2], const float (&m_run)[2], const float (&l_run)[2]) {
  const int qg = lane >> 2, qt = lane & 3, group = (int)p.group;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    float l = l_run[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int row = 64 * cw + 16 * warp + 8 * h + qg;
    if (row >= rows_here) continue;
    const bool none = m_run[h] == -INFINITY || !(l > 0.0f);
    const float inv = none ? 0.0f : 1.0f / l;
    const int m = m0 + row, qi = m % group, tq = m / group;
    const int64_t head = p.gqa_interleaved ? g + (int64_t)qi * p.hkv : (int64_t)g * group + qi;
    const int64_t i = s.first + tq;
    T *dst =
        (T *)p.o + (int64_t)s.b * p.o_stride[0] + head * p.o_stride[1] + i * p.o_stride[2] + 2 * qt;
#pragma unroll
    for (int dn = 0; dn < D / 8; dn++)
      *(uint32_t *)(dst + 8 * dn) = pack2<T>(o[4 * dn + 2 * h] * inv, o[4 * dn + 2 * h + 1] * inv);
    if (p.lse && qt == 0)
      p.lse[(int64_t)s.b * p.lse_stride[0] + head * p.lse_stride[1] + i * p.lse_stride[2]] =
          none ? -INFINITY : (m_run[h] + log2f(l)) * kLn2;
  }
}
#endif /* KITE_SM90_DEVICE */

} // namespace sm90
} // namespace kite_cuda

#endif /* KITE_CUDA_ATTENTION_SM90_CUH */
