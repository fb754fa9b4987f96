/*
 * fused_linear_cross_entropy: h[N, H], w[V, H] -> loss, dh, dw, db, in chunks of C rows so that
 * only a [C, V] piece of the logits ever exists (C from chunk_bytes, a multiple of 128 rows when
 * the budget allows, for the GEMMs' tiles). Per chunk of rows:
 *   logits[C, V]  = h_c w^T + bias               (GEMM, rounded to the dtype as linear rounds)
 *   the cross-entropy row kernel in its fused mode: each row's lse and loss, then the gradient of
 *   the reduced loss written over the row                -> dlogits[C, V]
 *   db           += column sums of dlogits, row order, in an f32 accumulator
 *   dh_c [C, H]   = dlogits w                    (the chunk's rows of dh are complete)
 *   dw   [V, H]  += dlogits^T h_c                (beta 0 for the first chunk, then 1)
 * Three GEMMs of N V H in all, against four for chunks of columns that recompute the logits; dw
 * is read and written once per chunk, in its own dtype. Every reduction has a fixed order (the
 * GEMMs' for a fixed shape, the chunks in order, the losses summed by one block), so results are
 * the same bits run after run.
 * "cublaslt" runs the GEMMs through cuBLASLt (blas.cu's lt_gemm), "generic" through a plain
 * 64x64-tile kernel that reads its operands through any strides; the generic kernel also serves
 * a call cuBLASLt refuses (H = 0, odd strides).
 * Scratch (the ctx's workspace): the row count, the rows' losses (sum / mean), the f32 db
 * accumulator and the chunk.
 */
#include "cross_entropy.cuh"
#include "gemm.cuh"

using namespace kite_cuda;

namespace {

const char *const kOp = "fused_linear_cross_entropy";

/* C[m, n] = A' B' (+ bias) + beta C with A'(i, l) = a[i a_si + l a_sk] and
 * B'(l, j) = b[l b_sk + j b_sj]; f32 sums; C is read only when beta is not 0. */
struct StridedGemm {
  int64_t m, n, k;
  const void *a;
  int64_t a_si, a_sk;
  const void *b;
  int64_t b_sk, b_sj;
  const void *bias;
  float beta;
  void *c;
  int64_t ldc;
};

constexpr int kTile = 64, kTileK = 16;

/* 256 threads in the register tile of tile_fma_4x4 (gemm.cuh). Tiles of rows past the grid's
 * 65535 are taken by the same blocks in turn. */
template <typename T> __global__ __launch_bounds__(256) void strided_gemm_kernel(StridedGemm p) {
  __shared__ float as[kTileK][kTile + 1];
  __shared__ float bs[kTileK][kTile + 1];
  const T *a = (const T *)p.a, *b = (const T *)p.b, *bias = (const T *)p.bias;
  T *c = (T *)p.c;
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const int64_t col0 = (int64_t)blockIdx.x * kTile, ytiles = (p.m + kTile - 1) / kTile;
  for (int64_t by = blockIdx.y; by < ytiles; by += gridDim.y) {
    const int64_t row0 = by * kTile;
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < p.k; k0 += kTileK) {
      for (int e = threadIdx.x; e < kTile * kTileK; e += 256) {
        const int r = e / kTileK, kk = e % kTileK;
        const int64_t row = row0 + r, col = col0 + r, l = k0 + kk;
        as[kk][r] = row < p.m && l < p.k ? to_float(a[row * p.a_si + l * p.a_sk]) : 0.0f;
        bs[kk][r] = col < p.n && l < p.k ? to_float(b[l * p.b_sk + col * p.b_sj]) : 0.0f;
      }
      __syncthreads();
      tile_fma_4x4(as, bs, tx, ty, acc);
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int64_t row = row0 + ty + 16 * i;
      if (row >= p.m) continue;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int64_t col = col0 + tx + 16 * j;
        if (col >= p.n) continue;
        T *out = c + row * p.ldc + col;
        float v = acc[i][j] + (bias ? to_float(bias[col]) : 0.0f);
        if (p.beta != 0.0f) v += p.beta * to_float(*out);
        *out = from_float<T>(v);
      }
    }
  }
}

/* acc[j] += sum over rows r < rows of d[r ld + j], in row order: one thread per column. */
template <typename T>
__global__ void column_sum_kernel(const T *d, int64_t rows, int64_t cols, int64_t ld, float *acc) {
  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < cols;
       j += (int64_t)gridDim.x * blockDim.x) {
    float s = acc[j];
    for (int64_t r = 0; r < rows; r++) s += to_float(d[r * ld + j]);
    acc[j] = s;
  }
}

template <typename T> __global__ void store_kernel(const float *src, int64_t n, T *dst) {
  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
       j += (int64_t)gridDim.x * blockDim.x)
    dst[j] = from_float<T>(src[j]);
}

unsigned blocks_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return (unsigned)(b < 1 ? 1 : b < 65535 ? b : 65535);
}

/* One GEMM: through cuBLASLt when lt and it takes the call, else the strided kernel. */
kite_status gemm(const LtGemm &g, bool lt, cudaStream_t s) {
  if (g.m <= 0 || g.n <= 0) return KITE_OK;
  if (lt) {
    const int r = lt_gemm(g, kOp, "cublaslt", s);
    if (r < 0) return KITE_ERR_DEVICE;
    if (r > 0) return KITE_OK;
  }
  StridedGemm p = {};
  p.m = g.m, p.n = g.n, p.k = g.k;
  p.a = g.a, p.a_si = g.a_trans ? 1 : g.lda, p.a_sk = g.a_trans ? g.lda : 1;
  p.b = g.b, p.b_sk = g.b_trans ? 1 : g.ldb, p.b_sj = g.b_trans ? g.ldb : 1;
  p.bias = g.bias, p.beta = g.beta;
  p.c = g.c, p.ldc = g.ldc;
  const int64_t ytiles = (g.m + kTile - 1) / kTile;
  const dim3 grid((unsigned)((g.n + kTile - 1) / kTile),
                  (unsigned)(ytiles < 65535 ? ytiles : 65535));
  return with_float_type(g.dtype, kOp, [&](auto tag) {
    using T = typename decltype(tag)::type;
    strided_gemm_kernel<T><<<grid, 256, 0, s>>>(p);
    return KITE_OK;
  });
}

size_t round256(size_t n) {
  return (n + 255) / 256 * 256;
}

kite_status flce_run(kite_ctx *ctx, const kite_flce_args *a, bool lt) {
  const char *variant = lt ? "cublaslt" : "generic";
  cudaStream_t s;
  kite_status st = begin(ctx, kOp, &s);
  if (st != KITE_OK) return st;
  const kite_dtype t = a->dtype;
  const int64_t N = a->rows, H = a->hidden, V = a->vocab;
  const size_t es = kite_dtype_size(t);
  const kite_reduction red = a->opts.reduction;
  const bool grads = a->dh || a->dw || a->db;

  /* chunk rows: a leading dimension of whole 16-byte units keeps every row of the piece aligned
   * for the row kernel's vector accesses and cuBLASLt */
  const int64_t ldl = (V + 7) / 8 * 8;
  int64_t rows_c = (int64_t)(a->chunk_bytes / ((size_t)ldl * es));
  if (rows_c > N) rows_c = N;
  if (rows_c > 128) rows_c -= rows_c % 128;
  if (rows_c < 1) rows_c = 1;
  const size_t loss_off = 256;
  const size_t loss_bytes = red != KITE_REDUCTION_NONE ? round256((size_t)N * sizeof(float)) : 0;
  const size_t db_off = loss_off + loss_bytes;
  const size_t db_bytes = a->db ? round256((size_t)V * sizeof(float)) : 0;
  const size_t chunk_off = db_off + db_bytes;
  void *ws;
  st = kite_ctx_workspace(ctx, chunk_off + (N > 0 ? (size_t)rows_c * (size_t)ldl * es : 0), &ws);
  if (st != KITE_OK) return st;
  int64_t *valid = (int64_t *)ws;
  float *row_loss = red != KITE_REDUCTION_NONE ? (float *)((char *)ws + loss_off) : a->loss;
  float *db_acc = a->db ? (float *)((char *)ws + db_off) : nullptr;
  char *chunk = (char *)ws + chunk_off;

  ce_count_launch(a->targets, N, a->opts.ignore_index, valid, s);
  if (db_acc && cudaMemsetAsync(db_acc, 0, (size_t)V * sizeof(float), s) != cudaSuccess)
    return cuda_check_launch(kOp, variant);
  for (int64_t r0 = 0; r0 < N; r0 += rows_c) {
    const int64_t c = N - r0 < rows_c ? N - r0 : rows_c;
    const char *hc = (const char *)a->h + (size_t)(r0 * a->h_stride) * es;
    LtGemm g = {};
    g.dtype = t, g.m = c, g.n = V, g.k = H;
    g.a = hc, g.lda = a->h_stride;
    g.b = a->w, g.ldb = a->w_stride, g.b_trans = true;
    g.bias = a->bias;
    g.c = chunk, g.ldc = ldl;
    if ((st = gemm(g, lt, s)) != KITE_OK) return st;

    CeRows p = {};
    p.rows = c, p.vocab = V;
    p.logits = chunk, p.logits_stride = ldl;
    p.targets = a->targets + r0;
    p.o = a->opts;
    p.row_loss = row_loss + r0;
    p.valid = valid;
    p.dlogits = chunk, p.dlogits_stride = ldl;
    if ((st = ce_rows_launch(t, grads ? CeMode::fused : CeMode::fwd, lt, p, s)) != KITE_OK)
      return st;
    if (!grads) continue;
    if (db_acc)
      with_float_type(t, kOp, [&](auto tag) {
        using T = typename decltype(tag)::type;
        column_sum_kernel<T>
            <<<blocks_for(V, 256), 256, 0, s>>>((const T *)chunk, c, V, ldl, db_acc);
        return KITE_OK;
      });
    if (a->dh) { /* dh_c[c, H] = dlogits[c, V] w[V, H] */
      LtGemm d = {};
      d.dtype = t, d.m = c, d.n = H, d.k = V;
      d.a = chunk, d.lda = ldl;
      d.b = a->w, d.ldb = a->w_stride;
      d.c = (char *)a->dh + (size_t)(r0 * a->dh_stride) * es, d.ldc = a->dh_stride;
      if ((st = gemm(d, lt, s)) != KITE_OK) return st;
    }
    if (a->dw) { /* dw[V, H] (+)= dlogits^T[V, c] h_c[c, H] */
      LtGemm d = {};
      d.dtype = t, d.m = V, d.n = H, d.k = c;
      d.a = chunk, d.lda = ldl, d.a_trans = true;
      d.b = hc, d.ldb = a->h_stride;
      d.beta = r0 > 0 ? 1.0f : 0.0f;
      d.c = a->dw, d.ldc = a->dw_stride;
      if ((st = gemm(d, lt, s)) != KITE_OK) return st;
    }
  }
  if (red != KITE_REDUCTION_NONE) ce_reduce_launch(row_loss, N, red, valid, a->loss, s);
  if (db_acc)
    with_float_type(t, kOp, [&](auto tag) {
      using T = typename decltype(tag)::type;
      store_kernel<T><<<blocks_for(V, 256), 256, 0, s>>>(db_acc, V, (T *)a->db);
      return KITE_OK;
    });
  if (N == 0 && a->dw && H > 0) { /* no rows: dw is zero (db came from the zeroed accumulator) */
    const size_t width = (size_t)H * es, pitch = (size_t)a->dw_stride * es;
    if (cudaMemset2DAsync(a->dw, pitch > width ? pitch : width, 0, width, (size_t)V, s) !=
        cudaSuccess)
      return cuda_check_launch(kOp, variant);
  }
  return cuda_check_launch(kOp, variant);
}

} // namespace

extern "C" CUDA_RUN(cuda_flce_cublaslt_run) {
  return flce_run(ctx, (const kite_flce_args *)args, true);
}

extern "C" CUDA_RUN(cuda_flce_generic_run) {
  return flce_run(ctx, (const kite_flce_args *)args, false);
}
