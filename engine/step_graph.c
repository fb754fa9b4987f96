/* Decode steps replayed as device graphs: see step_graph.h. */
#include "step_graph.h"

#include <stdlib.h>

#include "common.h"

int kr_step_graphs_init(kr_step_graphs *g, int max_seqs, int enabled, char *err, size_t err_len) {
  *g = (kr_step_graphs){.max_seqs = max_seqs, .off = !enabled};
  if (g->off) return 0;
  g->graph = calloc((size_t)max_seqs + 1, sizeof *g->graph);
  g->runs = calloc((size_t)max_seqs + 1, 1);
  if (!g->graph || !g->runs) return kr_errf(err, err_len, "model: out of memory");
  return 0;
}

void kr_step_graphs_free(kr_step_graphs *g) {
  if (g->graph)
    for (int b = 0; b <= g->max_seqs; b++) kite_graph_destroy(g->graph[b]);
  free(g->graph);
  free(g->runs);
  *g = (kr_step_graphs){0};
}

/* Records st's forward pass into *out; 0, or -1 when it could not be recorded (the reason is
 * dropped: the step then runs as it is, and that run reports any real error). */
static int record(kite_ctx *ctx, const kr_arch *arch, void *net, const kr_step *st,
                  const kr_kv_cache *kv, void *logits, kite_graph **out) {
  char why[256];
  if (kite_graph_begin(ctx) != KITE_OK) return -1;
  const int failed = arch->forward(net, st, kv, logits, why, sizeof why);
  kite_graph *g = NULL;
  if (kite_graph_end(ctx, &g) != KITE_OK || failed) {
    kite_graph_destroy(g);
    return -1;
  }
  *out = g;
  return 0;
}

int kr_step_graphs_forward(kr_step_graphs *g, kite_ctx *ctx, const kr_arch *arch, void *net,
                           const kr_step *st, const kr_kv_cache *kv, void *logits, char *err,
                           size_t err_len) {
  const int b = st->n_seq;
  if (g->off || st->n_decode != st->n_seq || st->n_tok != b || b < 1 || b > g->max_seqs)
    return arch->forward(net, st, kv, logits, err, err_len);
  if (!g->graph[b]) {
    if (g->runs[b] < 1) { /* the first step of this size runs as it is, sizing what it uses */
      g->runs[b]++;
      return arch->forward(net, st, kv, logits, err, err_len);
    }
    if (record(ctx, arch, net, st, kv, logits, &g->graph[b])) {
      g->off = 1; /* this device or model cannot record: no more attempts */
      return arch->forward(net, st, kv, logits, err, err_len);
    }
  }
  KR_CALL(kite_graph_launch(ctx, g->graph[b]));
  g->replays++;
  return 0;
}
