/*
 * The decoder's forward pass over one step (engine/decoder.h). Shapes: T rows of a step,
 * H = n_embd, Hq / Hkv heads of D, Dq = Hq D, Dkv = Hkv D, QKV = Dq + 2 Dkv, F = n_ff,
 * V = n_vocab; under tensor parallelism Hq, Hkv and F are the rank's share (engine/tp.h) and the
 * output projections leave partial sums in delta that the next join sums over the ranks.
 * Weights and step buffers come from decoder_load.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decoder_net.h"

int kr_decoder_layer_is_local(const kr_config *c, int l) {
  return c->swa_window > 0 && (c->swa_pattern <= 1 || l % c->swa_pattern < c->swa_pattern - 1);
}

/* q [T, Hq, D], k and v [T, Hkv, D] of the step: row-strided views of the fused projection, or
 * compact views of the three regions of the split one. */
static void qkv_views(const dec_net *n, int64_t T, kr_tensor *q, kr_tensor *k, kr_tensor *v) {
  const kr_config *c = &n->c;
  const kite_dtype A = n->act;
  const size_t es = kite_dtype_size(A);
  const int64_t Hq = n->n_head, Hkv = n->n_head_kv, D = c->head_dim;
  const int64_t Dq = Hq * D, Dkv = Hkv * D;
  const int64_t q_shape[3] = {T, Hq, D}, kv_shape[3] = {T, Hkv, D};
  uint8_t *base = n->qkv;
  if (n->split_qkv) {
    const size_t cap = (size_t)n->max_tokens;
    const int64_t qs[3] = {Dq, D, 1}, ks[3] = {Dkv, D, 1};
    kr_view(q, n->dev, base, A, 3, q_shape, qs);
    kr_view(k, n->dev, base + cap * (size_t)Dq * es, A, 3, kv_shape, ks);
    kr_view(v, n->dev, base + cap * (size_t)(Dq + Dkv) * es, A, 3, kv_shape, ks);
    return;
  }
  const int64_t s[3] = {n->qkv_dim, D, 1};
  kr_view(q, n->dev, base, A, 3, q_shape, s);
  kr_view(k, n->dev, base + (size_t)Dq * es, A, 3, kv_shape, s);
  kr_view(v, n->dev, base + (size_t)(Dq + Dkv) * es, A, 3, kv_shape, s);
}

/* The q, k and v projections of the normed rows into the qkv buffer (qkv_views' layout). */
static int project_qkv(dec_net *n, const dec_layer *L, int64_t T, char *err, size_t err_len) {
  const kr_config *c = &n->c;
  if (!n->split_qkv)
    return kr_linear(n->ctx, &L->proj[0], n->act, n->normed, T, L->qkv_bias, n->qkv, &n->scratch,
                     err, err_len);
  const size_t es = kite_dtype_size(n->act), cap = (size_t)n->max_tokens;
  const size_t Dq = (size_t)n->n_head * (size_t)c->head_dim;
  const size_t Dkv = (size_t)n->n_head_kv * (size_t)c->head_dim;
  const size_t row_off[3] = {0, cap * Dq * es, cap * (Dq + Dkv) * es};
  const size_t bias_off[3] = {0, Dq * es, (Dq + Dkv) * es};
  for (int i = 0; i < 3; i++) {
    const void *bias = L->qkv_bias ? (const uint8_t *)L->qkv_bias + bias_off[i] : NULL;
    if (kr_linear(n->ctx, &L->proj[i], n->act, n->normed, T, bias, (uint8_t *)n->qkv + row_off[i],
                  &n->scratch, err, err_len))
      return -1;
  }
  return 0;
}

/* Attention of layer l over the step's q into attn [T, Hq, D]: one paged_decode call for the
 * decode rows, one paged_prefill call for the prefill chunks. */
static int attention(dec_net *n, int l, const kr_step *st, const kr_kv_cache *kv, DLTensor *kc,
                     DLTensor *vc, char *err, size_t err_len) {
  const kr_config *c = &n->c;
  const DLDevice d = n->dev;
  const kite_dtype A = n->act;
  const size_t es = kite_dtype_size(A);
  const int64_t Hq = n->n_head, D = c->head_dim, Dq = Hq * D;
  const int64_t q_row = n->split_qkv ? Dq : n->qkv_dim; /* q's row stride */
  const int nd = st->n_decode, np = st->n_seq - st->n_decode;
  const int64_t q_strides[3] = {q_row, D, 1};
  const kr_step_index *ix = st->dev;
  kite_attn_opts opts = kite_attn_opts_default();
  opts.scale = (float)c->attn_scale;
  opts.softcap = (float)c->attn_softcap;
  if (kr_decoder_layer_is_local(c, l)) opts.window_left = c->swa_window - 1;
  if (nd > 0) {
    const int64_t shape[3] = {nd, Hq, D};
    kr_tensor q, out, table, lens;
    KR_CALL(
        kite_paged_decode(n->ctx, kr_view(&q, d, n->qkv, A, 3, shape, q_strides), kc, vc,
                          kr_view2(&table, d, ix->block_table, KITE_DTYPE_I32, nd, kv->max_blocks),
                          kr_view1(&lens, d, ix->seq_lens, KITE_DTYPE_I32, nd), NULL, &opts,
                          kr_view(&out, d, n->attn, A, 3, shape, NULL), NULL));
  }
  if (np > 0) {
    const int64_t shape[3] = {st->n_tok - nd, Hq, D};
    uint8_t *q_rows = (uint8_t *)n->qkv + (size_t)nd * (size_t)q_row * es;
    uint8_t *out_rows = (uint8_t *)n->attn + (size_t)nd * (size_t)Dq * es;
    kr_tensor q, out, table, cu, lens;
    KR_CALL(kite_paged_prefill(n->ctx, kr_view(&q, d, q_rows, A, 3, shape, q_strides), kc, vc,
                               kr_view2(&table, d,
                                        ix->block_table + (size_t)nd * (size_t)kv->max_blocks,
                                        KITE_DTYPE_I32, np, kv->max_blocks),
                               kr_view1(&cu, d, ix->cu_seqlens, KITE_DTYPE_I32, np + 1),
                               kr_view1(&lens, d, ix->seq_lens + nd, KITE_DTYPE_I32, np), NULL,
                               &opts, kr_view(&out, d, out_rows, A, 3, shape, NULL), NULL));
  }
  return 0;
}

/* x[rows, cols] (compact, in place) = rms_norm(x) * w: the per-head q/k norms and the
 * post-norms. */
static int norm_rows(dec_net *n, void *x, int64_t rows, int64_t cols, void *w, char *err,
                     size_t err_len) {
  kr_tensor tx, ty, tw;
  KR_CALL(kite_rms_norm(n->ctx, kr_view2(&tx, n->dev, x, n->act, rows, cols),
                        kr_view1(&tw, n->dev, w, n->act, cols), (float)n->c.rms_eps, 0.0f,
                        kr_view2(&ty, n->dev, x, n->act, rows, cols)));
  return 0;
}

/* delta [T, H] normed by w (Gemma's post-norms; w NULL: nothing to do). Under tensor
 * parallelism delta is a partial sum, summed over the ranks first: the norm needs all of it. */
static int post_norm(dec_net *n, int64_t T, void *w, char *err, size_t err_len) {
  if (!w) return 0;
  if (n->comm) {
    kr_tensor x;
    DLTensor *X = kr_view2(&x, n->dev, n->delta, n->act, T, n->c.n_embd);
    KR_CALL(kite_all_reduce(n->ctx, n->comm, X, X));
  }
  return norm_rows(n, n->delta, T, n->c.n_embd, w, err, err_len);
}

/* The residual joins a block's output and is normed: residual += delta, normed =
 * rms_norm(residual) * w (add_rms_norm, pre). Under tensor parallelism delta is still a partial
 * sum (unless post_norm summed it), summed over the ranks by the same call. */
static int join(dec_net *n, int64_t T, void *w, char *err, size_t err_len) {
  const DLDevice d = n->dev;
  const kite_dtype A = n->act;
  const int64_t H = n->c.n_embd;
  const float eps = (float)n->c.rms_eps;
  kr_tensor delta, residual, tw, normed;
  DLTensor *X = kr_view2(&delta, d, n->delta, A, T, H);
  DLTensor *R = kr_view2(&residual, d, n->residual, A, T, H);
  DLTensor *W = kr_view1(&tw, d, w, A, H);
  DLTensor *Y = kr_view2(&normed, d, n->normed, A, T, H);
  if (n->comm && !n->c.post_norms)
    KR_CALL(kite_all_reduce_add_rms_norm(n->ctx, n->comm, X, R, W, eps, 0.0f, KITE_NORM_PRE, Y));
  else
    KR_CALL(kite_add_rms_norm(n->ctx, X, R, W, eps, 0.0f, KITE_NORM_PRE, Y));
  return 0;
}

/* Attention half of block l: normed rows -> q, k, v (per-head norms, RoPE), cache, attention,
 * output projection into delta (post-normed where the family has it). */
static int attn_half(dec_net *n, int l, const kr_step *st, const kr_kv_cache *kv, char *err,
                     size_t err_len) {
  const kr_config *c = &n->c;
  const dec_layer *L = &n->layers[l];
  const DLDevice d = n->dev;
  const int64_t T = st->n_tok, D = c->head_dim;
  if (project_qkv(n, L, T, err, err_len)) return -1;
  kr_tensor q, k, v, pos, cos_sin, kc, vc, slots;
  qkv_views(n, T, &q, &k, &v);
  /* the split layout keeps q and k compact: [T Hq, D] and [T Hkv, D] rows */
  if (c->qk_norm && (norm_rows(n, q.t.data, T * n->n_head, D, L->q_norm, err, err_len) ||
                     norm_rows(n, k.t.data, T * n->n_head_kv, D, L->k_norm, err, err_len)))
    return -1;
  const int local = kr_decoder_layer_is_local(c, l) && n->cos_sin[1];
  KR_CALL(
      kite_rope(n->ctx, &q.t, &k.t, kr_view1(&pos, d, st->dev->pos, KITE_DTYPE_I32, T),
                kr_view2(&cos_sin, d, n->cos_sin[local], KITE_DTYPE_F32, n->ctx_len, c->rot_dim),
                c->rot_dim, c->rope_style));
  kr_kv_layer(kv, l, d, &kc, &vc);
  KR_CALL(kite_store_kv(n->ctx, &k.t, &v.t, &kc.t, &vc.t,
                        kr_view1(&slots, d, st->dev->slots, KITE_DTYPE_I32, T)));
  if (attention(n, l, st, kv, &kc.t, &vc.t, err, err_len) ||
      kr_linear(n->ctx, &L->o, n->act, n->attn, T, NULL, n->delta, &n->scratch, err, err_len))
    return -1;
  return post_norm(n, T, L->post_attn_norm, err, err_len);
}

/* The dense gated FFN of block l: normed rows -> delta (gate and up in one matrix, the gated
 * activation, down). */
static int ffn_dense(dec_net *n, const dec_layer *L, int64_t T, char *err, size_t err_len) {
  const DLDevice d = n->dev;
  const kite_dtype A = n->act;
  const int64_t F = n->n_ff;
  if (kr_linear(n->ctx, &L->gate_up, A, n->normed, T, NULL, n->gate_up, &n->scratch, err, err_len))
    return -1;
  kr_tensor gate_up, ffn;
  DLTensor *GU = kr_view2(&gate_up, d, n->gate_up, A, T, 2 * F);
  DLTensor *FF = kr_view2(&ffn, d, n->ffn, A, T, F);
  if (n->c.gelu)
    KR_CALL(kite_gelu_tanh_and_mul(n->ctx, GU, 0.0f, FF));
  else
    KR_CALL(kite_silu_and_mul(n->ctx, GU, 0.0f, FF));
  return kr_linear(n->ctx, &L->down, A, n->ffn, T, NULL, n->delta, &n->scratch, err, err_len);
}

/* The mixture-of-experts FFN of block l: router logits [T, E] of the normed rows, softmax
 * top-k routing (kite_moe_route: weights renormalized when expert_norm), then each row's k
 * gated SiLU experts summed with their weights into delta (kite_fused_moe). */
static int ffn_moe(dec_net *n, const dec_layer *L, int64_t T, char *err, size_t err_len) {
  const kr_config *c = &n->c;
  const DLDevice d = n->dev;
  const kite_dtype A = n->act;
  const int64_t H = c->n_embd, E = c->n_expert, K = c->n_expert_used, I = c->n_ff_exp;
  if (kr_linear(n->ctx, &L->router, A, n->normed, T, NULL, n->router, &n->scratch, err, err_len))
    return -1;
  kite_route_opts ro = kite_route_opts_default();
  ro.k = K;
  ro.renormalize = c->expert_norm;
  kr_tensor logits, rw, ids, x, w13, w2, y;
  const int64_t w13_shape[3] = {E, 2 * I, H}, w2_shape[3] = {E, H, I};
  DLTensor *W = kr_view2(&rw, d, n->route_w, KITE_DTYPE_F32, T, K);
  DLTensor *ID = kr_view2(&ids, d, n->route_ids, KITE_DTYPE_I32, T, K);
  KR_CALL(kite_moe_route(n->ctx, kr_view2(&logits, d, n->router, A, T, E), NULL, &ro, W, ID));
  KR_CALL(kite_fused_moe(n->ctx, kr_view2(&x, d, n->normed, A, T, H),
                         kr_view(&w13, d, L->w13, A, 3, w13_shape, NULL),
                         kr_view(&w2, d, L->w2, A, 3, w2_shape, NULL), W, ID, KITE_MOE_SILU,
                         kr_view2(&y, d, n->delta, A, T, H)));
  return 0;
}

/* Block l: residual += attention(norm(residual)); residual += ffn(norm(residual)). The sums
 * run one step late: a block leaves its output in delta, and the next norm adds it
 * (add_rms_norm, pre), so norm and residual update are one call. */
static int block(dec_net *n, int l, const kr_step *st, const kr_kv_cache *kv, char *err,
                 size_t err_len) {
  const kr_config *c = &n->c;
  const dec_layer *L = &n->layers[l];
  const DLDevice d = n->dev;
  const kite_dtype A = n->act;
  const int64_t T = st->n_tok, H = c->n_embd;
  if (l == 0) {
    kr_tensor residual, normed, attn_norm;
    KR_CALL(kite_rms_norm(n->ctx, kr_view2(&residual, d, n->residual, A, T, H),
                          kr_view1(&attn_norm, d, L->attn_norm, A, H), (float)c->rms_eps, 0.0f,
                          kr_view2(&normed, d, n->normed, A, T, H)));
  } else if (join(n, T, L->attn_norm, err, err_len)) {
    return -1;
  }
  if (attn_half(n, l, st, kv, err, err_len) || join(n, T, L->ffn_norm, err, err_len) ||
      (c->n_expert ? ffn_moe : ffn_dense)(n, L, T, err, err_len))
    return -1;
  return post_norm(n, T, L->post_ffn_norm, err, err_len);
}

int kr_decoder_forward(void *p, const kr_step *st, const kr_kv_cache *kv, void *logits, char *err,
                       size_t err_len) {
  dec_net *n = p;
  const kr_config *c = &n->c;
  const DLDevice d = n->dev;
  const kite_dtype A = n->act;
  const int64_t T = st->n_tok, H = c->n_embd;
  kr_tensor ids, embd, residual;
  KR_CALL(kite_embedding(n->ctx, kr_view1(&ids, d, st->dev->ids, KITE_DTYPE_I32, T),
                         kr_view2(&embd, d, n->embd, A, c->n_vocab, H),
                         kr_view2(&residual, d, n->residual, A, T, H)));
  for (int l = 0; l < c->n_layer; l++)
    if (block(n, l, st, kv, err, err_len)) return -1;
  if (join(n, T, n->out_norm, err, err_len)) return -1;
  if (!logits) return 0; /* a tensor-parallel rank other than 0 */
  /* the rows that predict a next token, gathered through the embedding lookup */
  kr_tensor normed, gather, last;
  KR_CALL(kite_embedding(n->ctx, kr_view1(&gather, d, st->dev->gather, KITE_DTYPE_I32, st->n_seq),
                         kr_view2(&normed, d, n->normed, A, T, H),
                         kr_view2(&last, d, n->last, A, st->n_seq, H)));
  return kr_linear(n->ctx, &n->lm_head, A, n->last, st->n_seq, NULL, logits, &n->scratch, err,
                   err_len);
}
