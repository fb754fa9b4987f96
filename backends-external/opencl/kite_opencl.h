/*
 * kite's OpenCL backend (libkite-opencl.so): what a caller needs beyond kite.h to hand kite its
 * OpenCL buffers and queues. Link the installed libkite-opencl.so, the file kite loads from
 * beside libkite.so (or look the function up with dlsym in the plugin kite loaded): a second copy
 * of the library makes contexts of its own, and buffers of those are refused by kite.
 *
 * Devices: every OpenCL device of every platform, GPUs and accelerators first, then the others
 * (CPU drivers such as PoCL), each group in platform order; a kite_ctx on device {kDLOpenCL, i}
 * uses device i. The backend makes one cl_context per device; every buffer and
 * queue used with kite must belong to it (kite_opencl_device gives it).
 *
 * Queues: kite_ctx_params.stream is a cl_command_queue of that context (in order), or NULL for
 * the backend's default queue of the device (which has profiling on, for kite bench's device
 * timer). Kernels are enqueued on it and never waited for, except where kite.h says an op
 * synchronizes (kite_memcpy, kite_ctx_synchronize).
 *
 * Tensors, as DLPack says: DLTensor.data of a kDLOpenCL tensor is a cl_mem (a buffer of that
 * context, not a sub-buffer or an image) and byte_offset the view's offset in it; strides as
 * usual. kite_malloc returns a new cl_mem, kite_free releases it; a caller's own cl_mem is used
 * as it is, with no call to enter it: kite neither retains nor releases it, and forgets it when
 * OpenCL destroys it. kite_memcpy_offset copies between (cl_mem, offset) pairs and host memory. A
 * tensor must lie inside its buffer (byte_offset plus its extent <= CL_MEM_SIZE): otherwise, or
 * when data is no cl_mem of the ctx's context, the op fails with INVALID_ARG naming the argument.
 */
#ifndef KITE_OPENCL_H
#define KITE_OPENCL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include "kite/kite.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Device device_id's context, device and default queue (each pointer may be NULL); the first
 * call builds the backend's kernels for the device.
 * Errors: INVALID_ARG (no such device), DEVICE (OpenCL failed: the message names the call). */
KITE_API kite_status kite_opencl_device(int device_id, cl_context *context, cl_device_id *device,
                                        cl_command_queue *queue);

#ifdef __cplusplus
}
#endif

#endif /* KITE_OPENCL_H */
