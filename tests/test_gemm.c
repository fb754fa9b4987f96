/*
 * The argument checks of the GEMM, MoE and quantization front-ends that are particular to these
 * ops: every call must return an error status with a message. (Their kernels are compared with
 * ref by `kite check`; test_bad_input covers the checks every op shares: NULLs, ranks, dtypes,
 * devices, overflowing sizes.)
 */
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include "check.h"
#include "kite/dtype.h"
#include "kite/kite.h"

#define MAX_TENSORS 64

/* A compact host tensor of up to 3 dims; the storage is zeroed. */
typedef struct tensor {
  DLTensor t;
  int64_t shape[3], strides[3];
} tensor;

static tensor g_pool[MAX_TENSORS];
static void *g_mem[MAX_TENSORS];
static int g_n;

static DLTensor *make(kite_dtype t, int ndim, int64_t d0, int64_t d1, int64_t d2) {
  tensor *x = &g_pool[g_n];
  const int64_t dims[3] = {d0, d1, d2};
  int64_t n = 1;
  for (int i = ndim - 1; i >= 0; i--) x->shape[i] = dims[i], x->strides[i] = n, n *= dims[i];
  g_mem[g_n] = calloc((size_t)n, kite_dtype_size(t));
  x->t.data = g_mem[g_n];
  x->t.device = (DLDevice){kDLCPU, 0};
  x->t.dtype = kite_dtype_dlpack(t);
  x->t.ndim = ndim;
  x->t.shape = x->shape;
  x->t.strides = x->strides;
  g_n++;
  return &x->t;
}

static DLTensor *vec(kite_dtype t, int64_t n) {
  return make(t, 1, n, 0, 0);
}
static DLTensor *mat(kite_dtype t, int64_t rows, int64_t cols) {
  return make(t, 2, rows, cols, 0);
}
static DLTensor *mat3(kite_dtype t, int64_t g, int64_t rows, int64_t cols) {
  return make(t, 3, g, rows, cols);
}

static void expect_error(kite_status s, const char *what) {
  CHECK(s != KITE_OK && kite_last_error()[0] != '\0', "%s returned %s", what, kite_status_name(s));
}

int main(void) {
  kite_ctx_params p = kite_ctx_params_default();
  p.num_threads = 1;
  kite_ctx *ctx = NULL;
  if (kite_ctx_create(&p, &ctx) != KITE_OK) {
    printf("ctx: %s\n", kite_last_error());
    return 1;
  }
  const kite_dtype f32 = KITE_DTYPE_F32, i32 = KITE_DTYPE_I32;
  DLTensor *x = mat(f32, 4, 8), *w = mat(f32, 6, 8), *y = mat(f32, 4, 6);
  DLTensor *wrong = mat(f32, 4, 5), *xb = mat(KITE_DTYPE_BF16, 4, 8), *b5 = vec(f32, 5);
  DLTensor *w3 = mat3(f32, 2, 6, 8), *gs = vec(i32, 2), *gsf = vec(f32, 2);
  DLTensor *l = mat(f32, 4, 8), *tw = mat(f32, 4, 2), *ti = mat(i32, 4, 2);
  DLTensor *q = mat(KITE_DTYPE_I8, 4, 8), *s = vec(f32, 4), *q32 = mat(i32, 4, 8);
  DLTensor *ws6 = vec(f32, 6), *w13 = mat3(f32, 3, 10, 8), *w2 = mat3(f32, 3, 8, 5);
  DLTensor *w2bad = mat3(f32, 3, 8, 4), *ym = mat(f32, 4, 8), *ym2 = mat(f32, 4, 8);

  expect_error(kite_linear(ctx, x, w, NULL, wrong), "linear: y of the wrong shape");
  expect_error(kite_linear(ctx, xb, w, NULL, y), "linear: mixed dtypes");
  expect_error(kite_linear(ctx, x, w, b5, y), "linear: bias of the wrong length");
  expect_error(kite_linear(ctx, x, w3, NULL, y), "linear: rank-3 w");
  expect_error(kite_linear(ctx, x, w, NULL, x), "linear: y is x");
  expect_error(kite_group_gemm(ctx, x, w, gs, y), "group_gemm: rank-2 w");
  expect_error(kite_group_gemm(ctx, x, w3, gsf, y), "group_gemm: f32 group sizes");
  expect_error(kite_topk_gating(ctx, l, 0, 1, tw, ti), "topk_gating: k = 0");
  expect_error(kite_topk_gating(ctx, l, 9, 1, tw, ti), "topk_gating: k > E");
  expect_error(kite_topk_gating(ctx, l, 2, 1, ti, ti), "topk_gating: i32 weights");
  expect_error(kite_quant(ctx, x, q32, s), "quant: i32 codes");
  expect_error(kite_quant(ctx, x, q, ws6), "quant: scales of the wrong length");
  expect_error(kite_dequant(ctx, q, s, q32), "dequant: i32 y");
  expect_error(kite_linear_quant(ctx, q, s, x, ws6, NULL, y), "linear_quant: float weights");
  expect_error(kite_fused_moe(ctx, ym, w13, w2bad, tw, ti, KITE_MOE_SILU, ym2),
               "fused_moe: w2 not [E, H, I]");
  expect_error(kite_fused_moe(ctx, ym, w13, w2, tw, ti, (kite_moe_act)7, ym2),
               "fused_moe: bad act");

  /* linear_wq4 with K = 0: y = bias, on every kernel that runs here; x and w hold no memory
   * (NULL data, as DLPack allows for an empty tensor), few and many rows */
  static const char *const wq4_kernels[] = {"ref", "cpu.scalar", "cpu.avx2", "cpu.avx512"};
  for (int m = 2; m <= 64; m += 62)
    for (size_t v = 0; v < sizeof wq4_kernels / sizeof wq4_kernels[0]; v++) {
      char pin[64];
      snprintf(pin, sizeof pin, "linear_wq4=%s", wq4_kernels[v]);
      DLTensor *x0 = mat(f32, m, 0), *w0 = mat(KITE_DTYPE_U8, 5, 0), *y0 = mat(f32, m, 5);
      DLTensor *bias = vec(f32, 5);
      for (int n = 0; n < 5; n++) ((float *)bias->data)[n] = (float)n + 0.5f;
      for (int i = 0; i < m * 5; i++) ((float *)y0->data)[i] = NAN;
      x0->data = w0->data = NULL;
      kite_config_set(pin);
      kite_status st = kite_linear_wq4(ctx, x0, w0, KITE_WQ4_SYM, bias, y0);
      if (st == KITE_ERR_UNSUPPORTED) continue; /* that ISA is not here */
      int ok = st == KITE_OK;
      for (int i = 0; i < m * 5 && ok; i++) ok = ((float *)y0->data)[i] == (float)(i % 5) + 0.5f;
      CHECK(ok, "linear_wq4 K = 0, %d rows, %s: y must be the bias\n", m, wq4_kernels[v]);
    }
  kite_config_set(NULL);

  for (int i = 0; i < g_n; i++) free(g_mem[i]);
  kite_ctx_destroy(ctx);
  return check_summary();
}
