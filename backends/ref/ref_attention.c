/*
 * Reference attention: store_kv, paged_decode, paged_prefill, sdpa, sdpa_varlen and the
 * backwards of the two, in double.
 *
 * Every op comes down to ref_attend(): one query row against keys at positions 0..n-1, each
 * found either in the paged cache (through the sequence's block-table row) or in a dense [Sk, D]
 * slab. The scores are kept in a buffer, so the softmax is the textbook one (max, sum, divide)
 * rather than the online rescaling the fast kernels use: the two must agree.
 *
 * Score of key j for a query at position p:
 *   s = scale * q.k_j;  s = softcap * tanh(s / softcap) when softcap > 0;  s += float mask;
 *   the key is not seen when its block id is out of range, when causal and j > p, when the
 *   window is on and j is outside [p - window_left, p], or when a bool mask says false.
 * A query that sees no key gets o = 0 and lse = -inf.
 * A sink (kite.h) is one more score in the max and the sum, with no value: with it, a query that
 * sees no key gets o = 0 and lse = the sink. Its gradient is summed in ref_sdpa_bwd_dense.
 */
#include <stdlib.h>
#include <string.h>

#include "ref.h"

/* Where the keys and values of one (sequence, kv head) live. */
typedef struct ref_kv {
  kite_dtype dtype;   /* of q, k and v */
  kite_dtype o_dtype; /* of o */
  const void *k, *v;  /* paged: the caches; dense: element 0 of this (batch, kv head) */
  int64_t n;          /* keys at positions [0, n) */
  int64_t head_dim;
  int64_t k_stride, v_stride; /* dense: elements between key (value) rows */
  const int32_t *blocks;      /* paged: the sequence's block-table row; NULL when dense */
  int64_t num_blocks, block_size, hkv, head;
} ref_kv;

/* Element offsets of key j in k and of its value in v; false when its block id is out of
 * range (the key is absent). */
static bool ref_kv_row(const ref_kv *kv, int64_t j, int64_t *k_off, int64_t *v_off) {
  if (!kv->blocks) {
    *k_off = j * kv->k_stride, *v_off = j * kv->v_stride;
    return true;
  }
  const int64_t blk = kv->blocks[j / kv->block_size];
  if (blk < 0 || blk >= kv->num_blocks) return false;
  *k_off = *v_off =
      ((blk * kv->hkv + kv->head) * kv->block_size + j % kv->block_size) * kv->head_dim;
  return true;
}

/* sdpa's mask row for one query: element j at mask[row + j * stride_j]. NULL data = no mask. */
typedef struct ref_mask {
  const void *data;
  kite_dtype dtype;
  int64_t row, stride_j;
} ref_mask;

/* Whether the query q[q0 .. q0 + D) at position pos sees key j, and then its scores: *s the
 * scaled dot product, *u the final score (softcapped, plus the float mask). */
static bool ref_score(const void *q, int64_t q0, const ref_kv *kv, int64_t j, int64_t pos,
                      const kite_attn_opts *opts, const ref_mask *mask, double *s, double *u) {
  int64_t row, v_row;
  if (!ref_kv_row(kv, j, &row, &v_row)) return false;
  if (opts->causal && j > pos) return false;
  if (opts->window_left >= 0 && (j < pos - opts->window_left || j > pos)) return false;
  if (mask->data && mask->dtype == KITE_DTYPE_U8 &&
      ((const uint8_t *)mask->data)[mask->row + j * mask->stride_j] == 0)
    return false;
  const kite_dtype t = kv->dtype;
  double dot = 0.0;
  for (int64_t d = 0; d < kv->head_dim; d++)
    dot += (double)kite_load_f32(t, q, q0 + d) * (double)kite_load_f32(t, kv->k, row + d);
  double score = *s = opts->scale * dot;
  if (opts->softcap > 0.0f) score = opts->softcap * tanh(score / opts->softcap);
  if (mask->data && mask->dtype != KITE_DTYPE_U8)
    score += kite_load_f32(mask->dtype, mask->data, mask->row + j * mask->stride_j);
  *u = score;
  return true;
}

/* The sink of q head h: -inf (no sink) when sinks is NULL. */
static double ref_sink(const float *sinks, int64_t h) {
  return sinks ? (double)sinks[h] : -INFINITY;
}

/* dsinks[hq] (when wanted) from the float64 sums. */
static void ref_store_dsinks(float *dsinks, const double *dsink, int64_t hq) {
  for (int64_t h = 0; dsinks && h < hq; h++) dsinks[h] = (float)dsink[h];
}

/* o[o0 .. o0 + D) and *lse for the query q[q0 .. q0 + D) at position pos, with the sink score
 * sink (-inf: none); s holds kv->n doubles of scratch. */
static void ref_attend(const void *q, int64_t q0, const ref_kv *kv, int64_t pos,
                       const kite_attn_opts *opts, const ref_mask *mask, double sink, double *s,
                       void *o, int64_t o0, float *lse) {
  const kite_dtype t = kv->dtype, ot = kv->o_dtype;
  const int64_t D = kv->head_dim;
  double m = sink;
  for (int64_t j = 0; j < kv->n; j++) {
    double raw, score;
    s[j] = -INFINITY;
    if (!ref_score(q, q0, kv, j, pos, opts, mask, &raw, &score)) continue;
    s[j] = score;
    if (score > m || isnan(score)) m = score;
  }

  if (m == -INFINITY) { /* no key seen, no sink */
    for (int64_t d = 0; d < D; d++) kite_store_f32(ot, o, o0 + d, 0.0f);
    if (lse) *lse = -INFINITY;
    return;
  }
  /* s[j] becomes the unnormalized probability exp(s[j] - m): 0 for unseen keys; the sink adds
   * its term to the sum only */
  double sum = exp(sink - m);
  for (int64_t j = 0; j < kv->n; j++) {
    s[j] = exp(s[j] - m);
    sum += s[j];
  }
  for (int64_t d = 0; d < D; d++) {
    double acc = 0.0;
    for (int64_t j = 0; j < kv->n; j++) {
      int64_t k_row, v_row;
      if (s[j] == 0.0 || !ref_kv_row(kv, j, &k_row, &v_row)) continue;
      acc += s[j] * (double)kite_load_f32(t, kv->v, v_row + d);
    }
    kite_store_f64(ot, o, o0 + d, acc / sum);
  }
  if (lse) *lse = (float)(m + log(sum));
}

/* q head h reads kv head ref_kv_head(h) (kite.h, kite_gqa_layout). */
static int64_t ref_kv_head(const kite_attn_opts *opts, int64_t h, int64_t hq, int64_t hkv) {
  return opts->gqa == KITE_GQA_INTERLEAVED ? h % hkv : h / (hq / hkv);
}

static kite_status ref_check(const char *op, kite_op want, kite_op got, kite_dtype t) {
  if (got != want)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: ref: op %s is not %s", op, ref_op_str(got),
                          op);
  if (!ref_is_float(t))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: ref: dtype %s is not supported", op,
                          ref_dtype_str(t));
  return KITE_OK;
}

kite_status ref_store_kv_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_store_kv_args *a = args;
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "store_kv: ref: NULL args");
  kite_status s = ref_check("store_kv", KITE_OP_STORE_KV, a->op, a->dtype);
  if (s != KITE_OK) return s;

  if ((s = kite_check_slots("store_kv", a->slots, a->tokens, a->num_blocks * a->block_size)) !=
      KITE_OK)
    return s;

  /* Tokens in order, so that of two tokens with one slot the later one stays. */
  const size_t es = kite_dtype_size(a->dtype), row_bytes = (size_t)a->head_dim * es;
  for (int64_t i = 0; i < a->tokens; i++) {
    const int64_t slot = a->slots[i];
    if (slot < 0) continue;
    const int64_t blk = slot / a->block_size, off = slot % a->block_size;
    for (int64_t h = 0; h < a->hkv; h++) {
      const int64_t dst = ((blk * a->hkv + h) * a->block_size + off) * a->head_dim;
      memcpy((char *)a->key_cache + dst * es,
             (const char *)a->k + (i * a->k_stride_t + h * a->k_stride_h) * es, row_bytes);
      memcpy((char *)a->value_cache + dst * es,
             (const char *)a->v + (i * a->v_stride_t + h * a->v_stride_h) * es, row_bytes);
    }
  }
  return KITE_OK;
}

/* Decode (cu_q_lens NULL: one query per sequence at position seq_len - 1) and prefill. */
kite_status ref_paged_attn_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_paged_attn_args *a = args;
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "paged attention: ref: NULL args");
  const bool prefill = a->op == KITE_OP_PAGED_PREFILL;
  const char *op = prefill ? "paged_prefill" : "paged_decode";
  kite_status s =
      ref_check(op, prefill ? KITE_OP_PAGED_PREFILL : KITE_OP_PAGED_DECODE, a->op, a->dtype);
  if (s != KITE_OK) return s;
  if (prefill) {
    const int32_t *cu = a->cu_q_lens;
    bool ok = cu[0] == 0 && cu[a->batch] == a->tokens;
    for (int64_t b = 0; ok && b < a->batch; b++) ok = cu[b] <= cu[b + 1];
    if (!ok)
      return kite_set_error(KITE_ERR_INVALID_ARG,
                            "paged_prefill: cu_q_lens must start at 0, not decrease and end at "
                            "T = %lld",
                            (long long)a->tokens);
  }

  /* seq_len is clamped to what the block table can address; negative counts as 0. */
  const int64_t max_keys = a->max_blocks * a->block_size;
  double *scores = malloc((size_t)(max_keys > 0 ? max_keys : 1) * sizeof *scores);
  if (!scores)
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: ref: cannot allocate %lld scores", op,
                          (long long)max_keys);
  const ref_mask no_mask = {0};
  for (int64_t b = 0; b < a->batch; b++) {
    int64_t seq_len = a->seq_lens[b];
    seq_len = seq_len < 0 ? 0 : seq_len > max_keys ? max_keys : seq_len;
    const int64_t t0 = prefill ? a->cu_q_lens[b] : b;
    const int64_t q_len = prefill ? a->cu_q_lens[b + 1] - t0 : 1;
    for (int64_t i = 0; i < q_len; i++) {
      const int64_t t = t0 + i, pos = seq_len - q_len + i;
      for (int64_t h = 0; h < a->hq; h++) {
        ref_kv kv = {.dtype = a->dtype,
                     .o_dtype = a->dtype,
                     .k = a->key_cache,
                     .v = a->value_cache,
                     .n = seq_len,
                     .head_dim = a->head_dim,
                     .blocks = a->block_table + b * a->block_table_stride,
                     .num_blocks = a->num_blocks,
                     .block_size = a->block_size,
                     .hkv = a->hkv,
                     .head = ref_kv_head(&a->opts, h, a->hq, a->hkv)};
        kite_attn_opts opts = a->opts;
        if (!prefill) opts.causal = 0; /* decode: every key is at or before the query */
        ref_attend(a->q, t * a->q_stride_t + h * a->q_stride_h, &kv, pos, &opts, &no_mask,
                   ref_sink(a->sinks, h), scores, a->o, t * a->o_stride_t + h * a->o_stride_h,
                   a->lse ? &a->lse[t * a->hq + h] : NULL);
      }
    }
  }
  free(scores);
  return KITE_OK;
}

/* Keys and values of kv head g of batch b of a dense problem. */
static ref_kv ref_dense_kv(const kite_sdpa_args *a, int64_t b, int64_t g) {
  const size_t es = kite_dtype_size(a->dtype);
  ref_kv kv = {.dtype = a->dtype,
               .o_dtype = a->dtype,
               .k = (const char *)a->k + (b * a->k_stride[0] + g * a->k_stride[1]) * es,
               .v = (const char *)a->v + (b * a->v_stride[0] + g * a->v_stride[1]) * es,
               .n = a->sk,
               .head_dim = a->head_dim,
               .k_stride = a->k_stride[2],
               .v_stride = a->v_stride[2]};
  return kv;
}

/* The mask row of query i of head h of batch b. */
static ref_mask ref_dense_mask(const kite_sdpa_args *a, int64_t b, int64_t h, int64_t i) {
  ref_mask m = {.data = a->mask,
                .dtype = a->mask_dtype,
                .row = b * a->mask_stride[0] + h * a->mask_stride[1] + i * a->mask_stride[2],
                .stride_j = a->mask_stride[3]};
  return m;
}

/* One dense problem (sdpa, or one sequence of sdpa_varlen viewed as batch 1, or sdpa_fp8's
 * dequantized inputs) into o of dtype ot: the lse of (b, h, i) at
 * a->lse[b * ls[0] + h * ls[1] + i * ls[2]]; scores holds sk doubles. */
static void ref_sdpa_dense(const kite_sdpa_args *a, kite_dtype ot, const int64_t ls[3],
                           double *scores) {
  for (int64_t b = 0; b < a->batch; b++)
    for (int64_t h = 0; h < a->hq; h++) {
      ref_kv kv = ref_dense_kv(a, b, ref_kv_head(&a->opts, h, a->hq, a->hkv));
      kv.o_dtype = ot;
      for (int64_t i = 0; i < a->sq; i++) {
        const ref_mask mask = ref_dense_mask(a, b, h, i);
        const int64_t pos = i + a->sk - a->sq; /* the last query sits at the last key */
        const int64_t q0 = b * a->q_stride[0] + h * a->q_stride[1] + i * a->q_stride[2];
        const int64_t o0 = b * a->o_stride[0] + h * a->o_stride[1] + i * a->o_stride[2];
        float *lse = a->lse ? &a->lse[b * ls[0] + h * ls[1] + i * ls[2]] : NULL;
        ref_attend(a->q, q0, &kv, pos, &a->opts, &mask, ref_sink(a->sinks, h), scores, a->o, o0,
                   lse);
      }
    }
}

/* The gradients of one dense problem, kite.h's formulas literally: per (batch, kv head) the dk /
 * dv sums over the query heads that read it, in head order, then over queries and keys; acc
 * holds (2 sk + 1) D doubles. lse as in ref_sdpa_dense. With fwd.sinks, dsink[h] (hq doubles,
 * added to) gets -exp(sink - lse_i) delta_i of every query i of head h. */
static void ref_sdpa_bwd_dense(const kite_sdpa_backward_args *a, const int64_t ls[3], double *acc,
                               double *dsink) {
  const kite_sdpa_args *f = &a->fwd;
  const kite_dtype t = f->dtype;
  const int64_t D = f->head_dim, sk = f->sk;
  const double scale = f->opts.scale, cap = f->opts.softcap;
  double *dk = acc, *dv = acc + sk * D, *dq = acc + 2 * sk * D;
  for (int64_t b = 0; b < f->batch; b++)
    for (int64_t g = 0; g < f->hkv; g++) {
      const ref_kv kv = ref_dense_kv(f, b, g);
      for (int64_t x = 0; x < 2 * sk * D; x++) acc[x] = 0.0;
      for (int64_t h = 0; h < f->hq; h++) {
        if (ref_kv_head(&f->opts, h, f->hq, f->hkv) != g) continue;
        for (int64_t i = 0; i < f->sq; i++) {
          const ref_mask mask = ref_dense_mask(f, b, h, i);
          const int64_t pos = i + sk - f->sq;
          const int64_t q0 = b * f->q_stride[0] + h * f->q_stride[1] + i * f->q_stride[2];
          const int64_t o0 = b * f->o_stride[0] + h * f->o_stride[1] + i * f->o_stride[2];
          const int64_t g0 = b * a->dout_stride[0] + h * a->dout_stride[1] + i * a->dout_stride[2];
          const double lse = f->lse[b * ls[0] + h * ls[1] + i * ls[2]];
          for (int64_t d = 0; d < D; d++) dq[d] = 0.0;
          double delta = 0.0;
          for (int64_t d = 0; d < D; d++)
            delta += (double)kite_load_f32(t, a->dout, g0 + d) * kite_load_f32(t, f->o, o0 + d);
          if (f->sinks && lse != -INFINITY) dsink[h] -= exp(f->sinks[h] - lse) * delta;
          for (int64_t j = 0; lse != -INFINITY && j < sk; j++) {
            double sc, u;
            if (!ref_score(f->q, q0, &kv, j, pos, &f->opts, &mask, &sc, &u)) continue;
            const double p = exp(u - lse);
            if (p == 0.0) continue; /* masked out by a float mask of -inf */
            double dp = 0.0;
            for (int64_t d = 0; d < D; d++)
              dp += (double)kite_load_f32(t, a->dout, g0 + d) *
                    kite_load_f32(t, kv.v, j * kv.v_stride + d);
            double ds = p * (dp - delta);
            if (cap > 0.0) {
              const double th = tanh(sc / cap);
              ds *= 1.0 - th * th;
            }
            for (int64_t d = 0; d < D; d++) {
              dq[d] += scale * ds * kite_load_f32(t, kv.k, j * kv.k_stride + d);
              dk[j * D + d] += scale * ds * kite_load_f32(t, f->q, q0 + d);
              dv[j * D + d] += p * kite_load_f32(t, a->dout, g0 + d);
            }
          }
          const int64_t dq0 = b * a->dq_stride[0] + h * a->dq_stride[1] + i * a->dq_stride[2];
          for (int64_t d = 0; d < D; d++) kite_store_f64(t, a->dq, dq0 + d, dq[d]);
        }
      }
      for (int64_t j = 0; j < sk; j++) {
        const int64_t k0 = b * a->dk_stride[0] + g * a->dk_stride[1] + j * a->dk_stride[2];
        const int64_t v0 = b * a->dv_stride[0] + g * a->dv_stride[1] + j * a->dv_stride[2];
        for (int64_t d = 0; d < D; d++) {
          kite_store_f64(t, a->dk, k0 + d, dk[j * D + d]);
          kite_store_f64(t, a->dv, v0 + d, dv[j * D + d]);
        }
      }
    }
}

kite_status ref_sdpa_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_sdpa_args *a = args;
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "sdpa: ref: NULL args");
  kite_status s = ref_check("sdpa", KITE_OP_SDPA, a->op, a->dtype);
  if (s != KITE_OK) return s;
  double *scores = malloc((size_t)(a->sk > 0 ? a->sk : 1) * sizeof *scores);
  if (!scores)
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "sdpa: ref: cannot allocate %lld scores",
                          (long long)a->sk);
  const int64_t ls[3] = {a->hq * a->sq, a->sq, 1};
  ref_sdpa_dense(a, a->dtype, ls, scores);
  free(scores);
  return KITE_OK;
}

kite_status ref_sdpa_backward_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_sdpa_backward_args *a = args;
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "sdpa_backward: ref: NULL args");
  kite_status s = ref_check("sdpa_backward", KITE_OP_SDPA_BACKWARD, a->op, a->dtype);
  if (s != KITE_OK) return s;
  const int64_t n = (2 * a->fwd.sk + 1) * a->fwd.head_dim + a->fwd.hq;
  double *acc = calloc((size_t)n, sizeof *acc);
  if (!acc)
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY,
                          "sdpa_backward: ref: cannot allocate %lld "
                          "accumulators",
                          (long long)n);
  const int64_t ls[3] = {a->fwd.hq * a->fwd.sq, a->fwd.sq, 1};
  double *dsink = acc + n - a->fwd.hq;
  ref_sdpa_bwd_dense(a, ls, acc, dsink);
  ref_store_dsinks(a->dsinks, dsink, a->fwd.hq);
  free(acc);
  return KITE_OK;
}

/* Sequence b of a varlen call as a dense problem of batch 1 ([1, H, S, D] views with the token
 * stride as the sequence stride); *ls its lse strides. Sequences are taken as the front-end
 * checked them (host memory). */
static kite_sdpa_args ref_varlen_seq(const kite_sdpa_varlen_args *a, int64_t b, int64_t ls[3]) {
  const size_t es = kite_dtype_size(a->dtype);
  const int64_t t0 = a->cu_seqlens_q[b], s0 = a->cu_seqlens_k[b];
  kite_sdpa_args f = {.op = KITE_OP_SDPA,
                      .dtype = a->dtype,
                      .batch = 1,
                      .hq = a->hq,
                      .hkv = a->hkv,
                      .sq = a->cu_seqlens_q[b + 1] - t0,
                      .sk = a->cu_seqlens_k[b + 1] - s0,
                      .head_dim = a->head_dim,
                      .q = (const char *)a->q + t0 * a->q_stride[0] * es,
                      .q_stride = {0, a->q_stride[1], a->q_stride[0]},
                      .k = (const char *)a->k + s0 * a->k_stride[0] * es,
                      .k_stride = {0, a->k_stride[1], a->k_stride[0]},
                      .v = (const char *)a->v + s0 * a->v_stride[0] * es,
                      .v_stride = {0, a->v_stride[1], a->v_stride[0]},
                      .mask = NULL,
                      .mask_dtype = KITE_DTYPE_U8,
                      .opts = a->opts,
                      .o = (char *)a->o + t0 * a->o_stride[0] * es,
                      .o_stride = {0, a->o_stride[1], a->o_stride[0]},
                      .lse = a->lse ? a->lse + t0 * a->hq : NULL,
                      .sinks = a->sinks};
  ls[0] = 0, ls[1] = 1, ls[2] = a->hq;
  return f;
}

/* The longest key sequence of a varlen call, or -1 when cu_seqlens_k does not hold what the
 * front-end checks. */
static int64_t ref_varlen_max_keys(const kite_sdpa_varlen_args *a) {
  const int32_t *cq = a->cu_seqlens_q, *ck = a->cu_seqlens_k;
  if (cq[0] != 0 || ck[0] != 0 || cq[a->batch] != a->tq || ck[a->batch] != a->tk) return -1;
  int64_t longest = 0;
  for (int64_t b = 0; b < a->batch; b++) {
    if (cq[b + 1] < cq[b] || ck[b + 1] < ck[b]) return -1;
    if (ck[b + 1] - ck[b] > longest) longest = ck[b + 1] - ck[b];
  }
  return longest;
}

kite_status ref_sdpa_varlen_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_sdpa_varlen_args *a = args;
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "sdpa_varlen: ref: NULL args");
  kite_status s = ref_check("sdpa_varlen", KITE_OP_SDPA_VARLEN, a->op, a->dtype);
  if (s != KITE_OK) return s;
  const int64_t longest = ref_varlen_max_keys(a);
  if (longest < 0)
    return kite_set_error(KITE_ERR_INVALID_ARG, "sdpa_varlen: ref: cu_seqlens must start at 0, "
                                                "not decrease and end at Tq / Tk");
  double *scores = malloc((size_t)(longest > 0 ? longest : 1) * sizeof *scores);
  if (!scores)
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "sdpa_varlen: ref: cannot allocate %lld scores",
                          (long long)longest);
  for (int64_t b = 0; b < a->batch; b++) {
    int64_t ls[3];
    const kite_sdpa_args f = ref_varlen_seq(a, b, ls);
    ref_sdpa_dense(&f, f.dtype, ls, scores);
  }
  free(scores);
  return KITE_OK;
}

kite_status ref_sdpa_varlen_backward_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_sdpa_varlen_backward_args *a = args;
  const char *op = "sdpa_varlen_backward";
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "%s: ref: NULL args", op);
  kite_status s = ref_check(op, KITE_OP_SDPA_VARLEN_BACKWARD, a->op, a->dtype);
  if (s != KITE_OK) return s;
  const int64_t longest = ref_varlen_max_keys(&a->fwd);
  if (longest < 0)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: ref: cu_seqlens must start at 0, not "
                          "decrease and end at Tq / Tk",
                          op);
  const int64_t n = (2 * longest + 1) * a->fwd.head_dim + a->fwd.hq;
  double *acc = calloc((size_t)n, sizeof *acc);
  double *dsink = acc ? acc + n - a->fwd.hq : NULL;
  if (!acc)
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: ref: cannot allocate %lld accumulators", op,
                          (long long)n);
  const size_t es = kite_dtype_size(a->dtype);
  for (int64_t b = 0; b < a->fwd.batch; b++) {
    const int64_t t0 = a->fwd.cu_seqlens_q[b], s0 = a->fwd.cu_seqlens_k[b];
    kite_sdpa_backward_args g = {.op = KITE_OP_SDPA_BACKWARD,
                                 .dtype = a->dtype,
                                 .dout = (const char *)a->dout + t0 * a->dout_stride[0] * es,
                                 .dout_stride = {0, a->dout_stride[1], a->dout_stride[0]},
                                 .dq = (char *)a->dq + t0 * a->dq_stride[0] * es,
                                 .dq_stride = {0, a->dq_stride[1], a->dq_stride[0]},
                                 .dk = (char *)a->dk + s0 * a->dk_stride[0] * es,
                                 .dk_stride = {0, a->dk_stride[1], a->dk_stride[0]},
                                 .dv = (char *)a->dv + s0 * a->dv_stride[0] * es,
                                 .dv_stride = {0, a->dv_stride[1], a->dv_stride[0]}};
    int64_t ls[3];
    g.fwd = ref_varlen_seq(&a->fwd, b, ls);
    ref_sdpa_bwd_dense(&g, ls, acc, dsink);
  }
  ref_store_dsinks(a->dsinks, dsink, a->fwd.hq);
  free(acc);
  return KITE_OK;
}

/* sdpa_fp8's rows of x[B, H, S, D] (e4m3 codes, strides st) dequantized: code * the scale of its
 * block of KITE_FP8_ATTN_BLOCK rows, rounded once to f32 (2^-24 relative, far below what any
 * kernel is held to), into a compact [B, H, S, D] buffer (NULL when out of memory). */
static float *ref_dequant_fp8(const uint8_t *x, const int64_t st[3], const float *scale, int64_t B,
                              int64_t H, int64_t S, int64_t D) {
  const int64_t nb = (S + KITE_FP8_ATTN_BLOCK - 1) / KITE_FP8_ATTN_BLOCK, n = B * H * S * D;
  /* n fits int64 (the tensor's numel), its floats may not fit memory (broadcast strides) */
  if ((uint64_t)n > SIZE_MAX / sizeof(float)) return NULL;
  float *out = malloc((size_t)(n > 0 ? n : 1) * sizeof *out);
  if (!out) return NULL;
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < S; i++) {
        const double sc = scale[(b * H + h) * nb + i / KITE_FP8_ATTN_BLOCK];
        const uint8_t *row = x + b * st[0] + h * st[1] + i * st[2];
        float *dst = out + ((b * H + h) * S + i) * D;
        for (int64_t d = 0; d < D; d++) dst[d] = (float)(kite_fp8_e4m3_to_f32(row[d]) * sc);
      }
  return out;
}

/* sdpa_fp8: kite.h's definition literally, sdpa's dense problem over the dequantized inputs. */
kite_status ref_sdpa_fp8_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_sdpa_fp8_args *a = args;
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "sdpa_fp8: ref: NULL args");
  kite_status s = ref_check("sdpa_fp8", KITE_OP_SDPA_FP8, a->op, a->dtype);
  if (s != KITE_OK) return s;
  const int64_t D = a->head_dim;
  float *q = ref_dequant_fp8(a->q, a->q_stride, a->q_scale, a->batch, a->hq, a->sq, D);
  float *kf = ref_dequant_fp8(a->k, a->k_stride, a->k_scale, a->batch, a->hkv, a->sk, D);
  float *v = ref_dequant_fp8(a->v, a->v_stride, a->v_scale, a->batch, a->hkv, a->sk, D);
  double *scores = malloc((size_t)(a->sk > 0 ? a->sk : 1) * sizeof *scores);
  if (q && kf && v && scores) {
    const kite_sdpa_args f = {.op = KITE_OP_SDPA,
                              .dtype = KITE_DTYPE_F32,
                              .batch = a->batch,
                              .hq = a->hq,
                              .hkv = a->hkv,
                              .sq = a->sq,
                              .sk = a->sk,
                              .head_dim = D,
                              .q = q,
                              .q_stride = {a->hq * a->sq * D, a->sq * D, D},
                              .k = kf,
                              .k_stride = {a->hkv * a->sk * D, a->sk * D, D},
                              .v = v,
                              .v_stride = {a->hkv * a->sk * D, a->sk * D, D},
                              .mask_dtype = KITE_DTYPE_U8,
                              .opts = a->opts,
                              .o = a->o,
                              .o_stride = {a->o_stride[0], a->o_stride[1], a->o_stride[2]},
                              .lse = a->lse};
    const int64_t ls[3] = {a->hq * a->sq, a->sq, 1};
    ref_sdpa_dense(&f, a->dtype, ls, scores);
  } else {
    s = kite_set_error(KITE_ERR_OUT_OF_MEMORY, "sdpa_fp8: ref: cannot allocate the dequantized "
                                               "inputs");
  }
  free(q);
  free(kf);
  free(v);
  free(scores);
  return s;
}
