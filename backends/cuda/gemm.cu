/*
 * Dense and grouped GEMMs: linear y[m, n] = x[m, k] w[n, k]^T + bias[n], and group_gemm, where
 * consecutive groups of x's rows each use their own w[g].
 *
 * linear goes through cuBLASLt ("cublaslt", blas.cu's lt_gemm). The row-major y = x w^T is the
 * column-major y^T[n, m] = w^T[n, k] x^T[k, m], so w is cuBLAS's A (transposed) and x its B, each
 * row stride a leading dimension; the bias is the epilogue's. f32 runs with CUBLAS_COMPUTE_32F,
 * never TF32. Where cuBLASLt offers no algorithm (odd alignments), the tiled kernel below serves
 * the call. group_gemm's "cublaslt" variant runs equal groups as one cuBLAS strided batch (what
 * torch.bmm runs) and groups of different sizes as one cuBLASLt matmul per group (see its run
 * function).
 *
 * The tiled kernel ("tiles") computes 64x64 output tiles in f32 from shared-memory slabs. Each
 * tile names its rows (a range of a group) and its group's weights, from a schedule that a
 * one-block kernel builds from the device-resident group sizes: no group size ever reaches the
 * host. fused_moe (moe.cu) drives the same kernel with gathered rows.
 */
#include <vector>

#include "gemm.cuh"

using namespace kite_cuda;

namespace kite_cuda {

/* ---- tiled kernel -------------------------------------------------------------------------- */
constexpr int kBM = kTileGemmRows, kBN = 64, kBK = 16;

/* 256 threads in the register tile of tile_fma_4x4 (gemm.cuh). */
template <typename T, typename OutT>
__global__ void __launch_bounds__(256) tile_gemm_kernel(TileGemm p) {
  __shared__ float as[kBK][kBM + 1];
  __shared__ float bs[kBK][kBN + 1];
  int64_t row0 = (int64_t)blockIdx.y * kBM, row_end = p.m;
  int64_t group = 0;
  if (p.tiles) {
    if ((int64_t)blockIdx.y >= *p.tile_count) return;
    const GemmTile t = p.tiles[blockIdx.y];
    row0 = t.row0, row_end = t.row0 + t.rows, group = t.group;
  }
  const int64_t col0 = (int64_t)blockIdx.x * kBN;
  const T *a = (const T *)p.a;
  const T *b = (const T *)p.b + group * p.b_stride_g;
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;

  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < p.k; k0 += kBK) {
    /* 64 x 16 elements of each operand, 4 per thread, k fastest so that loads follow rows */
    for (int e = threadIdx.x; e < kBM * kBK; e += 256) {
      const int r = e / kBK, kk = e % kBK;
      const int64_t row = row0 + r, kg = k0 + kk, col = col0 + r;
      float av = 0.0f, bv = 0.0f;
      if (row < row_end && kg < p.k) {
        const int64_t src = p.a_rows ? p.a_rows[row] : row;
        av = to_float(a[src * p.a_stride + kg]);
      }
      if (col < p.n && kg < p.k) bv = to_float(b[col * p.b_stride_n + kg]);
      as[kk][r] = av;
      bs[kk][r] = bv;
    }
    __syncthreads();
    tile_fma_4x4(as, bs, tx, ty, acc);
    __syncthreads();
  }
  const T *bias = (const T *)p.bias;
  OutT *c = (OutT *)p.c;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int64_t row = row0 + ty + 16 * i;
    if (row >= row_end) continue;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int64_t col = col0 + tx + 16 * j;
      if (col >= p.n) continue;
      const float v = acc[i][j] + (bias ? to_float(bias[col]) : 0.0f);
      c[row * p.c_stride + col] = from_float<OutT>(v);
    }
  }
}

/* One block: the tiles of each group in order, rows clamped to m, then the zero-fill start. */
__global__ void schedule_kernel(const int32_t *sizes, int64_t groups, int64_t m, GemmTile *tiles,
                                int32_t *tile_count, int64_t *rows_used) {
  if (threadIdx.x != 0) return;
  int64_t row = 0, n = 0;
  for (int64_t g = 0; g < groups && row < m; g++) {
    int64_t rows = sizes[g] > 0 ? sizes[g] : 0;
    if (rows > m - row) rows = m - row;
    for (int64_t r = 0; r < rows; r += kBM)
      tiles[n++] = GemmTile{row + r, (int32_t)(rows - r < kBM ? rows - r : kBM), (int32_t)g};
    row += rows;
  }
  *tile_count = (int32_t)n;
  *rows_used = row;
}

/* Rows [*rows_used, m) of y, which no group claims, become zeros. */
template <typename T>
__global__ void zero_rows_kernel(T *y, int64_t y_stride, int64_t m, int64_t n,
                                 const int64_t *rows_used) {
  const int64_t r0 = *rows_used;
  for (int64_t r = r0 + blockIdx.y; r < m; r += gridDim.y)
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < n;
         c += (int64_t)gridDim.x * blockDim.x)
      y[r * y_stride + c] = from_float<T>(0.0f);
}

int64_t tile_gemm_max_tiles(int64_t m, int64_t groups) {
  return (m + kBM - 1) / kBM + groups;
}

kite_status tile_gemm_schedule(const int32_t *sizes, int64_t groups, int64_t m, GemmTile *tiles,
                               int32_t *tile_count, int64_t *rows_used, cudaStream_t s) {
  schedule_kernel<<<1, 32, 0, s>>>(sizes, groups, m, tiles, tile_count, rows_used);
  return KITE_OK;
}

template <typename T, typename OutT> void tile_gemm_launch(const TileGemm &p, cudaStream_t s) {
  const int64_t ytiles = p.tiles ? p.max_tiles : (p.m + kBM - 1) / kBM;
  if (ytiles <= 0 || p.n <= 0) return;
  const dim3 grid((unsigned)((p.n + kBN - 1) / kBN), (unsigned)ytiles);
  tile_gemm_kernel<T, OutT><<<grid, 256, 0, s>>>(p);
}

kite_status tile_gemm_plan(kite_ctx *ctx, const int32_t *sizes, int64_t groups, int64_t m,
                           cudaStream_t s, TileSchedule *out) {
  out->max_tiles = tile_gemm_max_tiles(m, groups);
  void *ws;
  kite_status st = kite_ctx_workspace(ctx, 16 + (size_t)out->max_tiles * sizeof(GemmTile), &ws);
  if (st != KITE_OK) return st;
  out->rows_used = (int64_t *)ws;
  out->count = (int32_t *)((char *)ws + 8);
  out->tiles = (GemmTile *)((char *)ws + 16);
  return tile_gemm_schedule(sizes, groups, m, out->tiles, out->count, out->rows_used, s);
}

template <typename T>
void tile_gemm_zero_rows(T *y, int64_t y_stride, int64_t m, int64_t n, const int64_t *rows_used,
                         cudaStream_t s) {
  const dim3 grid((unsigned)((n + 255) / 256), (unsigned)(m < 1024 ? m : 1024));
  zero_rows_kernel<T><<<grid, 256, 0, s>>>(y, y_stride, m, n, rows_used);
}
template void tile_gemm_zero_rows<__half>(__half *, int64_t, int64_t, int64_t, const int64_t *,
                                          cudaStream_t);
template void tile_gemm_zero_rows<__nv_bfloat16>(__nv_bfloat16 *, int64_t, int64_t, int64_t,
                                                 const int64_t *, cudaStream_t);

template void tile_gemm_launch<float, float>(const TileGemm &, cudaStream_t);
template void tile_gemm_launch<__half, float>(const TileGemm &, cudaStream_t);
template void tile_gemm_launch<__nv_bfloat16, float>(const TileGemm &, cudaStream_t);
template void tile_gemm_launch<__half, __half>(const TileGemm &, cudaStream_t);
template void tile_gemm_launch<__nv_bfloat16, __nv_bfloat16>(const TileGemm &, cudaStream_t);

} // namespace kite_cuda

namespace {

/* y = x w^T + bias through cuBLASLt: 1 when it ran, 0 when no algorithm fits (the caller falls
 * back), or -1 with the error set. */
int lt_linear(const kite_linear_args *a, cudaStream_t s) {
  LtGemm g = {};
  g.dtype = a->dtype, g.m = a->m, g.n = a->n, g.k = a->k;
  g.a = a->x, g.lda = a->x_stride;
  g.b = a->w, g.ldb = a->w_stride, g.b_trans = true;
  g.bias = a->bias;
  g.c = a->y, g.ldc = a->y_stride;
  return lt_gemm(g, "linear", "cublaslt", s);
}

template <typename T> __global__ void fill_bias_kernel(kite_linear_args a) {
  for (int64_t r = blockIdx.y; r < a.m; r += gridDim.y)
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < a.n;
         c += (int64_t)gridDim.x * blockDim.x)
      ((T *)a.y)[r * a.y_stride + c] = a.bias ? ((const T *)a.bias)[c] : from_float<T>(0.0f);
}

kite_status linear_tiles(const kite_linear_args *a, cudaStream_t s) {
  return with_float_type(a->dtype, "linear", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (a->k == 0) { /* an empty sum: y = bias */
      const dim3 grid((unsigned)((a->n + 255) / 256), (unsigned)(a->m < 65535 ? a->m : 65535));
      fill_bias_kernel<T><<<grid, 256, 0, s>>>(*a);
    } else {
      TileGemm p = {};
      p.m = a->m, p.n = a->n, p.k = a->k;
      p.a = a->x, p.a_stride = a->x_stride;
      p.b = a->w, p.b_stride_n = a->w_stride;
      p.bias = a->bias;
      p.c = a->y, p.c_stride = a->y_stride;
      tile_gemm_launch<T, T>(p, s);
    }
    return KITE_OK;
  });
}

} // namespace

extern "C" CUDA_RUN(cuda_linear_cublaslt_run) {
  const kite_linear_args *a = (const kite_linear_args *)args;
  if (a->m <= 0 || a->n <= 0) return KITE_OK;
  cudaStream_t s;
  kite_status st = begin(ctx, "linear", &s);
  if (st != KITE_OK) return st;
  if (a->k > 0 && a->m <= INT32_MAX && a->n <= INT32_MAX && a->k <= INT32_MAX) {
    const int r = lt_linear(a, s);
    if (r < 0) return KITE_ERR_DEVICE;
    if (r > 0) return cuda_check_launch("linear", "cublaslt");
  }
  st = linear_tiles(a, s);
  return st != KITE_OK ? st : cuda_check_launch("linear", "cublaslt");
}

extern "C" CUDA_RUN(cuda_linear_tiles_run) {
  const kite_linear_args *a = (const kite_linear_args *)args;
  if (a->m <= 0 || a->n <= 0) return KITE_OK;
  cudaStream_t s;
  kite_status st = begin(ctx, "linear", &s);
  if (st != KITE_OK) return st;
  st = linear_tiles(a, s);
  return st != KITE_OK ? st : cuda_check_launch("linear", "tiles");
}

/* Workspace: the tile list, its length and the rows the groups claim. */
extern "C" CUDA_RUN(cuda_group_gemm_tiles_run) {
  const kite_group_gemm_args *a = (const kite_group_gemm_args *)args;
  if (a->m <= 0 || a->n <= 0) return KITE_OK;
  cudaStream_t s;
  kite_status st = begin(ctx, "group_gemm", &s);
  if (st != KITE_OK) return st;
  TileSchedule sch;
  if ((st = tile_gemm_plan(ctx, a->group_sizes, a->groups, a->m, s, &sch)) != KITE_OK) return st;
  int64_t *rows_used = sch.rows_used;
  st = with_float_type(a->dtype, "group_gemm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (a->k > 0) {
      TileGemm p = {};
      p.m = a->m, p.n = a->n, p.k = a->k;
      p.a = a->x, p.a_stride = a->x_stride;
      p.b = a->w, p.b_stride_g = a->w_stride_g, p.b_stride_n = a->w_stride_n;
      p.c = a->y, p.c_stride = a->y_stride;
      p.tiles = sch.tiles, p.tile_count = sch.count, p.max_tiles = sch.max_tiles;
      tile_gemm_launch<T, T>(p, s);
    } else { /* an empty sum: every row is zero */
      cudaMemsetAsync(rows_used, 0, sizeof *rows_used, s);
    }
    const dim3 grid((unsigned)((a->n + 255) / 256), (unsigned)(a->m < 1024 ? a->m : 1024));
    zero_rows_kernel<T><<<grid, 256, 0, s>>>((T *)a->y, a->y_stride, a->m, a->n, rows_used);
    return KITE_OK;
  });
  return st != KITE_OK ? st : cuda_check_launch("group_gemm", "tiles");
}

/* group_gemm through the vendor libraries. The group sizes come to the host (a 4*G-byte copy and
 * a stream synchronization: cuBLAS takes sizes from the host), then
 *   - every group the same size (an MoE batch padded per expert, a bmm): one
 *     cublasGemmStridedBatchedEx, else one strided-batched cuBLASLt matmul;
 *   - otherwise one cuBLASLt matmul per nonempty group (clamped to m rows), else the tiled
 *     kernel (no cuBLASLt algorithm: odd alignments); cuBLAS's one-call grouped batch
 *     (cublasGemmGroupedBatchedEx) ran 1.8x slower than these matmuls on an H100 (blas.cu);
 * and rows no group claims become zeros. The copy cannot happen inside CUDA graph capture, so a
 * capturing stream goes to the tiled kernel, whose schedule stays on the device. The variant
 * keeps its name "cublaslt" so that configurations naming it still pick it. */
extern "C" CUDA_RUN(cuda_group_gemm_cublaslt_run) {
  const kite_group_gemm_args *a = (const kite_group_gemm_args *)args;
  if (a->m <= 0 || a->n <= 0) return KITE_OK;
  cudaStream_t s;
  kite_status st = begin(ctx, "group_gemm", &s);
  if (st != KITE_OK) return st;
  constexpr int64_t kMaxGroups = 4096;
  if (stream_capturing(s) || a->k <= 0 || a->groups > kMaxGroups || a->n > INT32_MAX ||
      a->k > INT32_MAX)
    return cuda_group_gemm_tiles_run(k, ctx, args);
  int32_t sizes[kMaxGroups];
  if (a->groups > 0 && (cudaMemcpyAsync(sizes, a->group_sizes, (size_t)a->groups * sizeof(int32_t),
                                        cudaMemcpyDefault, s) != cudaSuccess ||
                        cudaStreamSynchronize(s) != cudaSuccess))
    return cuda_check_launch("group_gemm", "cublaslt");
  const char *op = "group_gemm", *variant = "cublaslt";
  const size_t es = kite_dtype_size(a->dtype);
  const BlasGroupGemm bg = {a->dtype, a->n, a->k, a->x_stride, a->w_stride_n, a->y_stride};
  int64_t row = 0;
  bool uniform = a->groups > 1 && sizes[0] > 0 && a->groups * (int64_t)sizes[0] <= a->m;
  for (int64_t g = 1; uniform && g < a->groups; g++) uniform = sizes[g] == sizes[0];
  int r = 0;
  if (uniform) {
    const int64_t rows = sizes[0];
    r = blas_gemm_strided(bg, a->groups, rows, a->x, rows * a->x_stride, a->w, a->w_stride_g, a->y,
                          rows * a->y_stride, op, variant, s);
    if (r == 0) {
      LtGemm g = {};
      g.dtype = a->dtype, g.m = rows, g.n = a->n, g.k = a->k;
      g.a = a->x, g.lda = a->x_stride, g.stride_a = rows * a->x_stride;
      g.b = a->w, g.ldb = a->w_stride_n, g.b_trans = true, g.stride_b = a->w_stride_g;
      g.c = a->y, g.ldc = a->y_stride, g.stride_c = rows * a->y_stride;
      g.batch = a->groups;
      r = lt_gemm(g, op, variant, s);
    }
    if (r < 0) return KITE_ERR_DEVICE;
    if (r > 0) row = a->groups * rows;
  }
  if (r == 0) {
    /* the groups that have rows, in order, each clamped to the rows left */
    for (int64_t g = 0; g < a->groups && row < a->m; g++) {
      int64_t rows = sizes[g] > 0 ? sizes[g] : 0;
      if (rows > a->m - row) rows = a->m - row;
      if (rows == 0) continue;
      const kite_linear_args la = {KITE_OP_LINEAR,
                                   a->dtype,
                                   rows,
                                   a->n,
                                   a->k,
                                   (const char *)a->x + (size_t)(row * a->x_stride) * es,
                                   a->x_stride,
                                   (const char *)a->w + (size_t)(g * a->w_stride_g) * es,
                                   a->w_stride_n,
                                   nullptr,
                                   (char *)a->y + (size_t)(row * a->y_stride) * es,
                                   a->y_stride};
      const int lr = rows <= INT32_MAX ? lt_linear(&la, s) : 0;
      if (lr < 0) return KITE_ERR_DEVICE;
      if (lr == 0 && (st = linear_tiles(&la, s)) != KITE_OK) return st;
      row += rows;
    }
  }
  if (row < a->m) /* a failure here is the runtime's last error, reported below */
    (void)cudaMemset2DAsync((char *)a->y + (size_t)(row * a->y_stride) * es,
                            (size_t)a->y_stride * es, 0, (size_t)a->n * es, (size_t)(a->m - row),
                            s);
  return cuda_check_launch(op, variant);
}
