/* Graphs (kite.h "Graphs"): a ctx records the device work of its calls through the backend that
 * serves its device type, and replays it. While recording, the ctx's stream is the backend's
 * recording stream, so every kernel queues there without knowing it is being recorded. */
#include <stdatomic.h>
#include <stdlib.h>

#include "core/internal.h"

struct kite_graph {
  const kite_backend *mem; /* the backend that recorded it, and frees it */
  int device_id;
  void *handle;
  const kite_ctx *ctx;              /* the ctx it was recorded on: it runs there only */
  struct kite_workspace *workspace; /* the ctx's scratch memory the recorded calls use */
};

static bool has_graphs(const kite_backend *b) {
  return b->graph_begin && b->graph_end && b->graph_launch && b->graph_destroy;
}

kite_status kite_ctx_not_recording(const kite_ctx *ctx, const char *fn) {
  if (!ctx->recording) return KITE_OK;
  return kite_set_error(KITE_ERR_INVALID_ARG,
                        "%s: the ctx is recording a graph (it waits on the host, and nothing "
                        "recorded has run): call it before kite_graph_begin or after "
                        "kite_graph_end",
                        fn);
}

kite_status kite_graph_begin(kite_ctx *ctx) {
  kite_clear_error();
  if (!ctx) return kite_set_error(KITE_ERR_INVALID_ARG, "kite_graph_begin: ctx is NULL");
  if (ctx->recording)
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_graph_begin: the ctx is already recording");
  if (!has_graphs(ctx->mem))
    return kite_set_error(KITE_ERR_UNSUPPORTED,
                          "kite_graph_begin: backend %s records no graphs on %s devices",
                          ctx->mem->name, kite_device_name(ctx->p.device.device_type));
  void *rec = NULL;
  kite_status s = ctx->mem->graph_begin(ctx->mem, ctx->p.device.device_id, ctx->p.stream, &rec);
  if (s != KITE_OK) return s;
  ctx->stream_saved = ctx->p.stream;
  ctx->p.stream = rec;
  ctx->recording = true;
  return KITE_OK;
}

kite_status kite_graph_end(kite_ctx *ctx, kite_graph **out) {
  kite_clear_error();
  if (out) *out = NULL;
  if (!ctx || !out)
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_graph_end: %s is NULL", ctx ? "out" : "ctx");
  if (!ctx->recording)
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_graph_end: the ctx is not recording");
  void *rec = ctx->p.stream, *handle = NULL;
  ctx->p.stream = ctx->stream_saved;
  ctx->recording = false;
  kite_status s = ctx->mem->graph_end(ctx->mem, ctx->p.device.device_id, rec, &handle);
  if (s != KITE_OK) return s;
  kite_graph *g = malloc(sizeof *g);
  if (!g) {
    ctx->mem->graph_destroy(ctx->mem, ctx->p.device.device_id, handle);
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "kite_graph_end: out of memory");
  }
  *g = (kite_graph){ctx->mem, ctx->p.device.device_id, handle, ctx, ctx->workspace};
  if (g->workspace) atomic_fetch_add(&g->workspace->refs, 1);
  *out = g;
  return KITE_OK;
}

kite_status kite_graph_launch(kite_ctx *ctx, const kite_graph *g) {
  kite_clear_error();
  if (!ctx || !g)
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_graph_launch: %s is NULL",
                          ctx ? "graph" : "ctx");
  if (ctx->recording)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "kite_graph_launch: the ctx is recording (a graph inside a graph)");
  if (g->ctx != ctx)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "kite_graph_launch: the graph was recorded on another ctx (%s:%d); it "
                          "runs on that ctx only, whose scratch memory it uses",
                          kite_device_name(g->mem->device_type), g->device_id);
  return ctx->mem->graph_launch(ctx->mem, g->device_id, ctx->p.stream, g->handle);
}

void kite_graph_destroy(kite_graph *g) {
  if (!g) return;
  g->mem->graph_destroy(g->mem, g->device_id, g->handle);
  kite_workspace_release(g->workspace);
  free(g);
}
