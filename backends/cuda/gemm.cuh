/*
 * The tiled GEMM of gemm.cu, shared with moe.cu: c[row, :] = a[a_rows[row], :] . b[g]^T (+ bias)
 * for the rows of each tile, where a tile is 64 consecutive rows of one group g. Without a
 * schedule (tiles NULL) every row belongs to group 0. Sums in f32; c is T or f32. And the library
 * calls of blas.cu: the cuBLASLt matmul that linear, fused_linear_cross_entropy and the MoE paths
 * share, and the two cuBLAS calls of group_gemm.
 */
#ifndef KITE_CUDA_GEMM_CUH
#define KITE_CUDA_GEMM_CUH

#include "common.cuh"

namespace kite_cuda {

struct GemmTile {
  int64_t row0;
  int32_t rows, group;
};

struct TileGemm {
  int64_t m, n, k;
  const void *a; /* [rows, k] with row stride a_stride */
  int64_t a_stride;
  const int32_t *a_rows; /* row r of the product reads a's row a_rows[r]; NULL = r */
  const void *b;         /* [groups, n, k] */
  int64_t b_stride_g, b_stride_n;
  const void *bias; /* [n] or NULL */
  void *c;          /* [m, n] with row stride c_stride */
  int64_t c_stride;
  const GemmTile *tiles; /* device schedule, or NULL */
  const int32_t *tile_count;
  int64_t max_tiles; /* grid rows launched when tiles is set */
};

/* The register tile of the 64 x 64 CUDA-core GEMMs (tile_gemm_kernel, flce.cu's strided one), 256
 * threads: thread (tx, ty) owns rows ty + 16 i and columns tx + 16 j (i, j < 4), so that a warp's
 * stores and shared reads touch consecutive columns. One staged k slice of both operands
 * (as[kk][row], bs[kk][col], padded to 65 against bank conflicts) into acc. */
template <int KK>
__device__ __forceinline__ void tile_fma_4x4(const float (&as)[KK][65], const float (&bs)[KK][65],
                                             int tx, int ty, float (&acc)[4][4]) {
#pragma unroll
  for (int kk = 0; kk < KK; kk++) {
    float ar[4], br[4];
#pragma unroll
    for (int i = 0; i < 4; i++) ar[i] = as[kk][ty + 16 * i], br[i] = bs[kk][tx + 16 * i];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < 4; j++) acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);
  }
}

/* Rows of a schedule's tiles at most. */
constexpr int kTileGemmRows = 64;

/* Most tiles that m rows in `groups` groups can need. */
int64_t tile_gemm_max_tiles(int64_t m, int64_t groups);
/* A grouped GEMM's device schedule in the ctx's workspace: tiles[max_tiles], their count, and
 * the rows the groups claim (the zero-fill start). */
struct TileSchedule {
  GemmTile *tiles;
  int32_t *count;
  int64_t *rows_used;
  int64_t max_tiles;
};
/* Takes the workspace and launches tile_gemm_schedule for m rows in `groups` groups. */
kite_status tile_gemm_plan(kite_ctx *ctx, const int32_t *sizes, int64_t groups, int64_t m,
                           cudaStream_t s, TileSchedule *out);
/* One-block kernel: tiles of each group's rows (sizes read on the device, negative = 0, clamped
 * to m rows in all), their count, and the rows claimed. */
kite_status tile_gemm_schedule(const int32_t *sizes, int64_t groups, int64_t m, GemmTile *tiles,
                               int32_t *tile_count, int64_t *rows_used, cudaStream_t s);
template <typename T, typename OutT> void tile_gemm_launch(const TileGemm &p, cudaStream_t s);
/* Rows [*rows_used, m) of y[m, n] (row stride y_stride), which no group of the schedule claims,
 * become zeros (rows_used: tile_gemm_schedule's, on the device). */
template <typename T>
void tile_gemm_zero_rows(T *y, int64_t y_stride, int64_t m, int64_t n, const int64_t *rows_used,
                         cudaStream_t s);

/* Row-major C[m, n] = A' B' (+ bias[n]) + beta C through cuBLASLt, f32 accumulation (never TF32),
 * all operands of one float dtype; or, with dtype KITE_DTYPE_I8, int8 A' and B' into an int32 C
 * (exact int32 sums on the integer tensor cores; no bias; cuBLASLt takes only a_trans false and
 * b_trans true there, strides multiples of 4). A' [m, k] is a[m, k] (row stride lda) or, with
 * a_trans, the transpose of a[k, m]; B' [k, n] is b[k, n] (row stride ldb) or, with b_trans, the
 * transpose of b[n, k] (linear's w). c_f32: C in f32 with f16 / bf16 A and B (no bias). batch > 1:
 * that many products in one call, operand i at a + i stride_a, b + i stride_b, c + i stride_c
 * (elements). For a fixed shape and layout the result is the same bits run after run. */
struct LtGemm {
  kite_dtype dtype;
  int64_t m, n, k;
  const void *a;
  int64_t lda;
  bool a_trans;
  const void *b;
  int64_t ldb;
  bool b_trans;
  const void *bias;
  float beta;
  void *c;
  int64_t ldc;
  bool c_f32;
  int64_t batch, stride_a, stride_b, stride_c;
};
/* 1 when it ran, 0 when cuBLASLt takes no such call (k = 0, a dimension past INT32_MAX, odd
 * strides, no algorithm: the caller computes it another way), -1 with the error set, naming op
 * and variant. */
int lt_gemm(const LtGemm &g, const char *op, const char *variant, cudaStream_t s);

/* group_gemm's products through cuBLAS: y_i[rows_i, n] = x_i[rows_i, k] w_i[n, k]^T, row-major,
 * all of dtype (f32, f16 or bf16), f32 accumulation and f32 reductions (CUBLAS_COMPUTE_32F, never
 * TF32), cuBLAS's default algorithm. ldx, ldw, ldy: the row strides of every x_i, w_i, y_i
 * (elements). */
struct BlasGroupGemm {
  kite_dtype dtype;
  int64_t n, k;
  int64_t ldx, ldw, ldy;
};
/* `batch` products of `rows` rows each, product i at x + i stride_x, w + i stride_w,
 * y + i stride_y (elements): one cublasGemmStridedBatchedEx, the call of torch.bmm.
 * 1 when it ran; 0 when cuBLAS takes no such call (a size past INT32_MAX, a stride that no
 * leading dimension describes, no handle, or cuBLAS declined before launching: the caller
 * computes it another way); -1 with the error set, naming op and variant. */
int blas_gemm_strided(const BlasGroupGemm &g, int64_t batch, int64_t rows, const void *x,
                      int64_t stride_x, const void *w, int64_t stride_w, void *y, int64_t stride_y,
                      const char *op, const char *variant, cudaStream_t s);

} // namespace kite_cuda

#endif /* KITE_CUDA_GEMM_CUH */
