/*
 * Tensor parallelism (`kite run --tp N`): one process, N ranks, each a host thread with its own
 * kite ctx (CUDA devices 0..N-1, or N CPU ctxs) and its share of the model, split Megatron-style
 * at load:
 *   - attention: q, k and v column-parallel by kv-head groups (rank r holds query heads
 *     [r Hq/N, (r + 1) Hq/N) and the kv heads they read, [r Hkv/N, (r + 1) Hkv/N)); the output
 *     projection row-parallel (its columns of those heads);
 *   - FFN: gate and up column-parallel (rows [r F/N, (r + 1) F/N) of each), down row-parallel;
 *   - norms, the per-head q/k norms and the embedding replicated; the output layer on rank 0
 *     only, which computes the logits from the replicated final hidden state (no vocab split, no
 *     all_gather); rank 0's ctx also holds the sampler, the logits and the scheduler's state;
 *   - each rank's KV cache holds its kv heads, all ranks' caches share one block allocation.
 * A row-parallel projection leaves a partial sum on each rank; the next residual add and norm is
 * kite_all_reduce_add_rms_norm (one collective per sub-layer); with Gemma's post-norms, which
 * norm the sum itself, kite_all_reduce then the norm.
 * GGUF block matrices split along whole rows; a row-parallel share whose columns do not start
 * and end on block boundaries is dequantized (f32) for that rank and held dense (int8 in the
 * int8 mode) in place of the blocks.
 * int8 matrices (KR_WEIGHTS_INT8, and the q4 mode's matrices that are not 4-bit) quantize each
 * rank's share of a row-parallel input with the share's own per-token scale, so their products
 * differ from one rank's (kite has no max collective to share the scale); f32, bf16 and blocks
 * as stored give one rank's results up to the order of the sums.
 * N must divide the kv head count and the FFN width.
 */
#ifndef KITE_ENGINE_TP_H
#define KITE_ENGINE_TP_H

#include <stddef.h>
#include <stdint.h>

#include <kite/kite.h>

#include "arch.h"
#include "gguf.h"

/* Which share of the weights a load takes: rank of nranks (1: the whole model). */
typedef struct kr_tp_shard {
  int rank, nranks;
} kr_tp_shard;

/* Whether the model splits into nranks shards: 0, or -1 with a message naming the count that
 * nranks does not divide. */
int kr_tp_check(const kr_config *c, int nranks, char *err, size_t err_len);

/* The column-parallel share of t for kr_load_matrix: section i of t is its rows [first[i],
 * first[i] + count[i]) (q, k, v of a fused projection; gate, up), and the shard takes the
 * count[i] / nranks rows of its rank in each, views of t's rows (whole rows of blocks) in
 * out[i]. One rank with sections that follow one another over all of t's rows: t itself, one
 * part. Returns the parts written. */
int kr_tp_rows(const kr_tp_shard *s, const kr_gguf_tensor *t, int n_sec, const int64_t *first,
               const int64_t *count, kr_gguf_tensor *out);

/* The row-parallel share of t (ne [K, rows]): its columns [rank K / nranks, (rank + 1) K /
 * nranks) in *out, a copy of whole blocks (f32 / f16 / bf16 values, or GGUF blocks when the
 * share's bounds are block boundaries) or else the share dequantized to f32. *owned holds the
 * copy (NULL for one rank, where *out is t); free it after the load. Returns 0, or -1 with a
 * message. */
int kr_tp_cols(const kr_tp_shard *s, const kr_gguf_tensor *t, kr_gguf_tensor *out, void **owned,
               char *err, size_t err_len);

/* The ranks of a tensor-parallel model: their comms, shards, KV caches and threads. */
typedef struct kr_tp kr_tp;

/* Sizes of the KV caches of the ranks > 0 (rank 0's is the model's). */
typedef struct kr_tp_kv_params {
  int block_size, num_blocks, ctx_len;
} kr_tp_kv_params;

/* Makes a group over ctxs[0..nranks) (kite_comm_create_all), loads each rank's shard of the
 * family `arch` on its ctx and the KV caches of ranks > 0, and starts a thread for each rank
 * > 0 (rank 0 runs on the caller's thread). *info is rank 0's (its weight_bytes: its shard).
 * NULL with a message on failure. */
kr_tp *kr_tp_load(kite_ctx *const *ctxs, int nranks, const kr_arch *arch, const kr_gguf *g,
                  const kr_config *c, const kr_net_params *p, const kr_tp_kv_params *kvp,
                  kr_net_info *info, char *err, size_t err_len);
/* Weight and KV cache bytes of rank r's shard (the KV cache of rank 0 is not the tp's: *kv is
 * 0 for it). */
void kr_tp_rank_bytes(const kr_tp *tp, int r, size_t *weights, size_t *kv);

/* The forward pass over every rank (kr_arch.forward's contract, with the step's host index
 * arrays, which each rank > 0 copies to its device); logits on rank 0. A rank that fails breaks
 * the group: every later step fails too. */
extern const kr_arch kr_arch_tp;

#endif /* KITE_ENGINE_TP_H */
