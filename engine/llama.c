/*
 * The llama family (llama, SmolLM, Mistral, Qwen2): pre-norm blocks of RMSNorm, attention with
 * RoPE and grouped kv heads over the paged cache, and a SiLU-gated FFN; q/k/v biases (Qwen2) and
 * tied embeddings where the file has them. Shapes: T rows of a step, H = n_embd, Hq / Hkv heads
 * of D, F = n_ff, V = n_vocab, QKV = (Hq + 2 Hkv) D.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kite/dtype.h>

#include "arch.h"
#include "common.h"
#include "weights.h"

typedef struct llama_layer {
  void *attn_norm, *ffn_norm; /* [H] act */
  kr_weight qkv;              /* [QKV, H]: the q, k and v projections, fused */
  void *qkv_bias;             /* [QKV] act, or NULL */
  kr_weight o;                /* [H, Hq D] */
  kr_weight gate_up;          /* [2F, H]: gate rows, then up rows */
  kr_weight down;             /* [H, F] */
} llama_layer;

typedef struct llama_net {
  kite_ctx *ctx;
  DLDevice dev;
  kr_config c;
  kite_dtype act;
  int64_t qkv_dim; /* QKV */
  int ctx_len;
  void *embd;          /* [V, H] act: the token lookup table */
  kr_weight lm_head;   /* [V, H]; its data is embd's when tied and dense */
  void *out_norm;      /* [H] act */
  llama_layer *layers; /* [n_layer] */
  void *cos_sin;       /* [ctx_len, rot_dim] f32: the RoPE cache */
  /* activations of a step, T = max_tokens rows, B = max_seqs, all act */
  void *residual;            /* [T, H] the residual stream */
  void *normed;              /* [T, H] a block's normed input */
  void *qkv;                 /* [T, QKV] */
  void *attn;                /* [T, Hq D] attention output */
  void *delta;               /* [T, H] a block's output, before it joins the residual */
  void *gate_up;             /* [T, 2F] */
  void *ffn;                 /* [T, F] */
  void *last;                /* [B, H] the normed rows that predict tokens */
  kr_linear_scratch scratch; /* int8 path: xq i8 [T, max(H, F)], xs f32 [T] */
} llama_net;

static int llama_read_config(const kr_gguf *g, kr_config *c, char *err, size_t err_len) {
  const char *a = c->arch;
  if (kr_config_int(g, a, "block_count", 1, 1024, 1, 0, &c->n_layer, err, err_len) ||
      kr_config_int(g, a, "embedding_length", 1, 1 << 16, 1, 0, &c->n_embd, err, err_len) ||
      kr_config_int(g, a, "attention.head_count", 1, 1024, 1, 0, &c->n_head, err, err_len) ||
      kr_config_int(g, a, "attention.head_count_kv", 1, 1024, 0, c->n_head, &c->n_head_kv, err,
                    err_len) ||
      kr_config_int(g, a, "feed_forward_length", 1, 1 << 20, 1, 0, &c->n_ff, err, err_len) ||
      kr_config_int(g, a, "context_length", 1, 1 << 24, 0, 2048, &c->n_ctx, err, err_len))
    return -1;
  if (c->n_embd % c->n_head || c->n_head % c->n_head_kv)
    return kr_errf(err, err_len, "model: %d heads over %d dims / %d kv heads do not divide",
                   c->n_head, c->n_embd, c->n_head_kv);
  c->head_dim = c->n_embd / c->n_head;
  if (kr_config_int(g, a, "attention.key_length", 1, 256, 0, c->head_dim, &c->head_dim, err,
                    err_len) ||
      kr_config_int(g, a, "rope.dimension_count", 2, c->head_dim, 0, c->head_dim, &c->rot_dim, err,
                    err_len))
    return -1;
  if (c->rot_dim % 2) return kr_errf(err, err_len, "model: odd rope dimension %d", c->rot_dim);
  if (kr_config_float(g, a, "rope.freq_base", 10000.0, &c->rope_theta, err, err_len) ||
      kr_config_float(g, a, "attention.layer_norm_rms_epsilon", 1e-5, &c->rms_eps, err, err_len))
    return -1;
  if (!(c->rope_theta > 0) || !(c->rms_eps >= 0))
    return kr_errf(err, err_len, "model: bad rope theta or rms eps");
  /* llama.cpp's converter permutes llama's q/k rows for adjacent-pair rotation; qwen2 keeps the
   * halves */
  c->rope_style = strcmp(a, "qwen2") == 0 ? KITE_ROPE_NEOX : KITE_ROPE_GPTJ;
  const kr_gguf_tensor *e = kr_gguf_tensor_find(g, "token_embd.weight");
  if (!e || e->ne[0] != c->n_embd) return kr_errf(err, err_len, "model: token_embd.weight missing");
  if (e->ne[1] > INT32_MAX)
    return kr_errf(err, err_len, "model: token_embd.weight has %lld rows", (long long)e->ne[1]);
  c->n_vocab = (int)e->ne[1];
  c->tied_embeddings = kr_gguf_tensor_find(g, "output.weight") == NULL;
  c->has_qkv_bias = kr_gguf_tensor_find(g, "blk.0.attn_q.bias") != NULL;
  if (c->n_head * c->head_dim != c->n_embd)
    return kr_errf(err, err_len, "model: heads * head_dim != embedding length");
  return 0;
}

static void llama_free(void *p) {
  llama_net *n = p;
  if (!n) return;
  kite_ctx *ctx = n->ctx;
  if (n->lm_head.data == n->embd) n->lm_head.data = NULL; /* tied: freed as embd */
  kr_weight_free(ctx, &n->lm_head);
  void **bufs[] = {&n->embd, &n->out_norm,   &n->cos_sin,   &n->residual, &n->normed,
                   &n->qkv,  &n->attn,       &n->delta,     &n->gate_up,  &n->ffn,
                   &n->last, &n->scratch.xq, &n->scratch.xs};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) kr_dev_free(ctx, bufs[i]);
  for (int l = 0; n->layers && l < n->c.n_layer; l++) {
    llama_layer *L = &n->layers[l];
    kr_dev_free(ctx, &L->attn_norm);
    kr_dev_free(ctx, &L->ffn_norm);
    kr_dev_free(ctx, &L->qkv_bias);
    kr_weight_free(ctx, &L->qkv);
    kr_weight_free(ctx, &L->o);
    kr_weight_free(ctx, &L->gate_up);
    kr_weight_free(ctx, &L->down);
  }
  free(n->layers);
  free(n);
}

/* Layer l's tensors, checked against the geometry, then loaded. */
static int load_layer(kr_loader *ld, const kr_gguf *g, const kr_config *c, int l, kr_wkind mat,
                      llama_layer *L, char *err, size_t err_len) {
  const int64_t H = c->n_embd, Dq = (int64_t)c->n_head * c->head_dim,
                Dkv = (int64_t)c->n_head_kv * c->head_dim, F = c->n_ff;
  const struct {
    const char *suffix;
    int64_t cols, rows;
  } want[9] = {{"attn_norm.weight", H, 1}, {"ffn_norm.weight", H, 1}, {"attn_q.weight", H, Dq},
               {"attn_k.weight", H, Dkv},  {"attn_v.weight", H, Dkv}, {"attn_output.weight", Dq, H},
               {"ffn_gate.weight", H, F},  {"ffn_up.weight", H, F},   {"ffn_down.weight", F, H}};
  const kr_gguf_tensor *t[9]; /* in want's order */
  for (int i = 0; i < 9; i++) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s", l, want[i].suffix);
    if (!(t[i] = kr_need_tensor(g, name, want[i].cols, want[i].rows, err, err_len))) return -1;
  }
  if (kr_load_vector(ld, &t[0], 1, &L->attn_norm, err, err_len) ||
      kr_load_vector(ld, &t[1], 1, &L->ffn_norm, err, err_len) ||
      kr_load_matrix(ld, &t[2], 3, mat, &L->qkv, err, err_len) ||
      kr_load_matrix(ld, &t[5], 1, mat, &L->o, err, err_len) ||
      kr_load_matrix(ld, &t[6], 2, mat, &L->gate_up, err, err_len) ||
      kr_load_matrix(ld, &t[8], 1, mat, &L->down, err, err_len))
    return -1;
  if (!c->has_qkv_bias) return 0;
  const kr_gguf_tensor *bias[3]; /* q, k, v */
  const char *bn[3] = {"attn_q", "attn_k", "attn_v"};
  const int64_t len[3] = {Dq, Dkv, Dkv};
  for (int i = 0; i < 3; i++) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s.bias", l, bn[i]);
    if (!(bias[i] = kr_need_tensor(g, name, len[i], 1, err, err_len))) return -1;
  }
  return kr_load_vector(ld, bias, 3, &L->qkv_bias, err, err_len);
}

/* The embedding, the output layer and norm, the layers. */
static int load_weights(llama_net *n, kr_loader *ld, const kr_gguf *g, kr_weights mode, char *err,
                        size_t err_len) {
  const kr_config *c = &n->c;
  const int64_t H = c->n_embd, V = c->n_vocab;
  const kr_wkind mat = mode == KR_WEIGHTS_INT8 ? KR_W_INT8
                       : mode == KR_WEIGHTS_Q4 ? KR_W_Q4
                                               : KR_W_DENSE;
  /* matrices not in a block type (f16, f32 embeddings) go int8 in q4 (as stored) mode */
  const kr_wkind other = mode == KR_WEIGHTS_Q4 ? KR_W_INT8 : mat;
  const kr_gguf_tensor *emb = kr_need_tensor(g, "token_embd.weight", H, V, err, err_len);
  if (!emb) return -1;
  kr_weight table; /* the lookup table, in the activation dtype */
  if (kr_load_matrix(ld, &emb, 1, KR_W_DENSE, &table, err, err_len)) return -1;
  n->embd = table.data;
  const kr_gguf_tensor *outw =
      c->tied_embeddings ? emb : kr_need_tensor(g, "output.weight", H, V, err, err_len);
  if (!outw) return -1;
  if (other == KR_W_DENSE && c->tied_embeddings)
    n->lm_head = table;
  else if (kr_load_matrix(ld, &outw, 1, kr_ggml_is_block(outw->type) ? mat : other, &n->lm_head,
                          err, err_len))
    return -1;
  const kr_gguf_tensor *on = kr_need_tensor(g, "output_norm.weight", H, 1, err, err_len);
  if (!on || kr_load_vector(ld, &on, 1, &n->out_norm, err, err_len)) return -1;
  n->layers = calloc((size_t)c->n_layer, sizeof *n->layers);
  if (!n->layers) return kr_errf(err, err_len, "model: out of memory");
  for (int l = 0; l < c->n_layer; l++)
    if (load_layer(ld, g, c, l, mat, &n->layers[l], err, err_len)) return -1;
  return 0;
}

/* The RoPE cache and the step's activation buffers. */
static int alloc_buffers(llama_net *n, const kr_net_params *p, char *err, size_t err_len) {
  const kr_config *c = &n->c;
  const size_t T = (size_t)p->max_tokens, B = (size_t)p->max_seqs, es = kite_dtype_size(n->act);
  const size_t H = (size_t)c->n_embd, F = (size_t)c->n_ff;
  const size_t rope = (size_t)n->ctx_len * (size_t)c->rot_dim;
  float *cs = malloc(rope * sizeof(float)); /* [ctx_len, rot_dim] */
  if (!cs) return kr_errf(err, err_len, "model: out of memory");
  if (kite_rope_cache_build(cs, n->ctx_len, c->rot_dim, c->rope_theta, NULL) != KITE_OK) {
    free(cs);
    return kr_errf(err, err_len, "%s", kite_last_error());
  }
  const int rc = kr_dev_upload(n->ctx, cs, rope * sizeof(float), &n->cos_sin, err, err_len);
  free(cs);
  if (rc) return -1;
  const size_t widest = F > H ? F : H; /* the widest input of a linear layer */
  const struct {
    void **buf;
    size_t bytes;
  } bufs[] = {{&n->residual, T * H * es},
              {&n->normed, T * H * es},
              {&n->qkv, T * (size_t)n->qkv_dim * es},
              {&n->attn, T * H * es},
              {&n->delta, T * H * es},
              {&n->gate_up, T * 2 * F * es},
              {&n->ffn, T * F * es},
              {&n->last, B * H * es},
              {&n->scratch.xq, T * widest},
              {&n->scratch.xs, T * sizeof(float)}};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
    if (kr_dev_alloc(n->ctx, bufs[i].bytes, bufs[i].buf, err, err_len)) return -1;
  return 0;
}

static void *llama_load(kite_ctx *ctx, const kr_gguf *g, const kr_config *c, const kr_net_params *p,
                        kr_net_info *info, char *err, size_t err_len) {
  llama_net *n = calloc(1, sizeof *n);
  if (!n) {
    kr_errf(err, err_len, "model: out of memory");
    return NULL;
  }
  n->ctx = ctx;
  n->dev = kite_ctx_device(ctx);
  n->c = *c;
  n->ctx_len = p->ctx_len;
  n->qkv_dim = (int64_t)(c->n_head + 2 * c->n_head_kv) * c->head_dim;
  const kr_gguf_tensor *q0 = kr_gguf_tensor_find(g, "blk.0.attn_q.weight");
  kr_weights mode = p->weights;
  if (mode == KR_WEIGHTS_AUTO)
    mode = q0 && kr_ggml_default_as_stored(q0->type) ? KR_WEIGHTS_Q4
           : n->dev.device_type == kDLCPU            ? KR_WEIGHTS_F32
                                                     : KR_WEIGHTS_BF16;
  n->act = mode == KR_WEIGHTS_BF16 ? KITE_DTYPE_BF16 : KITE_DTYPE_F32;
  kr_loader ld = {ctx, n->act, 0};
  if (load_weights(n, &ld, g, mode, err, err_len) || alloc_buffers(n, p, err, err_len)) {
    llama_free(n);
    return NULL;
  }
  info->weights = mode;
  info->act = n->act;
  info->weight_bytes = ld.bytes;
  return n;
}

/* Attention of one layer over the step's q [T, Hq, D] (a row-strided view of the fused
 * projection) into attn [T, Hq, D]: one paged_decode call for the decode rows, one
 * paged_prefill call for the prefill chunks. */
static int attention(llama_net *n, const kr_step *st, const kr_kv_cache *kv, DLTensor *kc,
                     DLTensor *vc, char *err, size_t err_len) {
  const kr_config *c = &n->c;
  const DLDevice d = n->dev;
  const kite_dtype A = n->act;
  const size_t es = kite_dtype_size(A);
  const int64_t Hq = c->n_head, D = c->head_dim, QKV = n->qkv_dim, H = c->n_embd;
  const int nd = st->n_decode, np = st->n_seq - st->n_decode;
  const int64_t q_strides[3] = {QKV, D, 1};
  const kr_step_index *ix = st->dev;
  kite_attn_opts opts = kite_attn_opts_default();
  if (nd > 0) {
    const int64_t shape[3] = {nd, Hq, D};
    kr_tensor q, out, table, lens;
    KR_CALL(
        kite_paged_decode(n->ctx, kr_view(&q, d, n->qkv, A, 3, shape, q_strides), kc, vc,
                          kr_view2(&table, d, ix->block_table, KITE_DTYPE_I32, nd, kv->max_blocks),
                          kr_view1(&lens, d, ix->seq_lens, KITE_DTYPE_I32, nd), &opts,
                          kr_view(&out, d, n->attn, A, 3, shape, NULL), NULL));
  }
  if (np > 0) {
    const int64_t shape[3] = {st->n_tok - nd, Hq, D};
    uint8_t *q_rows = (uint8_t *)n->qkv + (size_t)nd * (size_t)QKV * es;
    uint8_t *out_rows = (uint8_t *)n->attn + (size_t)nd * (size_t)H * es;
    kr_tensor q, out, table, cu, lens;
    KR_CALL(kite_paged_prefill(n->ctx, kr_view(&q, d, q_rows, A, 3, shape, q_strides), kc, vc,
                               kr_view2(&table, d,
                                        ix->block_table + (size_t)nd * (size_t)kv->max_blocks,
                                        KITE_DTYPE_I32, np, kv->max_blocks),
                               kr_view1(&cu, d, ix->cu_seqlens, KITE_DTYPE_I32, np + 1),
                               kr_view1(&lens, d, ix->seq_lens + nd, KITE_DTYPE_I32, np), &opts,
                               kr_view(&out, d, out_rows, A, 3, shape, NULL), NULL));
  }
  return 0;
}

/* Block l: residual += attention(norm(residual)); residual += ffn(norm(residual)). The sums
 * run one step late: a block leaves its output in delta, and the next norm adds it
 * (add_rms_norm, pre), so norm and residual update are one call. */
static int block(llama_net *n, int l, const kr_step *st, const kr_kv_cache *kv, char *err,
                 size_t err_len) {
  const kr_config *c = &n->c;
  const llama_layer *L = &n->layers[l];
  const DLDevice d = n->dev;
  const kite_dtype A = n->act;
  const size_t es = kite_dtype_size(A);
  const int64_t T = st->n_tok, H = c->n_embd, Hq = c->n_head, Hkv = c->n_head_kv;
  const int64_t D = c->head_dim, F = c->n_ff, QKV = n->qkv_dim;
  const float eps = (float)c->rms_eps;
  kr_tensor residual, delta, normed, attn_norm;
  DLTensor *R = kr_view2(&residual, d, n->residual, A, T, H);
  DLTensor *Y = kr_view2(&normed, d, n->normed, A, T, H);
  DLTensor *W = kr_view1(&attn_norm, d, L->attn_norm, A, H);
  if (l == 0)
    KR_CALL(kite_rms_norm(n->ctx, R, W, eps, 0.0f, Y));
  else
    KR_CALL(kite_add_rms_norm(n->ctx, kr_view2(&delta, d, n->delta, A, T, H), R, W, eps, 0.0f,
                              KITE_NORM_PRE, Y));
  if (kr_linear(n->ctx, &L->qkv, A, n->normed, T, L->qkv_bias, n->qkv, &n->scratch, err, err_len))
    return -1;
  /* q [T, Hq, D], k and v [T, Hkv, D]: row-strided views of the fused projection */
  const int64_t q_shape[3] = {T, Hq, D}, kv_shape[3] = {T, Hkv, D}, strides[3] = {QKV, D, 1};
  uint8_t *qkv = n->qkv;
  kr_tensor q, k, v, pos, cos_sin, kc, vc, slots;
  DLTensor *Q = kr_view(&q, d, qkv, A, 3, q_shape, strides);
  DLTensor *K = kr_view(&k, d, qkv + (size_t)(Hq * D) * es, A, 3, kv_shape, strides);
  DLTensor *V = kr_view(&v, d, qkv + (size_t)((Hq + Hkv) * D) * es, A, 3, kv_shape, strides);
  KR_CALL(kite_rope(n->ctx, Q, K, kr_view1(&pos, d, st->dev->pos, KITE_DTYPE_I32, T),
                    kr_view2(&cos_sin, d, n->cos_sin, KITE_DTYPE_F32, n->ctx_len, c->rot_dim),
                    c->rot_dim, c->rope_style));
  kr_kv_layer(kv, l, d, &kc, &vc);
  KR_CALL(kite_store_kv(n->ctx, K, V, &kc.t, &vc.t,
                        kr_view1(&slots, d, st->dev->slots, KITE_DTYPE_I32, T)));
  if (attention(n, st, kv, &kc.t, &vc.t, err, err_len) ||
      kr_linear(n->ctx, &L->o, A, n->attn, T, NULL, n->delta, &n->scratch, err, err_len))
    return -1;
  kr_tensor ffn_norm, gate_up, ffn;
  KR_CALL(kite_add_rms_norm(n->ctx, kr_view2(&delta, d, n->delta, A, T, H), R,
                            kr_view1(&ffn_norm, d, L->ffn_norm, A, H), eps, 0.0f, KITE_NORM_PRE,
                            Y));
  if (kr_linear(n->ctx, &L->gate_up, A, n->normed, T, NULL, n->gate_up, &n->scratch, err, err_len))
    return -1;
  KR_CALL(kite_silu_and_mul(n->ctx, kr_view2(&gate_up, d, n->gate_up, A, T, 2 * F), 0.0f,
                            kr_view2(&ffn, d, n->ffn, A, T, F)));
  return kr_linear(n->ctx, &L->down, A, n->ffn, T, NULL, n->delta, &n->scratch, err, err_len);
}

static int llama_forward(void *p, const kr_step *st, const kr_kv_cache *kv, void *logits, char *err,
                         size_t err_len) {
  llama_net *n = p;
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
  kr_tensor delta, out_norm, normed, gather, last;
  KR_CALL(kite_add_rms_norm(n->ctx, kr_view2(&delta, d, n->delta, A, T, H), &residual.t,
                            kr_view1(&out_norm, d, n->out_norm, A, H), (float)c->rms_eps, 0.0f,
                            KITE_NORM_PRE, kr_view2(&normed, d, n->normed, A, T, H)));
  /* the rows that predict a next token, gathered through the embedding lookup */
  KR_CALL(kite_embedding(n->ctx, kr_view1(&gather, d, st->dev->gather, KITE_DTYPE_I32, st->n_seq),
                         &normed.t, kr_view2(&last, d, n->last, A, st->n_seq, H)));
  return kr_linear(n->ctx, &n->lm_head, A, n->last, st->n_seq, NULL, logits, &n->scratch, err,
                   err_len);
}

static const char *const llama_names[] = {"llama", "mistral", "qwen2", NULL};

const kr_arch kr_arch_llama = {
    .names = llama_names,
    .read_config = llama_read_config,
    .load = llama_load,
    .forward = llama_forward,
    .free = llama_free,
};
