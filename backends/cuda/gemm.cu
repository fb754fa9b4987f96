/*
 * Dense and grouped GEMMs: linear y[m, n] = x[m, k] w[n, k]^T + bias[n], and group_gemm, where
 * consecutive groups of x's rows each use their own w[g].
 *
 * linear goes through cuBLASLt ("cublaslt"). The row-major y = x w^T is the column-major
 * y^T[n, m] = w^T[n, k] x^T[k, m], so w is cuBLAS's A (transposed) and x its B, each row stride a
 * leading dimension; the bias is the epilogue's. f32 runs with CUBLAS_COMPUTE_32F, never TF32.
 * Where cuBLASLt offers no algorithm (odd alignments), the tiled kernel below serves the call.
 *
 * The tiled kernel ("tiles") computes 64x64 output tiles in f32 from shared-memory slabs. Each
 * tile names its rows (a range of a group) and its group's weights, from a schedule that a
 * one-block kernel builds from the device-resident group sizes: no group size ever reaches the
 * host. fused_moe (moe.cu) drives the same kernel with gathered rows.
 */
#include <cublasLt.h>

#include <mutex>

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

/* ---- cuBLASLt handle and workspace, one per device, made on first use -------------------- */
constexpr size_t kLtWorkspace = 32u << 20;
constexpr int kMaxDevices = 64;

struct LtDevice {
  std::once_flag once;
  cublasLtHandle_t handle = nullptr;
  void *workspace = nullptr;
  bool ok = false;
};
LtDevice g_lt[kMaxDevices];

/* The handle of the current device; NULL when cuBLASLt cannot be set up there. */
LtDevice *lt_device() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    (void)cudaGetLastError();
    return nullptr;
  }
  LtDevice *d = &g_lt[dev];
  std::call_once(d->once, [d] {
    if (cublasLtCreate(&d->handle) != CUBLAS_STATUS_SUCCESS) return;
    if (cudaMalloc(&d->workspace, kLtWorkspace) != cudaSuccess) {
      (void)cudaGetLastError();
      d->workspace = nullptr;
    }
    d->ok = true; /* without a workspace, algorithms that need none still run */
  });
  return d->ok ? d : nullptr;
}

cudaDataType_t lt_type(kite_dtype t) {
  return t == KITE_DTYPE_F32 ? CUDA_R_32F : t == KITE_DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
}

/* The largest power of two (up to 256) dividing the address, for cuBLASLt's alignment hints. */
uint32_t alignment_of(uintptr_t p) {
  uint32_t a = 256;
  while (a > 1 && (p & (a - 1))) a >>= 1;
  return a;
}

/* The alignment every matrix of a strided batch keeps: its base's and its stride's in bytes. */
uint32_t batch_alignment(const void *p, int64_t batch, int64_t stride, size_t elem) {
  const uint32_t a = alignment_of((uintptr_t)p);
  if (batch <= 1) return a;
  const uint32_t b = alignment_of((uintptr_t)stride * elem);
  return a < b ? a : b;
}

/* Descriptors of one cuBLASLt call, destroyed together. */
struct LtCall {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtCall() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

/* A cuBLASLt layout of a column-major rows x cols matrix; a single column may come with any
 * stride (cuBLAS wants ld >= rows). False when the stride cannot describe the matrix. */
bool lt_layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows, int64_t cols,
               int64_t ld) {
  if (cols == 1 && ld < rows) ld = rows;
  if (ld < rows || ld < 1) return false;
  return cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld) ==
         CUBLAS_STATUS_SUCCESS;
}

/* A strided batch of `batch` matrices of layout l, `stride` elements apart (batch <= 1: one). */
bool lt_batch(cublasLtMatrixLayout_t l, int64_t batch, int64_t stride) {
  if (batch <= 1) return true;
  const int32_t count = (int32_t)batch;
  return cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                          sizeof count) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                          sizeof stride) == CUBLAS_STATUS_SUCCESS;
}

} // namespace

namespace kite_cuda {

/* Row-major C = A' B' (+ bias) + beta C is the column-major C^T[n, m] = B'^T A'^T: B' is cuBLAS's
 * A and A' its B. A row-major [r, c] matrix with row stride ld is a column-major [c, r] one with
 * leading dimension ld, so a stored operand that already has the shape cuBLAS wants goes in
 * untransposed and the other one transposed. */
int lt_gemm(const LtGemm &g, const char *op, const char *variant, cudaStream_t s) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0 || g.m > INT32_MAX || g.n > INT32_MAX || g.k > INT32_MAX ||
      g.batch > INT32_MAX)
    return 0;
  LtDevice *d = lt_device();
  if (!d) return 0;
  /* int8: IMMA, exact int32 sums into an int32 c, no bias (the caller scales) */
  const bool i8 = g.dtype == KITE_DTYPE_I8;
  if (i8 && g.bias) return 0;
  if (g.c_f32 && (g.bias || g.dtype == KITE_DTYPE_I8)) return 0;
  const cudaDataType_t t = i8 ? CUDA_R_8I : lt_type(g.dtype);
  const cudaDataType_t tc = i8 ? CUDA_R_32I : g.c_f32 ? CUDA_R_32F : t;
  LtCall c;
  bool ok = cublasLtMatmulDescCreate(&c.op, i8 ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F,
                                     i8 ? CUDA_R_32I : CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
  /* cuBLAS A = B'^T [n, k]: b stored [n, k] is column-major [k, n] (transposed); b stored [k, n]
   * is column-major [n, k] as it is. cuBLAS B = A'^T [k, m] likewise from a. */
  const cublasOperation_t ta = g.b_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = g.a_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  ok = ok && cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) ==
                 CUBLAS_STATUS_SUCCESS;
  ok = ok && cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) ==
                 CUBLAS_STATUS_SUCCESS;
  if (ok && g.bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const int32_t bias_type = (int32_t)t;
    ok = cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) ==
             CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias,
                                        sizeof g.bias) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                        sizeof bias_type) == CUBLAS_STATUS_SUCCESS;
  }
  ok =
      ok && (g.b_trans ? lt_layout(&c.a, t, g.k, g.n, g.ldb) : lt_layout(&c.a, t, g.n, g.k, g.ldb));
  ok =
      ok && (g.a_trans ? lt_layout(&c.b, t, g.m, g.k, g.lda) : lt_layout(&c.b, t, g.k, g.m, g.lda));
  ok = ok && lt_layout(&c.c, tc, g.n, g.m, g.ldc);
  ok = ok && lt_batch(c.a, g.batch, g.stride_b) && lt_batch(c.b, g.batch, g.stride_a) &&
       lt_batch(c.c, g.batch, g.stride_c);
  ok = ok && cublasLtMatmulPreferenceCreate(&c.pref) == CUBLAS_STATUS_SUCCESS;
  const size_t ws = d->workspace ? kLtWorkspace : 0;
  const size_t es = kite_dtype_size(g.dtype), es_c = i8 || g.c_f32 ? 4 : es;
  const uint32_t al_a = batch_alignment(g.b, g.batch, g.stride_b, es);
  const uint32_t al_b = batch_alignment(g.a, g.batch, g.stride_a, es);
  const uint32_t al_c = batch_alignment(g.c, g.batch, g.stride_c, es_c);
  ok = ok &&
       cublasLtMatmulPreferenceSetAttribute(c.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                            sizeof ws) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatmulPreferenceSetAttribute(c.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                            &al_a, sizeof al_a) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatmulPreferenceSetAttribute(c.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                            &al_b, sizeof al_b) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatmulPreferenceSetAttribute(c.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                            &al_c, sizeof al_c) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatmulPreferenceSetAttribute(c.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                            &al_c, sizeof al_c) == CUBLAS_STATUS_SUCCESS;
  if (!ok) return 0;
  cublasLtMatmulHeuristicResult_t h;
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(d->handle, c.op, c.a, c.b, c.c, c.c, c.pref, 1, &h, &found) !=
          CUBLAS_STATUS_SUCCESS ||
      found == 0)
    return 0;
  const float alpha = 1.0f, beta = g.beta;
  const int32_t alpha_i = 1, beta_i = (int32_t)g.beta;
  const cublasStatus_t st =
      cublasLtMatmul(d->handle, c.op, i8 ? (const void *)&alpha_i : (const void *)&alpha, g.b, c.a,
                     g.a, c.b, i8 ? (const void *)&beta_i : (const void *)&beta, g.c, c.c, g.c, c.c,
                     &h.algo, d->workspace, h.workspaceSize, s);
  if (st != CUBLAS_STATUS_SUCCESS) {
    kite_set_error(KITE_ERR_DEVICE, "%s: cuda.%s: cublasLtMatmul failed: %s", op, variant,
                   cublasLtGetStatusString(st));
    return -1;
  }
  return 1;
}

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

/* group_gemm through cuBLASLt: the group sizes come to the host (a 4*G-byte copy and a stream
 * synchronization), then one strided-batched cuBLASLt matmul when all groups have the same size,
 * else one matmul per nonempty group; rows no group claims become zeros. The copy cannot happen
 * inside CUDA graph capture, so a capturing stream (and any call cuBLASLt cannot take) goes to the
 * tiled kernel, whose schedule stays on the device. */
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
  const size_t es = kite_dtype_size(a->dtype);
  int64_t row = 0;
  /* every group the same size (an MoE batch padded per expert, a bmm): one strided-batched call */
  bool uniform = a->groups > 1 && sizes[0] > 0 && a->groups * (int64_t)sizes[0] <= a->m;
  for (int64_t g = 1; uniform && g < a->groups; g++) uniform = sizes[g] == sizes[0];
  if (uniform) {
    LtGemm g = {};
    g.dtype = a->dtype, g.m = sizes[0], g.n = a->n, g.k = a->k;
    g.a = a->x, g.lda = a->x_stride, g.stride_a = sizes[0] * a->x_stride;
    g.b = a->w, g.ldb = a->w_stride_n, g.b_trans = true, g.stride_b = a->w_stride_g;
    g.c = a->y, g.ldc = a->y_stride, g.stride_c = sizes[0] * a->y_stride;
    g.batch = a->groups;
    const int r = lt_gemm(g, "group_gemm", "cublaslt", s);
    if (r < 0) return KITE_ERR_DEVICE;
    if (r > 0) row = a->groups * (int64_t)sizes[0];
  }
  const bool batched = row > 0;
  for (int64_t g = 0; !batched && g < a->groups && row < a->m; g++) {
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
    const int r = rows <= INT32_MAX ? lt_linear(&la, s) : 0;
    if (r < 0) return KITE_ERR_DEVICE;
    if (r == 0 && (st = linear_tiles(&la, s)) != KITE_OK) return st;
    row += rows;
  }
  if (row < a->m) /* a failure here is the runtime's last error, reported below */
    (void)cudaMemset2DAsync((char *)a->y + (size_t)(row * a->y_stride) * es,
                            (size_t)a->y_stride * es, 0, (size_t)a->n * es, (size_t)(a->m - row),
                            s);
  return cuda_check_launch("group_gemm", "cublaslt");
}
