/*
 * MLA on the CPU (kite.h): mla_store_kv (a row copy per token) and the absorbed mla_decode, one
 * portable build, multithreaded.
 *
 * Decode: a work item is one sequence and a group of up to MLA_GROUP of its heads. Every head
 * reads the same latent rows, so the item converts each key's c_kv and k_pe to f32 once and
 * scores it for all heads of the group, each head keeping its own online-softmax state (running
 * max m, sum l, accumulator acc[R]) in f32. The item's scratch (queries as f32, accumulators,
 * the converted key) lives in the ctx's workspace, one slice per thread.
 */
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "cpu_kernels.h"
#include "kite/dtype.h"

/* ---- mla_store_kv ---------------------------------------------------------------------------- */
static void store_task(const void *job, int64_t begin, int64_t end, int slot) {
  (void)slot;
  const kite_mla_store_kv_args *a = job;
  const size_t e = (size_t)cpu_esize(a->dtype);
  const int64_t capacity = a->num_blocks * a->block_size;
  for (int64_t t = begin; t < end; t++) {
    const int64_t s = a->slots[t];
    if (s < 0 || s >= capacity) continue; /* padding; the front-end refused the rest */
    memcpy((char *)a->ckv_cache + (size_t)(s * a->kv_rank) * e,
           (const char *)a->c_kv + (size_t)(t * a->c_kv_stride) * e, (size_t)a->kv_rank * e);
    memcpy((char *)a->kpe_cache + (size_t)(s * a->rope_dim) * e,
           (const char *)a->k_pe + (size_t)(t * a->k_pe_stride) * e, (size_t)a->rope_dim * e);
  }
}

CPU_RUN_DECL(cpu_mla_store_kv_scalar) {
  (void)k;
  const kite_mla_store_kv_args *a = args;
  const int parts = cpu_parallel_parts(ctx, a->tokens, a->tokens * (a->kv_rank + a->rope_dim));
  cpu_parallel_run(parts, a->tokens, store_task, a);
  return KITE_OK;
}

/* ---- mla_decode ------------------------------------------------------------------------------ */
#define MLA_GROUP 16

typedef struct decode_job {
  const kite_mla_decode_args *a;
  int64_t groups;   /* head groups per sequence */
  float *scratch;   /* per thread: slot_floats() */
  int64_t per_slot; /* floats of one thread's scratch */
} decode_job;

/* One thread's scratch: q[G][R + P], acc[G][R], key[R + P], m[G], l[G]. */
static int64_t slot_floats(int64_t R, int64_t P) {
  return MLA_GROUP * (R + P) + MLA_GROUP * R + (R + P) + 2 * MLA_GROUP;
}

/* Loads n elements of dtype t at p[off..] as f32. */
static void load_row(kite_dtype t, const void *p, int64_t off, int64_t n, float *out) {
  for (int64_t d = 0; d < n; d++) out[d] = kite_load_f32(t, p, off + d);
}

static void decode_item(const decode_job *j, int64_t item, float *ws) {
  const kite_mla_decode_args *a = j->a;
  const kite_dtype t = a->dtype;
  const int64_t R = a->kv_rank, P = a->rope_dim, W = R + P;
  const int64_t b = item / j->groups, h0 = item % j->groups * MLA_GROUP;
  const int64_t G = a->heads - h0 < MLA_GROUP ? a->heads - h0 : MLA_GROUP;
  float *q = ws, *acc = q + MLA_GROUP * W, *key = acc + MLA_GROUP * R, *m = key + W,
        *l = m + MLA_GROUP;
  for (int64_t g = 0; g < G; g++) {
    const int64_t h = h0 + g;
    load_row(t, a->q_nope, b * a->q_nope_stride_b + h * a->q_nope_stride_h, R, q + g * W);
    load_row(t, a->q_pe, b * a->q_pe_stride_b + h * a->q_pe_stride_h, P, q + g * W + R);
    memset(acc + g * R, 0, (size_t)R * sizeof(float));
    m[g] = -INFINITY, l[g] = 0.0f;
  }
  const int64_t capacity = a->max_blocks * a->block_size;
  int64_t n = a->seq_lens[b];
  n = n < 0 ? 0 : n > capacity ? capacity : n;
  const int32_t *row = a->block_table + b * a->block_table_stride;
  for (int64_t jk = 0; jk < n; jk++) {
    const int64_t blk = row[jk / a->block_size];
    if (blk < 0 || blk >= a->num_blocks) continue; /* absent key */
    const int64_t slot = blk * a->block_size + jk % a->block_size;
    load_row(t, a->ckv_cache, slot * R, R, key);
    load_row(t, a->kpe_cache, slot * P, P, key + R);
    for (int64_t g = 0; g < G; g++) {
      const float *qg = q + g * W;
      float dot = 0.0f;
      for (int64_t d = 0; d < W; d++) dot += qg[d] * key[d];
      const float s = a->scale * dot;
      float *ag = acc + g * R;
      if (s > m[g]) { /* rescale what was summed under the old max */
        const float c = expf(m[g] - s);
        l[g] *= c;
        for (int64_t d = 0; d < R; d++) ag[d] *= c;
        m[g] = s;
      }
      const float p = expf(s - m[g]);
      l[g] += p;
      for (int64_t d = 0; d < R; d++) ag[d] += p * key[d];
    }
  }
  for (int64_t g = 0; g < G; g++) {
    const int64_t h = h0 + g, o0 = b * a->o_stride_b + h * a->o_stride_h;
    const float inv = l[g] > 0.0f ? 1.0f / l[g] : 0.0f;
    for (int64_t d = 0; d < R; d++) kite_store_f32(t, a->o, o0 + d, acc[g * R + d] * inv);
    if (a->lse) a->lse[b * a->heads + h] = l[g] > 0.0f ? m[g] + logf(l[g]) : -INFINITY;
  }
}

static void decode_task(const void *job, int64_t begin, int64_t end, int slot) {
  const decode_job *j = job;
  for (int64_t item = begin; item < end; item++)
    decode_item(j, item, j->scratch + (size_t)slot * (size_t)j->per_slot);
}

CPU_RUN_DECL(cpu_mla_decode_scalar) {
  (void)k;
  const kite_mla_decode_args *a = args;
  const int64_t groups = (a->heads + MLA_GROUP - 1) / MLA_GROUP, items = a->batch * groups;
  int64_t keys = 0;
  for (int64_t b = 0; b < a->batch; b++) keys += a->seq_lens[b] > 0 ? a->seq_lens[b] : 0;
  const int parts =
      cpu_parallel_parts(ctx, items, keys * a->heads * (2 * a->kv_rank + a->rope_dim));
  decode_job j = {a, groups, NULL, slot_floats(a->kv_rank, a->rope_dim)};
  void *ws;
  kite_status s = kite_ctx_workspace(ctx, (size_t)parts * (size_t)j.per_slot * sizeof(float), &ws);
  if (s != KITE_OK) return s;
  j.scratch = ws;
  cpu_parallel_run(parts, items, decode_task, &j);
  return KITE_OK;
}
