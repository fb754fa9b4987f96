/*
 * The bottom of the CUDA plugin's host code, used by every .cu file, nccl.c and cuda_plugin.c:
 * making a ctx's device current and fetching its stream (cuda_begin), turning CUDA errors into
 * kite statuses, names for messages, and the dtype check every kernel's supports() starts with.
 * It calls nothing else of the plugin.
 */
#include <cuda_runtime_api.h>

#include "cuda_backend.h"

const char *cuda_op_str(kite_op op) {
  const char *s = kite_op_name(op);
  return s ? s : "unknown op";
}

const char *cuda_dtype_str(kite_dtype t) {
  const char *s = (unsigned)t < KITE_DTYPE_COUNT ? kite_dtype_name(t) : NULL;
  return s ? s : "unknown dtype";
}

/* cudaGetLastError also clears the error, so that one failure does not blame later calls. */
kite_status cuda_device_error(const char *op, const char *what, int e) {
  (void)cudaGetLastError();
  return kite_set_error(KITE_ERR_DEVICE, "%s: %s: %s", op, what,
                        cudaGetErrorString((cudaError_t)e));
}

/* cudaSetDevice costs little, but skipping it when the device is current costs less. */
kite_status cuda_use_device(const char *op, int device_id) {
  int current = -1;
  cudaError_t e = cudaGetDevice(&current);
  if (e == cudaSuccess && current == device_id) return KITE_OK;
  e = cudaSetDevice(device_id);
  return e == cudaSuccess ? KITE_OK : cuda_device_error(op, "cudaSetDevice", e);
}

kite_status cuda_begin(kite_ctx *ctx, const char *op, void **stream) {
  *stream = kite_ctx_stream(ctx);
  return cuda_use_device(op, kite_ctx_device(ctx).device_id);
}

bool cuda_float_dtype(kite_dtype t, const char **why) {
  if (t == KITE_DTYPE_F32 || t == KITE_DTYPE_F16 || t == KITE_DTYPE_BF16) return true;
  *why = "dtype must be f32, f16 or bf16";
  return false;
}

CUDA_SUPPORTS(cuda_float_supports) {
  (void)k;
  return cuda_float_dtype(kite_args_head_of(args)->dtype, why);
}

kite_status cuda_check_launch(const char *op, const char *variant) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return KITE_OK;
  return kite_set_error(KITE_ERR_DEVICE, "%s: cuda.%s: launch failed: %s", op, variant,
                        cudaGetErrorString(e));
}
