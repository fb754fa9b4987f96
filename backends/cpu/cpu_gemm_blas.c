/*
 * cpu.openblas: linear on OpenBLAS's cblas_sgemm, f32 only (supports() says so). Built when
 * CMake finds OpenBLAS's cblas.h (Debian: libopenblas-dev); the library is loaded at run time. y =
 * x w^T is sgemm(RowMajor, NoTrans, Trans) straight on the caller's strided rows; the bias goes in
 * first as y's initial value (beta = 1). OpenBLAS keeps one global thread count, so each call sets
 * it to the ctx's.
 */
#include <dlfcn.h>

#include <cblas.h>

#include "cpu_gemm.h"
#include "cpu_kernels.h"

void openblas_set_num_threads(int num_threads);

/* libkite does not link OpenBLAS: a build made where it exists must load where it does not.
 * cpu_openblas_load() opens it once (the soname, then the file found at configure time); without
 * it the entry lacks its feature bit and `kite list` says why. */
static struct {
  __typeof__(&cblas_sgemm) cblas_sgemm;
  __typeof__(&openblas_set_num_threads) openblas_set_num_threads;
} g_blas;
static bool g_blas_loaded;

bool cpu_openblas_load(void) {
  void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
#if defined(KITE_OPENBLAS_PATH)
  if (!h) h = dlopen(KITE_OPENBLAS_PATH, RTLD_NOW | RTLD_LOCAL);
#endif
  if (!h) return false;
  *(void **)&g_blas.cblas_sgemm = dlsym(h, "cblas_sgemm");
  *(void **)&g_blas.openblas_set_num_threads = dlsym(h, "openblas_set_num_threads");
  if (!g_blas.cblas_sgemm || !g_blas.openblas_set_num_threads) {
    dlclose(h);
    return false;
  }
  return g_blas_loaded = true;
}
#define cblas_sgemm g_blas.cblas_sgemm
#define openblas_set_num_threads g_blas.openblas_set_num_threads

/* OpenBLAS computes f32 only, on rows at least K apart. */
bool cpu_openblas_supports_linear(const kite_kernel *k, const void *args, const char **why) {
  const kite_linear_args *a = args;
  if (!g_blas_loaded) {
    *why = "not available here: libopenblas.so.0 not found";
    return false;
  }
  if (a->dtype != KITE_DTYPE_F32) {
    *why = "f32 only (cblas_sgemm)";
    return false;
  }
  if ((a->m > 1 && a->x_stride < a->k) || (a->n > 1 && a->w_stride < a->k)) {
    *why = "overlapping rows (stride < K): BLAS needs ld >= K";
    return false;
  }
  return true;
}

kite_status cpu_linear_openblas(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_linear_args *a = args;
  if (a->dtype != KITE_DTYPE_F32)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "linear: cpu.openblas: f32 only");
  if (a->m > INT32_MAX || a->n > INT32_MAX || a->k > INT32_MAX || a->x_stride > INT32_MAX ||
      a->w_stride > INT32_MAX || a->y_stride > INT32_MAX)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "linear: cpu.openblas: sizes exceed BLAS int");
  float *y = a->y;
  const float *bias = a->bias;
  for (int64_t r = 0; r < a->m; r++)
    for (int64_t j = 0; j < a->n; j++) y[r * a->y_stride + j] = bias ? bias[j] : 0.0f;
  if (a->k == 0) return KITE_OK;
  openblas_set_num_threads(kite_ctx_num_threads(ctx));
  /* BLAS wants lda >= K even for one row; a stride below that only occurs with M = 1 */
  const int lda = (int)(a->x_stride > a->k ? a->x_stride : a->k);
  const int ldb = (int)(a->w_stride > a->k ? a->w_stride : a->k);
  const int ldc = (int)(a->y_stride > a->n ? a->y_stride : a->n);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)a->m, (int)a->n, (int)a->k, 1.0f, a->x,
              lda, a->w, ldb, 1.0f, y, ldc);
  return KITE_OK;
}
