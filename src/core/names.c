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
#define KITE_OP(ID, name, ...) [KITE_OP_##ID] = #name,
#define KITE_FN(...)
#include "kite/ops.def"
#undef KITE_OP
#undef KITE_FN
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
