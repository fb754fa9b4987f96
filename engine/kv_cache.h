/*
 * The paged KV cache: per layer one key and one value buffer of num_blocks blocks of block_size
 * positions, [num_blocks, Hkv, block_size, D] in the activation dtype (kite's paged layout), a
 * free list of blocks shared by the layers, and per sequence a block table. Position p of a
 * sequence lives in slot table[p / block_size] * block_size + p % block_size of every layer.
 */
#ifndef KITE_ENGINE_KV_CACHE_H
#define KITE_ENGINE_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include <kite/kite.h>

#include "common.h"

typedef struct kr_kv_cache {
  kite_ctx *ctx;
  int n_layer;
  int64_t n_head_kv, head_dim;
  kite_dtype dtype;
  int block_size, num_blocks;
  int max_blocks;     /* blocks of one sequence holding the whole context */
  void **k, **v;      /* [n_layer] device buffers, each [num_blocks, Hkv, block_size, D] */
  int32_t *free_list; /* [num_blocks] host: the free block ids, the next one handed out last */
  int n_free;
} kr_kv_cache;

/* The blocks of one sequence, in position order. */
typedef struct kr_block_table {
  int32_t *blocks; /* [max_blocks] host */
  int n;
} kr_block_table;

/* Allocates the cache for positions < ctx_len per sequence. Returns 0, or -1 with a message. */
int kr_kv_init(kr_kv_cache *kv, kite_ctx *ctx, int n_layer, int64_t n_head_kv, int64_t head_dim,
               kite_dtype dtype, int block_size, int num_blocks, int ctx_len, char *err,
               size_t err_len);
void kr_kv_free(kr_kv_cache *kv);
/* Device bytes of the cache's keys and values. */
size_t kr_kv_bytes(const kr_kv_cache *kv);
/* Every block free again (block 0 handed out first). */
void kr_kv_reset(kr_kv_cache *kv);

/* Blocks that hold `positions` positions. */
int kr_kv_blocks_for(const kr_kv_cache *kv, size_t positions);
int kr_kv_table_init(const kr_kv_cache *kv, kr_block_table *t);
void kr_kv_table_free(kr_block_table *t);
/* Gives t the blocks to hold `positions` positions: 0, or -1 (t unchanged) when that passes the
 * context or the free blocks. */
int kr_kv_grow(kr_kv_cache *kv, kr_block_table *t, size_t positions);
/* Returns t's blocks to the free list. */
void kr_kv_release(kr_kv_cache *kv, kr_block_table *t);
/* The cache slot of position pos (which t must hold). */
int32_t kr_kv_slot(const kr_kv_cache *kv, const kr_block_table *t, size_t pos);

/* Layer l's key and value caches as kite tensors on dev. */
void kr_kv_layer(const kr_kv_cache *kv, int l, DLDevice dev, kr_tensor *k, kr_tensor *v);

#endif /* KITE_ENGINE_KV_CACHE_H */
