/*
 * Decode steps replayed as device graphs (kite.h "Graphs"). At batch 1 a step of a small model is
 * hundreds of short kernels whose launches cost more than their work. A decode-only step of one
 * batch size always makes the same calls on the same buffers (the step's index arrays are copied
 * into one fixed device buffer first, and every size is fixed by the batch), so its forward pass
 * is recorded once and replayed.
 *
 * Per batch size: the first step runs as it is (it sizes the workspace and the lazily made state
 * of the kernels), the second is recorded and then replayed, every later one is replayed. A
 * device without graphs (every CPU) or any failure to record turns graphs off for the model, and
 * steps run as they are: the result never depends on whether a graph ran.
 */
#ifndef KITE_ENGINE_STEP_GRAPH_H
#define KITE_ENGINE_STEP_GRAPH_H

#include <kite/kite.h>

#include "arch.h"

typedef struct kr_step_graphs {
  kite_graph **graph;  /* [max_seqs + 1] the recorded decode step of each batch size, or NULL */
  unsigned char *runs; /* [max_seqs + 1] steps of that size run without a graph so far */
  int max_seqs;
  int off;     /* graphs are not used (asked so, the device has none, or recording failed) */
  int replays; /* steps replayed (kite run --bench reports it) */
} kr_step_graphs;

/* enabled 0: every step runs as it is. Returns 0, or -1 with a message. */
int kr_step_graphs_init(kr_step_graphs *g, int max_seqs, int enabled, char *err, size_t err_len);
void kr_step_graphs_free(kr_step_graphs *g);

/* arch->forward(net, st, kv, logits), through the step's graph when st is decode-only. */
int kr_step_graphs_forward(kr_step_graphs *g, kite_ctx *ctx, const kr_arch *arch, void *net,
                           const kr_step *st, const kr_kv_cache *kv, void *logits, char *err,
                           size_t err_len);

#endif /* KITE_ENGINE_STEP_GRAPH_H */
