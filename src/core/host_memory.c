/*
 * Host memory, owned by the core: every backend whose device is the host (ref, cpu, a vendor's
 * CPU plugin) runs on memory that the core serves, so a build with any one of them works. A
 * registered backend of device type kDLCPU that brings its own memory operations is used
 * instead (kite_memory_backend finds it first).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* 64-byte aligned (a cache line; enough for any vector load). aligned_alloc wants a size that
 * is a multiple of the alignment, so round up; 0 bytes still gets a real block, so every
 * successful alloc returns a pointer that free accepts. */
#define HOST_ALIGN 64

static kite_status host_alloc(const kite_backend *b, int device_id, size_t bytes, void **out) {
  if (!out) return kite_set_error(KITE_ERR_INVALID_ARG, "host: alloc: out is NULL");
  *out = NULL;
  if (bytes > SIZE_MAX - (HOST_ALIGN - 1))
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "host: alloc: %zu bytes is too large", bytes);
  size_t rounded = bytes == 0 ? HOST_ALIGN : (bytes + HOST_ALIGN - 1) / HOST_ALIGN * HOST_ALIGN;
  *out = aligned_alloc(HOST_ALIGN, rounded);
  if (!*out)
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "host: alloc: cannot allocate %zu bytes", bytes);
  return KITE_OK;
}

static void host_free(const kite_backend *b, int device_id, void *ptr) {
  free(ptr);
}

/* Host to host whatever the kind says: every kind is a memcpy. */
static kite_status host_copy(const kite_backend *b, int device_id, void *dst, const void *src,
                             size_t bytes, kite_copy_kind kind, void *stream) {
  if (bytes == 0) return KITE_OK;
  if (!dst || !src) return kite_set_error(KITE_ERR_INVALID_ARG, "host: copy: NULL pointer");
  memcpy(dst, src, bytes);
  return KITE_OK;
}

static kite_status host_memset(const kite_backend *b, int device_id, void *dst, int value,
                               size_t bytes, void *stream) {
  if (bytes == 0) return KITE_OK;
  if (!dst) return kite_set_error(KITE_ERR_INVALID_ARG, "host: memset: NULL pointer");
  memset(dst, value, bytes);
  return KITE_OK;
}

static int host_device_count(const kite_backend *b) {
  return 1;
}

/* Not registered: it has no kernels, only the memory operations of the host. */
static const kite_backend host_memory = {
    .name = "host",
    .device_type = kDLCPU,
    .description = "host memory, served by the core",
    .device_count = host_device_count,
    .alloc = host_alloc,
    .free = host_free,
    .copy = host_copy,
    .memset = host_memset,
    .host_memory = true,
};

const kite_backend *kite_device_memory(DLDeviceType t) {
  const kite_backend *b = kite_memory_backend(t);
  return b || t != kDLCPU ? b : &host_memory;
}
