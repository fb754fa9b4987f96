/*
 * The optimized CPU backend "cpu" and its one table of kernel entries.
 *
 * cpu_kernels[] below lists every entry of the backend, a row per entry, grouped by op and
 * ordered best first within an op, the portable (scalar) row last; the registry keeps the rows
 * whose feature bits are present here (cpu_features_detect, capped by KITE_CPU_ISA) and runs the
 * highest priority one that supports() the call. A templated family (kernels/<family>.inc) gets
 * one row macro that expands to its ISA builds. features_str is rendered from the bits at init.
 * Host memory is the core's, which serves the host to every backend.
 */
#include "cpu.h"
#include "cpu_gemm.h"
#include "cpu_kernels.h"

/* ---- supports() predicates ------------------------------------------------------------------ */

static kite_dtype args_dtype(const void *args) {
  return kite_args_head_of(args)->dtype;
}

/* Computing ops take f32/f16/bf16; embedding copies bytes, so any sized type. */
static bool supports_float(const kite_kernel *k, const void *args, const char **why) {
  const kite_dtype t = args_dtype(args);
  if (k->op == KITE_OP_EMBEDDING ? (unsigned)t >= KITE_DTYPE_COUNT || kite_dtype_size(t) == 0
                                 : !cpu_is_float(t)) {
    *why = "dtype not supported (f32, f16, bf16)";
    return false;
  }
  return true;
}

static bool supports_bf16(const kite_kernel *k, const void *args, const char **why) {
  if (args_dtype(args) != KITE_DTYPE_BF16) {
    *why = "bf16 only";
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

/* ---- the table ------------------------------------------------------------------------------ */

#define ROW(op_id, var, prio, feat, sup, fn, desc)                                                 \
  {                                                                                                \
    .op = (op_id), .variant = (var), .priority = (prio), .features = (feat), .supports = (sup),    \
    .run = (fn), .description = (desc)                                                             \
  }

/* Rows that exist only on x86-64 (the ISA builds past scalar). */
#if defined(__x86_64__)
#define X86(...) __VA_ARGS__,
#else
#define X86(...)
#endif

/* A templated row family (cpu_<fn>_<isa>, kernels/<fn>.inc): every ISA build of it, best first.
 * avx512bf16 differs from avx512 only in rounding to bf16, so it takes bf16 calls alone. */
#define ROW_FAMILY(op_id, fn)                                                                      \
  X86(ROW(op_id, "avx512bf16", 40, CPU_ISA_AVX512BF16, supports_bf16, cpu_##fn##_avx512bf16,       \
          "AVX-512 with hardware bf16 conversion (bf16 only), multithreaded"),                     \
      ROW(op_id, "avx512", 30, CPU_ISA_AVX512, supports_float, cpu_##fn##_avx512,                  \
          "AVX-512, 16 lanes, multithreaded"),                                                     \
      ROW(op_id, "avx2", 20, CPU_ISA_AVX2, supports_float, cpu_##fn##_avx2,                        \
          "AVX2/FMA/F16C, 8 lanes, multithreaded"))                                                \
  ROW(op_id, "scalar", 10, 0, supports_float, cpu_##fn##_scalar,                                   \
      "portable C, f32 math, multithreaded")

/* The attention template (kernels/attention.inc): its AVX2 and portable builds. */
#define ATTN_FAMILY(op_id, fn, what)                                                               \
  X86(ROW(op_id, "avx2", 20, CPU_ISA_AVX2, supports_float, cpu_##fn##_avx2, what ", AVX2 FMA"))    \
  ROW(op_id, "scalar", 10, 0, supports_float, cpu_##fn##_scalar, what ", portable C")

/* The sampling template (kernels/sampling.inc): its AVX-512, AVX2 and portable builds. */
#define SAMPLING_FAMILY(op_id, fn, what)                                                           \
  X86(ROW(op_id, "avx512", 30, CPU_ISA_AVX512, supports_float, cpu_##fn##_avx512,                  \
          what ", AVX-512"),                                                                       \
      ROW(op_id, "avx2", 20, CPU_ISA_AVX2, supports_float, cpu_##fn##_avx2, what ", AVX2"))        \
  ROW(op_id, "scalar", 10, 0, supports_float, cpu_##fn##_scalar, what ", portable C")

static kite_kernel cpu_kernels[] = {
/* activations, gated activations, norms, rope, softmax, embedding, each with its backward
 * (act_bwd serves activation_backward and gated_backward; rope serves rope_backward) */
#define ROW_ACT(ID, name) ROW_FAMILY(KITE_OP_##ID, act),
#define ROW_GATED(ID, name, AID, aname) ROW_FAMILY(KITE_OP_##ID, gated),
    KITE_ACTIVATION_OPS(ROW_ACT) ROW_FAMILY(KITE_OP_ACTIVATION_BACKWARD, act_bwd),
    KITE_GATED_OPS(ROW_GATED) ROW_FAMILY(KITE_OP_GATED_BACKWARD, act_bwd),
    ROW_FAMILY(KITE_OP_RMS_NORM, norm),
    ROW_FAMILY(KITE_OP_LAYER_NORM, norm),
    ROW_FAMILY(KITE_OP_ADD_RMS_NORM, norm),
    ROW_FAMILY(KITE_OP_ADD_LAYER_NORM, norm),
    ROW_FAMILY(KITE_OP_RMS_NORM_BACKWARD, norm_bwd),
    ROW_FAMILY(KITE_OP_LAYER_NORM_BACKWARD, norm_bwd),
    ROW_FAMILY(KITE_OP_ROPE, rope),
    ROW_FAMILY(KITE_OP_ROPE_BACKWARD, rope),
    ROW_FAMILY(KITE_OP_SOFTMAX, softmax),
    ROW_FAMILY(KITE_OP_SOFTMAX_BACKWARD, softmax_bwd),
    ROW_FAMILY(KITE_OP_EMBEDDING, embedding),
    ROW_FAMILY(KITE_OP_EMBEDDING_BACKWARD, embedding_bwd),

    /* losses (kernels/loss.inc, cpu_flce.c) */
    ROW_FAMILY(KITE_OP_CROSS_ENTROPY, ce),
    ROW_FAMILY(KITE_OP_CROSS_ENTROPY_BACKWARD, ce),
    ROW_FAMILY(KITE_OP_CROSS_ENTROPY_WITH_GRAD, ce),
    ROW(KITE_OP_FUSED_LINEAR_CROSS_ENTROPY, "chunked", 10, 0, supports_float, cpu_flce_chunked,
        "vocabulary chunks through kite_linear, logits recomputed for the gradients"),

    /* attention */
    ATTN_FAMILY(KITE_OP_STORE_KV, store_kv,
                "row copy into the paged caches, kv heads over threads"),
    ATTN_FAMILY(KITE_OP_PAGED_DECODE, paged,
                "online softmax, GQA heads share each K/V row, keys split over threads when "
                "sequences are few"),
    ATTN_FAMILY(KITE_OP_PAGED_PREFILL, paged,
                "online softmax over (query tile, kv head) items, unseen keys skipped"),
    ATTN_FAMILY(KITE_OP_SDPA, sdpa,
                "online softmax over (query tile, kv head) items, masks per tile"),
    ATTN_FAMILY(KITE_OP_SDPA_FP8, sdpa_fp8,
                "q, k, v dequantized per block into f32, then sdpa's online softmax"),
    ATTN_FAMILY(KITE_OP_QUANT_FP8_BLOCKS, quant_fp8_blocks,
                "blocks of 128 rows over threads: finite amax by vectors, then the codes"),
    ATTN_FAMILY(KITE_OP_SDPA_VARLEN, sdpa_varlen,
                "sdpa's online softmax over (sequence query tile, kv head) items"),
    ATTN_FAMILY(KITE_OP_SDPA_BACKWARD, sdpa_bwd,
                "dq over (query tile, q head), dk / dv over (key tile, kv head) items, scores "
                "recomputed, fixed summation order"),
    ATTN_FAMILY(KITE_OP_SDPA_VARLEN_BACKWARD, sdpa_bwd,
                "sdpa_backward's two passes per packed sequence"),

    /* sampling: sample serves argmax too */
    SAMPLING_FAMILY(KITE_OP_ARGMAX, sample, "one pass per row, rows or column ranges over threads"),
    SAMPLING_FAMILY(KITE_OP_SAMPLE, sample,
                    "top-k candidates gathered behind a rising k-th-largest bar, top-p by mass "
                    "buckets, pruned exponential race over Philox draws"),
    SAMPLING_FAMILY(KITE_OP_LOGPROBS, logprobs,
                    "max and top-n pass, log-sum-exp pass, rows over threads"),
    ROW(KITE_OP_APPLY_PENALTIES, "scalar", 10, 0, supports_float, cpu_apply_penalties_scalar,
        "per row: the seen ids sorted, one float64 update per distinct id"),
    ROW(KITE_OP_SOFTCAP, "scalar", 10, 0, supports_float, cpu_softcap_scalar,
        "cap * tanhf(l / cap) in f32, rows over threads"),

/* GEMM family: hand-written kernels and library variants. */
#if defined(KITE_HAVE_ONEDNN)
    /* oneDNN bf16 and int8 rank above ours where oneDNN has them natively (AVX-512-BF16 or AMX;
     * VNNI, for exact int32 sums), which its supports() checks; bf16 decode rows stay with the
     * GEMV. */
    ROW(KITE_OP_LINEAR, "onednn_bf16", 24, CPU_ISA_AVX512BF16 | CPU_F_ONEDNN,
        cpu_onednn_supports_linear_bf16, cpu_linear_onednn,
        "oneDNN matmul, bf16 on AVX-512-BF16 / AMX (M > 8), strided views"),
#endif
#if defined(__x86_64__)
    /* amx bf16 ranks just below cpu.onednn_bf16, which is faster at M = 9-16 (ours pads x to 32
     * rows) and declines M <= 8, where this entry takes over (with the GEMV). */
    ROW(KITE_OP_LINEAR, "amx", 23, CPU_ISA_AMX, supports_amx_bf16, cpu_linear_amx,
        "bf16: 32x32 blocks of four TDPBF16PS tiles; M <= 8: the GEMV"),
    ROW(KITE_OP_LINEAR, "avx512", 22, CPU_ISA_AVX512, supports_float, cpu_linear_avx512,
        "packed 12x32 AVX-512 FMA GEMM (bf16/f16 widened while packing); M <= 16: the GEMV"),
    ROW(KITE_OP_LINEAR, "avx2", 20, CPU_ISA_AVX2, supports_float, cpu_linear_avx2,
        "packed 6x16 FMA GEMM (bf16/f16 widened while packing); GEMV streaming w for M <= 16"),
    /* avx512bf16 ranks below cpu.avx2 and cpu.avx512: on a Sapphire Rapids Xeon VDPBF16PS issues
     * at a quarter of the f32 FMA's rate, so with twice the products per instruction it does half
     * the work per cycle. A pin still reaches it; CPUs with a faster VDPBF16PS may rank it
     * higher. */
    ROW(KITE_OP_LINEAR, "avx512bf16", 18, CPU_ISA_AVX512BF16, supports_bf16, cpu_linear_avx512bf16,
        "bf16 pairs packed, 12x32 VDPBF16PS GEMM (bf16 only); M <= 16: the GEMV"),
#endif
#if defined(KITE_HAVE_OPENBLAS)
    /* OpenBLAS ranks below cpu.avx2: close to ours on large squares, several times slower than
     * our GEMV for few rows (decode), and declining those shapes would break a pin to it. */
    ROW(KITE_OP_LINEAR, "openblas", 15, CPU_F_OPENBLAS, cpu_openblas_supports_linear,
        cpu_linear_openblas, "OpenBLAS cblas_sgemm (f32), threads set to the ctx's per call"),
#endif
#if defined(KITE_HAVE_ONEDNN)
    /* oneDNN f32 ranks below ours and OpenBLAS. */
    ROW(KITE_OP_LINEAR, "onednn", 14, CPU_F_ONEDNN, cpu_onednn_supports_linear, cpu_linear_onednn,
        "oneDNN matmul, f32 (jit sgemm), strided views, no copies"),
#endif
#if defined(__x86_64__)
    ROW(KITE_OP_GROUP_GEMM, "avx2", 20, CPU_ISA_AVX2, supports_float, cpu_group_gemm_avx2,
        "the linear kernels once per group"),
    ROW(KITE_OP_FUSED_MOE, "avx2", 20, CPU_ISA_AVX2, supports_float, cpu_fused_moe_avx2,
        "fused_moe_ex's grouped kernel: pairs bucketed by expert, two GEMMs per expert over "
        "gathered rows, slots summed in order"),
    ROW(KITE_OP_FUSED_MOE_EX, "avx2", 20, CPU_ISA_AVX2, supports_float, cpu_fused_moe_ex_avx2,
        "pairs bucketed by expert, two GEMMs per expert over gathered rows (transposed weights "
        "read as stored), biases / clamp / act in 8 lanes, slots summed in order"),
    ROW(KITE_OP_TOPK_GATING, "avx2", 20, CPU_ISA_AVX2, supports_float, cpu_topk_gating_avx2,
        "insertion top-k on the logits, f32 softmax weights, rows over threads"),
    ROW(KITE_OP_QUANT, "avx2", 20, CPU_ISA_AVX2, supports_quant, cpu_quant_avx2,
        "per-token amax, divide, round/saturate 8 lanes at a time"),
    ROW(KITE_OP_DEQUANT, "avx2", 20, CPU_ISA_AVX2, supports_quant, cpu_quant_avx2,
        "codes widened 8 lanes at a time times the row scale"),
    /* int8 on AMX ranks above oneDNN's. */
    ROW(KITE_OP_LINEAR_QUANT, "amx", 26, CPU_ISA_AMX, supports_amx_i8, cpu_linear_quant_amx,
        "int8: 32x32 blocks of four TDPBSSD tiles, int32 exact (int8 only)"),
#endif
#if defined(KITE_HAVE_ONEDNN)
    /* oneDNN int8 ranks below cpu.avx512vnni: slower alone (2048^3: 294 against 362 GOP/s on a
     * 2-core EPYC) and far slower inside a model, where its OpenMP threads spin beside kite's
     * pool (SmolLM2 int8 decode 9 against 35 tok/s, docs/performance.md). */
    ROW(KITE_OP_LINEAR_QUANT, "onednn", 21, CPU_ISA_AVX512VNNI | CPU_F_ONEDNN,
        cpu_onednn_supports_linear_quant, cpu_linear_quant_onednn,
        "oneDNN s8 x s8 -> s32 matmul (VNNI/AMX), then scales and bias"),
#endif
#if defined(__x86_64__)
    ROW(KITE_OP_LINEAR_QUANT, "avx512vnni", 22, CPU_ISA_AVX512VNNI, supports_i8,
        cpu_linear_quant_avx512vnni,
        "int8: x + 128 and w in 4-byte groups, 12x32 VPDPBUSD, int32 exact (int8 only)"),
    ROW(KITE_OP_LINEAR_QUANT, "avx2", 20, CPU_ISA_AVX2, supports_linear_quant,
        cpu_linear_quant_avx2,
        "int8: 6x16 VPMADDWD on int16 pairs, int32 exact; e4m3: f32 panels + FMA"),
#endif
    ROW(KITE_OP_LINEAR_WQ4, "scalar", 10, 0, supports_float, cpu_linear_wq4_scalar,
        "4-bit blocks widened in plain C, 4 rows of x per decoded block"),
    ROW(KITE_OP_MOE_ROUTE, "scalar", 10, 0, supports_float, cpu_moe_route_scalar,
        "f32 scores and keys, groups by top-2 sums, k arg-max passes, tokens over threads"),
    ROW(KITE_OP_FUSED_MOE_EX, "scalar", 10, 0, supports_float, cpu_fused_moe_ex_scalar,
        "per token: chosen experts' gate/up dots, clamp, act, w2 dots + biases, f32"),
    ROW(KITE_OP_MOE_AUX_LOSS, "scalar", 10, 0, supports_float, cpu_moe_aux_loss_scalar,
        "expert counts and softmax sums in row order, float64 accumulators"),
    ROW(KITE_OP_MOE_AUX_LOSS_BACKWARD, "scalar", 10, 0, supports_float, cpu_moe_aux_loss_scalar,
        "counts in row order, then p (c - c.p) per row, rows over threads"),
    ROW(KITE_OP_MLA_STORE_KV, "scalar", 10, 0, supports_float, cpu_mla_store_kv_scalar,
        "row copy per token into the latent caches, tokens over threads"),
    ROW(KITE_OP_MLA_DECODE, "scalar", 10, 0, supports_float, cpu_mla_decode_scalar,
        "a latent row converted once per 16 heads, f32 online softmax, items over threads"),
#if defined(__x86_64__)
    ROW(KITE_OP_LINEAR_WQ4, "avx512", 22, CPU_ISA_AVX512, supports_float, cpu_linear_wq4_avx512,
        "a block decoded to d q + c in two zmm once per 8 x rows, 2 FMAs per row"),
    ROW(KITE_OP_LINEAR_WQ4, "avx2", 20, CPU_ISA_AVX2, supports_float, cpu_linear_wq4_avx2,
        "4-bit blocks widened to 4 x 8 floats, FMA, 4 rows of x per block"),
#endif
    ROW(KITE_OP_LINEAR_GGUF, "scalar", 10, 0, supports_float, cpu_gguf_scalar,
        "4 rows of w decoded to f32 in portable C, every row of x against them"),
    ROW(KITE_OP_DEQUANT_GGUF, "scalar", 10, 0, supports_float, cpu_gguf_scalar,
        "blocks decoded to f32 in portable C, stored in y's dtype"),
    ROW(KITE_OP_GROUP_GEMM_GGUF, "scalar", 10, 0, supports_float, cpu_group_gguf_scalar,
        "each group as linear_gguf's scalar kernel against its w[g]"),
#if defined(__x86_64__)
    ROW(KITE_OP_LINEAR_GGUF, "avx512", 22, CPU_ISA_AVX512, supports_float, cpu_gguf_avx512,
        "4 rows of w decoded to f32, every row of x against them, 16-lane FMA"),
    ROW(KITE_OP_LINEAR_GGUF, "avx2", 20, CPU_ISA_AVX2, supports_float, cpu_gguf_avx2,
        "4 rows of w decoded to f32, every row of x against them, 8-lane FMA"),
    ROW(KITE_OP_DEQUANT_GGUF, "avx512", 22, CPU_ISA_AVX512, supports_float, cpu_gguf_avx512,
        "blocks decoded to f32 in 16-lane vectors, stored in y's dtype"),
    ROW(KITE_OP_DEQUANT_GGUF, "avx2", 20, CPU_ISA_AVX2, supports_float, cpu_gguf_avx2,
        "blocks decoded to f32 in 8-lane vectors, stored in y's dtype"),
    ROW(KITE_OP_LINEAR_GGUF_Q8, "avx512vnni", 24, CPU_ISA_AVX512VNNI, supports_float,
        cpu_gguf_q8_avx512vnni, "x blocks to int8, 4 rows of w decoded to codes, VPDPBUSD"),
    ROW(KITE_OP_LINEAR_GGUF_Q8, "avx2", 20, CPU_ISA_AVX2, supports_float, cpu_gguf_q8_avx2,
        "x blocks to int8, 4 rows of w decoded to codes, VPMADDUBSW + VPMADDWD"),
    ROW(KITE_OP_GROUP_GEMM_GGUF, "avx512", 22, CPU_ISA_AVX512, supports_float,
        cpu_group_gguf_avx512, "each group as linear_gguf's avx512 kernel against its w[g]"),
    ROW(KITE_OP_GROUP_GEMM_GGUF, "avx2", 20, CPU_ISA_AVX2, supports_float, cpu_group_gguf_avx2,
        "each group as linear_gguf's avx2 kernel against its w[g]"),
#endif
};
#define CPU_NUM_KERNELS (sizeof cpu_kernels / sizeof cpu_kernels[0])

/* features_str of each row, rendered from its bits. */
static char cpu_feature_names[CPU_NUM_KERNELS][CPU_FEATURE_NAMES_MAX];
static uint64_t cpu_present;

static int cpu_device_count(const kite_backend *b) {
  return 1;
}

static uint64_t cpu_features_present(const kite_backend *b) {
  return cpu_present;
}

static kite_backend cpu_backend = {
    .name = "cpu",
    .device_type = kDLCPU,
    .description = "optimized CPU kernels: scalar, AVX2, AVX-512 variants chosen by CPUID",
    .device_count = cpu_device_count,
    .features_present = cpu_features_present,
    .kernels = cpu_kernels,
    .num_kernels = CPU_NUM_KERNELS,
};

kite_status kite_backend_init_cpu(void);
kite_status kite_backend_init_cpu(void) {
  cpu_present = cpu_features_detect();
#if defined(KITE_HAVE_OPENBLAS)
  if (cpu_openblas_load()) cpu_present |= CPU_F_OPENBLAS;
#endif
#if defined(KITE_HAVE_ONEDNN)
  if (cpu_onednn_load()) cpu_present |= CPU_F_ONEDNN;
#endif
  for (size_t i = 0; i < CPU_NUM_KERNELS; i++) {
    cpu_features_render(cpu_kernels[i].features, cpu_feature_names[i], CPU_FEATURE_NAMES_MAX);
    cpu_kernels[i].features_str = cpu_feature_names[i];
  }
  return kite_backend_register(&cpu_backend);
}
