#include "kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include <kite/dtype.h>

int kr_kv_init(kr_kv_cache *kv, kite_ctx *ctx, int n_layer, int64_t n_head_kv, int64_t head_dim,
               kite_dtype dtype, int block_size, int num_blocks, int ctx_len, char *err,
               size_t err_len) {
  memset(kv, 0, sizeof *kv);
  kv->ctx = ctx;
  kv->n_layer = n_layer;
  kv->n_head_kv = n_head_kv;
  kv->head_dim = head_dim;
  kv->dtype = dtype;
  kv->block_size = block_size;
  kv->num_blocks = num_blocks;
  kv->max_blocks = (ctx_len + block_size - 1) / block_size;
  size_t bytes = kite_dtype_size(dtype); /* of one layer's key (or value) cache */
  if (kr_mul_size(bytes, (size_t)num_blocks, &bytes) ||
      kr_mul_size(bytes, (size_t)n_head_kv * (size_t)block_size * (size_t)head_dim, &bytes))
    return kr_errf(err, err_len, "model: a KV cache of %d blocks of %d positions is too large",
                   num_blocks, block_size);
  kv->k = calloc((size_t)n_layer, sizeof *kv->k);
  kv->v = calloc((size_t)n_layer, sizeof *kv->v);
  kv->free_list = malloc((size_t)num_blocks * sizeof *kv->free_list);
  if (!kv->k || !kv->v || !kv->free_list) return kr_errf(err, err_len, "model: out of memory");
  for (int l = 0; l < n_layer; l++)
    if (kr_dev_alloc(ctx, bytes, &kv->k[l], err, err_len) ||
        kr_dev_alloc(ctx, bytes, &kv->v[l], err, err_len))
      return -1;
  kr_kv_reset(kv);
  return 0;
}

void kr_kv_free(kr_kv_cache *kv) {
  for (int l = 0; l < kv->n_layer; l++) {
    if (kv->k) kr_dev_free(kv->ctx, &kv->k[l]);
    if (kv->v) kr_dev_free(kv->ctx, &kv->v[l]);
  }
  free(kv->k);
  free(kv->v);
  free(kv->free_list);
  memset(kv, 0, sizeof *kv);
}

size_t kr_kv_bytes(const kr_kv_cache *kv) {
  /* the product fit a size_t at init */
  return 2 * (size_t)kv->n_layer * (size_t)kv->num_blocks * (size_t)kv->n_head_kv *
         (size_t)kv->block_size * (size_t)kv->head_dim * kite_dtype_size(kv->dtype);
}

void kr_kv_reset(kr_kv_cache *kv) {
  kv->n_free = kv->num_blocks;
  for (int i = 0; i < kv->num_blocks; i++) kv->free_list[i] = kv->num_blocks - 1 - i;
}

int kr_kv_blocks_for(const kr_kv_cache *kv, size_t positions) {
  return (int)((positions + (size_t)kv->block_size - 1) / (size_t)kv->block_size);
}

int kr_kv_table_init(const kr_kv_cache *kv, kr_block_table *t) {
  t->n = 0;
  t->blocks = malloc((size_t)kv->max_blocks * sizeof *t->blocks);
  return t->blocks ? 0 : -1;
}

void kr_kv_table_free(kr_block_table *t) {
  free(t->blocks);
  t->blocks = NULL;
  t->n = 0;
}

int kr_kv_grow(kr_kv_cache *kv, kr_block_table *t, size_t positions) {
  const int need = kr_kv_blocks_for(kv, positions);
  if (need > kv->max_blocks || need - t->n > kv->n_free) return -1;
  while (t->n < need) t->blocks[t->n++] = kv->free_list[--kv->n_free];
  return 0;
}

void kr_kv_release(kr_kv_cache *kv, kr_block_table *t) {
  while (t->n > 0) kv->free_list[kv->n_free++] = t->blocks[--t->n];
}

int32_t kr_kv_slot(const kr_kv_cache *kv, const kr_block_table *t, size_t pos) {
  const size_t bs = (size_t)kv->block_size;
  return t->blocks[pos / bs] * kv->block_size + (int32_t)(pos % bs);
}

void kr_kv_layer(const kr_kv_cache *kv, int l, DLDevice dev, kr_tensor *k, kr_tensor *v) {
  const int64_t shape[4] = {kv->num_blocks, kv->n_head_kv, kv->block_size, kv->head_dim};
  kr_view(k, dev, kv->k[l], kv->dtype, 4, shape, NULL);
  kr_view(v, dev, kv->v[l], kv->dtype, 4, shape, NULL);
}
