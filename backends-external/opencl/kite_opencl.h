/*
 * kite's OpenCL backend (libkite-opencl.so): what a caller needs beyond kite.h to hand kite its
 * OpenCL buffers and queues. Link the installed libkite-opencl.so, the file kite loads from
 * beside libkite.so (or look the functions up with dlsym in the plugin kite loaded): a second copy
 * of the library keeps an address table of its own, and its addresses mean nothing to kite.
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
 * Tensors: DLTensor.data of a kDLOpenCL tensor is a kite device address, not a cl_mem: kite's op
 * front-ends add byte_offset to data and pass plain addresses to kernels, which a cl_mem handle
 * cannot survive. kite_malloc returns such an address; a cl_mem of your own gets one from
 * kite_opencl_wrap. byte_offset and strides then work as DLPack says.
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

/* A kite device address for buffer (a cl_mem of device device_id's context), to put in
 * DLTensor.data: the whole buffer, from offset 0 to its CL_MEM_SIZE. The buffer is retained
 * until kite_opencl_unwrap (or kite_free on the address) releases it. Wrapping a buffer twice
 * gives two addresses. Errors: INVALID_ARG (NULL, a buffer of another context), DEVICE. */
KITE_API kite_status kite_opencl_wrap(int device_id, cl_mem buffer, void **data);

/* Forgets an address kite_opencl_wrap gave and releases the buffer once.
 * Errors: INVALID_ARG (not such an address). */
KITE_API kite_status kite_opencl_unwrap(void *data);

/* The buffer and byte offset behind any kite device address (one from kite_malloc or
 * kite_opencl_wrap, plus an offset into it), for your own kernels. The buffer is not retained.
 * Errors: INVALID_ARG (NULL, an address of no buffer). */
KITE_API kite_status kite_opencl_buffer(const void *data, cl_mem *buffer, size_t *offset);

#ifdef __cplusplus
}
#endif

#endif /* KITE_OPENCL_H */
