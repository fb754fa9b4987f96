/*
 * Device memory. kite's op front-ends add a tensor's byte_offset to its data pointer and hand
 * kernels plain addresses, so the backend cannot give out cl_mem handles as kite device pointers
 * (a handle plus an offset names nothing). Instead every buffer gets a range of addresses in a
 * span of virtual address space reserved here (PROT_NONE: never host memory, never touched):
 * kite_malloc returns the start of a new buffer's range, a caller's own cl_mem is entered with
 * kite_opencl_wrap, and a kernel resolves any address inside a range to (cl_mem, offset).
 * Ranges are page-aligned with a free page between them, so an address past one buffer's end
 * resolves to nothing rather than to its neighbour.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kite_opencl.h"
#include "ocl_internal.h"

#define PAGE ((uintptr_t)4096)

typedef struct range {
  uintptr_t addr;
  size_t size; /* bytes the caller asked for */
  size_t span; /* bytes of address space taken, page-rounded */
  cl_mem mem;
  int device_id;
} range;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t g_base, g_end; /* the reserved span */
static range *g_ranges;         /* sorted by addr */
static size_t g_n, g_cap;

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

/* Enters mem (size bytes) as a new range; the caller holds g_lock. */
static kite_status insert_locked(cl_mem mem, size_t size, int device_id, void **out) {
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
    size_t cap = g_cap ? 2 * g_cap : 64;
    range *r = realloc(g_ranges, cap * sizeof *r);
    if (!r) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "opencl: out of host memory");
    g_ranges = r;
    g_cap = cap;
  }
  memmove(&g_ranges[i + 1], &g_ranges[i], (g_n - i) * sizeof *g_ranges);
  g_ranges[i] = (range){at, size, span, mem, device_id};
  g_n++;
  *out = (void *)at;
  return KITE_OK;
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
                          "%s: %s: %p is not in an OpenCL buffer of kite (kite_malloc or "
                          "kite_opencl_wrap gives device addresses)",
                          op, arg, p);
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
  pthread_mutex_lock(&g_lock);
  s = insert_locked(mem, bytes, device_id, out);
  pthread_mutex_unlock(&g_lock);
  if (s != KITE_OK) clReleaseMemObject(mem);
  return s;
}

/* Removes the range starting exactly at p and releases its buffer (kite_free, unwrap). */
static int remove_range(void *p) {
  cl_mem mem = NULL;
  pthread_mutex_lock(&g_lock);
  long i = find_locked((uintptr_t)p);
  if (i >= 0 && g_ranges[i].addr == (uintptr_t)p) {
    mem = g_ranges[i].mem;
    memmove(&g_ranges[i], &g_ranges[i + 1], (g_n - (size_t)i - 1) * sizeof *g_ranges);
    g_n--;
  }
  pthread_mutex_unlock(&g_lock);
  if (mem) clReleaseMemObject(mem);
  return mem != NULL;
}

void ocl_free(const kite_backend *b, int device_id, void *ptr) {
  (void)b;
  (void)device_id;
  if (ptr) remove_range(ptr);
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

kite_status kite_opencl_wrap(int device_id, cl_mem buffer, void **data) {
  if (!buffer || !data)
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_opencl_wrap: NULL buffer or data");
  *data = NULL;
  ocl_dev *d;
  kite_status s = ocl_device_get(device_id, "kite_opencl_wrap", &d);
  if (s != KITE_OK) return s;
  cl_context c = NULL;
  size_t size = 0;
  cl_int e = clGetMemObjectInfo(buffer, CL_MEM_CONTEXT, sizeof c, &c, NULL);
  if (e == CL_SUCCESS) e = clGetMemObjectInfo(buffer, CL_MEM_SIZE, sizeof size, &size, NULL);
  if (e != CL_SUCCESS) return ocl_error("kite_opencl_wrap", "clGetMemObjectInfo", e);
  if (c != d->context)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "kite_opencl_wrap: buffer: not of device %d's context (create it on "
                          "the context kite_opencl_device gives)",
                          device_id);
  clRetainMemObject(buffer);
  pthread_mutex_lock(&g_lock);
  s = insert_locked(buffer, size, device_id, data);
  pthread_mutex_unlock(&g_lock);
  if (s != KITE_OK) clReleaseMemObject(buffer);
  return s;
}

kite_status kite_opencl_unwrap(void *data) {
  if (!data || !remove_range(data))
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_opencl_unwrap: %p is not a wrapped buffer",
                          data);
  return KITE_OK;
}

kite_status kite_opencl_buffer(const void *data, cl_mem *buffer, size_t *offset) {
  if (!data || !buffer || !offset)
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_opencl_buffer: NULL argument");
  ocl_buf b;
  kite_status s = ocl_resolve("kite_opencl_buffer", "data", data, &b);
  if (s != KITE_OK) return s;
  *buffer = b.mem;
  *offset = (size_t)b.off;
  return KITE_OK;
}
