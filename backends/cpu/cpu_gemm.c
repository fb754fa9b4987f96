/*
 * Kernel entries of the GEMM family for the cpu backend's table (appended by cpu_backend.c), and
 * the supports() predicates that keep each variant to what it does best or at all.
 */
#include "cpu_gemm.h"

static bool supports_float(const kite_kernel *k, const void *args, const char **why) {
  /* every GEMM-family args struct starts with op, dtype */
  const kite_dtype t = ((const kite_linear_args *)args)->dtype;
  if (!cpu_is_float(t)) {
    *why = "dtype not supported (f32, f16, bf16)";
    return false;
  }
  return true;
}

static bool supports_quant(const kite_kernel *k, const void *args, const char **why) {
  const kite_quant_args *a = args;
  if (!cpu_is_float(a->dtype) || (a->qdtype != KITE_DTYPE_I8 && a->qdtype != KITE_DTYPE_FP8_E4M3)) {
    *why = "dtype not supported (f32/f16/bf16 with i8/fp8_e4m3)";
    return false;
  }
  return true;
}

static bool supports_linear_quant(const kite_kernel *k, const void *args, const char **why) {
  const kite_linear_quant_args *a = args;
  if (!cpu_is_float(a->dtype) || (a->qdtype != KITE_DTYPE_I8 && a->qdtype != KITE_DTYPE_FP8_E4M3)) {
    *why = "dtype not supported (i8/fp8_e4m3 into f32/f16/bf16)";
    return false;
  }
  return true;
}

#if defined(__x86_64__)
static bool supports_bf16(const kite_kernel *k, const void *args, const char **why) {
  if (((const kite_linear_args *)args)->dtype != KITE_DTYPE_BF16) {
    *why = "bf16 only";
    return false;
  }
  return true;
}

static bool supports_i8(const kite_kernel *k, const void *args, const char **why) {
  const kite_linear_quant_args *a = args;
  if (a->qdtype != KITE_DTYPE_I8 || !cpu_is_float(a->dtype)) {
    *why = "int8 into f32/f16/bf16 only";
    return false;
  }
  return true;
}

/* The OS hands the AMX tile state to a process that asks (cpu_amx_ready); where it refuses, the
 * AMX entries decline. */
static bool amx_granted(const char **why) {
  if (cpu_amx_ready()) return true;
  *why = "the OS did not grant the AMX tile state (arch_prctl)";
  return false;
}

static bool supports_amx_bf16(const kite_kernel *k, const void *args, const char **why) {
  return supports_bf16(k, args, why) && amx_granted(why);
}

static bool supports_amx_i8(const kite_kernel *k, const void *args, const char **why) {
  return supports_i8(k, args, why) && amx_granted(why);
}
#endif

#if defined(KITE_HAVE_OPENBLAS)
/* OpenBLAS computes f32 only, on rows at least K apart. Its priority (15) sits below cpu.avx2
 * (20): at 2048^3 it is within ~10% of ours, but for few rows (decode, M <= 16) it is several
 * times slower than our GEMV, and declining those shapes would break a pin to it. */
static bool supports_openblas(const kite_kernel *k, const void *args, const char **why) {
  const kite_linear_args *a = args;
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
#endif

#define ENTRY(op_id, var, prio, feat, feat_str, sup, fn, desc)                                     \
  {                                                                                                \
    .op = (op_id), .variant = (var), .priority = (prio), .features = (feat),                       \
    .features_str = (feat_str), .supports = (sup), .run = (fn), .description = (desc)              \
  }

const kite_kernel cpu_gemm_kernels[] = {
    ENTRY(KITE_OP_LINEAR_WQ4, "scalar", 10, 0, "", supports_float, cpu_linear_wq4_scalar,
          "4-bit blocks widened in plain C, 4 rows of x per decoded block"),
#if defined(__x86_64__)
    ENTRY(KITE_OP_LINEAR_WQ4, "avx2", 20, CPU_ISA_AVX2, "avx2,fma,f16c", supports_float,
          cpu_linear_wq4_avx2, "4-bit blocks widened to 4 x 8 floats, FMA, 4 rows of x per block"),
    ENTRY(KITE_OP_LINEAR, "avx2", 20, CPU_ISA_AVX2, "avx2,fma,f16c", supports_float,
          cpu_linear_avx2,
          "packed 6x16 FMA GEMM (bf16/f16 widened while packing); GEMV streaming w for M <= 16"),
    ENTRY(KITE_OP_GROUP_GEMM, "avx2", 20, CPU_ISA_AVX2, "avx2,fma,f16c", supports_float,
          cpu_group_gemm_avx2, "the linear kernels once per group"),
    ENTRY(KITE_OP_FUSED_MOE, "avx2", 20, CPU_ISA_AVX2, "avx2,fma,f16c", supports_float,
          cpu_fused_moe_avx2,
          "tokens bucketed by expert, two packed GEMMs per expert over gathered rows"),
    ENTRY(KITE_OP_TOPK_GATING, "avx2", 20, CPU_ISA_AVX2, "avx2,fma,f16c", supports_float,
          cpu_topk_gating_avx2,
          "insertion top-k on the logits, f32 softmax weights, rows over threads"),
    ENTRY(KITE_OP_QUANT, "avx2", 20, CPU_ISA_AVX2, "avx2,fma,f16c", supports_quant, cpu_quant_avx2,
          "per-token amax, divide, round/saturate 8 lanes at a time"),
    ENTRY(KITE_OP_DEQUANT, "avx2", 20, CPU_ISA_AVX2, "avx2,fma,f16c", supports_quant,
          cpu_quant_avx2, "codes widened 8 lanes at a time times the row scale"),
    ENTRY(KITE_OP_LINEAR_QUANT, "avx2", 20, CPU_ISA_AVX2, "avx2,fma,f16c", supports_linear_quant,
          cpu_linear_quant_avx2,
          "int8: 6x16 VPMADDWD on int16 pairs, int32 exact; e4m3: f32 panels + FMA"),
    ENTRY(KITE_OP_LINEAR, "avx512", 22, CPU_ISA_AVX512, "avx512f,avx512bw,avx512vl,avx512dq",
          supports_float, cpu_linear_avx512,
          "packed 12x32 AVX-512 FMA GEMM (bf16/f16 widened while packing); M <= 16: the GEMV"),
    /* Priority 18, below cpu.avx2 and cpu.avx512: on a Sapphire Rapids Xeon a core issued 1.01 G
     * VDPBF16PS/s against 4.30 G FMA/s (zmm, independent chains): with 32 products against 16,
     * half the f32 FMA's rate, and bf16 2048^3 ran at 115 GFLOP/s against cpu.avx512's f32 276. A
     * pin still reaches it; CPUs with a faster VDPBF16PS may rank it higher. */
    ENTRY(KITE_OP_LINEAR, "avx512bf16", 18, CPU_ISA_AVX512BF16,
          "avx512f,avx512bw,avx512vl,avx512dq,avx512_bf16", supports_bf16, cpu_linear_avx512bf16,
          "bf16 pairs packed, 12x32 VDPBF16PS GEMM (bf16 only); M <= 16: the GEMV"),
    ENTRY(KITE_OP_LINEAR_QUANT, "avx512vnni", 22, CPU_ISA_AVX512VNNI,
          "avx512f,avx512bw,avx512vl,avx512dq,avx512_vnni", supports_i8,
          cpu_linear_quant_avx512vnni,
          "int8: x + 128 and w in 4-byte groups, 12x32 VPDPBUSD, int32 exact (int8 only)"),
    /* On a Sapphire Rapids Xeon (2 threads, 2048^3, three runs) bf16 608 / 581 / 739 GFLOP/s
     * against oneDNN's 640 / 613 / 729, int8 1242 / 1879 / 1245 GOP/s against 1047 / 1816 /
     * 1023. int8 ranks above oneDNN; bf16 just below cpu.onednn_bf16, which is faster at
     * M = 9-16 (16 x 4096 x 4096: 1557 us against 2932, ours padding x to 32 rows) and declines
     * M <= 8, where this entry takes over (with the GEMV). */
    ENTRY(KITE_OP_LINEAR, "amx", 23, CPU_ISA_AMX, "avx512f,avx512_bf16,amx_tile,amx_bf16",
          supports_amx_bf16, cpu_linear_amx,
          "bf16: 32x32 blocks of four TDPBF16PS tiles; M <= 8: the GEMV"),
    ENTRY(KITE_OP_LINEAR_QUANT, "amx", 26, CPU_ISA_AMX, "avx512f,amx_tile,amx_int8",
          supports_amx_i8, cpu_linear_quant_amx,
          "int8: 32x32 blocks of four TDPBSSD tiles, int32 exact (int8 only)"),
#endif
#if defined(KITE_HAVE_OPENBLAS)
    ENTRY(KITE_OP_LINEAR, "openblas", 15, 0, "", supports_openblas, cpu_linear_openblas,
          "OpenBLAS cblas_sgemm (f32), threads set to the ctx's per call"),
#endif
#if defined(KITE_HAVE_ONEDNN)
    /* oneDNN matmul. f32 ranks below ours and OpenBLAS (2048^3, 2 threads: Zen 3 137-147
     * GFLOP/s against ours 144-162; a Xeon 250-279 against ours 192-276, OpenBLAS 161-297, a
     * noisy host). bf16 and int8 rank above ours where oneDNN has them natively (AVX-512-BF16 or
     * AMX; VNNI, for exact int32 sums), which its supports() checks: on a Xeon with AMX bf16 ran
     * at 630-1601 GFLOP/s (ours 270, widened to f32) and int8 at 1057-2136 GOP/s (ours 680-850);
     * bf16 decode rows stay with the GEMV. */
    ENTRY(KITE_OP_LINEAR, "onednn", 14, 0, "", cpu_onednn_supports_linear, cpu_linear_onednn,
          "oneDNN matmul, f32 (jit sgemm), strided views, no copies"),
    ENTRY(KITE_OP_LINEAR, "onednn_bf16", 24, CPU_ISA_AVX512BF16, "avx512_bf16",
          cpu_onednn_supports_linear_bf16, cpu_linear_onednn,
          "oneDNN matmul, bf16 on AVX-512-BF16 / AMX (M > 8), strided views"),
    ENTRY(KITE_OP_LINEAR_QUANT, "onednn", 25, CPU_ISA_AVX512VNNI, "avx512_vnni",
          cpu_onednn_supports_linear_quant, cpu_linear_quant_onednn,
          "oneDNN s8 x s8 -> s32 matmul (VNNI/AMX), then scales and bias"),
#endif
};
const size_t cpu_gemm_num_kernels = sizeof cpu_gemm_kernels / sizeof cpu_gemm_kernels[0];

_Static_assert(sizeof cpu_gemm_kernels / sizeof cpu_gemm_kernels[0] <= CPU_GEMM_MAX,
               "raise CPU_GEMM_MAX");
