/* kite_comm: one rank of a group, made by the backend that provides communicators for the ctx's
 * device type; the core keeps which backend, its handle, the group's size and the device. */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

/* The backend that makes comms for ctx's device type, or UNSUPPORTED naming the device. */
static kite_status comm_backend_of(const kite_ctx *ctx, const char *fn, const kite_backend **out) {
  *out = kite_comm_backend(ctx->p.device.device_type);
  if (*out) return KITE_OK;
  return kite_set_error(KITE_ERR_UNSUPPORTED,
                        "%s: no backend provides communicators for device type %s", fn,
                        kite_device_name(ctx->p.device.device_type));
}

/* A backend's failure without a message still gets one. */
static kite_status backend_failed(const char *fn, const kite_backend *b, kite_status s) {
  if (!kite_last_error()[0])
    kite_set_error(s, "%s: backend %s failed with %s", fn, b->name, kite_status_name(s));
  return s;
}

kite_status kite_comm_get_unique_id(kite_ctx *ctx, kite_comm_id *id) {
  const char *fn = "kite_comm_get_unique_id";
  kite_clear_error();
  kite_init();
  kite_status s;
  if ((s = kite_check_ctx(ctx, fn)) != KITE_OK) return s;
  if (!id) return kite_set_error(KITE_ERR_INVALID_ARG, "%s: id is NULL", fn);
  const kite_backend *b;
  if ((s = comm_backend_of(ctx, fn, &b)) != KITE_OK) return s;
  if (!b->comm_unique_id)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: backend %s gives no group ids", fn, b->name);
  memset(id, 0, sizeof *id);
  s = b->comm_unique_id(b, ctx, id);
  return s == KITE_OK ? s : backend_failed(fn, b, s);
}

static kite_status comm_new(const kite_backend *b, const kite_ctx *ctx, void *handle, int nranks,
                            int rank, kite_comm **out) {
  kite_comm *c = calloc(1, sizeof *c);
  if (!c) {
    b->comm_destroy(b, handle);
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "kite_comm_create: out of memory");
  }
  c->ref = (kite_comm_ref){b, handle, nranks, rank};
  c->device = ctx->p.device;
  *out = c;
  return KITE_OK;
}

kite_status kite_comm_create(kite_ctx *ctx, const kite_comm_id *id, int nranks, int rank,
                             kite_comm **out) {
  const char *fn = "kite_comm_create";
  kite_clear_error();
  kite_init();
  if (!out) return kite_set_error(KITE_ERR_INVALID_ARG, "%s: out is NULL", fn);
  *out = NULL;
  kite_status s;
  if ((s = kite_check_ctx(ctx, fn)) != KITE_OK) return s;
  if (!id) return kite_set_error(KITE_ERR_INVALID_ARG, "%s: id is NULL", fn);
  if (nranks < 1)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: nranks %d must be >= 1", fn, nranks);
  if (rank < 0 || rank >= nranks)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: rank %d is outside [0, %d)", fn, rank, nranks);
  const kite_backend *b;
  if ((s = comm_backend_of(ctx, fn, &b)) != KITE_OK) return s;
  void *h = NULL;
  if ((s = b->comm_create(b, ctx, id, nranks, rank, &h)) != KITE_OK)
    return backend_failed(fn, b, s);
  return comm_new(b, ctx, h, nranks, rank, out);
}

kite_status kite_comm_create_all(kite_ctx *const *ctxs, int nranks, kite_comm **comms) {
  const char *fn = "kite_comm_create_all";
  kite_clear_error();
  kite_init();
  if (!ctxs || !comms)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s is NULL", fn, ctxs ? "comms" : "ctxs");
  if (nranks < 1)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: nranks %d must be >= 1", fn, nranks);
  for (int i = 0; i < nranks; i++) comms[i] = NULL;
  for (int i = 0; i < nranks; i++) {
    if (!ctxs[i]) return kite_set_error(KITE_ERR_INVALID_ARG, "%s: ctxs[%d] is NULL", fn, i);
    if (ctxs[i]->p.device.device_type != ctxs[0]->p.device.device_type)
      return kite_set_error(KITE_ERR_INVALID_ARG, "%s: ctxs[%d] is on %s, ctxs[0] on %s", fn, i,
                            kite_device_name(ctxs[i]->p.device.device_type),
                            kite_device_name(ctxs[0]->p.device.device_type));
  }
  const kite_backend *b;
  kite_status s;
  if ((s = comm_backend_of(ctxs[0], fn, &b)) != KITE_OK) return s;
  /* everything that can run out of memory first, so that a made group is never torn down */
  void **h = calloc((size_t)nranks, sizeof *h);
  bool oom = !h;
  for (int i = 0; i < nranks && !oom; i++) oom = !(comms[i] = calloc(1, sizeof *comms[i]));
  if (oom) {
    free(h);
    for (int i = 0; i < nranks; i++) {
      free(comms[i]);
      comms[i] = NULL;
    }
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  }
  int made = 0;
  if (b->comm_create_all) {
    s = b->comm_create_all(b, ctxs, nranks, h);
    if (s == KITE_OK) made = nranks;
  } else {
    kite_comm_id id;
    memset(&id, 0, sizeof id);
    s = b->comm_unique_id ? b->comm_unique_id(b, ctxs[0], &id)
                          : kite_set_error(KITE_ERR_UNSUPPORTED,
                                           "%s: backend %s gives no group ids", fn, b->name);
    for (; s == KITE_OK && made < nranks; made++)
      if ((s = b->comm_create(b, ctxs[made], &id, nranks, made, &h[made])) != KITE_OK) break;
  }
  if (s != KITE_OK) {
    backend_failed(fn, b, s);
    for (int i = 0; i < made; i++) b->comm_destroy(b, h[i]);
  }
  for (int i = 0; i < nranks; i++) {
    if (s == KITE_OK) {
      comms[i]->ref = (kite_comm_ref){b, h[i], nranks, i};
      comms[i]->device = ctxs[i]->p.device;
    } else {
      free(comms[i]);
      comms[i] = NULL;
    }
  }
  free(h);
  return s;
}

void kite_comm_destroy(kite_comm *comm) {
  if (!comm) return;
  comm->ref.backend->comm_destroy(comm->ref.backend, comm->ref.handle);
  free(comm);
}

kite_status kite_comm_info(const kite_comm *comm, int *nranks, int *rank) {
  kite_clear_error();
  if (!comm || !nranks || !rank)
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_comm_info: %s is NULL",
                          !comm     ? "comm"
                          : !nranks ? "nranks"
                                    : "rank");
  *nranks = comm->ref.nranks;
  *rank = comm->ref.rank;
  return KITE_OK;
}
