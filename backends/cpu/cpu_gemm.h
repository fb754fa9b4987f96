/*
 * GEMM, grouped GEMM, MoE and quantization kernels of the cpu backend, private to backends/cpu.
 *
 * cpu_gemm_avx2.c holds our own kernels (packing + register-blocked micro-kernels, a GEMV path for
 * few rows, the MoE and quantization loops); cpu_gemm_avx512bf16.c a bf16 linear on VDPBF16PS;
 * cpu_gemm_blas.c the OpenBLAS variant, built only when the library is found (KITE_HAVE_OPENBLAS).
 * cpu_backend.c appends cpu_gemm_kernels to its table.
 */
#ifndef KITE_CPU_GEMM_H
#define KITE_CPU_GEMM_H

#include "cpu.h"

/* Entries for the cpu backend's table; cpu_gemm_num_kernels of them (at most CPU_GEMM_MAX). */
#define CPU_GEMM_MAX 32
extern const kite_kernel cpu_gemm_kernels[];
extern const size_t cpu_gemm_num_kernels;

/* linear with at most this many rows streams the weights (GEMV) instead of packing them. */
#define CPU_GEMV_MAX_M 16

#if defined(__x86_64__)
kite_status cpu_linear_avx2(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status cpu_group_gemm_avx2(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status cpu_fused_moe_avx2(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status cpu_topk_gating_avx2(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status cpu_quant_avx2(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status cpu_linear_quant_avx2(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status cpu_linear_avx512bf16(const kite_kernel *k, kite_ctx *ctx, const void *args);
#endif
#if defined(KITE_HAVE_OPENBLAS)
kite_status cpu_linear_openblas(const kite_kernel *k, kite_ctx *ctx, const void *args);
#endif

#endif /* KITE_CPU_GEMM_H */
