/*
 * Attention for Hopper (sm_90a): paged_prefill and dense sdpa, bf16/f16, head_dim 64/128/256, as
 * a warp-specialized flash-attention kernel on wgmma. This file's kernel (cuda.sm90) runs one
 * dependent chain per tile and takes head_dim 256; head_dim 64 and 128 run the pipelined loop of
 * attention_sm90pp.cu (cuda.sm90pp), which this file launches.
 *
 * A CTA of 3 warpgroups takes one kv head g of one sequence and a tile of 128 packed query rows
 * (row m = query token m / group, q head m % group of the group reading g, as cuda.mma packs
 * them). Warpgroup 0 is the producer: it gives up registers (setmaxnreg) and fills a ring of
 * K/V stages (tiles of BN keys; 2 stages, 4 for head_dim 64): by TMA from dense K/V (tensor maps
 * built on the host) or from the paged caches (a box per cache block, block ids read one tile at a
 * time by one warp) when block_size is a multiple of 16 that divides BN or that BN divides; else
 * with 16-byte cp.async (dense strides, or slot by slot through the block table, so any
 * block_size); at head_dim 128 a paged box carries both column blocks of its cache block
 * (interleaved_cols). Each stage has a "full" mbarrier (TMA bytes, or every producer thread
 * once its copies landed and were made visible to the async proxy) and an "empty" one (each
 * consumer warp arrives after its P V wgmma completed). Warpgroups 1 and 2 are consumers:
 * each owns 64 packed rows (the wgmma M), takes the extra registers, and per tile runs
 *   S = Q K^T   wgmma m64nBNk16, Q and K from shared memory (K-major descriptors),
 *   scale / softcap / masks, online softmax in base 2 (the S accumulator fragment: 2 rows per
 *   thread, rows reduced over the 4 lanes of a quad),
 *   O += P V    wgmma m64nNk16, P rounded to T in registers (the f32 S fragment converted to
 *               pairs is the register A fragment), V from shared memory (MN-major descriptor).
 * The two consumers run independently, so the softmax of one overlaps the wgmma of the other.
 * attention_sm90.cuh holds the producer and these consumer steps; attention_sm90pp.cu pipelines
 * them (cuda.sm90pp).
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

#include "attention_sm90.cuh"

using namespace kite_cuda;
using namespace kite_cuda::sm90;

namespace {

/* K/V stages in the ring: as many as shared memory holds beside the Q tile. */
template <int D> using SmemOf = Smem<D, D == 64 ? 4 : 2, true>;

/* Grid: x = query tile of 128 packed rows (see find_tile), y = kv head. See the file comment. */
template <typename T, int D, int LOAD>
__global__ void __launch_bounds__(kThreads, 1)
    attend_sm90_kernel(AttnParams p, const __grid_constant__ CUtensorMap tmap_k,
                       const __grid_constant__ CUtensorMap tmap_v) {
#ifdef KITE_SM90_DEVICE
  using SM = SmemOf<D>;
  constexpr int BN = SM::BN, kStages = SM::kStages;
  constexpr bool PAGED = LOAD == LOAD_PAGED || LOAD == LOAD_PAGED_TMA;

  KITE_SM90_HEAD(T, D, LOAD, SM, 40);

  /* ---- consumers: warpgroup cw owns tile rows [64 cw, 64 cw + 64) ---- */
  reg_alloc<232>();
  const int cw = wg - 1, ctid = tid & 127, warp = ctid >> 5;
  load_q<T, D>(p, s, g, m0, rows_here, sh.q, cw, ctid);
  const Rows r = consumer_rows(p, s, m0, rows_here, cw, warp, lane >> 2);

  float o[D / 2], sc[BN / 2], m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < BN / 2; i++) sc[i] = 0.0f;
  const uint32_t q_addr = smem_addr(sh.q) + 64 * cw * 128;

  for (int t = 0; t < ntiles; t++) {
    const int st = t % kStages, j0 = klo + t * BN;
    mbar_wait(bar0 + st * 8, (t / kStages) & 1);
    if (tile_active<BN>(r, j0)) {
      const uint32_t k_addr = smem_addr(sh.kv + (size_t)st * SM::stage_bytes),
                     v_addr = k_addr + (uint32_t)SM::k_bytes;
      issue_qk<T, D, BN>(sc, q_addr, k_addr);
      wgmma_wait<0>();
      fence_regs(sc);
      /* the lazy rescale (softmax_tile) gave head_dim 256 2.6-5 % on an H100 */
      float corr[2];
      const float ps[2] = {r.pscale, r.pscale};
      softmax_tile<BN, PAGED, true>(sc, r, ps, j0, khi, lo_last, hi_first, sh.ok + st * BN, lane,
                                    m_run, l_run, corr);
      rescale_o<D, true>(o, corr);
      uint32_t pa[BN / 16][4];
      pack_p<T, BN>(pa, sc);
      issue_pv<T, D, BN>(o, pa, v_addr);
      wgmma_wait<0>();
      fence_regs(o);
    }
    release_stage<PAGED>(bar0 + (kStages + st) * 8, lane);
  }
  store_rows<T, D>(p, s, g, m0, rows_here, cw, warp, lane, o, m_run, l_run);
#else
  (void)p;
#endif
}

/* ---- host side ----------------------------------------------------------------------------- */
/* The tensor map of rank `rank` (4 or 5) of elements of esize bytes (2: dtype's bf16/f16; 1: e4m3
 * codes) over base with these dims, byte strides of dims 1 .. rank - 1 and box, 128-byte
 * swizzled, element by element. */
bool encode_map(PFN_cuTensorMapEncodeTiled_v12000 encode, CUtensorMap *map, kite_dtype dtype,
                int esize, const void *base, const cuuint64_t *dims, const cuuint64_t *strides,
                const cuuint32_t *box, int rank = 4) {
  const cuuint32_t unit[5] = {1, 1, 1, 1, 1};
  const CUtensorMapDataType type = esize == 1                 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : dtype == KITE_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                              : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return encode(map, type, (cuuint32_t)rank, const_cast<void *>(base), dims, strides, box, unit,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

} // namespace

bool kite_cuda::rows_tensor_map(CUtensorMap *map, kite_dtype dtype, int esize, const void *base,
                                const int64_t stride[3], int64_t head_dim, int64_t rows,
                                int64_t heads, int64_t batch, int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (!encode || (uintptr_t)base % 16 != 0) return false;
  const cuuint64_t dims[4] = {(cuuint64_t)head_dim, (cuuint64_t)rows, (cuuint64_t)heads,
                              (cuuint64_t)batch};
  cuuint64_t strides[3];
  for (int i = 0; i < 3; i++) {
    const int64_t b = stride[2 - i] * esize;
    if (b <= 0 || b % 16 != 0 || b >= (1LL << 40)) return false;
    strides[i] = (cuuint64_t)b;
  }
  for (int i = 1; i < 4; i++)
    if (dims[i] == 0 || dims[i] > 0x7fffffffu) return false;
  const cuuint32_t box[4] = {(cuuint32_t)(128 / esize), (cuuint32_t)box_rows, 1, 1};
  return encode_map(encode, map, dtype, esize, base, dims, strides, box);
}

bool kite_cuda::sm90::dense_tensor_map(CUtensorMap *map, const AttnParams &p, const void *base,
                                       const int64_t stride[3], int bn, int esize) {
  return rows_tensor_map(map, p.dtype, esize, base, stride, p.head_dim, p.sk, p.hkv, p.batch, bn);
}

namespace {

/* The tensor map of a paged cache [num_blocks][hkv][block_size][head_dim] in boxes of 64 elements x
 * min(block_size, bn) slots; false where TMA cannot take it (see enum Load). Head_dim 128
 * (interleaved_cols): the cache seen as [num_blocks hkv][block_size / 8][2][8][64] (slot group,
 * column block, slot, column), so that one box carries both column blocks of min(block_size, bn)
 * slots, 8-slot groups of the two column blocks alternating in shared memory. */
bool paged_tensor_map(CUtensorMap *map, const AttnParams &p, const void *base, int bn) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  const int64_t bs = p.block_size;
  if (!encode || (uintptr_t)base % 16 != 0 || bs % 16 != 0 || (bn % bs != 0 && bs % bn != 0) ||
      p.num_blocks <= 0 || p.num_blocks > 0x7fffffff)
    return false;
  if (p.head_dim == 128) {
    const cuuint64_t row = 256, groups = (cuuint64_t)(bs / 8);
    const cuuint64_t dims[5] = {64, 8, 2, groups, (cuuint64_t)p.num_blocks * (cuuint64_t)p.hkv};
    const cuuint64_t strides[4] = {row, 128, 8 * row, row * (cuuint64_t)bs};
    if (dims[4] > 0x7fffffffull || strides[3] >= (1ull << 40)) return false; /* int coordinates */
    const cuuint32_t box[5] = {64, 8, 2, (cuuint32_t)((bs < bn ? bs : bn) / 8), 1};
    return encode_map(encode, map, p.dtype, 2, base, dims, strides, box, 5);
  }
  const cuuint64_t dims[4] = {(cuuint64_t)p.head_dim, (cuuint64_t)bs, (cuuint64_t)p.hkv,
                              (cuuint64_t)p.num_blocks};
  const cuuint64_t row = (cuuint64_t)p.head_dim * 2;
  const cuuint64_t strides[3] = {row, row * bs, row * bs * p.hkv};
  if (strides[2] >= (1ull << 40)) return false;
  const cuuint32_t box[4] = {64, (cuuint32_t)(bs < bn ? bs : bn), 1, 1};
  return encode_map(encode, map, p.dtype, 2, base, dims, strides, box);
}

/* The kernel of cuda.sm90 for a Load mode. */
template <typename T, int D> Kernel chain_kernel(int load) {
  const size_t smem = SmemOf<D>::total;
  switch (load) {
  case LOAD_DENSE:
    return {attend_sm90_kernel<T, D, LOAD_DENSE>, smem};
  case LOAD_PAGED:
    return {attend_sm90_kernel<T, D, LOAD_PAGED>, smem};
  case LOAD_TMA:
    return {attend_sm90_kernel<T, D, LOAD_TMA>, smem};
  default:
    return {attend_sm90_kernel<T, D, LOAD_PAGED_TMA>, smem};
  }
}

/* The kernel entry that runs head_dim D: the pipelined loop at 64 and 128 (attention_sm90pp.cu),
 * the dependent chain per tile at 256 (there o, S and P leave ptxas too few registers to keep
 * wgmma in flight across the softmax). */
const char *entry_name(int64_t head_dim) {
  return head_dim == 256 ? "cuda.sm90" : "cuda.sm90pp";
}

/* name: the kernel entry (entry_name). */
template <typename T, int D>
kite_status launch_sm90(const AttnParams &p, dim3 grid, cudaStream_t s, const char *name) {
  CUtensorMap tk, tv;
  memset(&tk, 0, sizeof tk);
  memset(&tv, 0, sizeof tv);
  constexpr int BN = tile_keys<D>();
  int load;
  if (p.kind != ATTN_SDPA)
    load = paged_tensor_map(&tk, p, p.k, BN) && paged_tensor_map(&tv, p, p.v, BN) ? LOAD_PAGED_TMA
                                                                                  : LOAD_PAGED;
  else if (dense_tensor_map(&tk, p, p.k, p.k_stride, BN, 2) &&
           dense_tensor_map(&tv, p, p.v, p.v_stride, BN, 2))
    load = LOAD_TMA;
  else
    load = LOAD_DENSE;
  Kernel k;
  if constexpr (D == 256)
    k = chain_kernel<T, D>(load);
  else
    k = pipelined_kernel<T, D>(load);
  if (cudaFuncSetAttribute(k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)k.smem) !=
      cudaSuccess) {
    const cudaError_t e = cudaGetLastError();
    return kite_set_error(KITE_ERR_DEVICE, "%s: %zu bytes of shared memory: %s", name, k.smem,
                          cudaGetErrorString(e));
  }
  k.fn<<<grid, kThreads, k.smem, s>>>(p, tk, tv);
  return KITE_OK;
}

kite_status run_sm90(kite_ctx *ctx, const AttnParams &p, const char *op) {
  const char *name = entry_name(p.head_dim);
  if (p.rows <= 0 || p.hq <= 0 || p.hkv <= 0) return KITE_OK;
  cudaStream_t s;
  kite_status st = begin(ctx, op, &s);
  if (st != KITE_OK) return st;
  const int64_t packed = p.rows * p.group;
  const int64_t tiles = p.kind == ATTN_PREFILL ? (packed + kBM - 1) / kBM + p.batch
                                               : p.batch * ((p.sq * p.group + kBM - 1) / kBM);
  if (tiles > 0x7fffffff || p.hkv > 65535)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: %s: too many query tiles or kv heads", op,
                          name);
  const dim3 grid((unsigned)tiles, (unsigned)p.hkv, 1);
  st = with_float_type(p.dtype, op, [&](auto tag) -> kite_status {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same<T, float>::value) {
      return kite_set_error(KITE_ERR_INTERNAL, "%s: %s: f32 has no wgmma kernel", op, name);
    } else {
      switch (p.head_dim) {
      case 64:
        return launch_sm90<T, 64>(p, grid, s, name);
      case 128:
        return launch_sm90<T, 128>(p, grid, s, name);
      case 256:
        return launch_sm90<T, 256>(p, grid, s, name);
      default:
        return kite_set_error(KITE_ERR_INTERNAL, "%s: %s: no kernel for head_dim %lld", op, name,
                              (long long)p.head_dim);
      }
    }
  });
  return st != KITE_OK ? st : cuda_check_launch(op, name + 5 /* the variant */);
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
/* The cases of both entries; cuda.sm90 takes head_dim 256 of them, cuda.sm90pp the others. */
static bool paged_cases(const kite_kernel *k, const void *args, const char **why) {
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
  const int64_t bs = a->block_size, bn = tile_keys<256>();
  if (a->head_dim == 256 && (bs % 16 != 0 || (bn % bs != 0 && bs % bn != 0))) {
    *why = "head_dim 256 needs a block_size that is a multiple of 16 dividing 64 or divided by it";
    return false;
  }
  const int64_t group = a->hkv > 0 ? a->hq / a->hkv : 0;
  return sm90_common(a->head_dim, a->tokens * group > 32 * a->batch, why);
}

static bool sdpa_cases(const kite_kernel *k, const void *args, const char **why) {
  const kite_sdpa_args *a = (const kite_sdpa_args *)args;
  if (!cuda_sdpa_mma_supports(k, args, why)) return false;
  if (a->sinks) {
    *why = "no sinks (cuda.mma takes them)";
    return false;
  }
  const int64_t group = a->hkv > 0 ? a->hq / a->hkv : 0;
  return sm90_common(a->head_dim, a->sq * group > 32, why);
}

static const char *const kOnly256 = "head_dim 256 only (cuda.sm90pp takes 64 and 128)";
static const char *const kNo256 = "head_dim 64 or 128 (cuda.sm90 takes 256)";

extern "C" CUDA_SUPPORTS(cuda_paged_sm90_supports) {
  return ok_unless(((const kite_paged_attn_args *)args)->head_dim != 256, kOnly256, why) &&
         paged_cases(k, args, why);
}

extern "C" CUDA_SUPPORTS(cuda_paged_sm90pp_supports) {
  return ok_unless(((const kite_paged_attn_args *)args)->head_dim == 256, kNo256, why) &&
         paged_cases(k, args, why);
}

extern "C" CUDA_SUPPORTS(cuda_sdpa_sm90_supports) {
  return ok_unless(((const kite_sdpa_args *)args)->head_dim != 256, kOnly256, why) &&
         sdpa_cases(k, args, why);
}

extern "C" CUDA_SUPPORTS(cuda_sdpa_sm90pp_supports) {
  return ok_unless(((const kite_sdpa_args *)args)->head_dim == 256, kNo256, why) &&
         sdpa_cases(k, args, why);
}

/* both entries: the kernel follows head_dim (entry_name) */
extern "C" CUDA_RUN(cuda_paged_sm90_run) {
  const kite_paged_attn_args *a = (const kite_paged_attn_args *)args;
  return run_sm90(ctx, attn_paged_params(a), cuda_op_str(a->op));
}

extern "C" CUDA_RUN(cuda_sdpa_sm90_run) {
  return run_sm90(ctx, attn_sdpa_params((const kite_sdpa_args *)args), "sdpa");
}
