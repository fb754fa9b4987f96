/*
 * What the GEMM-family kernels of the cpu backend share (threads plan, the K = 0 product).
 *
 * cpu_gemm_avx2.c: packing + register-blocked micro-kernels (linear, group_gemm, linear_quant),
 * cpu_gemv_avx2.c the GEMV for few rows, cpu_moe_avx2.c, cpu_topk_avx2.c, cpu_quant_avx2.c;
 * cpu_gemm_avx512.c linear (f32 FMA, bf16 VDPBF16PS, AMX) and int8 linear_quant (VPDPBUSD, AMX)
 * on one AVX-512 packed driver; cpu_gemm_onednn.c and cpu_gemm_blas.c the library variants.
 */
#ifndef KITE_CPU_GEMM_H
#define KITE_CPU_GEMM_H

#include "cpu.h"
#include "kite/dtype.h"

/* linear with at most this many rows streams the weights (GEMV) instead of packing them. */
#define CPU_GEMV_MAX_M 16

/* How a packed GEMM of m x n x k shares out over threads: `parts` threads (one per 2^21
 * multiply-adds at least, at most the ctx's), over `items` ranges of `span` columns (split_n: N
 * is wide enough) or rows, aligned to the micro-kernel's nr or mr. Item i covers
 * [i * span, min((i + 1) * span, N or M)). */
typedef struct cpu_gemm_plan {
  int parts;
  bool split_n;
  int64_t span, items;
} cpu_gemm_plan;

static inline int cpu_gemm_parts(const kite_ctx *ctx, int64_t m, int64_t n, int64_t k) {
  const double work = (double)m * (double)n * (double)(k > 0 ? k : 1);
  int parts = kite_ctx_num_threads(ctx);
  if (work < (double)parts * (1 << 21)) parts = (int)(work / (1 << 21));
  return parts < 1 ? 1 : parts;
}

static inline cpu_gemm_plan cpu_gemm_plan_make(int parts, int64_t m, int64_t n, int64_t mr,
                                               int64_t nr) {
  cpu_gemm_plan p = {.parts = parts, .split_n = n >= m || n >= (int64_t)parts * 256};
  const int64_t dim = p.split_n ? n : m, align = p.split_n ? nr : mr;
  p.span = ((dim + parts - 1) / parts + align - 1) / align * align;
  p.items = p.span ? (dim + p.span - 1) / p.span : 0;
  if (p.items < p.parts) p.parts = (int)(p.items > 0 ? p.items : 1);
  return p;
}

/* y [m, n] (rows ldy apart, dtype t) = bias [n] or 0: a product over K = 0. */
static inline void cpu_linear_bias_only(kite_dtype t, int64_t m, int64_t n, const void *bias,
                                        void *y, int64_t ldy) {
  for (int64_t r = 0; r < m; r++)
    for (int64_t j = 0; j < n; j++)
      kite_store_f32(t, y, r * ldy + j, bias ? kite_load_f32(t, bias, j) : 0.0f);
}

#if defined(__x86_64__)
/* linear_wq4 [m, k] x [n, k/32 blocks] through the AVX-512 packed f32 GEMM, the 4-bit blocks
 * decoded into the packed w panels (cpu_gemm_avx512.c); for many rows of x. */
kite_status cpu_wq4_gemm_avx512(kite_ctx *ctx, const kite_linear_wq4_args *a);
#endif

#endif /* KITE_CPU_GEMM_H */
