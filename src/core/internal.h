/*
 * Internal core API shared by src/core and the op front-ends in src/ops. Not installed.
 */
#ifndef KITE_CORE_INTERNAL_H
#define KITE_CORE_INTERNAL_H

#include <stdbool.h>

#include "kite/backend.h"

#define KITE_MAX_DIMS 8

/* ---- errors (error.c) ---------------------------------------------------------------------- */
/* kite_set_error is public (backend.h). Clears the thread-local message at the start of a call. */
void kite_clear_error(void);

/* ---- library init (init.c) ----------------------------------------------------------------- */
/* Registers built-in backends, reads KITE_KERNELS / KITE_LOG, auto-loads plugins. Idempotent and
 * thread-safe; every public entry point calls it first. */
void kite_init(void);

/* Generated from KITE_BUILTIN_BACKENDS (cmake/builtin_backends.c.in); ends with {NULL, NULL}. */
typedef struct kite_builtin_backend {
  const char *name;
  kite_status (*init)(void);
} kite_builtin_backend;
extern const kite_builtin_backend kite_builtin_backends[];

/* ---- dispatch (dispatch.c) ----------------------------------------------------------------- */
/* Picks the kernel for (op, ctx device type, dtype) and these args, then runs it.
 * Errors: UNSUPPORTED naming the op, dtype and why each candidate was rejected; the pin's reason
 * when the op is pinned. */
kite_status kite_dispatch(kite_ctx *ctx, kite_op op, kite_dtype dtype, const void *args);

/* Makes a failed kernel's status a kite_status with a message: a value outside kite_status becomes
 * INTERNAL (keeping the kernel's message after it), and a status without a message gets one naming
 * the op and the kernel. s != KITE_OK; the error message was cleared before the kernel ran. For
 * every caller that runs a kernel (dispatch, direct runs). */
kite_status kite_kernel_failed(const char *backend, const kite_kernel *k, kite_status s);
/* The name of the registered backend kernel k belongs to ("?" when k is not registered). */
const char *kite_kernel_backend_name(const kite_kernel *k);

/* The backend serving memory for a device type (NULL when none). */
const kite_backend *kite_memory_backend(DLDeviceType t);
/* The backend providing communicators for a device type (kite_backend.comm_create; NULL when
 * none). */
const kite_backend *kite_comm_backend(DLDeviceType t);
/* The same, falling back on the core's host memory for kDLCPU (host_memory.c). */
const kite_backend *kite_device_memory(DLDeviceType t);

/* ---- tensor validation (tensor.c) ---------------------------------------------------------- *
 * Every helper sets an error message "<op>: <arg>: <problem>" and returns INVALID_ARG (or
 * UNSUPPORTED for a dtype kite does not know) on failure. */

/* A validated tensor: data includes byte_offset, strides are filled in (compact when NULL). */
typedef struct kite_tensor {
  void *data;
  kite_dtype dtype;
  int ndim;
  int64_t shape[KITE_MAX_DIMS];
  int64_t strides[KITE_MAX_DIMS];
  int64_t numel;
} kite_tensor;

/* Checks t: non-NULL, 1 <= ndim <= KITE_MAX_DIMS, non-negative
 * shape, non-negative strides, numel and byte extent without int64 overflow, data non-NULL when
 * numel > 0, device equal to the ctx's, dtype known to kite. Fills *out. */
kite_status kite_tensor_check(const kite_ctx *ctx, const char *op, const char *arg,
                              const DLTensor *t, kite_tensor *out);

/* Requires t->dtype to be one of f32/f16/bf16 (UNSUPPORTED otherwise: no kernel runs it). */
kite_status kite_tensor_require_float(const char *op, const char *arg, const kite_tensor *t);
/* Requires the exact dtype. */
kite_status kite_tensor_require_dtype(const char *op, const char *arg, const kite_tensor *t,
                                      kite_dtype want);
/* Requires the exact rank. */
kite_status kite_tensor_require_ndim(const char *op, const char *arg, const kite_tensor *t,
                                     int ndim);

/* Views t as [rows, cols]: cols = last dim (must be unit-stride unless cols <= 1), rows = product
 * of the leading dims, which must collapse into one stride (row_stride). A 1-d tensor is one row.
 * Errors when the leading dims do not collapse or the last dim is not unit-stride. */
kite_status kite_tensor_rows(const char *op, const char *arg, const kite_tensor *t, int64_t *rows,
                             int64_t *cols, int64_t *row_stride);

/* Same leading shape (all dims but the last). */
bool kite_tensor_same_lead(const kite_tensor *a, const kite_tensor *b);
kite_status kite_tensor_require_same_shape(const char *op, const char *arg, const kite_tensor *t,
                                           const kite_tensor *ref_t, const char *ref_arg);

/* The shape as "[2, 3, 4]" into buf (for messages). */
const char *kite_shape_str(const kite_tensor *t, char *buf, size_t n);

/* -- more validation helpers for the op front-ends (tensor.c) -- */
/* NULL ctx -> INVALID_ARG "<op>: ctx is NULL". */
kite_status kite_check_ctx(const kite_ctx *ctx, const char *op);
/* The start of every op front-end: the thread's error cleared, the library initialized, ctx
 * checked (kite_check_ctx). */
static inline kite_status kite_op_begin(const kite_ctx *ctx, const char *op) {
  kite_clear_error();
  kite_init();
  return kite_check_ctx(ctx, op);
}
/* Requires compact row-major strides (dims of size 1 may have any stride): for tensors handed to
 * kernels as a bare pointer (weights, ids, positions, caches). */
kite_status kite_tensor_require_compact(const char *op, const char *arg, const kite_tensor *t);
/* Requires distinct elements at distinct addresses (no zero or overlapping strides): for every
 * tensor a kernel writes, so that threads never race on one element. */
kite_status kite_tensor_require_no_overlap(const char *op, const char *arg, const kite_tensor *t);
/* Requires the byte ranges of t and other not to intersect. */
kite_status kite_tensor_require_disjoint(const char *op, const char *arg, const kite_tensor *t,
                                         const kite_tensor *other, const char *other_arg);

/* Row-wise ops, x[..., n] -> y[..., n / x_per_y] (activations, softmax, norms: 1; gated: 2):
 * x and y checked, x float, y of x's dtype, same leading dims, both viewed as rows, y's elements
 * distinct. */
typedef struct kite_rowwise {
  kite_dtype dtype;
  int64_t rows, x_cols, y_cols;
  const void *x;
  int64_t x_stride;
  void *y;
  int64_t y_stride;
  kite_tensor xt, yt; /* the checked tensors, for further checks */
} kite_rowwise;
kite_status kite_check_rowwise(const kite_ctx *ctx, const char *op, const DLTensor *x,
                               const DLTensor *y, int x_per_y, kite_rowwise *out);
/* The fields every row-wise args struct takes from a kite_rowwise v (op, dtype, rows, cols = x's
 * columns, x and y with their row strides), for its designated initializer. */
#define KITE_ROWWISE_FIELDS(op_id, v)                                                              \
  .op = (op_id), .dtype = (v).dtype, .rows = (v).rows, .cols = (v).x_cols, .x = (v).x,             \
  .x_stride = (v).x_stride, .y = (v).y, .y_stride = (v).y_stride
/* The checks of kite_add_rms_norm (and add_layer_norm with b) under the name `op` for messages,
 * into *out with out->op KITE_OP_ADD_RMS_NORM (norm.c; the fused collective shares them). */
kite_status kite_add_norm_check(kite_ctx *ctx, const char *op, const DLTensor *x,
                                DLTensor *residual, const DLTensor *w, const DLTensor *b, float eps,
                                float offset, kite_norm_pos pos, DLTensor *y, kite_norm_args *out);
/* The start of a row-wise op's front-end: clears the error, initializes the library, checks ctx
 * and kite_check_rowwise(x, y, x_per_y) under the name op. */
kite_status kite_rowwise_begin(kite_ctx *ctx, const char *op, const DLTensor *x, const DLTensor *y,
                               int x_per_y, kite_rowwise *out);
/* A float tensor viewed as [rows, cols] (kite_tensor_rows). */
kite_status kite_tensor_check_float_rows(const kite_ctx *ctx, const char *op, const char *arg,
                                         const DLTensor *t, kite_tensor *out, int64_t *rows,
                                         int64_t *cols, int64_t *stride);
/* A tensor of ref_t's shape and dtype, viewed as rows (the last dim unit-stride). */
kite_status kite_tensor_check_like(const kite_ctx *ctx, const char *op, const char *arg,
                                   const DLTensor *t, const kite_tensor *ref_t, const char *ref_arg,
                                   kite_tensor *out, int64_t *stride);
/* Whether a and b are the same view: same address, shape and strides. */
bool kite_tensor_same_view(const kite_tensor *a, const kite_tensor *b);
/* An output whose elements are distinct and that may share memory with `alias` only by being
 * exactly it (in place); any other overlap with alias, and any overlap with `other`, is an
 * error. alias and other may be NULL. */
kite_status kite_tensor_check_out(const char *op, const char *arg, const kite_tensor *out,
                                  const kite_tensor *alias, const char *alias_arg,
                                  const kite_tensor *other, const char *other_arg);
/* An optional compact vector [n] of dtype t: *data is NULL when v is, else v's data (vt filled).
 * n_is (or NULL) says in the length error what n is: "x's last dim". */
kite_status kite_tensor_check_vector(const kite_ctx *ctx, const char *op, const char *arg,
                                     const DLTensor *v, kite_dtype t, int64_t n, const char *n_is,
                                     kite_tensor *vt, const void **data);
/* Ids or targets [T]: int32, compact. */
kite_status kite_tensor_check_ids(const kite_ctx *ctx, const char *op, const char *arg,
                                  const DLTensor *ids, kite_tensor *it);
/* The checks activation_backward and gated_backward share (activation.c), in their order: ctx;
 * act of the op's kind (KITE_ACTIVATION_OPS or KITE_GATED_OPS); x and dy float rows of one dtype.
 * Fills *a but for dx, dx_stride and limit; xt, dyt: the checked x and dy. */
kite_status kite_act_bwd_check(kite_ctx *ctx, kite_op opid, kite_op act, const DLTensor *x,
                               const DLTensor *dy, kite_tensor *xt, kite_tensor *dyt,
                               kite_act_bwd_args *a);
/* -- end of front-end validation helpers -- */

/* True when the tensors of ctx's calls live in host memory that the front-end may read now (the
 * memory backend of ctx's device says so: kite_backend.host_memory): index values (block tables,
 * lengths, slots, group sizes) are then checked before any kernel runs. */
static inline bool kite_indices_on_host(const kite_ctx *ctx);

/* ---- ctx (ctx.c) --------------------------------------------------------------------------- */
struct kite_dispatch_cache; /* per-ctx selection cache, owned by registry.c */
struct kite_ctx {
  kite_ctx_params p;
  const kite_backend *mem;          /* memory operations for p.device */
  struct kite_workspace *workspace; /* NULL until a kernel asks for scratch memory */
  void *workspace_addr;             /* its device address, for kernels (kite_device_address) */
  size_t workspace_bytes;
  struct kite_dispatch_cache *cache;
  /* Recording a graph (graph.c): p.stream is the backend's recording stream until
   * kite_graph_end, which puts stream_saved back. */
  bool recording;
  void *stream_saved;
};
/* A ctx's scratch memory, shared with the graphs recorded while it was the ctx's: a recorded
 * call holds its address, so a graph keeps it alive (refs) after the ctx has grown a larger one. */
struct kite_workspace {
  const kite_backend *mem;
  int device_id;
  void *handle; /* what mem->alloc returned */
  _Atomic int refs;
};
/* Drops one reference; the last frees the memory. NULL is a no-op. */
void kite_workspace_release(struct kite_workspace *w);
/* INVALID_ARG naming fn when ctx is recording a graph (calls that wait on the host). */
kite_status kite_ctx_not_recording(const kite_ctx *ctx, const char *fn);
void kite_dispatch_cache_free(struct kite_dispatch_cache *c);
/* The device address kernels get for the memory at byte_offset in data (what DLTensor.data
 * holds) on ctx's device, spanning bytes from there: the memory backend's tensor_address where
 * it has one, else data + byte_offset. Errors: INVALID_ARG with a message naming no op (the
 * caller prefixes it): the backend's, or the range running past the end of the address space. */
kite_status kite_device_address(const kite_ctx *ctx, void *data, uint64_t byte_offset,
                                uint64_t bytes, uintptr_t *out);

/* ---- comm (comm.c) ------------------------------------------------------------------------- */
struct kite_comm {
  kite_comm_ref ref; /* backend, handle, nranks, rank */
  DLDevice device;   /* the device of the ctx it was created with */
};

static inline bool kite_indices_on_host(const kite_ctx *ctx) {
  return ctx->mem->host_memory;
}

#endif /* KITE_CORE_INTERNAL_H */
