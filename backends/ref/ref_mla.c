/*
 * Reference MLA (kite.h): mla_store_kv copies the latents into the paged caches; mla_decode is
 * the absorbed form's definition in double, with the textbook softmax over a buffer of scores
 * (max, sum, divide) that the fast kernels' online rescaling must agree with.
 */
#include <stdlib.h>
#include <string.h>

#include "ref.h"

kite_status ref_mla_store_kv_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  (void)k, (void)ctx;
  const kite_mla_store_kv_args *a = args;
  if (!a || a->op != KITE_OP_MLA_STORE_KV || !ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "mla_store_kv: ref: these args are not supported");
  const kite_status s =
      kite_check_slots("mla_store_kv", a->slots, a->tokens, a->num_blocks * a->block_size);
  if (s != KITE_OK) return s;
  const size_t e = kite_dtype_size(a->dtype);
  for (int64_t t = 0; t < a->tokens; t++) {
    const int64_t slot = a->slots[t];
    if (slot < 0) continue;
    memcpy((char *)a->ckv_cache + (size_t)(slot * a->kv_rank) * e,
           (const char *)a->c_kv + (size_t)(t * a->c_kv_stride) * e, (size_t)a->kv_rank * e);
    memcpy((char *)a->kpe_cache + (size_t)(slot * a->rope_dim) * e,
           (const char *)a->k_pe + (size_t)(t * a->k_pe_stride) * e, (size_t)a->rope_dim * e);
  }
  return KITE_OK;
}

/* The slot of sequence b's key j, or -1 when its block id is out of range (the key is absent). */
static int64_t key_slot(const kite_mla_decode_args *a, int64_t b, int64_t j) {
  const int64_t blk = a->block_table[b * a->block_table_stride + j / a->block_size];
  return blk < 0 || blk >= a->num_blocks ? -1 : blk * a->block_size + j % a->block_size;
}

kite_status ref_mla_decode_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  (void)k, (void)ctx;
  const kite_mla_decode_args *a = args;
  if (!a || a->op != KITE_OP_MLA_DECODE || !ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "mla_decode: ref: these args are not supported");
  const kite_dtype t = a->dtype;
  const int64_t R = a->kv_rank, P = a->rope_dim, capacity = a->max_blocks * a->block_size;
  int64_t longest = 1;
  for (int64_t b = 0; b < a->batch; b++)
    if (a->seq_lens[b] > longest) longest = a->seq_lens[b];
  longest = longest < capacity ? longest : capacity;
  double *s = malloc((size_t)(longest > 0 ? longest : 1) * sizeof *s);
  int64_t *slot = malloc((size_t)(longest > 0 ? longest : 1) * sizeof *slot);
  if (!s || !slot) {
    free(s), free(slot);
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "mla_decode: ref: out of memory");
  }

  for (int64_t b = 0; b < a->batch; b++) {
    int64_t n = a->seq_lens[b];
    n = n < 0 ? 0 : n > capacity ? capacity : n;
    for (int64_t j = 0; j < n; j++) slot[j] = key_slot(a, b, j);
    for (int64_t h = 0; h < a->heads; h++) {
      const int64_t qn = b * a->q_nope_stride_b + h * a->q_nope_stride_h;
      const int64_t qp = b * a->q_pe_stride_b + h * a->q_pe_stride_h;
      const int64_t o0 = b * a->o_stride_b + h * a->o_stride_h;
      double m = -INFINITY;
      for (int64_t j = 0; j < n; j++) {
        s[j] = -INFINITY;
        if (slot[j] < 0) continue;
        double dot = 0.0;
        for (int64_t d = 0; d < R; d++)
          dot += (double)kite_load_f32(t, a->q_nope, qn + d) *
                 (double)kite_load_f32(t, a->ckv_cache, slot[j] * R + d);
        for (int64_t d = 0; d < P; d++)
          dot += (double)kite_load_f32(t, a->q_pe, qp + d) *
                 (double)kite_load_f32(t, a->kpe_cache, slot[j] * P + d);
        s[j] = (double)a->scale * dot;
        if (s[j] > m || isnan(s[j])) m = s[j];
      }
      float *lse = a->lse ? &a->lse[b * a->heads + h] : NULL;
      if (m == -INFINITY) { /* no key seen */
        for (int64_t d = 0; d < R; d++) kite_store_f32(t, a->o, o0 + d, 0.0f);
        if (lse) *lse = -INFINITY;
        continue;
      }
      double sum = 0.0;
      for (int64_t j = 0; j < n; j++) sum += s[j] = exp(s[j] - m);
      for (int64_t d = 0; d < R; d++) {
        double acc = 0.0;
        for (int64_t j = 0; j < n; j++)
          if (s[j] != 0.0) acc += s[j] * (double)kite_load_f32(t, a->ckv_cache, slot[j] * R + d);
        kite_store_f64(t, a->o, o0 + d, acc / sum);
      }
      if (lse) *lse = (float)(m + log(sum));
    }
  }
  free(s), free(slot);
  return KITE_OK;
}
