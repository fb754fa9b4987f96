/*
 * The optimized CPU backend "cpu": registers every op once per ISA build of the kernels
 * (cpu.scalar, cpu.avx2, cpu.avx512, cpu.avx512bf16). Each entry names the feature bits it needs;
 * the registry keeps those present here (cpu_features_detect, capped by KITE_CPU_ISA) and runs the
 * highest priority. Host memory is served by the ref backend, so no memory operations here.
 */
#include "cpu.h"
#include "cpu_gemm.h"

/* The attention kernels of every ISA build (cpu_attention.c). */
#define CPU_ATTN_MAX 16
extern const kite_kernel cpu_attn_kernels[];
extern const size_t cpu_attn_num_kernels;
/* The sampling kernels of every ISA build (cpu_sampling.c). */
#define CPU_SAMPLING_MAX 16
extern const kite_kernel cpu_sampling_kernels[];
extern const size_t cpu_sampling_num_kernels;

typedef struct cpu_isa {
  const char *variant;
  int priority;
  uint64_t features;
  const char *features_str;
  const char *description;
  const cpu_isa_kernels *kernels;
  bool bf16_only;
} cpu_isa;

static const cpu_isa cpu_isas[] = {
    {"scalar", 10, 0, "", "portable C, f32 math, multithreaded", &cpu_kernels_scalar, false},
#if defined(__x86_64__)
    {"avx2", 20, CPU_ISA_AVX2, "avx2,fma,f16c", "AVX2/FMA/F16C, 8 lanes, multithreaded",
     &cpu_kernels_avx2, false},
    {"avx512", 30, CPU_ISA_AVX512, "avx512f,avx512bw,avx512vl,avx512dq,fma,f16c",
     "AVX-512, 16 lanes, multithreaded", &cpu_kernels_avx512, false},
    {"avx512bf16", 40, CPU_ISA_AVX512BF16,
     "avx512f,avx512bw,avx512vl,avx512dq,avx512_bf16,fma,f16c",
     "AVX-512 with hardware bf16 conversion (bf16 only), multithreaded", &cpu_kernels_avx512bf16,
     true},
#endif
};
#define CPU_NUM_ISAS (sizeof cpu_isas / sizeof cpu_isas[0])

static const kite_op cpu_ops[] = {
    KITE_OP_SILU,     KITE_OP_GELU,         KITE_OP_GELU_TANH,    KITE_OP_GELU_QUICK,
    KITE_OP_RELU,     KITE_OP_SILU_AND_MUL, KITE_OP_GELU_AND_MUL, KITE_OP_GELU_TANH_AND_MUL,
    KITE_OP_RMS_NORM, KITE_OP_LAYER_NORM,   KITE_OP_ADD_RMS_NORM, KITE_OP_ADD_LAYER_NORM,
    KITE_OP_ROPE,     KITE_OP_SOFTMAX,      KITE_OP_EMBEDDING,
};
#define CPU_NUM_OPS (sizeof cpu_ops / sizeof cpu_ops[0])

static kite_kernel cpu_kernels[CPU_NUM_ISAS * CPU_NUM_OPS + CPU_GEMM_MAX + CPU_ATTN_MAX +
                               CPU_SAMPLING_MAX];
static uint64_t cpu_present;

static kite_run_fn run_for(const cpu_isa_kernels *k, kite_op op) {
  switch (op) {
  case KITE_OP_SILU_AND_MUL:
  case KITE_OP_GELU_AND_MUL:
  case KITE_OP_GELU_TANH_AND_MUL:
    return k->gated;
  case KITE_OP_RMS_NORM:
  case KITE_OP_LAYER_NORM:
  case KITE_OP_ADD_RMS_NORM:
  case KITE_OP_ADD_LAYER_NORM:
    return k->norm;
  case KITE_OP_ROPE:
    return k->rope;
  case KITE_OP_SOFTMAX:
    return k->softmax;
  case KITE_OP_EMBEDDING:
    return k->embedding;
  default:
    return k->act;
  }
}

/* The element type of a call; each args struct is read as its own type. */
static kite_dtype args_dtype(kite_op op, const void *args) {
  switch (op) {
  case KITE_OP_SILU_AND_MUL:
  case KITE_OP_GELU_AND_MUL:
  case KITE_OP_GELU_TANH_AND_MUL:
    return ((const kite_gated_args *)args)->dtype;
  case KITE_OP_RMS_NORM:
  case KITE_OP_LAYER_NORM:
  case KITE_OP_ADD_RMS_NORM:
  case KITE_OP_ADD_LAYER_NORM:
    return ((const kite_norm_args *)args)->dtype;
  case KITE_OP_ROPE:
    return ((const kite_rope_args *)args)->dtype;
  case KITE_OP_SOFTMAX:
    return ((const kite_softmax_args *)args)->dtype;
  case KITE_OP_EMBEDDING:
    return ((const kite_embedding_args *)args)->dtype;
  default:
    return ((const kite_act_args *)args)->dtype;
  }
}

/* Computing ops take f32/f16/bf16; embedding copies bytes, so any sized type. */
static bool cpu_supports(const kite_kernel *k, const void *args, const char **why) {
  const kite_dtype t = args_dtype(k->op, args);
  if (k->op == KITE_OP_EMBEDDING ? (unsigned)t >= KITE_DTYPE_COUNT || kite_dtype_size(t) == 0
                                 : !cpu_is_float(t)) {
    *why = "dtype not supported";
    return false;
  }
  return true;
}

static bool cpu_supports_bf16(const kite_kernel *k, const void *args, const char **why) {
  if (args_dtype(k->op, args) != KITE_DTYPE_BF16) {
    *why = "bf16 only (f32 and f16 run on cpu.avx512)";
    return false;
  }
  return true;
}

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
};

kite_status kite_backend_init_cpu(void);
kite_status kite_backend_init_cpu(void) {
  cpu_present = cpu_features_detect();
  size_t n = 0;
  for (size_t i = 0; i < CPU_NUM_ISAS; i++) {
    const cpu_isa *isa = &cpu_isas[i];
    for (size_t o = 0; o < CPU_NUM_OPS; o++) {
      cpu_kernels[n++] = (kite_kernel){
          .op = cpu_ops[o],
          .variant = isa->variant,
          .priority = isa->priority,
          .features = isa->features,
          .features_str = isa->features_str,
          .supports = isa->bf16_only ? cpu_supports_bf16 : cpu_supports,
          .run = run_for(isa->kernels, cpu_ops[o]),
          .description = isa->description,
      };
    }
  }
  for (size_t i = 0; i < cpu_gemm_num_kernels; i++) cpu_kernels[n++] = cpu_gemm_kernels[i];
  for (size_t i = 0; i < cpu_attn_num_kernels && i < CPU_ATTN_MAX; i++)
    cpu_kernels[n++] = cpu_attn_kernels[i];
  for (size_t i = 0; i < cpu_sampling_num_kernels && i < CPU_SAMPLING_MAX; i++)
    cpu_kernels[n++] = cpu_sampling_kernels[i];
  cpu_backend.num_kernels = n;
  return kite_backend_register(&cpu_backend);
}
