/*
 * Attention for Hopper (sm_90a): paged_prefill and dense sdpa, bf16/f16, head_dim 64/128/256, as
 * a warp-specialized flash-attention kernel on wgmma.
 *
 * A CTA of 3 warpgroups takes one kv head g of one sequence and a tile of 128 packed query rows
 * (row m = query token m / group, q head m % group of the group reading g, as cuda.mma packs
 * them). Warpgroup 0 is the producer: it gives up registers (setmaxnreg) and fills a ring of
 * K/V stages (tiles of BN keys; 2 stages, 4 for head_dim 64): by TMA from dense K/V (tensor maps
 * built on the host) or from the paged caches (a box per cache block, block ids read one tile at a
 * time by one warp) when block_size is a multiple of 16 that divides BN or that BN divides; else
 * with 16-byte cp.async (dense strides, or slot by slot through the block table, so any
 * block_size). Each stage has a "full" mbarrier (TMA bytes, or every producer thread once its
 * copies landed and were made visible to the async proxy) and an "empty" one (each consumer warp
 * arrives after its P V wgmma completed). Warpgroups 1 and 2 are consumers:
 * each owns 64 packed rows (the wgmma M), takes the extra registers, and per tile runs
 *   S = Q K^T   wgmma m64nBNk16, Q and K from shared memory (K-major descriptors),
 *   scale / softcap / masks, online softmax in base 2 (the S accumulator fragment: 2 rows per
 *   thread, rows reduced over the 4 lanes of a quad),
 *   O += P V    wgmma m64nNk16, P rounded to T in registers (the f32 S fragment converted to
 *               pairs is the register A fragment), V from shared memory (MN-major descriptor).
 * The two consumers run independently, so the softmax of one overlaps the wgmma of the other.
 *
 * Shared-memory tiles are in the 128-byte swizzled layout of wgmma: a tile of R rows x D
 * elements is D / 64 column blocks of R rows x 128 bytes (1024-byte aligned); the 16-byte chunk
 * c of row r sits at chunk c ^ (r % 8) of its 128-byte row.
 *
 * Semantics are those of cuda.mma (attention_mma.cu): query i of sequence b sits at position
 * n_b - q_len_b + i and sees keys [pos - window_left, pos] of [0, n_b) (causal, window); keys
 * whose block id is out of range are absent; a row that sees no key gets o = 0, lse = -inf.
 */
/* CUtensorMap and its enums; libcuda is not linked, its entry point comes through the runtime */
#include <cuda.h>

#include "attention.cuh"
#include "sm90.cuh"

using namespace kite_cuda;

namespace {

constexpr int kThreads = 384, kBM = 128;

/* How the producer fills a K/V stage: cp.async row by row from dense strides or through the block
 * table (any block_size), or TMA: dense K/V with 16-byte aligned strides, or the caches seen as
 * [block][kv head][slot][d] when block_size is a multiple of 16 that divides the tile or that the
 * tile divides (a box per block, or per tile within a block). */
enum Load { LOAD_DENSE, LOAD_PAGED, LOAD_TMA, LOAD_PAGED_TMA };

/* Keys per K/V tile: 128, or 64 for head_dim 256 (the shared memory of 2 stages). */
template <int D> constexpr int tile_keys() {
  return D == 256 ? 64 : 128;
}

/* K/V stages in the ring: as many as shared memory holds beside the Q tile. */
template <int D> constexpr int tile_stages() {
  return D == 64 ? 4 : 2;
}

template <int D> struct Smem {
  static constexpr int BN = tile_keys<D>(), kStages = tile_stages<D>();
  static constexpr size_t q_bytes = (size_t)kBM * D * 2;
  static constexpr size_t kv_bytes = (size_t)BN * D * 2; /* one K or V tile */
  static constexpr size_t off_bytes = 2 * 2 * BN * 8;    /* [buf][k/v][key] */
  static constexpr size_t ok_bytes = (size_t)kStages * BN;
  static constexpr size_t bar_bytes = 2 * kStages * 8;
  static constexpr size_t total =
      1024 /* alignment */ + q_bytes + 2 * kStages * kv_bytes + off_bytes + ok_bytes + bar_bytes;
};

/* Grid: x = query tile of 128 packed rows (see find_tile), y = kv head. See the file comment. */
template <typename T, int D, int LOAD>
__global__ void __launch_bounds__(kThreads, 1)
    attend_sm90_kernel(AttnParams p, const __grid_constant__ CUtensorMap tmap_k,
                       const __grid_constant__ CUtensorMap tmap_v) {
#ifdef KITE_SM90_DEVICE
  using SM = Smem<D>;
  constexpr int BN = SM::BN, CH = D / 8, KV = (int)SM::kv_bytes, kStages = SM::kStages;
  constexpr bool PAGED = LOAD == LOAD_PAGED || LOAD == LOAD_PAGED_TMA;
  static_assert((BN * CH) % 128 == 0 && BN % 32 == 0, "whole copies per producer thread");

  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  unsigned char *sQ = smem, *sKV = smem + SM::q_bytes; /* stage st: K at 2 st, V at 2 st + 1 */
  int64_t *sOff = (int64_t *)(sKV + 2 * kStages * SM::kv_bytes);
  uint8_t *sOk = (uint8_t *)(sOff + 2 * 2 * BN);
  const uint32_t bar0 = smem_addr(sOk + SM::ok_bytes); /* full[kStages], then empty[kStages] */

  const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31;
  const int g = blockIdx.y, group = (int)p.group;
  /* the longest tiles first: the last tiles of a sequence see the most keys under causal */
  const int64_t x = (p.kind == ATTN_PREFILL || p.causal) ? (int64_t)gridDim.x - 1 - blockIdx.x
                                                         : (int64_t)blockIdx.x;
  KITE_CTA_TILE(kBM, p, x);
  /* tiles start at multiples of BN (the keys below lo_first are masked): a TMA box never straddles
   * a cache block */
  const int klo = lo_first / BN * BN, khi = hi_last > lo_first ? hi_last : lo_first;
  const int ntiles = (khi - klo + BN - 1) / BN;

  if (tid == 0) {
#pragma unroll
    for (int st = 0; st < kStages; st++) {
      /* dense TMA: one arrival with the expected bytes; paged TMA: the producer warp, each lane
       * after its key flags (lane 0's arrival carries the bytes); cp.async: every producer
       * thread, once its copies landed */
      mbar_init(bar0 + st * 8, LOAD == LOAD_TMA ? 1 : LOAD == LOAD_PAGED_TMA ? 32 : 128);
      mbar_init(bar0 + (kStages + st) * 8, 8); /* every consumer warp, once its P V completed */
    }
  }
  __syncthreads();

  if (wg == 0) { /* ---- producer ---- */
    reg_dealloc<40>();
    if constexpr (LOAD == LOAD_TMA) {
      if (tid != 0) return;
      for (int t = 0; t < ntiles; t++) {
        const int st = t % kStages, j = klo + t * BN;
        const uint32_t full = bar0 + st * 8;
        mbar_wait(bar0 + (kStages + st) * 8, ((t / kStages) & 1) ^ 1);
        mbar_expect_tx(full, 2 * KV);
        const uint32_t dk = smem_addr(sKV + (size_t)(2 * st) * KV), dv = dk + KV;
#pragma unroll
        for (int cb = 0; cb < D / 64; cb++) {
          tma_load_4d(dk + cb * BN * 128, &tmap_k, cb * 64, j, g, s.b, full);
          tma_load_4d(dv + cb * BN * 128, &tmap_v, cb * 64, j, g, s.b, full);
        }
      }
      return;
    }
    if constexpr (LOAD == LOAD_PAGED_TMA) {
      if (tid >= 32) return;
      /* a box of `rows` keys: lane i < nbox resolves the cache block of box i of the tile */
      const int bs = (int)p.block_size, rows = bs < BN ? bs : BN, nbox = BN / rows;
      for (int t = 0; t < ntiles; t++) {
        const int st = t % kStages, j0 = klo + t * BN;
        const uint32_t full = bar0 + st * 8;
        mbar_wait(bar0 + (kStages + st) * 8, ((t / kStages) & 1) ^ 1);
        int blk = -1;
        if (tid < nbox && j0 + tid * rows < khi) {
          const int j = j0 + tid * rows;
          const int64_t b = p.block_table[(int64_t)s.b * p.block_table_stride + j / bs];
          if (b >= 0 && b < p.num_blocks) blk = (int)b;
        }
        /* a key is present when its box's block is and it is below khi (an absent box's
         * coordinates are out of bounds: TMA fills zeros and still counts the bytes); each lane
         * writes its flags and then arrives itself, which publishes them to the consumers */
#pragma unroll
        for (int e = 0; e < BN / 32; e++) {
          const int jl = tid * (BN / 32) + e;
          const int bb = __shfl_sync(0xffffffffu, blk, jl / rows);
          sOk[st * BN + jl] = bb >= 0 && j0 + jl < khi;
        }
        int boxes[BN / 16];
#pragma unroll
        for (int i = 0; i < BN / 16; i++) boxes[i] = __shfl_sync(0xffffffffu, blk, i);
        if (tid != 0) {
          mbar_arrive(full);
        } else {
          mbar_expect_tx(full, 2 * KV);
          const uint32_t dk = smem_addr(sKV + (size_t)(2 * st) * KV), dv = dk + KV;
          const int row0 = j0 % bs;
#pragma unroll
          for (int i = 0; i < BN / 16; i++) {
            if (i >= nbox) break;
            const int b = boxes[i] >= 0 ? boxes[i] : -1;
#pragma unroll
            for (int cb = 0; cb < D / 64; cb++) {
              tma_load_4d(dk + cb * BN * 128 + i * rows * 128, &tmap_k, cb * 64, row0, g, b, full);
              tma_load_4d(dv + cb * BN * 128 + i * rows * 128, &tmap_v, cb * 64, row0, g, b, full);
            }
          }
        }
        __syncwarp();
      }
      return;
    }
    const T *kc = (const T *)p.k, *vc = (const T *)p.v;
    for (int t = 0; t < ntiles; t++) {
      const int st = t % kStages, buf = t & 1;
      mbar_wait(bar0 + (kStages + st) * 8, ((t / kStages) & 1) ^ 1);
      if (tid < BN) {
        int64_t ko, vo;
        key_offsets<PAGED>(p, s, g, klo + t * BN + tid, khi, &ko, &vo);
        sOff[(buf * 2 + 0) * BN + tid] = ko;
        sOff[(buf * 2 + 1) * BN + tid] = vo;
        sOk[st * BN + tid] = ko >= 0;
      }
      /* sOff[buf] was last read two tiles ago, before every producer thread passed the previous
       * barrier */
      named_sync(1, 128);
      const uint32_t dk = smem_addr(sKV + (size_t)(2 * st) * KV), dv = dk + KV;
#pragma unroll 8
      for (int i = 0; i < BN * CH / 128; i++) {
        const int idx = tid + i * 128, r = idx / CH, c = idx % CH;
        const int64_t ko = sOff[(buf * 2 + 0) * BN + r], vo = sOff[(buf * 2 + 1) * BN + r];
        const bool ok = ko >= 0;
        cp_async16(dk + swz(BN, r, c), ok ? kc + ko + c * 8 : kc, ok);
        cp_async16(dv + swz(BN, r, c), ok ? vc + vo + c * 8 : vc, ok);
      }
      cp_async_commit();
      cp_async_wait<0>();
      fence_async_shared();
      mbar_arrive(bar0 + st * 8);
    }
    return;
  }

  /* ---- consumers: warpgroup cw owns tile rows [64 cw, 64 cw + 64) ---- */
  reg_alloc<232>();
  const int cw = wg - 1, ctid = tid & 127, warp = ctid >> 5;
  const int qg = lane >> 2, qt = lane & 3; /* accumulator fragment row and column pair */

  /* Q rows: packed row -> (token, head); padding rows are zeros. */
  {
    const T *qbase = (const T *)p.q;
    const int64_t qb = (int64_t)s.b * p.q_stride[0];
    for (int idx = ctid; idx < 64 * CH; idx += 128) {
      const int r = 64 * cw + idx / CH, c = idx % CH, m = m0 + r;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (r < rows_here) {
        const int qi = m % group, t = m / group;
        const int64_t head = p.gqa_interleaved ? g + (int64_t)qi * p.hkv : (int64_t)g * group + qi;
        v = *(const uint4 *)(qbase + qb + head * p.q_stride[1] +
                             (int64_t)(s.first + t) * p.q_stride[2] + c * 8);
      }
      *(uint4 *)(sQ + swz(kBM, r, c)) = v;
    }
    fence_async_shared();
    named_sync(2 + cw, 128);
  }

  /* this thread's two rows (h = 0, 1) and their visible keys; the warpgroup's key span */
  int rlo[2], rhi[2];
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = 64 * cw + 16 * warp + 8 * h + qg;
    rlo[h] = 0, rhi[h] = 0x7fffffff; /* padding rows are never stored */
    if (row < rows_here) key_range(p, s, (m0 + row) / group, &rlo[h], &rhi[h]);
  }
  const bool has_rows = 64 * cw < rows_here;
  int wlo = 0, whi = 0;
  if (has_rows) {
    int unused;
    const int last = 64 * cw + 63 < rows_here - 1 ? 64 * cw + 63 : rows_here - 1;
    key_range(p, s, (m0 + 64 * cw) / group, &wlo, &unused);
    key_range(p, s, (m0 + last) / group, &unused, &whi);
  }

  float o[D / 2], sc[BN / 2], m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < BN / 2; i++) sc[i] = 0.0f;
  const bool capped = p.softcap > 0.0f;
  const float qk_scale = capped ? p.scale / p.softcap : p.scale * kLog2e;
  const float cap2 = p.softcap * kLog2e;
  /* Without softcap the scale rides in the exponent's FMA: max(c s) = c max(s) for c > 0. */
  const bool fold = !capped && qk_scale > 0.0f;
  const float pscale = fold ? qk_scale : 1.0f;
  const uint32_t q_addr = smem_addr(sQ) + 64 * cw * 128;

  for (int t = 0; t < ntiles; t++) {
    const int st = t % kStages, j0 = klo + t * BN;
    mbar_wait(bar0 + st * 8, (t / kStages) & 1);
    if (has_rows && j0 < whi && j0 + BN > wlo) {
      const uint32_t k_addr = smem_addr(sKV + (size_t)(2 * st) * KV), v_addr = k_addr + KV;

      /* S = Q K^T: k-step kk is 32 bytes into a 128-byte swizzle row of column block kk / 4 */
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++) {
        const uint64_t da = smem_desc(q_addr + (kk >> 2) * kBM * 128 + (kk & 3) * 32, 16, 1024);
        const uint64_t db = smem_desc(k_addr + (kk >> 2) * BN * 128 + (kk & 3) * 32, 16, 1024);
        if constexpr (BN == 128)
          wgmma_ss_n128<T>(sc, da, db, kk > 0);
        else
          wgmma_ss_n64<T>(sc, da, db, kk > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(sc);

      /* scores in base 2 (times pscale); masks only on tiles that cross a row's range or hold
       * absent keys */
      bool full = j0 + BN <= khi && j0 >= lo_last && j0 + BN <= hi_first;
      if (PAGED && full) {
        bool ok = true;
#pragma unroll
        for (int e = 0; e < BN / 32; e++) ok = ok && sOk[st * BN + lane * (BN / 32) + e] != 0;
        full = __all_sync(0xffffffffu, ok) != 0;
      }
      if (capped) {
#pragma unroll
        for (int i = 0; i < BN / 2; i++) sc[i] = cap2 * tanhf(sc[i] * qk_scale);
      } else if (!fold) {
#pragma unroll
        for (int i = 0; i < BN / 2; i++) sc[i] *= qk_scale;
      }
      if (!full) {
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
          for (int nb = 0; nb < BN / 8; nb++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
              const int jl = nb * 8 + 2 * qt + e, j = j0 + jl;
              if (j < rlo[h] || j >= rhi[h] || (PAGED && !sOk[st * BN + jl]))
                sc[4 * nb + 2 * h + e] = -INFINITY;
            }
      }

      /* online softmax per row; P overwrites S */
#pragma unroll
      for (int h = 0; h < 2; h++) {
        float mx0 = sc[2 * h], mx1 = sc[2 * h + 1];
#pragma unroll
        for (int nb = 1; nb < BN / 8; nb++)
          mx0 = fmaxf(mx0, sc[4 * nb + 2 * h]), mx1 = fmaxf(mx1, sc[4 * nb + 2 * h + 1]);
        float mx = fmaxf(m_run[h], fmaxf(mx0, mx1) * pscale);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float base = mx == -INFINITY ? 0.0f : mx; /* every key so far masked */
        const float corr = fast_exp2(m_run[h] - base);
        m_run[h] = mx;
        float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
        for (int nb = 0; nb < BN / 8; nb++) {
          sc[4 * nb + 2 * h] = fast_exp2(fmaf(sc[4 * nb + 2 * h], pscale, -base));
          sc[4 * nb + 2 * h + 1] = fast_exp2(fmaf(sc[4 * nb + 2 * h + 1], pscale, -base));
          s0 += sc[4 * nb + 2 * h], s1 += sc[4 * nb + 2 * h + 1];
        }
        l_run[h] = l_run[h] * corr + (s0 + s1);
#pragma unroll
        for (int dn = 0; dn < D / 8; dn++) o[4 * dn + 2 * h] *= corr, o[4 * dn + 2 * h + 1] *= corr;
      }

      /* O += P V: P's k-step kj is the S fragment's n-blocks 2 kj and 2 kj + 1; V's 16 keys
       * are 2048 bytes into each column block; the n-halves of D 256 are 2 column blocks apart */
      uint32_t pa[BN / 16][4];
#pragma unroll
      for (int kj = 0; kj < BN / 16; kj++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          pa[kj][e] = pack2<T>(sc[8 * kj + 2 * e], sc[8 * kj + 2 * e + 1]);
      wgmma_fence();
#pragma unroll
      for (int kj = 0; kj < BN / 16; kj++) {
        if constexpr (D == 64) {
          wgmma_rs_n64<T>(o, pa[kj], smem_desc(v_addr + kj * 2048, BN * 128, 1024));
        } else {
#pragma unroll
          for (int nh = 0; nh < D / 128; nh++)
            wgmma_rs_n128<T>(*reinterpret_cast<float(*)[64]>(&o[64 * nh]), pa[kj],
                             smem_desc(v_addr + nh * 2 * BN * 128 + kj * 2048, BN * 128, 1024));
        }
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(o);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(bar0 + (kStages + st) * 8);
  }

  /* epilogue: normalize, store pairs; lse in natural log */
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
#else
  (void)p;
#endif
}

/* ---- host side ----------------------------------------------------------------------------- */
/* The 4-d tensor map of p's dtype (bf16/f16) over base with these dims, byte strides of dims 1-3
 * and box, 128-byte swizzled, element by element. */
bool encode_map(PFN_cuTensorMapEncodeTiled_v12000 encode, CUtensorMap *map, const AttnParams &p,
                const void *base, const cuuint64_t dims[4], const cuuint64_t strides[3],
                const cuuint32_t box[4]) {
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  const CUtensorMapDataType type = p.dtype == KITE_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                              : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return encode(map, type, 4, const_cast<void *>(base), dims, strides, box, unit,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* The tensor map of dense K or V (element strides [b, h, j], rows of head_dim elements) as a 4-d
 * tensor [b][h][j][d] read in boxes of 64 elements x bn keys, 128-byte swizzled: one column block
 * of a tile. False where TMA cannot address it (strides not positive multiples of 16 bytes). */
bool dense_tensor_map(CUtensorMap *map, const AttnParams &p, const void *base,
                      const int64_t stride[3], int bn) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (!encode || (uintptr_t)base % 16 != 0) return false;
  const cuuint64_t dims[4] = {(cuuint64_t)p.head_dim, (cuuint64_t)p.sk, (cuuint64_t)p.hkv,
                              (cuuint64_t)p.batch};
  cuuint64_t strides[3];
  for (int i = 0; i < 3; i++) {
    const int64_t b = stride[2 - i] * 2;
    if (b <= 0 || b % 16 != 0 || b >= (1LL << 40)) return false;
    strides[i] = (cuuint64_t)b;
  }
  for (int i = 1; i < 4; i++)
    if (dims[i] == 0 || dims[i] > 0x7fffffffu) return false;
  const cuuint32_t box[4] = {64, (cuuint32_t)bn, 1, 1};
  return encode_map(encode, map, p, base, dims, strides, box);
}

/* The tensor map of a paged cache [num_blocks][hkv][block_size][head_dim] in boxes of 64 elements x
 * min(block_size, bn) slots; false where TMA cannot take it (see enum Load). */
bool paged_tensor_map(CUtensorMap *map, const AttnParams &p, const void *base, int bn) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  const int64_t bs = p.block_size;
  if (!encode || (uintptr_t)base % 16 != 0 || bs % 16 != 0 || (bn % bs != 0 && bs % bn != 0) ||
      p.num_blocks <= 0 || p.num_blocks > 0x7fffffff)
    return false;
  const cuuint64_t dims[4] = {(cuuint64_t)p.head_dim, (cuuint64_t)bs, (cuuint64_t)p.hkv,
                              (cuuint64_t)p.num_blocks};
  const cuuint64_t row = (cuuint64_t)p.head_dim * 2;
  const cuuint64_t strides[3] = {row, row * bs, row * bs * p.hkv};
  if (strides[2] >= (1ull << 40)) return false;
  const cuuint32_t box[4] = {64, (cuuint32_t)(bs < bn ? bs : bn), 1, 1};
  return encode_map(encode, map, p, base, dims, strides, box);
}

template <typename T, int D>
kite_status launch_sm90(const AttnParams &p, dim3 grid, cudaStream_t s) {
  const size_t smem = Smem<D>::total;
  CUtensorMap tk, tv;
  memset(&tk, 0, sizeof tk);
  memset(&tv, 0, sizeof tv);
  auto run = [&](auto kernel) {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
        cudaSuccess)
      return false;
    kernel<<<grid, kThreads, smem, s>>>(p, tk, tv);
    return true;
  };
  bool ok;
  constexpr int BN = Smem<D>::BN;
  if (p.kind != ATTN_SDPA)
    ok = paged_tensor_map(&tk, p, p.k, BN) && paged_tensor_map(&tv, p, p.v, BN)
             ? run(attend_sm90_kernel<T, D, LOAD_PAGED_TMA>)
             : run(attend_sm90_kernel<T, D, LOAD_PAGED>);
  else if (dense_tensor_map(&tk, p, p.k, p.k_stride, BN) &&
           dense_tensor_map(&tv, p, p.v, p.v_stride, BN))
    ok = run(attend_sm90_kernel<T, D, LOAD_TMA>);
  else
    ok = run(attend_sm90_kernel<T, D, LOAD_DENSE>);
  if (!ok) {
    const cudaError_t e = cudaGetLastError();
    return kite_set_error(KITE_ERR_DEVICE, "cuda.sm90: %zu bytes of shared memory: %s", smem,
                          cudaGetErrorString(e));
  }
  return KITE_OK;
}

kite_status run_sm90(kite_ctx *ctx, const AttnParams &p, const char *op) {
  if (p.rows <= 0 || p.hq <= 0 || p.hkv <= 0) return KITE_OK;
  cudaStream_t s;
  kite_status st = begin(ctx, op, &s);
  if (st != KITE_OK) return st;
  const int64_t packed = p.rows * p.group;
  const int64_t tiles = p.kind == ATTN_PREFILL ? (packed + kBM - 1) / kBM + p.batch
                                               : p.batch * ((p.sq * p.group + kBM - 1) / kBM);
  if (tiles > 0x7fffffff || p.hkv > 65535)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cuda.sm90: too many query tiles or kv heads",
                          op);
  const dim3 grid((unsigned)tiles, (unsigned)p.hkv, 1);
  st = with_float_type(p.dtype, op, [&](auto tag) -> kite_status {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same<T, float>::value) {
      return kite_set_error(KITE_ERR_INTERNAL, "%s: cuda.sm90: f32 has no wgmma kernel", op);
    } else {
      switch (p.head_dim) {
      case 64:
        return launch_sm90<T, 64>(p, grid, s);
      case 128:
        return launch_sm90<T, 128>(p, grid, s);
      case 256:
        return launch_sm90<T, 256>(p, grid, s);
      default:
        return kite_set_error(KITE_ERR_INTERNAL, "%s: cuda.sm90: no kernel for head_dim %lld", op,
                              (long long)p.head_dim);
      }
    }
  });
  return st != KITE_OK ? st : cuda_check_launch(op, "sm90");
}

/* many_rows: more than 32 packed query rows per sequence on average (fewer go to cuda.mma, whose
 * keys mode splits a few rows over the keys). */
bool sm90_common(int64_t head_dim, bool many_rows, const char **why) {
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) {
    *why = "head_dim must be 64, 128 or 256";
    return false;
  }
  if (!many_rows) {
    *why = "needs more than 32 packed query rows per sequence";
    return false;
  }
  return ok_unless(!all_devices_sm90(), "needs compute capability 9.0", why);
}

} // namespace

PFN_cuTensorMapEncodeTiled_v12000 kite_cuda::tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void *f = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return (PFN_cuTensorMapEncodeTiled_v12000) nullptr;
    }
    return (PFN_cuTensorMapEncodeTiled_v12000)f;
  }();
  return fn;
}

/* Every visible device is compute capability 9.0: the sm_90a code runs on nothing else. */
bool kite_cuda::all_devices_sm90() {
  static const bool yes = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
      (void)cudaGetLastError();
      return false;
    }
    for (int d = 0; d < n; d++) {
      int major = 0, minor = 0;
      if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess ||
          cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
      }
      if (major != 9 || minor != 0) return false;
    }
    return true;
  }();
  return yes;
}

/* ---- entry points -------------------------------------------------------------------------- */
extern "C" CUDA_SUPPORTS(cuda_paged_sm90_supports) {
  const kite_paged_attn_args *a = (const kite_paged_attn_args *)args;
  if (!cuda_paged_mma_supports(k, args, why)) return false;
  if (a->sinks) {
    *why = "no sinks (cuda.mma takes them)";
    return false;
  }
  if (a->op != KITE_OP_PAGED_PREFILL) {
    *why = "paged_prefill only";
    return false;
  }
  /* head_dim 256 through cp.async (block sizes TMA cannot box): the race check reports its
   * key-offset traffic, so it stays on cuda.mma until that is settled */
  const int64_t bs = a->block_size, bn = Smem<256>::BN;
  if (a->head_dim == 256 && (bs % 16 != 0 || (bn % bs != 0 && bs % bn != 0))) {
    *why = "head_dim 256 needs a block_size that is a multiple of 16 dividing 64 or divided by it";
    return false;
  }
  const int64_t group = a->hkv > 0 ? a->hq / a->hkv : 0;
  return sm90_common(a->head_dim, a->tokens * group > 32 * a->batch, why);
}

extern "C" CUDA_RUN(cuda_paged_sm90_run) {
  const kite_paged_attn_args *a = (const kite_paged_attn_args *)args;
  return run_sm90(ctx, attn_paged_params(a), cuda_op_str(a->op));
}

extern "C" CUDA_SUPPORTS(cuda_sdpa_sm90_supports) {
  const kite_sdpa_args *a = (const kite_sdpa_args *)args;
  if (!cuda_sdpa_mma_supports(k, args, why)) return false;
  if (a->sinks) {
    *why = "no sinks (cuda.mma takes them)";
    return false;
  }
  const int64_t group = a->hkv > 0 ? a->hq / a->hkv : 0;
  return sm90_common(a->head_dim, a->sq * group > 32, why);
}

extern "C" CUDA_RUN(cuda_sdpa_sm90_run) {
  return run_sm90(ctx, attn_sdpa_params((const kite_sdpa_args *)args), "sdpa");
}
