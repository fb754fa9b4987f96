/*
 * Device memory. A kDLOpenCL tensor is (cl_mem, byte_offset), as DLPack says, but kernels get
 * one address per tensor (backend.h, tensor_address) and the front-ends compare those addresses
 * for overlaps. So every buffer gets a range of addresses in a span of virtual address space
 * reserved here (PROT_NONE: never host memory, never touched): the address of (mem, offset) is
 * the start of mem's range + offset, and a kernel resolves an address back to (cl_mem, offset).
 * A buffer enters the table when kite_malloc creates it or, for a caller's own cl_mem, when kite
 * first sees it; it leaves when OpenCL destroys it (clSetMemObjectDestructorCallback), so kite
 * never retains a caller's buffer and a later buffer reusing the handle is entered afresh.
 * Ranges are page-aligned with a free page between them, so an address past one buffer's end
 * resolves to nothing rather than to its neighbour.
 */
#define _GNU_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE, process_vm_readv */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "kite_opencl.h"
#include "ocl_internal.h"

#define PAGE ((uintptr_t)4096)

typedef struct range {
  uintptr_t addr;
  size_t size; /* the buffer's bytes (what kite_malloc was asked for) */
  size_t span; /* bytes of address space taken, page-rounded */
  cl_mem mem;
  int device_id; /* whose context the buffer belongs to */
} range;

/* A handle's range start, for looking handles up (sorted by mem). */
typedef struct handle {
  cl_mem mem;
  uintptr_t addr;
  uintptr_t gen; /* which entering of mem this is: a driver reuses a released handle's value */
} handle;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t g_base, g_end; /* the reserved span */
static range *g_ranges;         /* sorted by addr */
static handle *g_handles;       /* the same buffers, sorted by mem */
static size_t g_n, g_cap;
static uintptr_t g_gen; /* the last entering's number */

static kite_status reserve_locked(void) {
  if (g_base) return KITE_OK;
  /* 1 TiB of addresses, no memory: PROT_NONE and MAP_NORESERVE; smaller where refused */
  for (size_t bytes = (size_t)1 << 40; bytes >= ((size_t)1 << 32); bytes >>= 2) {
    void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
      g_base = (uintptr_t)p;
      g_end = g_base + bytes;
      return KITE_OK;
    }
  }
  return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "opencl: cannot reserve an address span");
}

/* The index in g_handles where mem is or would go; the caller holds g_lock. */
static size_t handle_at_locked(cl_mem mem) {
  size_t lo = 0, hi = g_n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if ((uintptr_t)g_handles[mid].mem < (uintptr_t)mem)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* The range holding p (p == its end allowed: an empty view), or -1; the caller holds g_lock. */
static long find_locked(uintptr_t p) {
  size_t lo = 0, hi = g_n;
  while (lo < hi) { /* the last range starting at or before p */
    size_t mid = (lo + hi) / 2;
    if (g_ranges[mid].addr <= p)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0) return -1;
  const range *r = &g_ranges[lo - 1];
  return p - r->addr <= r->size ? (long)(lo - 1) : -1;
}

/* mem's range, or NULL; the caller holds g_lock. */
static const range *range_of_locked(cl_mem mem) {
  const size_t h = handle_at_locked(mem);
  if (h == g_n || g_handles[h].mem != mem) return NULL;
  return &g_ranges[find_locked(g_handles[h].addr)];
}

/* Enters mem (size bytes) as a new range; the caller holds g_lock. */
static kite_status insert_locked(cl_mem mem, size_t size, int device_id, uintptr_t *gen) {
  kite_status s = reserve_locked();
  if (s != KITE_OK) return s;
  const size_t span = ((size ? size : 1) + PAGE - 1) / PAGE * PAGE + PAGE; /* + a free page */
  uintptr_t at = g_base;
  size_t i = 0;
  for (; i < g_n; i++) { /* first fit */
    if (g_ranges[i].addr - at >= span) break;
    at = g_ranges[i].addr + g_ranges[i].span;
  }
  if (g_end - at < span)
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "opencl: address span exhausted");
  if (g_n == g_cap) {
    const size_t cap = g_cap ? 2 * g_cap : 64;
    range *r = realloc(g_ranges, cap * sizeof *r);
    if (r) g_ranges = r;
    handle *h = r ? realloc(g_handles, cap * sizeof *h) : NULL;
    if (!h) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "opencl: out of host memory");
    g_handles = h;
    g_cap = cap;
  }
  memmove(&g_ranges[i + 1], &g_ranges[i], (g_n - i) * sizeof *g_ranges);
  g_ranges[i] = (range){at, size, span, mem, device_id};
  const size_t h = handle_at_locked(mem);
  memmove(&g_handles[h + 1], &g_handles[h], (g_n - h) * sizeof *g_handles);
  g_handles[h] = (handle){mem, at, *gen = ++g_gen};
  g_n++;
  return KITE_OK;
}

/* mem's range goes, if it is still the entering numbered gen (0: whichever). */
static void forget_gen(cl_mem mem, uintptr_t gen) {
  pthread_mutex_lock(&g_lock);
  const size_t h = handle_at_locked(mem);
  if (h < g_n && g_handles[h].mem == mem && (!gen || g_handles[h].gen == gen)) {
    const size_t i = (size_t)find_locked(g_handles[h].addr);
    memmove(&g_ranges[i], &g_ranges[i + 1], (g_n - i - 1) * sizeof *g_ranges);
    memmove(&g_handles[h], &g_handles[h + 1], (g_n - h - 1) * sizeof *g_handles);
    g_n--;
  }
  pthread_mutex_unlock(&g_lock);
}

/* OpenCL destroys a caller's buffer (called by the runtime, on any thread, possibly after the
 * driver has given the handle's value to a new buffer that kite has entered again: user holds
 * the entering's number, so only that one goes). */
static void CL_CALLBACK forget(cl_mem mem, void *user) {
  forget_gen(mem, (uintptr_t)user);
}

/* Enters mem (a buffer of size bytes) unless it is in already (two threads meeting a caller's
 * buffer first at once). A caller's buffer (watch) is forgotten when OpenCL destroys it; kite's
 * own (kite_malloc) when kite_free releases it. */
static kite_status enter(const char *op, cl_mem mem, size_t size, int device_id, int watch) {
  uintptr_t gen = 0;
  pthread_mutex_lock(&g_lock);
  const int known = range_of_locked(mem) != NULL;
  kite_status s = known ? KITE_OK : insert_locked(mem, size, device_id, &gen);
  pthread_mutex_unlock(&g_lock);
  if (s != KITE_OK || known || !watch) return s;
  cl_int e = clSetMemObjectDestructorCallback(mem, forget, (void *)gen);
  if (e != CL_SUCCESS) {
    forget_gen(mem, gen);
    return ocl_error(op, "clSetMemObjectDestructorCallback", e);
  }
  return KITE_OK;
}

/* Whether data may be a cl_mem of device d: its first word is readable (process_vm_readv fails
 * instead of faulting where it is not) and is the ICD dispatch table of d's context, as every
 * OpenCL object of one driver starts with it. Anything else (a host pointer, say) is refused
 * before OpenCL dereferences it. */
static int looks_like_mem(const ocl_dev *d, const void *data) {
  void *first = NULL;
  struct iovec local = {&first, sizeof first}, remote = {(void *)data, sizeof first};
  if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof first) return 0;
  return first == *(void *const *)d->context;
}

/* First sight of a caller's buffer: checked (a buffer of device d's context, not a sub-buffer)
 * and entered with its CL_MEM_SIZE. */
static kite_status enter_caller_buffer(ocl_dev *d, int device_id, cl_mem mem) {
  if (!looks_like_mem(d, mem))
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%p is not a cl_mem of OpenCL device %d (kDLOpenCL tensors hold a "
                          "cl_mem in data and the view's offset in byte_offset)",
                          (void *)mem, device_id);
  cl_context c = NULL;
  cl_mem_object_type type = 0;
  cl_mem parent = NULL;
  size_t size = 0;
  cl_int e = clGetMemObjectInfo(mem, CL_MEM_CONTEXT, sizeof c, &c, NULL);
  if (e == CL_SUCCESS) e = clGetMemObjectInfo(mem, CL_MEM_TYPE, sizeof type, &type, NULL);
  if (e == CL_SUCCESS)
    e = clGetMemObjectInfo(mem, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL);
  if (e == CL_SUCCESS) e = clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof size, &size, NULL);
  if (e != CL_SUCCESS) return ocl_error("opencl", "clGetMemObjectInfo", e);
  if (c != d->context)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "cl_mem %p is not of device %d's context (create it on the context "
                          "kite_opencl_device gives)",
                          (void *)mem, device_id);
  if (type != CL_MEM_OBJECT_BUFFER || parent)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "cl_mem %p is not a buffer (images and sub-buffers are not taken: pass "
                          "the buffer and the view's byte_offset)",
                          (void *)mem);
  return enter("opencl", mem, size, device_id, 1);
}

kite_status ocl_tensor_address(const kite_backend *b, int device_id, void *data,
                               uint64_t byte_offset, uint64_t bytes, void **out) {
  (void)b;
  cl_mem mem = data;
  for (int pass = 0;; pass++) {
    pthread_mutex_lock(&g_lock);
    const range *r = range_of_locked(mem);
    const uintptr_t addr = r ? r->addr : 0;
    const size_t size = r ? r->size : 0;
    const int owner = r ? r->device_id : device_id;
    pthread_mutex_unlock(&g_lock);
    if (owner != device_id)
      return kite_set_error(KITE_ERR_INVALID_ARG,
                            "cl_mem %p is a buffer of OpenCL device %d, not of device %d",
                            (void *)mem, owner, device_id);
    if (r) {
      /* an empty view addresses nothing, so its byte_offset may lie past the buffer's end (k of
       * a fused qkv with no tokens), as nothing checks it on a pointer device either: it gets
       * the buffer's end, aligned for any dtype */
      if (bytes == 0 && byte_offset > size) byte_offset = size / 64 * 64;
      size_t now = size;
      if ((byte_offset > size || bytes > size - byte_offset) && pass == 0 &&
          clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof now, &now, NULL) == CL_SUCCESS &&
          now != size) {
        /* a released buffer's handle value given to a new buffer before OpenCL told kite of
         * the release: the stale entry goes, the buffer is entered afresh */
        forget_gen(mem, 0);
        continue;
      }
      if (byte_offset > size || bytes > size - byte_offset)
        return kite_set_error(KITE_ERR_INVALID_ARG,
                              "byte_offset %llu + %llu bytes run past the end of cl_mem %p "
                              "(%zu bytes)",
                              (unsigned long long)byte_offset, (unsigned long long)bytes,
                              (void *)mem, size);
      *out = (void *)(addr + (uintptr_t)byte_offset);
      return KITE_OK;
    }
    if (pass > 1) /* entered, then gone again at once */
      return kite_set_error(KITE_ERR_INTERNAL, "opencl: cl_mem %p was not entered", data);
    ocl_dev *d;
    kite_status s = ocl_device_get(device_id, "opencl", &d);
    if (s == KITE_OK) s = enter_caller_buffer(d, device_id, mem);
    if (s != KITE_OK) return s;
  }
}

kite_status ocl_resolve(const char *op, const char *arg, const void *p, ocl_buf *out) {
  out->mem = NULL;
  out->off = 0;
  if (!p) return KITE_OK;
  pthread_mutex_lock(&g_lock);
  long i = find_locked((uintptr_t)p);
  if (i >= 0) {
    out->mem = g_ranges[i].mem;
    out->off = (cl_ulong)((uintptr_t)p - g_ranges[i].addr);
  }
  pthread_mutex_unlock(&g_lock);
  if (i < 0)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: %s: %p is no address of an OpenCL buffer kite knows", op, arg, p);
  return KITE_OK;
}

cl_command_queue ocl_queue(kite_ctx *ctx, ocl_dev *d) {
  void *s = kite_ctx_stream(ctx);
  return s ? (cl_command_queue)s : d->queue;
}

static cl_command_queue stream_queue(ocl_dev *d, void *stream) {
  return stream ? (cl_command_queue)stream : d->queue;
}

/* ---- the backend's memory operations ------------------------------------------------------- */

kite_status ocl_alloc(const kite_backend *b, int device_id, size_t bytes, void **out) {
  (void)b;
  *out = NULL;
  ocl_dev *d;
  kite_status s = ocl_device_get(device_id, "opencl: alloc", &d);
  if (s != KITE_OK) return s;
  cl_int e;
  cl_mem mem = clCreateBuffer(d->context, CL_MEM_READ_WRITE, bytes ? bytes : 256, NULL, &e);
  if (!mem) return ocl_error("alloc", "clCreateBuffer", e);
  if ((s = enter("alloc", mem, bytes, device_id, 0)) != KITE_OK) {
    clReleaseMemObject(mem);
    return s;
  }
  *out = mem; /* DLTensor.data: the cl_mem itself */
  return KITE_OK;
}

/* kite_free: the buffer's range goes now (the address is only read when a command is
 * enqueued, so commands already queued are unaffected), then its one reference: the driver may
 * give the handle's value to the next buffer at once. */
void ocl_free(const kite_backend *b, int device_id, void *ptr) {
  (void)b;
  (void)device_id;
  if (!ptr) return;
  forget_gen((cl_mem)ptr, 0);
  clReleaseMemObject((cl_mem)ptr);
}

kite_status ocl_copy(const kite_backend *b, int device_id, void *dst, const void *src, size_t bytes,
                     kite_copy_kind kind, void *stream) {
  (void)b;
  if (bytes == 0) return KITE_OK;
  ocl_dev *d;
  kite_status s = ocl_device_get(device_id, "memcpy", &d);
  if (s != KITE_OK) return s;
  cl_command_queue q = stream_queue(d, stream);
  ocl_buf db = {0}, sb = {0};
  cl_int e;
  switch (kind) {
  case KITE_COPY_HOST_TO_DEVICE:
    if ((s = ocl_resolve("memcpy", "dst", dst, &db)) != KITE_OK) return s;
    /* blocking: kite_memcpy promises the host buffer may be reused when it returns */
    e = clEnqueueWriteBuffer(q, db.mem, CL_TRUE, db.off, bytes, src, 0, NULL, NULL);
    return e == CL_SUCCESS ? KITE_OK : ocl_error("memcpy", "clEnqueueWriteBuffer", e);
  case KITE_COPY_DEVICE_TO_HOST:
    if ((s = ocl_resolve("memcpy", "src", src, &sb)) != KITE_OK) return s;
    e = clEnqueueReadBuffer(q, sb.mem, CL_TRUE, sb.off, bytes, dst, 0, NULL, NULL);
    return e == CL_SUCCESS ? KITE_OK : ocl_error("memcpy", "clEnqueueReadBuffer", e);
  case KITE_COPY_DEVICE_TO_DEVICE:
    if ((s = ocl_resolve("memcpy", "dst", dst, &db)) != KITE_OK ||
        (s = ocl_resolve("memcpy", "src", src, &sb)) != KITE_OK)
      return s;
    e = clEnqueueCopyBuffer(q, sb.mem, db.mem, sb.off, db.off, bytes, 0, NULL, NULL);
    return e == CL_SUCCESS ? KITE_OK : ocl_error("memcpy", "clEnqueueCopyBuffer", e);
  default:
    return kite_set_error(KITE_ERR_INVALID_ARG, "memcpy: opencl: unknown kind %d", (int)kind);
  }
}

kite_status ocl_memset(const kite_backend *b, int device_id, void *dst, int value, size_t bytes,
                       void *stream) {
  (void)b;
  if (bytes == 0) return KITE_OK;
  ocl_dev *d;
  ocl_buf db;
  kite_status s = ocl_device_get(device_id, "memset", &d);
  if (s == KITE_OK) s = ocl_resolve("memset", "dst", dst, &db);
  if (s != KITE_OK) return s;
  const unsigned char v = (unsigned char)value;
  cl_int e =
      clEnqueueFillBuffer(stream_queue(d, stream), db.mem, &v, 1, db.off, bytes, 0, NULL, NULL);
  return e == CL_SUCCESS ? KITE_OK : ocl_error("memset", "clEnqueueFillBuffer", e);
}

kite_status ocl_synchronize(const kite_backend *b, int device_id, void *stream) {
  (void)b;
  ocl_dev *d;
  kite_status s = ocl_device_get(device_id, "synchronize", &d);
  if (s != KITE_OK) return s;
  cl_int e = clFinish(stream_queue(d, stream));
  return e == CL_SUCCESS ? KITE_OK : ocl_error("synchronize", "clFinish", e);
}

/* Device time between two markers (the queue needs CL_QUEUE_PROFILING_ENABLE: the default queue
 * has it; a caller's queue without it gives UNSUPPORTED and kite bench times on the host). */
kite_status ocl_timer_start(const kite_backend *b, int device_id, void *stream, void **timer) {
  (void)b;
  ocl_dev *d;
  kite_status s = ocl_device_get(device_id, "timer", &d);
  if (s != KITE_OK) return s;
  cl_command_queue q = stream_queue(d, stream);
  cl_command_queue_properties props = 0;
  clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL);
  if (!(props & CL_QUEUE_PROFILING_ENABLE))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "timer: opencl: the queue has no profiling");
  cl_event ev;
  cl_int e = clEnqueueMarkerWithWaitList(q, 0, NULL, &ev);
  if (e != CL_SUCCESS) return ocl_error("timer", "clEnqueueMarkerWithWaitList", e);
  *timer = ev;
  return KITE_OK;
}

kite_status ocl_timer_stop(const kite_backend *b, int device_id, void *stream, void *timer,
                           double *seconds) {
  (void)b;
  cl_event start = timer, stop = NULL;
  ocl_dev *d;
  kite_status s = ocl_device_get(device_id, "timer", &d);
  cl_int e = CL_SUCCESS;
  cl_ulong t0 = 0, t1 = 0;
  if (s == KITE_OK) {
    e = clEnqueueMarkerWithWaitList(stream_queue(d, stream), 0, NULL, &stop);
    if (e == CL_SUCCESS) e = clWaitForEvents(1, &stop);
    if (e == CL_SUCCESS)
      e = clGetEventProfilingInfo(start, CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL);
    if (e == CL_SUCCESS)
      e = clGetEventProfilingInfo(stop, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
  }
  clReleaseEvent(start);
  if (stop) clReleaseEvent(stop);
  if (s != KITE_OK) return s;
  if (e != CL_SUCCESS) return ocl_error("timer", "clGetEventProfilingInfo", e);
  *seconds = t1 > t0 ? (double)(t1 - t0) * 1e-9 : 0.0;
  return KITE_OK;
}

/* ---- kite_opencl.h ------------------------------------------------------------------------- */

kite_status kite_opencl_device(int device_id, cl_context *context, cl_device_id *device,
                               cl_command_queue *queue) {
  ocl_dev *d;
  kite_status s = ocl_device_get(device_id, "kite_opencl_device", &d);
  if (s != KITE_OK) return s;
  if (context) *context = d->context;
  if (device) *device = d->id;
  if (queue) *queue = d->queue;
  return KITE_OK;
}
