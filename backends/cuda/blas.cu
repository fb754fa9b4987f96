/*
 * The vendor GEMM libraries, a handle of each per device: cuBLASLt's lt_gemm (linear,
 * fused_linear_cross_entropy, linear_quant's int8, fused_moe_ex's grouped products, group_gemm
 * where cuBLAS declines) and group_gemm's cuBLAS call for equal groups (blas_gemm_strided).
 *
 * Both libraries are column-major: a row-major [r, c] matrix with row stride ld is a column-major
 * [c, r] one with leading dimension ld. So group_gemm's row-major y[rows, n] = x[rows, k] w[n, k]^T
 * is the column-major y^T[n, rows] = w^T[n, k] x^T[k, rows]: w is cuBLAS's A (stored [n, k], that
 * is column-major [k, n], so transposed), x its B as stored, y its C. This is the arrangement
 * torch.bmm(x, w.transpose(1, 2)) hands cuBLAS.
 *
 * group_gemm's equal groups use cuBLAS's cublasGemmStridedBatchedEx, the call torch.bmm makes
 * (f16 / bf16 / f32 with CUBLAS_COMPUTE_32F). cublasGemmGroupedBatchedEx (one call for groups of
 * different sizes) is not used: on an H100 with cuBLAS 13.0 it ran an sm80 CUTLASS kernel
 * (mma.sync) at 420 us where eight cuBLASLt matmuls take 265 (bf16, 8 groups of 128 - 896 rows,
 * N = K = 4096).
 */
#include <cublasLt.h>
#include <cublas_v2.h>

#include <mutex>
#include <vector>

#include "gemm.cuh"

using namespace kite_cuda;

namespace {

/* ---- handles and workspace, one set per device, made on first use ------------------------ */
constexpr size_t kWorkspace = 32u << 20;
constexpr int kMaxDevices = 64;

/* Made once per device on first use and kept for the life of the process. The 32 MiB workspace
 * serves both libraries, so that neither allocates while it runs (cuBLAS would otherwise take
 * memory from its own pool on a new stream). A cuBLASLt call names its stream, so its handle is
 * shared without a lock; a cuBLAS handle holds a stream, so binding it and the call made on it
 * happen under blas_mu (BlasCall). */
struct BlasDevice {
  std::once_flag lt_once, blas_once;
  void *workspace = nullptr;
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;
  bool lt_ok = false, blas_ok = false;
  std::mutex blas_mu;
};
BlasDevice g_dev[kMaxDevices];

/* The current device's entry, its workspace and cuBLASLt handle made; NULL when the device
 * cannot be named. */
BlasDevice *device_entry() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    (void)cudaGetLastError();
    return nullptr;
  }
  BlasDevice *d = &g_dev[dev];
  std::call_once(d->lt_once, [d] {
    if (cudaMalloc(&d->workspace, kWorkspace) != cudaSuccess) {
      (void)cudaGetLastError();
      d->workspace = nullptr; /* without a workspace, algorithms that need none still run */
    }
    d->lt_ok = cublasLtCreate(&d->lt) == CUBLAS_STATUS_SUCCESS;
  });
  return d;
}

/* The current device's entry with a cuBLASLt handle; NULL when cuBLASLt cannot be set up. */
BlasDevice *lt_device() {
  BlasDevice *d = device_entry();
  return d && d->lt_ok ? d : nullptr;
}

/* The current device's entry with a cuBLAS handle; NULL when cuBLAS cannot be set up. Reductions
 * stay in f32 (CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION): by default cuBLAS may add
 * split-k partial sums in the 16-bit output type, and kite rounds a product once. */
BlasDevice *blas_device() {
  BlasDevice *d = device_entry();
  if (!d) return nullptr;
  std::call_once(d->blas_once, [d] {
    if (cublasCreate(&d->blas) != CUBLAS_STATUS_SUCCESS) return;
    d->blas_ok = cublasSetMathMode(
                     d->blas, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                             CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) ==
                 CUBLAS_STATUS_SUCCESS;
  });
  return d->blas_ok ? d : nullptr;
}

/* A leading dimension that describes a column-major rows x cols matrix stored with stride ld
 * (both libraries want ld >= max(1, rows)); a single column may come with any stride. -1 when
 * none does. */
int64_t col_ld(int64_t ld, int64_t rows, int64_t cols) {
  if (cols == 1 && ld < rows) ld = rows;
  return ld >= rows && ld >= 1 ? ld : -1;
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

/* A cuBLASLt layout of a column-major rows x cols matrix; false when the stride cannot describe
 * it (col_ld). */
bool lt_layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows, int64_t cols,
               int64_t ld) {
  ld = col_ld(ld, rows, cols);
  if (ld < 0) return false;
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
  BlasDevice *d = lt_device();
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
  const size_t ws = d->workspace ? kWorkspace : 0;
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
  if (cublasLtMatmulAlgoGetHeuristic(d->lt, c.op, c.a, c.b, c.c, c.c, c.pref, 1, &h, &found) !=
          CUBLAS_STATUS_SUCCESS ||
      found == 0)
    return 0;
  const float alpha = 1.0f, beta = g.beta;
  const int32_t alpha_i = 1, beta_i = (int32_t)g.beta;
  const cublasStatus_t st =
      cublasLtMatmul(d->lt, c.op, i8 ? (const void *)&alpha_i : (const void *)&alpha, g.b, c.a, g.a,
                     c.b, i8 ? (const void *)&beta_i : (const void *)&beta, g.c, c.c, g.c, c.c,
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

/* The cuBLAS handle of d bound to stream s and to the shared workspace, locked for one call.
 * cublasSetStream puts cuBLAS back on its own workspace pool, so the workspace is set after it
 * on every call. */
struct BlasCall {
  std::lock_guard<std::mutex> lock;
  cublasHandle_t h;
  cublasStatus_t st;
  const char *fn = "cublasSetStream";
  BlasCall(BlasDevice *d, cudaStream_t s) : lock(d->blas_mu), h(d->blas) {
    st = cublasSetStream(h, s);
    if (st != CUBLAS_STATUS_SUCCESS) return;
    fn = "cublasSetWorkspace";
    st = cublasSetWorkspace(h, d->workspace, d->workspace ? kWorkspace : 0);
  }
};

/* What a cuBLAS status means to the caller. A call that cuBLAS refuses before it launches
 * anything (a type, shape or alignment it does not take, or a handle it cannot use) is 0: the
 * caller's cuBLASLt path computes it instead, which beats failing a call another library can
 * serve. Any other failure (a launch or execution failure, y possibly half written) is -1 with
 * the error set: "<op>: cuda.<variant>: <function> failed: <cuBLAS status>". */
int blas_result(cublasStatus_t st, const char *fn, const char *op, const char *variant) {
  switch (st) {
  case CUBLAS_STATUS_SUCCESS:
    return 1;
  case CUBLAS_STATUS_NOT_SUPPORTED:
  case CUBLAS_STATUS_INVALID_VALUE:
  case CUBLAS_STATUS_ARCH_MISMATCH:
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return 0;
  default:
    kite_set_error(KITE_ERR_DEVICE, "%s: cuda.%s: %s failed: %s", op, variant, fn,
                   cublasGetStatusString(st));
    return -1;
  }
}

/* The three leading dimensions of rows-row products of g in cuBLAS's terms (A = w [k, n], B =
 * x [k, rows], C = y [n, rows]); false when one does not exist or passes INT32_MAX. */
bool blas_lds(const BlasGroupGemm &g, int64_t rows, int *lda, int *ldb, int *ldc) {
  const int64_t a = col_ld(g.ldw, g.k, g.n), b = col_ld(g.ldx, g.k, rows),
                c = col_ld(g.ldy, g.n, rows);
  if (a < 0 || b < 0 || c < 0 || a > INT32_MAX || b > INT32_MAX || c > INT32_MAX) return false;
  *lda = (int)a, *ldb = (int)b, *ldc = (int)c;
  return true;
}

bool blas_dims_fit(const BlasGroupGemm &g) {
  return g.n >= 1 && g.k >= 1 && g.n <= INT32_MAX && g.k <= INT32_MAX;
}

} // namespace

namespace kite_cuda {

int blas_gemm_strided(const BlasGroupGemm &g, int64_t batch, int64_t rows, const void *x,
                      int64_t stride_x, const void *w, int64_t stride_w, void *y, int64_t stride_y,
                      const char *op, const char *variant, cudaStream_t s) {
  int lda, ldb, ldc;
  if (!blas_dims_fit(g) || batch < 1 || batch > INT32_MAX || rows < 1 || rows > INT32_MAX ||
      !blas_lds(g, rows, &lda, &ldb, &ldc))
    return 0;
  BlasDevice *d = blas_device();
  if (!d) return 0;
  const cudaDataType_t t = lt_type(g.dtype);
  const float alpha = 1.0f, beta = 0.0f;
  BlasCall c(d, s);
  if (c.st == CUBLAS_STATUS_SUCCESS) {
    c.fn = "cublasGemmStridedBatchedEx";
    c.st = cublasGemmStridedBatchedEx(c.h, CUBLAS_OP_T, CUBLAS_OP_N, (int)g.n, (int)rows, (int)g.k,
                                      &alpha, w, t, lda, stride_w, x, t, ldb, stride_x, &beta, y, t,
                                      ldc, stride_y, (int)batch, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT);
  }
  return blas_result(c.st, c.fn, op, variant);
}

} // namespace kite_cuda
