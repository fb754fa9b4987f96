/* kite_ctx: device, stream, threads, seed, workspace; device memory through the backend that
 * serves the ctx's device type. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"

kite_ctx_params kite_ctx_params_default(void) {
  kite_ctx_params p = {{kDLCPU, 0}, NULL, 0, 0, 0};
  return p;
}

/* The checks KITE_CHECK asks for: a comma-separated list of names ("indices"); unknown names are
 * ignored, so that a newer setting does not break an older library. */
static uint32_t env_checks(void) {
  const char *e = getenv("KITE_CHECK");
  uint32_t flags = 0;
  for (const char *p = e; p && *p;) {
    size_t n = strcspn(p, ",");
    if (n == 7 && !strncmp(p, "indices", 7)) flags |= KITE_CHECK_INDICES;
    p += n + (p[n] == ',');
  }
  return flags;
}

kite_status kite_ctx_create(const kite_ctx_params *params, kite_ctx **out) {
  kite_clear_error();
  kite_init();
  if (!out) return kite_set_error(KITE_ERR_INVALID_ARG, "kite_ctx_create: out is NULL");
  *out = NULL;
  kite_ctx_params p = params ? *params : kite_ctx_params_default();
  if (p.num_threads < 0)
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_ctx_create: num_threads %d is negative",
                          p.num_threads);
  if (p.device.device_id < 0)
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_ctx_create: device_id %d is negative",
                          p.device.device_id);
  if (p.checks & ~(uint32_t)KITE_CHECK_INDICES)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "kite_ctx_create: checks 0x%x has bits that are no kite_check_flags",
                          (unsigned)p.checks);
  p.checks |= env_checks();
  const kite_backend *mem = kite_device_memory(p.device.device_type);
  if (!mem)
    return kite_set_error(KITE_ERR_UNSUPPORTED,
                          "kite_ctx_create: no backend drives device type %s (%d); is its plugin "
                          "installed?",
                          kite_device_name(p.device.device_type), (int)p.device.device_type);
  int count = mem->device_count ? mem->device_count(mem) : 1;
  if (p.device.device_id >= count)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "kite_ctx_create: %s:%d requested, %d present",
                          kite_device_name(p.device.device_type), p.device.device_id, count);
  if (p.num_threads == 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    p.num_threads = n > 0 ? (int)n : 1;
  }
  kite_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "kite_ctx_create: out of memory");
  ctx->p = p;
  ctx->mem = mem;
  *out = ctx;
  return KITE_OK;
}

void kite_ctx_destroy(kite_ctx *ctx) {
  if (!ctx) return;
  if (ctx->recording) { /* a recording never ended: free its stream and what it held */
    void *g = NULL;
    if (ctx->mem->graph_end(ctx->mem, ctx->p.device.device_id, ctx->p.stream, &g) == KITE_OK)
      ctx->mem->graph_destroy(ctx->mem, ctx->p.device.device_id, g);
  }
  kite_workspace_release(ctx->workspace);
  kite_dispatch_cache_free(ctx->cache);
  free(ctx);
}

kite_status kite_ctx_synchronize(kite_ctx *ctx) {
  kite_clear_error();
  if (!ctx) return kite_set_error(KITE_ERR_INVALID_ARG, "kite_ctx_synchronize: ctx is NULL");
  kite_status r = kite_ctx_not_recording(ctx, "kite_ctx_synchronize");
  if (r != KITE_OK) return r;
  if (!ctx->mem->synchronize) return KITE_OK;
  return ctx->mem->synchronize(ctx->mem, ctx->p.device.device_id, ctx->p.stream);
}

kite_status kite_malloc(kite_ctx *ctx, size_t bytes, void **out) {
  kite_clear_error();
  if (!ctx || !out) return kite_set_error(KITE_ERR_INVALID_ARG, "kite_malloc: ctx or out is NULL");
  *out = NULL;
  if (bytes > (size_t)INT64_MAX)
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_malloc: %zu bytes is too large", bytes);
  return ctx->mem->alloc(ctx->mem, ctx->p.device.device_id, bytes, out);
}

kite_status kite_free(kite_ctx *ctx, void *ptr) {
  kite_clear_error();
  if (!ctx) return kite_set_error(KITE_ERR_INVALID_ARG, "kite_free: ctx is NULL");
  if (ptr) ctx->mem->free(ctx->mem, ctx->p.device.device_id, ptr);
  return KITE_OK;
}

kite_status kite_device_address(const kite_ctx *ctx, void *data, uint64_t byte_offset,
                                uint64_t bytes, uintptr_t *out) {
  uintptr_t addr, end;
  if (ctx->mem->tensor_address) {
    void *p = NULL;
    kite_status s =
        ctx->mem->tensor_address(ctx->mem, ctx->p.device.device_id, data, byte_offset, bytes, &p);
    if (s != KITE_OK) return s;
    addr = (uintptr_t)p;
  } else if (__builtin_add_overflow((uintptr_t)data, byte_offset, &addr)) {
    addr = UINTPTR_MAX; /* fails the check below */
    bytes = 1;
  }
  if (__builtin_add_overflow(addr, bytes, &end))
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "byte_offset %llu runs past the end of the address space",
                          (unsigned long long)byte_offset);
  *out = addr;
  return KITE_OK;
}

/* The address of one side of a copy: a device side through kite_device_address, a host side
 * (or any side on host memory) as ptr + offset. */
static kite_status copy_side(const kite_ctx *ctx, const char *arg, bool device, const void *ptr,
                             size_t offset, size_t bytes, uintptr_t *out) {
  uintptr_t end;
  kite_status s = KITE_OK;
  if (device)
    s = kite_device_address(ctx, (void *)ptr, offset, bytes, out);
  else if (__builtin_add_overflow((uintptr_t)ptr, offset, out) ||
           __builtin_add_overflow(*out, bytes, &end))
    s = kite_set_error(KITE_ERR_INVALID_ARG,
                       "%zu bytes at offset %zu run past the end of the address space", bytes,
                       offset);
  if (s == KITE_OK) return s;
  char why[256];
  snprintf(why, sizeof why, "%s", kite_last_error());
  return kite_set_error(s, "kite_memcpy: %s: %s", arg, why);
}

kite_status kite_memcpy_offset(kite_ctx *ctx, void *dst, size_t dst_offset, const void *src,
                               size_t src_offset, size_t bytes, kite_copy_kind kind) {
  kite_clear_error();
  if (!ctx) return kite_set_error(KITE_ERR_INVALID_ARG, "kite_memcpy: ctx is NULL");
  kite_status r = kite_ctx_not_recording(ctx, "kite_memcpy");
  if (r != KITE_OK) return r;
  if (bytes == 0) return KITE_OK;
  if (!dst || !src) return kite_set_error(KITE_ERR_INVALID_ARG, "kite_memcpy: dst or src is NULL");
  if (kind != KITE_COPY_HOST_TO_DEVICE && kind != KITE_COPY_DEVICE_TO_HOST &&
      kind != KITE_COPY_DEVICE_TO_DEVICE)
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_memcpy: kind %d is not a kite_copy_kind",
                          (int)kind);
  uintptr_t d0, s0;
  kite_status s;
  if ((s = copy_side(ctx, "dst", kind != KITE_COPY_DEVICE_TO_HOST, dst, dst_offset, bytes, &d0)) !=
          KITE_OK ||
      (s = copy_side(ctx, "src", kind != KITE_COPY_HOST_TO_DEVICE, src, src_offset, bytes, &s0)) !=
          KITE_OK)
    return s;
  /* Host ranges (a CPU ctx) and two device ranges share one address space; a copy between
   * overlapping ranges has no single meaning (memcpy and cudaMemcpy leave it undefined). */
  const bool one_space = ctx->mem->host_memory || kind == KITE_COPY_DEVICE_TO_DEVICE;
  if (one_space && d0 < s0 + bytes && s0 < d0 + bytes)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "kite_memcpy: dst %p and src %p overlap (%zu bytes each)", (void *)d0,
                          (void *)s0, bytes);
  s = ctx->mem->copy(ctx->mem, ctx->p.device.device_id, (void *)d0, (const void *)s0, bytes, kind,
                     ctx->p.stream);
  if (s != KITE_OK || !ctx->mem->synchronize) return s;
  return ctx->mem->synchronize(ctx->mem, ctx->p.device.device_id, ctx->p.stream);
}

kite_status kite_memcpy(kite_ctx *ctx, void *dst, const void *src, size_t bytes,
                        kite_copy_kind kind) {
  return kite_memcpy_offset(ctx, dst, 0, src, 0, bytes, kind);
}

DLDevice kite_ctx_device(const kite_ctx *ctx) {
  return ctx->p.device;
}
void *kite_ctx_stream(const kite_ctx *ctx) {
  return ctx->p.stream;
}
int kite_ctx_num_threads(const kite_ctx *ctx) {
  return ctx->p.num_threads;
}
uint64_t kite_ctx_seed(const kite_ctx *ctx) {
  return ctx->p.seed;
}
uint32_t kite_ctx_checks(const kite_ctx *ctx) {
  return ctx->p.checks;
}

void kite_workspace_release(struct kite_workspace *w) {
  if (w && atomic_fetch_sub(&w->refs, 1) == 1) {
    w->mem->free(w->mem, w->device_id, w->handle);
    free(w);
  }
}

kite_status kite_ctx_workspace(kite_ctx *ctx, size_t bytes, void **out) {
  if (bytes <= ctx->workspace_bytes) {
    *out = ctx->workspace_addr;
    return KITE_OK;
  }
  if (ctx->recording) /* the recorded calls hold the old workspace's address */
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "workspace: %zu bytes needed while recording a graph, %zu held: make "
                          "the same calls once before kite_graph_begin",
                          bytes, ctx->workspace_bytes);
  void *p = NULL;
  uintptr_t addr = 0;
  kite_status s = ctx->mem->alloc(ctx->mem, ctx->p.device.device_id, bytes, &p);
  if (s != KITE_OK) return s;
  if ((s = kite_device_address(ctx, p, 0, bytes, &addr)) != KITE_OK) {
    ctx->mem->free(ctx->mem, ctx->p.device.device_id, p);
    return s;
  }
  struct kite_workspace *w = malloc(sizeof *w);
  if (!w) {
    ctx->mem->free(ctx->mem, ctx->p.device.device_id, p);
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "workspace: out of memory");
  }
  *w = (struct kite_workspace){ctx->mem, ctx->p.device.device_id, p, 1};
  kite_workspace_release(ctx->workspace); /* graphs recorded with it keep it */
  ctx->workspace = w;
  ctx->workspace_addr = (void *)addr;
  ctx->workspace_bytes = bytes;
  *out = (void *)addr;
#ifndef NDEBUG
  /* Debug builds fill a new workspace with 0xff bytes (NaN as f32, f16 and bf16): a kernel that
   * reads scratch it did not write then fails its conformance check every time, instead of only
   * when an earlier call happened to leave a NaN there. */
  if (ctx->mem->memset)
    return ctx->mem->memset(ctx->mem, ctx->p.device.device_id, (void *)addr, 0xff, bytes,
                            ctx->p.stream);
#endif
  return KITE_OK;
}
