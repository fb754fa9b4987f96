/*
 * The OpenCL backend's internals, shared by its files:
 *   ocl_device.c   platforms, devices, one cl_context / default queue / program per device
 *                  (built at first use, cached on disk), error messages
 *   ocl_memory.c   the address ranges behind cl_mem buffers (tensor_address), the memory
 *                  ops, timers, kite_opencl_device
 *   ocl_ops.c      the host side of each kernel: resolve buffers, set arguments, enqueue
 *   ocl_linear.c   linear through CLBlast
 *   ocl_plugin.c   the kernel table and kite_plugin_init
 */
#ifndef KITE_OCL_INTERNAL_H
#define KITE_OCL_INTERNAL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <pthread.h>

#include "kite/backend.h"

/* The kernels of the embedded program (the .cl files of kernels/), in the order of
 * ocl_kernel_names. */
typedef enum ocl_kernel_id {
  OCL_K_ACT,
  OCL_K_GATED,
  OCL_K_EMBEDDING,
  OCL_K_STORE_KV,
  OCL_K_ROPE,
  OCL_K_TO_F32,
  OCL_K_BIAS_STORE,
  OCL_K_NORM,
  OCL_K_SOFTMAX,
  OCL_K_PAGED_DECODE,
  OCL_K_SAMPLE,
  OCL_K_COUNT
} ocl_kernel_id;

/* Work-group size of the row kernels (a power of two, <= the device's limit); the program is
 * built with it as KITE_GROUP. paged_decode's groups are always PAGED_GROUP (64) items. */
#define OCL_ROW_GROUP_MAX 256
#define OCL_PAGED_GROUP 64

typedef struct ocl_dev {
  cl_platform_id platform;
  cl_device_id id;
  char name[256];
  size_t row_group;
  /* built at first use under lock */
  pthread_mutex_t lock;
  int ready;
  cl_context context;
  cl_command_queue queue; /* in order, profiling on: the ctx's queue when its stream is NULL */
  cl_program program;
  cl_kernel kernels[OCL_K_COUNT];
} ocl_dev;

/* ---- ocl_device.c ---- */
int ocl_device_count(void);
/* Device id, its context, queue and program ready; errors name op. */
kite_status ocl_device_get(int device_id, const char *op, ocl_dev **out);
/* A kite status (DEVICE, or OUT_OF_MEMORY for an allocation failure) naming op, the call and
 * OpenCL's error name. */
kite_status ocl_error(const char *op, const char *call, cl_int e);
const char *ocl_op_str(kite_op op);

/* ---- ocl_memory.c ---- */
kite_status ocl_alloc(const kite_backend *b, int device_id, size_t bytes, void **out);
void ocl_free(const kite_backend *b, int device_id, void *ptr);
kite_status ocl_copy(const kite_backend *b, int device_id, void *dst, const void *src, size_t bytes,
                     kite_copy_kind kind, void *stream);
kite_status ocl_memset(const kite_backend *b, int device_id, void *dst, int value, size_t bytes,
                       void *stream);
kite_status ocl_synchronize(const kite_backend *b, int device_id, void *stream);
/* kite_backend.tensor_address: (cl_mem, byte_offset) -> the address kernels get; a caller's
 * cl_mem is entered at first sight. */
kite_status ocl_tensor_address(const kite_backend *b, int device_id, void *data,
                               uint64_t byte_offset, uint64_t bytes, void **out);
kite_status ocl_timer_start(const kite_backend *b, int device_id, void *stream, void **timer);
kite_status ocl_timer_stop(const kite_backend *b, int device_id, void *stream, void *timer,
                           double *seconds);
/* The buffer and byte offset behind a device address of a tensor (NULL gives a NULL buffer). */
typedef struct ocl_buf {
  cl_mem mem;
  cl_ulong off;
} ocl_buf;
kite_status ocl_resolve(const char *op, const char *arg, const void *p, ocl_buf *out);
/* The queue of a call on ctx: its stream, or the device's default queue. */
cl_command_queue ocl_queue(kite_ctx *ctx, ocl_dev *d);

/* ---- ocl_ops.c: one launch, arguments set in order under the device's lock ---- */
typedef struct ocl_launch {
  ocl_dev *d;
  cl_kernel k;
  cl_command_queue q;
  cl_uint n;
  cl_int err;
  kite_status st;
  const char *op;
} ocl_launch;
kite_status ocl_begin(ocl_launch *L, kite_ctx *ctx, kite_op op, ocl_kernel_id kid);
void ocl_arg_buf(ocl_launch *L, const char *name, const void *p); /* two args: mem, offset */
void ocl_arg_i32(ocl_launch *L, int v);
void ocl_arg_i64(ocl_launch *L, int64_t v);
void ocl_arg_u64(ocl_launch *L, uint64_t v);
void ocl_arg_f32(ocl_launch *L, float v);
void ocl_arg_local(ocl_launch *L, size_t bytes);
/* Enqueues over global[dims] in groups of local[dims] (global rounded up) and unlocks. */
kite_status ocl_end(ocl_launch *L, cl_uint dims, const size_t *global, const size_t *local);

#define OCL_RUN(name) kite_status name(const kite_kernel *k, kite_ctx *ctx, const void *args)
#define OCL_SUPPORTS(name) bool name(const kite_kernel *k, const void *args, const char **why)
OCL_SUPPORTS(ocl_float_supports);
OCL_SUPPORTS(ocl_paged_supports);
OCL_RUN(ocl_act_run);
OCL_RUN(ocl_gated_run);
OCL_RUN(ocl_norm_run);
OCL_RUN(ocl_softmax_run);
OCL_RUN(ocl_embedding_run);
OCL_RUN(ocl_store_kv_run);
OCL_RUN(ocl_rope_run);
OCL_RUN(ocl_paged_decode_run);
OCL_RUN(ocl_sample_run);
/* ocl_linear.c */
OCL_RUN(ocl_linear_run);
/* y = src (f32 compact, or NULL: y itself when from_y, else 0) + bias, rounded to y's dtype */
kite_status ocl_bias_store(kite_ctx *ctx, kite_op op, kite_dtype dt, int64_t rows, int64_t cols,
                           const void *src, const void *bias, void *y, int64_t ys, int from_y);

#endif /* KITE_OCL_INTERNAL_H */
