/*
 * group_gemm on Hopper (sm_90a), bf16/f16: one persistent, warp-specialized wgmma kernel whose
 * schedule stays on the device (no group size reaches the host: CUDA-graph safe).
 *
 * y[M, N] is cut into tiles of 128 rows x BN columns of one group. Every CTA reads the G group
 * sizes (warp 0 scans them into shared memory: the first row and the first tile of each group,
 * sizes clamped as kite.h says) and walks the linear tile index t = blockIdx.x, += gridDim.x over
 * (group, n-tile, m-tile), m-tiles fastest so that the CTAs running at once share the tiles of
 * w[g]. Tiles past the groups' cover rows [sum, M), which become zeros in the same kernel.
 *
 * A CTA has 3 warpgroups. Warpgroup 0 is the producer: one thread fills a ring of kStages stages,
 * each a 128 x 64 tile of x (a 2-d tensor map over [M, K]: a tile starts at its group's row; rows
 * past the group's end are the next group's or TMA's zeros past M, and are never stored) and a
 * BN x 64 tile of w[g] (a 3-d map over [G, N, K]); K past its end is TMA's zero fill. Each stage
 * has a "full" mbarrier (the TMA bytes) and an "empty" one (each consumer warp reading the stage,
 * once the wgmmas reading it completed). Warpgroups 1 and 2 are consumers running wgmma from
 * shared memory into f32 accumulators, one k-block of wgmmas in flight. BN = 256: both consumers
 * work on every tile, each owning 64 of its rows (one m64n256k16 per k-step).
 *
 * The epilogue keeps the stores off the critical path: a consumer whose 64 rows all lie inside
 * the tile's group writes them as T, 64 columns at a time, to its own swizzled staging buffer
 * (stmatrix, a 64 x 64 block), fences them to the async proxy, and one of its threads TMA-stores
 * the block to y (a 2-d map over [M, N]; columns past N are clipped) as a bulk group; the
 * warpgroup goes on, and waits for a group only before it writes the buffer again, so the last
 * block's store runs under the next tile's main loop. A box never reaches past its group's rows:
 * those may be the next group's. The other consumers (the group's last, partial tile) and a y
 * that TMA cannot describe store T pairs (single elements where y's layout leaves pairs
 * unaligned) straight from the accumulator fragment with row and column predicates.
 *
 * Shared-memory tiles are in the 128-byte swizzled layout (sm90.cuh): a tile of R rows x 64
 * elements is R rows of 128 bytes, 1024-byte aligned.
 */
#include "gemm.cuh"
#include "sm90.cuh"

using namespace kite_cuda;

namespace {

constexpr int kThreads = 384, kBM = 128, kBK = 64;
/* Groups the shared-memory schedule holds; more go to the cuBLAS path. */
constexpr int kMaxGroups = 1024;

/* kStages: the ring's depth; kEpiCols: the columns of each consumer's staging buffer (64 rows x
 * kEpiCols, in 64-column swizzled blocks) that TMA stores to y. Measured on an H100 (8 x 512 x
 * 4096^2 bf16): 4 stages and 64 columns at a time 186.5 us; 3 stages and all 256 columns 203.0;
 * stores from the accumulator fragments (no staging) 206.5. */
struct GgShape {
  static constexpr int BN = 256, kStages = 4, kEpiCols = 64;
  /* consumer warps reading each stage: both warpgroups' */
  static constexpr int kReaders = 8;
  static_assert(kReaders * 32 == kThreads - 128, "every consumer warp reads every stage");
  static_assert(kEpiCols % 64 == 0 && kEpiCols <= BN && BN % kEpiCols == 0, "64-column blocks");
  static constexpr size_t a_bytes = (size_t)kBM * kBK * 2, b_bytes = (size_t)BN * kBK * 2;
  /* per consumer: 64 rows x kEpiCols */
  static constexpr size_t stage_bytes = (size_t)64 * kEpiCols * 2;
  static constexpr size_t sched_bytes = 2 * (size_t)(kMaxGroups + 1) * sizeof(int32_t);
  static constexpr size_t bar_bytes = 2 * kStages * 8;
  static constexpr size_t smem = 1024 /* alignment */ + kStages * (a_bytes + b_bytes) +
                                 2 * stage_bytes + sched_bytes + bar_bytes;
  static_assert(smem <= 227 * 1024, "shared memory of one CTA");
};

struct GgParams {
  int32_t m, n, k, groups;
  const int32_t *sizes;
  void *y;
  int64_t y_stride;
  int pairs; /* y's base and row stride keep column pairs 4-byte aligned */
  int tma_y; /* y has a tensor map (16-byte aligned base and row stride): the staged epilogue */
};

/* Where a tile lies: group g's rows [row0, row0 + rows), columns from n0. */
struct GgTile {
  int g, row0, rows, n0;
};

/* Moves the cursor g to tile t's group (tiles only grow along a CTA's walk) and decodes it. */
template <int BN>
__device__ __forceinline__ GgTile find_tile(const int32_t *s_row, const int32_t *s_tile, int &g,
                                            int t) {
  while (s_tile[g + 1] <= t) g++;
  const int rows_g = s_row[g + 1] - s_row[g], mts = (rows_g + kBM - 1) / kBM;
  const int local = t - s_tile[g], mt = local % mts, nt = local / mts;
  const int rows = rows_g - mt * kBM;
  return GgTile{g, s_row[g] + mt * kBM, rows < kBM ? rows : kBM, nt * BN};
}

/* Stores this thread's part of a 64 x 128 accumulator block (rows r0 + 16 warp + 8 h + lane / 4,
 * columns c0 + 8 nb + 2 (lane % 4) + e) of the rows below rows_here, columns below n; zero: zeros.
 */
template <typename T, bool ZERO>
__device__ __forceinline__ void store_block(const GgParams &p, const float (&d)[64], int64_t row0,
                                            int r0, int rows_here, int c0, int warp, int lane) {
  T *y = (T *)p.y;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int r = r0 + 16 * warp + 8 * h + (lane >> 2);
    if (r >= rows_here) continue;
    T *dst = y + (row0 + r) * p.y_stride;
#pragma unroll
    for (int nb = 0; nb < 16; nb++) {
      const int c = c0 + 8 * nb + 2 * (lane & 3);
      const float v0 = ZERO ? 0.0f : d[4 * nb + 2 * h], v1 = ZERO ? 0.0f : d[4 * nb + 2 * h + 1];
      if (c + 1 < p.n && p.pairs) {
        *(uint32_t *)(dst + c) = pack2<T>(v0, v1);
      } else {
        if (c < p.n) dst[c] = from_float<T>(v0);
        if (c + 1 < p.n) dst[c + 1] = from_float<T>(v1);
      }
    }
  }
}

#ifdef KITE_SM90_DEVICE
/* The staged epilogue of consumer cw (its 64 rows of the tile at row0, n0 of y's N columns; wtid,
 * warp, lane: this thread in the warpgroup): kEpiCols columns at a time, stmatrix into the swizzled
 * staging buffer stg, then one thread TMA-stores its 64 x 64 blocks as one bulk group. The buffer
 * is written again only once the previous group has read it; the stores' completion is awaited only
 * at the kernel's end. */
template <typename T>
__device__ __forceinline__ void store_staged(const CUtensorMap *tmap_y, const float (&d)[2][64],
                                             uint32_t stg, int row0, int n0, int n, int cw,
                                             int wtid, int warp, int lane) {
  constexpr int kBlockBytes = 64 * 128; /* one 64 x 64 block */
  const int j = lane >> 3;              /* the matrix whose row this lane addresses */
  const int r = 16 * warp + 8 * (j & 1) + (lane & 7);
#pragma unroll
  for (int c0 = 0; c0 < GgShape::BN; c0 += GgShape::kEpiCols) {
    if (wtid == 0) bulk_wait_read<0>();
    named_sync(1 + cw, 128);
#pragma unroll
    for (int nb = 0; nb < GgShape::kEpiCols / 8; nb += 2) {
      /* 8-column blocks nb and nb + 1 of this chunk: column block cc = c0 / 8 + nb of the tile */
      const int cc = c0 / 8 + nb, h = cc / 16, q = cc % 16;
      const uint32_t v[4] = {
          pack2<T>(d[h][4 * q], d[h][4 * q + 1]), pack2<T>(d[h][4 * q + 2], d[h][4 * q + 3]),
          pack2<T>(d[h][4 * q + 4], d[h][4 * q + 5]), pack2<T>(d[h][4 * q + 6], d[h][4 * q + 7])};
      const int ch = nb + (j >> 1); /* this lane's 16-byte chunk within the staged columns */
      stmatrix_x4(stg + swz(64, r, ch), v); /* block ch / 8 of the 64 x 64 blocks */
    }
    fence_async_shared();
    named_sync(1 + cw, 128);
    if (wtid == 0) {
#pragma unroll
      for (int b = 0; b < GgShape::kEpiCols / 64; b++)
        if (n0 + c0 + 64 * b < n) /* boxes past N would write nothing */
          tma_store_2d(tmap_y, stg + b * kBlockBytes, n0 + c0 + 64 * b, row0 + 64 * cw);
      bulk_commit();
    }
  }
}
#endif

template <typename T>
__global__ void __launch_bounds__(kThreads, 1)
    group_gemm_sm90_kernel(GgParams p, const __grid_constant__ CUtensorMap tmap_x,
                           const __grid_constant__ CUtensorMap tmap_w,
                           const __grid_constant__ CUtensorMap tmap_y) {
#ifdef KITE_SM90_DEVICE
  constexpr int BN = GgShape::BN, kStages = GgShape::kStages;
  constexpr uint32_t TX_BYTES = (uint32_t)(GgShape::a_bytes + GgShape::b_bytes);
  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  unsigned char *sA = smem, *sB = smem + kStages * GgShape::a_bytes;
  unsigned char *sStage = sB + kStages * GgShape::b_bytes; /* [2][stage_bytes]: the consumers' */
  int32_t *s_row = (int32_t *)(sStage + 2 * GgShape::stage_bytes); /* [groups + 1]: first rows */
  int32_t *s_tile = s_row + kMaxGroups + 1;                        /* [groups + 1]: first tiles */
  const uint32_t bar0 = smem_addr(s_tile + kMaxGroups + 1); /* full[kStages], empty[kStages] */

  const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31;
  const int ntn = (p.n + BN - 1) / BN;
  const int cta = (int)blockIdx.x, ctas = (int)gridDim.x;

  /* the schedule: warp 0 scans the sizes 32 at a time (negative = 0, clamped to M rows) */
  if (tid < 32) {
    int64_t rows_carry = 0, tile_carry = 0;
    for (int base = 0; base < p.groups; base += 32) {
      const int g = base + lane;
      const int64_t sz = g < p.groups && p.sizes[g] > 0 ? p.sizes[g] : 0;
      int64_t incl = sz;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int64_t v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
      }
      const int64_t start = rows_carry + incl - sz < p.m ? rows_carry + incl - sz : p.m;
      const int64_t rows = sz < p.m - start ? sz : p.m - start;
      const int64_t tiles = (rows + kBM - 1) / kBM * ntn;
      int64_t tincl = tiles;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int64_t v = __shfl_up_sync(0xffffffffu, tincl, o);
        if (lane >= o) tincl += v;
      }
      if (g < p.groups) {
        s_row[g] = (int32_t)start;
        s_tile[g] = (int32_t)(tile_carry + tincl - tiles);
      }
      const int64_t rsum = __shfl_sync(0xffffffffu, incl, 31);
      rows_carry = rows_carry + rsum < p.m ? rows_carry + rsum : p.m;
      tile_carry += __shfl_sync(0xffffffffu, tincl, 31);
    }
    if (lane == 0) {
      s_row[p.groups] = (int32_t)rows_carry;
      s_tile[p.groups] = (int32_t)tile_carry;
    }
  } else if (tid == 32) {
#pragma unroll
    for (int st = 0; st < kStages; st++) {
      mbar_init(bar0 + st * 8, 1);                             /* the producer's expected bytes */
      mbar_init(bar0 + (kStages + st) * 8, GgShape::kReaders); /* the consumer warps reading it */
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int used = s_row[p.groups], tiles = s_tile[p.groups];
  const int zero_tiles = (p.m - used + kBM - 1) / kBM * ntn;
  const int kblocks = (p.k + kBK - 1) / kBK;

  if (wg == 0) { /* ---- producer: the ring in the CTA's tile order ---- */
    reg_dealloc<40>();
    if (tid == 0) {
      int g = 0, it = 0;
      for (int t = cta; t < tiles; t += ctas) {
        const GgTile tl = find_tile<BN>(s_row, s_tile, g, t);
        for (int kb = 0; kb < kblocks; kb++, it++) {
          const int st = it % kStages;
          const uint32_t full = bar0 + st * 8;
          mbar_wait(bar0 + (kStages + st) * 8, ((it / kStages) & 1) ^ 1);
          mbar_expect_tx(full, (int)TX_BYTES);
          tma_load_2d(smem_addr(sA + st * GgShape::a_bytes), &tmap_x, kb * kBK, tl.row0, full);
          tma_load_3d(smem_addr(sB + st * GgShape::b_bytes), &tmap_w, kb * kBK, tl.n0, tl.g, full);
        }
      }
    }
    return;
  }

  /* ---- consumers ---- */
  reg_alloc<232>();
  const int cw = wg - 1, warp = (tid & 127) >> 5;
  /* a stage goes back to the producer: this warp arrives on its empty barrier */
  auto release = [&](int st) {
    if (lane == 0) mbar_arrive(bar0 + (kStages + st) * 8);
  };
  /* the n256 accumulators of this consumer's 64 rows: [0] columns [0, 128), [1] [128, 256) */
  float d[2][64];
  int g = 0;
  for (int j = 0, t = cta; t < tiles; j++, t += ctas) {
    const GgTile tl = find_tile<BN>(s_row, s_tile, g, t);
    int it = j * kblocks; /* the ring position of this tile's first k-block */
    for (int kb = 0; kb < kblocks; kb++, it++) {
      const int st = it % kStages;
      mbar_wait(bar0 + st * 8, (it / kStages) & 1);
      const uint32_t a_addr = smem_addr(sA + st * GgShape::a_bytes) + 64 * cw * 128;
      const uint32_t b_addr = smem_addr(sB + st * GgShape::b_bytes);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; kk++) {
        const uint64_t db = smem_desc(b_addr + kk * 32, 16, 1024);
        wgmma_ss_n256<T>(*reinterpret_cast<float(*)[128]>(&d[0][0]),
                         smem_desc(a_addr + kk * 32, 16, 1024), db, kb > 0 || kk > 0);
      }
      wgmma_commit();
      /* the previous k-block's wgmmas are done: its stage goes back */
      wgmma_wait<1>();
      fence_regs(d[0]);
      fence_regs(d[1]);
      if (kb > 0) release((it - 1) % kStages);
    }
    wgmma_wait<0>();
    fence_regs(d[0]);
    fence_regs(d[1]);
    release((it - 1) % kStages);
    /* this consumer's 64 rows all in the group: TMA stores the whole box */
    if (p.tma_y && tl.rows >= 64 * cw + 64) {
      store_staged<T>(&tmap_y, d, smem_addr(sStage + cw * GgShape::stage_bytes), tl.row0, tl.n0,
                      p.n, cw, tid & 127, warp, lane);
      continue;
    }
#pragma unroll
    for (int h = 0; h < 2; h++)
      store_block<T, false>(p, d[h], tl.row0, 64 * cw, tl.rows, tl.n0 + 128 * h, warp, lane);
  }
  /* rows no group claims: zeros, 128 x BN at a time, consumer cw on rows [64 cw, 64 cw + 64) */
  for (int t = blockIdx.x; t < zero_tiles; t += gridDim.x) {
    const int mt = t / ntn, nt = t % ntn;
    const int64_t row0 = used + (int64_t)mt * kBM;
    const int rows = p.m - (int)row0 < kBM ? p.m - (int)row0 : kBM;
#pragma unroll
    for (int h = 0; h < BN / 128; h++)
      store_block<T, true>(p, d[h], row0, 64 * cw, rows, nt * BN + 128 * h, warp, lane);
  }
  /* the shared memory the stores read stays until they are done */
  if ((tid & 127) == 0) bulk_wait<0>();
#else
  (void)p;
#endif
}

/* ---- host side ----------------------------------------------------------------------------- */
/* A tensor map of a's dtype over base: `rank` dims (innermost first), byte strides of dims 1 and
 * up, box of 64 elements x box1 rows (x 1), 128-byte swizzled; TMA's zeros out of bounds. */
bool gg_map(CUtensorMap *map, kite_dtype dtype, const void *base, int rank, const cuuint64_t *dims,
            const cuuint64_t *strides, cuuint32_t box1) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (!encode) return false;
  const cuuint32_t box[3] = {(cuuint32_t)kBK, box1, 1}, unit[3] = {1, 1, 1};
  const CUtensorMapDataType type =
      dtype == KITE_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return encode(map, type, (cuuint32_t)rank, const_cast<void *>(base), dims, strides, box, unit,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* One launch of the kernel; *mapped false where TMA cannot describe x or w (the caller takes the
 * cuBLAS path); y without a tensor map is stored directly.
 * Graph-safe: nothing here allocates or synchronizes; the tensor maps travel as kernel
 * parameters. */
template <typename T>
kite_status gg_launch(const kite_group_gemm_args *a, const char *variant, cudaStream_t s,
                      bool *mapped) {
  CUtensorMap tx, tw, ty;
  memset(&tx, 0, sizeof tx);
  memset(&tw, 0, sizeof tw);
  memset(&ty, 0, sizeof ty);
  const cuuint64_t xdims[2] = {(cuuint64_t)a->k, (cuuint64_t)a->m};
  const cuuint64_t xstrides[1] = {(cuuint64_t)a->x_stride * 2};
  const cuuint64_t wdims[3] = {(cuuint64_t)a->k, (cuuint64_t)a->n, (cuuint64_t)a->groups};
  /* one group: its stride is never stepped, any multiple of 16 bytes describes it */
  const cuuint64_t wg_bytes = a->groups > 1 ? (cuuint64_t)a->w_stride_g * 2
                                            : ((cuuint64_t)a->n * a->w_stride_n * 2 + 15) / 16 * 16;
  const cuuint64_t wstrides[2] = {(cuuint64_t)a->w_stride_n * 2, wg_bytes};
  /* y [M, N] in 64 x 64 boxes (TMA stores clip at M and N; rows of the next group are never in a
   * stored box) */
  const cuuint64_t ydims[2] = {(cuuint64_t)a->n, (cuuint64_t)a->m};
  const cuuint64_t ystrides[1] = {(cuuint64_t)a->y_stride * 2};
  const bool y_tma = (uintptr_t)a->y % 16 == 0 && a->y_stride * 2 % 16 == 0 && a->y_stride > 0 &&
                     a->y_stride * 2 < (1LL << 40);
  /* Host calls only, but under a global-mode capture (PyTorch's default) of any stream the
   * runtime may refuse them as unsafe: relaxed mode for this thread around them. */
  auto kernel = group_gemm_sm90_kernel<T>;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  const bool exchanged = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
  const bool ok = gg_map(&tx, a->dtype, a->x, 2, xdims, xstrides, kBM) &&
                  gg_map(&tw, a->dtype, a->w, 3, wdims, wstrides, GgShape::BN);
  const bool y_mapped = y_tma && gg_map(&ty, a->dtype, a->y, 2, ydims, ystrides, 64);
  const cudaError_t attr_e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)GgShape::smem);
  int64_t ctas = sm_count();
  if (exchanged) (void)cudaThreadExchangeStreamCaptureMode(&mode);
  *mapped = ok;
  if (!ok) return KITE_OK;
  if (attr_e != cudaSuccess) {
    (void)cudaGetLastError();
    return kite_set_error(KITE_ERR_DEVICE, "group_gemm: cuda.%s: %zu bytes of shared memory: %s",
                          variant, GgShape::smem, cudaGetErrorString(attr_e));
  }
  const GgParams p = {(int32_t)a->m,  (int32_t)a->n,
                      (int32_t)a->k,  (int32_t)a->groups,
                      a->group_sizes, a->y,
                      a->y_stride,    (uintptr_t)a->y % 4 == 0 && a->y_stride % 2 == 0,
                      y_mapped};
  /* at most ceil(M / 128) + G row tiles of groups, or ceil(M / 128) of zeros, each ntn wide */
  const int64_t ntn = (a->n + GgShape::BN - 1) / GgShape::BN;
  const int64_t tiles = ((a->m + kBM - 1) / kBM + a->groups) * ntn;
  if (tiles < ctas) ctas = tiles;
  kernel<<<(unsigned)ctas, kThreads, GgShape::smem, s>>>(p, tx, tw, ty);
  return KITE_OK;
}

kite_status gg_run(const kite_kernel *k, kite_ctx *ctx, const void *args, const char *variant) {
  const kite_group_gemm_args *a = (const kite_group_gemm_args *)args;
  if (a->m <= 0 || a->n <= 0) return KITE_OK;
  cudaStream_t s;
  kite_status st = begin(ctx, "group_gemm", &s);
  if (st != KITE_OK) return st;
  bool mapped = false;
  if (a->dtype == KITE_DTYPE_BF16)
    st = gg_launch<__nv_bfloat16>(a, variant, s, &mapped);
  else if (a->dtype == KITE_DTYPE_F16)
    st = gg_launch<__half>(a, variant, s, &mapped);
  else
    st = kite_set_error(KITE_ERR_INTERNAL, "group_gemm: cuda.%s: f16/bf16 only", variant);
  if (st != KITE_OK) return st;
  if (!mapped) {
    /* under capture the cuBLAS path would need a workspace reserved before: say why instead */
    if (stream_capturing(s))
      return kite_set_error(KITE_ERR_DEVICE,
                            "group_gemm: cuda.%s: the driver declined x's or w's tensor map "
                            "while the stream is capturing",
                            variant);
    return cuda_group_gemm_cublaslt_run(k, ctx, args);
  }
  return cuda_check_launch("group_gemm", variant);
}

/* What the kernel needs: f16/bf16, K > 0, TMA's 16-byte aligned bases and row strides of x and w,
 * at most kMaxGroups groups, tile counts in int32, compute capability 9.0. */
bool gg_supports(const void *args, const char **why) {
  const kite_group_gemm_args *a = (const kite_group_gemm_args *)args;
  if (a->dtype != KITE_DTYPE_BF16 && a->dtype != KITE_DTYPE_F16) {
    *why = "f16/bf16 only";
    return false;
  }
  if (a->k <= 0 || a->groups <= 0) {
    *why = "needs K > 0 and a group";
    return false;
  }
  if (a->groups > kMaxGroups) {
    *why = "at most 1024 groups";
    return false;
  }
  if (a->m >= INT32_MAX || a->n >= INT32_MAX || a->k >= INT32_MAX ||
      (2 * ((a->m + kBM - 1) / kBM) + a->groups) * ((a->n + GgShape::BN - 1) / GgShape::BN) >=
          INT32_MAX) {
    *why = "sizes past int32";
    return false;
  }
  const bool w_ok = a->groups == 1 || (a->w_stride_g > 0 && a->w_stride_g * 2 % 16 == 0 &&
                                       a->w_stride_g * 2 < (1LL << 40));
  if ((uintptr_t)a->x % 16 != 0 || (uintptr_t)a->w % 16 != 0 || a->x_stride * 2 % 16 != 0 ||
      a->x_stride <= 0 || a->w_stride_n * 2 % 16 != 0 || a->w_stride_n <= 0 ||
      a->x_stride * 2 >= (1LL << 40) || a->w_stride_n * 2 >= (1LL << 40) || !w_ok) {
    *why = "x and w need 16-byte aligned bases and row strides (TMA)";
    return false;
  }
  return ok_unless(!all_devices_sm90(), "needs compute capability 9.0", why);
}

} // namespace

extern "C" CUDA_SUPPORTS(cuda_group_gemm_wgmma_supports) {
  (void)k;
  return gg_supports(args, why);
}
extern "C" CUDA_RUN(cuda_group_gemm_wgmma_run) {
  return gg_run(k, ctx, args, "wgmma");
}
