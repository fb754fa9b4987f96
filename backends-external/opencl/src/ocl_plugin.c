/*
 * The OpenCL backend as a plugin (libkite-opencl.so), built out of tree against an installed
 * kite: the kernel table and kite_plugin_init. Every other op has no OpenCL kernel and is
 * UNSUPPORTED on an OpenCL ctx (kite list shows which ops this backend serves).
 *
 * Loading never fails for want of a device: without an OpenCL platform, device_count is 0 and
 * the kernels are listed as not running here. Kernels are compiled at a device's first use, not
 * at load (kite list and processes that never touch OpenCL pay nothing).
 */
#include "ocl_internal.h"

#define EXPORT __attribute__((visibility("default")))

enum { PRIORITY_GENERIC = 10, PRIORITY_LIBRARY = 50 };

#define KERNEL(op_id, name, prio, supports_fn, run_fn, desc)                                       \
  {                                                                                                \
    .op = (op_id), .variant = (name), .priority = (prio), .features = 0, .features_str = "",       \
    .supports = (supports_fn), .run = (run_fn), .description = (desc), .userdata = NULL            \
  }
#define GENERIC(op_id, run_fn, desc)                                                               \
  KERNEL(op_id, "generic", PRIORITY_GENERIC, ocl_float_supports, run_fn, desc)

static const kite_kernel ocl_kernels[] = {
/* every activation and gated activation of backend.h's lists */
#define OCL_ACT_ROW(ID, name) GENERIC(KITE_OP_##ID, ocl_act_run, #name ", an item per element"),
#define OCL_GATED_ROW(ID, name, AID, aname)                                                        \
  GENERIC(KITE_OP_##ID, ocl_gated_run, #aname "(gate) * up, an item per output"),
    KITE_ACTIVATION_OPS(OCL_ACT_ROW) KITE_GATED_OPS(OCL_GATED_ROW)
#undef OCL_ACT_ROW
#undef OCL_GATED_ROW
        GENERIC(KITE_OP_RMS_NORM, ocl_norm_run, "a work-group per row, f32 statistics"),
    GENERIC(KITE_OP_ADD_RMS_NORM, ocl_norm_run, "fused add, a work-group per row"),
    GENERIC(KITE_OP_LAYER_NORM, ocl_norm_run, "a work-group per row, two-pass variance"),
    GENERIC(KITE_OP_ADD_LAYER_NORM, ocl_norm_run, "fused add, a work-group per row"),
    GENERIC(KITE_OP_ROPE, ocl_rope_run, "neox/gptj, an item per pair, q and k in one launch"),
    GENERIC(KITE_OP_ROPE_BACKWARD, ocl_rope_run, "rotation by -theta, an item per pair"),
    GENERIC(KITE_OP_SOFTMAX, ocl_softmax_run, "a work-group per row, three passes"),
    GENERIC(KITE_OP_EMBEDDING, ocl_embedding_run, "an item per element, zeros for bad ids"),
    GENERIC(KITE_OP_STORE_KV, ocl_store_kv_run, "k and v in one launch, bad slots skipped"),
    KERNEL(KITE_OP_PAGED_DECODE, "generic", PRIORITY_GENERIC, ocl_paged_supports,
           ocl_paged_decode_run, "a work-group per query head, 64 keys per step, online softmax"),
    KERNEL(KITE_OP_LINEAR, "clblast", PRIORITY_LIBRARY, ocl_float_supports, ocl_linear_run,
           "CLBlast Sgemm (f16/bf16 converted to f32 first), bias in a second launch"),
    GENERIC(KITE_OP_ARGMAX, ocl_sample_run, "a work-group per row"),
    GENERIC(KITE_OP_SAMPLE, ocl_sample_run,
            "a work-group per row: bisection for top-k / top-p thresholds, exponential race"),
};

static int ocl_count(const kite_backend *b) {
  (void)b;
  return ocl_device_count();
}

static const kite_backend ocl_backend = {
    .name = "opencl",
    .device_type = kDLOpenCL,
    .description = "OpenCL C kernels and CLBlast, any OpenCL 1.2 device",
    .device_count = ocl_count,
    .features_present = NULL,
    .alloc = ocl_alloc,
    .free = ocl_free,
    .copy = ocl_copy,
    .memset = ocl_memset,
    .synchronize = ocl_synchronize,
    .kernels = ocl_kernels,
    .num_kernels = sizeof ocl_kernels / sizeof ocl_kernels[0],
    .userdata = NULL,
    .timer_start = ocl_timer_start,
    .timer_stop = ocl_timer_stop,
    .host_memory = false,
    .tensor_address = ocl_tensor_address,
};

EXPORT const uint32_t kite_plugin_abi_version = KITE_BACKEND_ABI_VERSION;

EXPORT kite_status kite_plugin_init(uint32_t host_abi_version);
EXPORT kite_status kite_plugin_init(uint32_t host_abi_version) {
  if (host_abi_version != KITE_BACKEND_ABI_VERSION)
    return kite_set_error(KITE_ERR_PLUGIN, "opencl: host backend ABI %u, plugin built for %u",
                          host_abi_version, (unsigned)KITE_BACKEND_ABI_VERSION);
  return kite_backend_register(&ocl_backend);
}
