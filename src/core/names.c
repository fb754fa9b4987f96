/* Name tables: ops, dtypes, device types. */
#include <string.h>

#include "core/internal.h"

#define KITE_STR2(x) #x
#define KITE_STR(x) KITE_STR2(x)
const char *kite_version(void) {
  return KITE_STR(KITE_VERSION_MAJOR) "." KITE_STR(KITE_VERSION_MINOR) "." KITE_STR(
      KITE_VERSION_PATCH);
}

static const char *const g_op_names[KITE_OP_COUNT] = {
    [KITE_OP_SILU] = "silu",
    [KITE_OP_GELU] = "gelu",
    [KITE_OP_GELU_TANH] = "gelu_tanh",
    [KITE_OP_GELU_QUICK] = "gelu_quick",
    [KITE_OP_RELU] = "relu",
    [KITE_OP_SILU_AND_MUL] = "silu_and_mul",
    [KITE_OP_GELU_AND_MUL] = "gelu_and_mul",
    [KITE_OP_GELU_TANH_AND_MUL] = "gelu_tanh_and_mul",
    [KITE_OP_RMS_NORM] = "rms_norm",
    [KITE_OP_LAYER_NORM] = "layer_norm",
    [KITE_OP_ADD_RMS_NORM] = "add_rms_norm",
    [KITE_OP_ADD_LAYER_NORM] = "add_layer_norm",
    [KITE_OP_ROPE] = "rope",
    [KITE_OP_SOFTMAX] = "softmax",
    [KITE_OP_EMBEDDING] = "embedding",
    [KITE_OP_STORE_KV] = "store_kv",
    [KITE_OP_PAGED_DECODE] = "paged_decode",
    [KITE_OP_PAGED_PREFILL] = "paged_prefill",
    [KITE_OP_SDPA] = "sdpa",
    [KITE_OP_LINEAR] = "linear",
    [KITE_OP_GROUP_GEMM] = "group_gemm",
    [KITE_OP_TOPK_GATING] = "topk_gating",
    [KITE_OP_FUSED_MOE] = "fused_moe",
    [KITE_OP_QUANT] = "quant",
    [KITE_OP_DEQUANT] = "dequant",
    [KITE_OP_LINEAR_QUANT] = "linear_quant",
    [KITE_OP_ACTIVATION_BACKWARD] = "activation_backward",
    [KITE_OP_GATED_BACKWARD] = "gated_backward",
    [KITE_OP_RMS_NORM_BACKWARD] = "rms_norm_backward",
    [KITE_OP_LAYER_NORM_BACKWARD] = "layer_norm_backward",
    [KITE_OP_ROPE_BACKWARD] = "rope_backward",
    [KITE_OP_SOFTMAX_BACKWARD] = "softmax_backward",
    [KITE_OP_EMBEDDING_BACKWARD] = "embedding_backward",
    [KITE_OP_CROSS_ENTROPY] = "cross_entropy",
    [KITE_OP_CROSS_ENTROPY_BACKWARD] = "cross_entropy_backward",
    [KITE_OP_FUSED_LINEAR_CROSS_ENTROPY] = "fused_linear_cross_entropy",
    [KITE_OP_ARGMAX] = "argmax",
    [KITE_OP_SAMPLE] = "sample",
    [KITE_OP_APPLY_PENALTIES] = "apply_penalties",
    [KITE_OP_LOGPROBS] = "logprobs",
    [KITE_OP_LINEAR_WQ4] = "linear_wq4",
    [KITE_OP_ALL_REDUCE] = "all_reduce",
    [KITE_OP_ALL_GATHER] = "all_gather",
    [KITE_OP_REDUCE_SCATTER] = "reduce_scatter",
    [KITE_OP_ALL_REDUCE_ADD_RMS_NORM] = "all_reduce_add_rms_norm",
};

const char *kite_op_name(kite_op op) {
  if ((int)op < 0 || op >= KITE_OP_COUNT) return NULL;
  return g_op_names[op];
}

int kite_op_from_name(const char *name) {
  if (!name) return -1;
  for (int i = 0; i < KITE_OP_COUNT; i++)
    if (g_op_names[i] && strcmp(g_op_names[i], name) == 0) return i;
  return -1;
}

const char *kite_dtype_name(kite_dtype t) {
  switch (t) {
  case KITE_DTYPE_F32:
    return "f32";
  case KITE_DTYPE_F16:
    return "f16";
  case KITE_DTYPE_BF16:
    return "bf16";
  case KITE_DTYPE_I32:
    return "i32";
  case KITE_DTYPE_I8:
    return "i8";
  case KITE_DTYPE_F64:
    return "f64";
  case KITE_DTYPE_U8:
    return "u8";
  case KITE_DTYPE_FP8_E4M3:
    return "fp8_e4m3";
  case KITE_DTYPE_I64:
    return "i64";
  case KITE_DTYPE_COUNT:
    break;
  }
  return "?";
}

size_t kite_dtype_size(kite_dtype t) {
  switch (t) {
  case KITE_DTYPE_F32:
    return 4;
  case KITE_DTYPE_F16:
    return 2;
  case KITE_DTYPE_BF16:
    return 2;
  case KITE_DTYPE_I32:
    return 4;
  case KITE_DTYPE_I8:
    return 1;
  case KITE_DTYPE_F64:
    return 8;
  case KITE_DTYPE_U8:
    return 1;
  case KITE_DTYPE_FP8_E4M3:
    return 1;
  case KITE_DTYPE_I64:
    return 8;
  case KITE_DTYPE_COUNT:
    break;
  }
  return 0;
}

/* DLPack's device types by name, for display and for "--device cuda:0" style parsing. */
const char *kite_device_name(DLDeviceType t) {
  /* on the int: newer DLPack headers (PyTorch's) add device types that are "unknown" here */
  switch ((int)t) {
  case kDLCPU:
    return "cpu";
  case kDLCUDA:
    return "cuda";
  case kDLCUDAHost:
    return "cuda_host";
  case kDLOpenCL:
    return "opencl";
  case kDLVulkan:
    return "vulkan";
  case kDLMetal:
    return "metal";
  case kDLVPI:
    return "vpi";
  case kDLROCM:
    return "rocm";
  case kDLROCMHost:
    return "rocm_host";
  case kDLExtDev:
    return "ext_dev";
  case kDLCUDAManaged:
    return "cuda_managed";
  }
  return "unknown";
}
