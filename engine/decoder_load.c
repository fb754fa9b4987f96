/*
 * The decoder's config reading shared by the families, its weights and its step buffers
 * (engine/decoder.h). Shapes as in decoder.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decoder_net.h"
#include "tp.h"

int kr_decoder_read_common(const kr_gguf *g, kr_config *c, char *err, size_t err_len) {
  const char *a = c->arch;
  if (kr_config_int(g, a, "block_count", 1, 1024, 1, 0, &c->n_layer, err, err_len) ||
      kr_config_int(g, a, "embedding_length", 1, 1 << 16, 1, 0, &c->n_embd, err, err_len) ||
      kr_config_int(g, a, "attention.head_count", 1, 1024, 1, 0, &c->n_head, err, err_len) ||
      kr_config_int(g, a, "attention.head_count_kv", 1, 1024, 0, c->n_head, &c->n_head_kv, err,
                    err_len) ||
      kr_config_int(g, a, "feed_forward_length", 1, 1 << 20, 1, 0, &c->n_ff, err, err_len) ||
      kr_config_int(g, a, "context_length", 1, 1 << 24, 0, 2048, &c->n_ctx, err, err_len))
    return -1;
  if (c->n_head % c->n_head_kv)
    return kr_errf(err, err_len, "model: %d heads do not divide into %d kv heads", c->n_head,
                   c->n_head_kv);
  /* head_dim is embedding_length / head_count unless key_length says otherwise (Qwen3, Gemma) */
  const int def_dim = c->n_embd % c->n_head ? 0 : c->n_embd / c->n_head;
  int v_dim;
  if (kr_config_int(g, a, "attention.key_length", 1, 256, !def_dim, def_dim, &c->head_dim, err,
                    err_len) ||
      kr_config_int(g, a, "attention.value_length", 1, 256, 0, c->head_dim, &v_dim, err, err_len) ||
      kr_config_int(g, a, "rope.dimension_count", 2, c->head_dim, 0, c->head_dim, &c->rot_dim, err,
                    err_len))
    return -1;
  if (v_dim != c->head_dim)
    return kr_errf(err, err_len, "model: %s.attention.value_length %d differs from key_length %d",
                   a, v_dim, c->head_dim);
  if (c->rot_dim % 2) return kr_errf(err, err_len, "model: odd rope dimension %d", c->rot_dim);
  if (kr_config_float(g, a, "rope.freq_base", 10000.0, &c->rope_theta, err, err_len) ||
      kr_config_float(g, a, "attention.layer_norm_rms_epsilon", 1e-5, &c->rms_eps, err, err_len))
    return -1;
  if (!(c->rope_theta > 0) || !(c->rms_eps >= 0))
    return kr_errf(err, err_len, "model: bad rope theta or rms eps");
  c->rope_theta_swa = c->rope_theta;
  c->rope_linear = 1.0;
  const kr_gguf_tensor *e = kr_gguf_tensor_find(g, "token_embd.weight");
  if (!e || e->ne[0] != c->n_embd) return kr_errf(err, err_len, "model: token_embd.weight missing");
  if (e->ne[1] > INT32_MAX)
    return kr_errf(err, err_len, "model: token_embd.weight has %lld rows", (long long)e->ne[1]);
  c->n_vocab = (int)e->ne[1];
  c->tied_embeddings = kr_gguf_tensor_find(g, "output.weight") == NULL;
  c->has_qkv_bias = kr_gguf_tensor_find(g, "blk.0.attn_q.bias") != NULL;
  return 0;
}

int kr_decoder_read_experts(const kr_gguf *g, kr_config *c, char *err, size_t err_len) {
  const char *a = c->arch;
  if (kr_config_int(g, a, "expert_count", 0, 1 << 16, 0, 0, &c->n_expert, err, err_len)) return -1;
  if (c->n_expert == 0) return 0;
  if (kr_config_int(g, a, "expert_used_count", 1, c->n_expert, 1, 0, &c->n_expert_used, err,
                    err_len) ||
      kr_config_int(g, a, "expert_feed_forward_length", 1, 1 << 20, 0, c->n_ff, &c->n_ff_exp, err,
                    err_len))
    return -1;
  /* Mixtral and Qwen3-MoE renormalize the chosen weights (norm_topk_prob), as llama.cpp runs
   * both: their files do not say */
  c->expert_norm = 1;
  return 0;
}

int kr_decoder_read_rope_scaling(const kr_gguf *g, kr_config *c, char *err, size_t err_len) {
  char key[128], msg[256];
  snprintf(key, sizeof key, "%s.rope.scaling.type", c->arch);
  const char *s;
  uint64_t len;
  const int rc = kr_gguf_meta_str(g, key, &s, &len, msg, sizeof msg);
  if (rc < 0) return kr_errf(err, err_len, "model: %s", msg);
  if (rc > 0 || (len == 4 && memcmp(s, "none", 4) == 0)) return 0;
  if (len != 6 || memcmp(s, "linear", 6) != 0)
    return kr_errf(err, err_len, "model: %s '%.*s' not supported (none, linear)", key, (int)len, s);
  if (kr_config_float(g, c->arch, "rope.scaling.factor", 1.0, &c->rope_linear, err, err_len))
    return -1;
  if (!(c->rope_linear >= 1.0) || !isfinite(c->rope_linear))
    return kr_errf(err, err_len, "model: %s.rope.scaling.factor %g is not a finite value >= 1",
                   c->arch, c->rope_linear);
  return 0;
}

void kr_decoder_free(void *p) {
  dec_net *n = p;
  if (!n) return;
  kite_ctx *ctx = n->ctx;
  if (n->lm_head.data == n->embd) n->lm_head.data = NULL; /* tied: freed as embd */
  kr_weight_free(ctx, &n->lm_head);
  void **bufs[] = {&n->embd,    &n->out_norm, &n->cos_sin[0], &n->cos_sin[1], &n->residual,
                   &n->normed,  &n->qkv,      &n->attn,       &n->delta,      &n->gate_up,
                   &n->ffn,     &n->last,     &n->scratch.xq, &n->scratch.xs, &n->router,
                   &n->route_w, &n->route_ids};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) kr_dev_free(ctx, bufs[i]);
  for (int l = 0; n->layers && l < n->c.n_layer; l++) {
    dec_layer *L = &n->layers[l];
    void **vecs[] = {&L->attn_norm, &L->ffn_norm, &L->post_attn_norm, &L->post_ffn_norm,
                     &L->q_norm,    &L->k_norm,   &L->qkv_bias};
    for (size_t i = 0; i < sizeof vecs / sizeof *vecs; i++) kr_dev_free(ctx, vecs[i]);
    for (int i = 0; i < 3; i++) kr_weight_free(ctx, &L->proj[i]);
    kr_weight_free(ctx, &L->o);
    kr_weight_free(ctx, &L->gate_up);
    kr_weight_free(ctx, &L->down);
    kr_weight_free(ctx, &L->router);
    kr_dev_free(ctx, &L->w13);
    kr_dev_free(ctx, &L->w2);
  }
  free(n->layers);
  free(n);
}

/* blk.l.<suffix> with ne [cols, rows], checked. */
static const kr_gguf_tensor *layer_tensor(const kr_gguf *g, int l, const char *suffix, int64_t cols,
                                          int64_t rows, char *err, size_t err_len) {
  char name[96];
  snprintf(name, sizeof name, "blk.%d.%s.weight", l, suffix);
  return kr_need_tensor(g, name, cols, rows, err, err_len);
}

/* The norm vector blk.l.<suffix> of length len into *out. */
static int layer_vector(kr_loader *ld, const kr_gguf *g, int l, const char *suffix, int64_t len,
                        void **out, char *err, size_t err_len) {
  const kr_gguf_tensor *t = layer_tensor(g, l, suffix, len, 1, err, err_len);
  return t ? kr_load_vector(ld, &t, 1, out, err, err_len) : -1;
}

/* The rank's share (engine/tp.h) of matrix t's row sections [first[i], first[i] + count[i]) as
 * one matrix of the given kind (column-parallel). */
static int load_rows(const dec_net *n, kr_loader *ld, const kr_gguf_tensor *t, int n_sec,
                     const int64_t *first, const int64_t *count, kr_wkind mat, kr_weight *w,
                     char *err, size_t err_len) {
  const kr_tp_shard s = {n->rank, n->nranks};
  kr_gguf_tensor part[KR_MAX_PARTS];
  const kr_gguf_tensor *parts[KR_MAX_PARTS];
  const int np = kr_tp_rows(&s, t, n_sec, first, count, part);
  for (int i = 0; i < np; i++) parts[i] = &part[i];
  return kr_load_matrix(ld, parts, np, mat, w, err, err_len);
}

/* The rank's share of matrix t's columns (row-parallel), or of vector t's values. */
static int load_cols(const dec_net *n, kr_loader *ld, const kr_gguf_tensor *t, int vector,
                     kr_wkind mat, void *out, char *err, size_t err_len) {
  const kr_tp_shard s = {n->rank, n->nranks};
  kr_gguf_tensor part;
  void *owned;
  if (kr_tp_cols(&s, t, &part, &owned, err, err_len)) return -1;
  const kr_gguf_tensor *p = &part;
  /* a share that cuts through blocks comes dequantized: where blocks run as stored it runs
   * dense, with the blocks' very values (int8 would round them again) */
  if (mat == KR_W_Q4 && part.type != t->type) mat = KR_W_DENSE;
  const int rc = vector ? kr_load_vector(ld, &p, 1, out, err, err_len)
                        : kr_load_matrix(ld, &p, 1, mat, out, err, err_len);
  free(owned);
  return rc;
}

/* The q, k and v projections (and biases) of layer l: fused in the file (attn_qkv), fused at
 * load (attn_q, attn_k, attn_v rows one after another), or three matrices (split_qkv); each the
 * rank's heads. */
static int load_qkv(const dec_net *n, kr_loader *ld, const kr_gguf *g, int l, kr_wkind mat,
                    dec_layer *L, char *err, size_t err_len) {
  const kr_config *c = &n->c;
  const int64_t H = c->n_embd, Dq = (int64_t)c->n_head * c->head_dim,
                Dkv = (int64_t)c->n_head_kv * c->head_dim;
  const int64_t rows[3] = {Dq, Dkv, Dkv}, first[3] = {0, Dq, Dq + Dkv};
  if (c->fused) {
    const kr_gguf_tensor *t = layer_tensor(g, l, "attn_qkv", H, Dq + 2 * Dkv, err, err_len);
    return t ? load_rows(n, ld, t, 3, first, rows, mat, &L->proj[0], err, err_len) : -1;
  }
  const char *names[3] = {"attn_q", "attn_k", "attn_v"};
  const kr_gguf_tensor *t[3];
  for (int i = 0; i < 3; i++)
    if (!(t[i] = layer_tensor(g, l, names[i], H, rows[i], err, err_len))) return -1;
  const kr_tp_shard s = {n->rank, n->nranks};
  const int64_t zero = 0;
  kr_gguf_tensor part[3];
  const kr_gguf_tensor *parts[3];
  for (int i = 0; i < 3; i++) {
    kr_tp_rows(&s, t[i], 1, &zero, &rows[i], &part[i]);
    parts[i] = &part[i];
  }
  for (int i = 0; i < (n->split_qkv ? 3 : 1); i++)
    if (kr_load_matrix(ld, &parts[i], n->split_qkv ? 1 : 3, mat, &L->proj[i], err, err_len))
      return -1;
  if (!c->has_qkv_bias) return 0;
  const kr_gguf_tensor *bias[3];
  kr_gguf_tensor bias_part[3];
  void *owned[3] = {NULL, NULL, NULL};
  int rc = 0;
  for (int i = 0; i < 3 && !rc; i++) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s.bias", l, names[i]);
    const kr_gguf_tensor *b = kr_need_tensor(g, name, rows[i], 1, err, err_len);
    rc = b ? kr_tp_cols(&s, b, &bias_part[i], &owned[i], err, err_len) : -1;
    bias[i] = &bias_part[i];
  }
  if (!rc) rc = kr_load_vector(ld, bias, 3, &L->qkv_bias, err, err_len);
  for (int i = 0; i < 3; i++) free(owned[i]);
  return rc;
}

/* The experts of MoE layer l: the router [E, H] (dense: the choice of experts is sensitive to
 * its rounding), gate and up experts packed into w13 [E, 2I, H] and the down experts w2
 * [E, H, I], dense in the activation dtype whatever the weights mode (block types decoded at
 * load), for kite_fused_moe. One rank only (kr_tp_check). */
static int load_experts(kr_loader *ld, const kr_gguf *g, int l, const kr_config *c, dec_layer *L,
                        char *err, size_t err_len) {
  const int64_t H = c->n_embd, E = c->n_expert, I = c->n_ff_exp;
  char name[96];
  const char *names[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
  const kr_gguf_tensor *t[3];
  for (int i = 0; i < 3; i++) {
    snprintf(name, sizeof name, "blk.%d.%s.weight", l, names[i]);
    if (!(t[i] = kr_need_tensor3(g, name, i < 2 ? H : I, i < 2 ? I : H, E, err, err_len)))
      return -1;
  }
  const kr_gguf_tensor *router = layer_tensor(g, l, "ffn_gate_inp", H, E, err, err_len);
  return !router || kr_load_matrix(ld, &router, 1, KR_W_DENSE, &L->router, err, err_len) ||
                 kr_load_stacked(ld, t, 2, &L->w13, err, err_len) ||
                 kr_load_stacked(ld, &t[2], 1, &L->w2, err, err_len)
             ? -1
             : 0;
}

/* Layer l's tensors, checked against the geometry, then loaded (the rank's share). */
static int load_layer(const dec_net *n, kr_loader *ld, const kr_gguf *g, int l, kr_wkind mat,
                      dec_layer *L, char *err, size_t err_len) {
  const kr_config *c = &n->c;
  const int64_t H = c->n_embd, Dq = (int64_t)c->n_head * c->head_dim, F = c->n_ff;
  if (layer_vector(ld, g, l, "attn_norm", H, &L->attn_norm, err, err_len) ||
      layer_vector(ld, g, l, "ffn_norm", H, &L->ffn_norm, err, err_len) ||
      load_qkv(n, ld, g, l, mat, L, err, err_len))
    return -1;
  if (c->qk_norm && (layer_vector(ld, g, l, "attn_q_norm", c->head_dim, &L->q_norm, err, err_len) ||
                     layer_vector(ld, g, l, "attn_k_norm", c->head_dim, &L->k_norm, err, err_len)))
    return -1;
  if (c->post_norms &&
      (layer_vector(ld, g, l, "post_attention_norm", H, &L->post_attn_norm, err, err_len) ||
       layer_vector(ld, g, l, "post_ffw_norm", H, &L->post_ffn_norm, err, err_len)))
    return -1;
  const kr_gguf_tensor *o = layer_tensor(g, l, "attn_output", Dq, H, err, err_len);
  if (c->n_expert)
    return !o || load_cols(n, ld, o, 0, mat, &L->o, err, err_len) ||
                   load_experts(ld, g, l, c, L, err, err_len)
               ? -1
               : 0;
  const kr_gguf_tensor *down = o ? layer_tensor(g, l, "ffn_down", F, H, err, err_len) : NULL;
  if (!down || load_cols(n, ld, o, 0, mat, &L->o, err, err_len) ||
      load_cols(n, ld, down, 0, mat, &L->down, err, err_len))
    return -1;
  const int64_t first[2] = {0, F}, count[2] = {F, F};
  const kr_gguf_tensor *gu; /* gate rows, then up rows */
  if (c->fused) {
    if (!(gu = layer_tensor(g, l, "ffn_up", H, 2 * F, err, err_len))) return -1;
    return load_rows(n, ld, gu, 2, first, count, mat, &L->gate_up, err, err_len);
  }
  const kr_gguf_tensor *gate = layer_tensor(g, l, "ffn_gate", H, F, err, err_len);
  if (!gate || !(gu = layer_tensor(g, l, "ffn_up", H, F, err, err_len))) return -1;
  const kr_tp_shard s = {n->rank, n->nranks};
  kr_gguf_tensor part[2];
  kr_tp_rows(&s, gate, 1, first, count, &part[0]);
  kr_tp_rows(&s, gu, 1, first, count, &part[1]);
  const kr_gguf_tensor *parts[2] = {&part[0], &part[1]};
  return kr_load_matrix(ld, parts, 2, mat, &L->gate_up, err, err_len);
}

/* The embedding, the output layer and norm, the layers. */
static int load_weights(dec_net *n, kr_loader *ld, const kr_gguf *g, kr_weights mode, char *err,
                        size_t err_len) {
  const kr_config *c = &n->c;
  const int64_t H = c->n_embd, V = c->n_vocab;
  const kr_wkind mat = mode == KR_WEIGHTS_INT8 ? KR_W_INT8
                       : mode == KR_WEIGHTS_Q4 ? KR_W_Q4
                                               : KR_W_DENSE;
  /* matrices that are not 4-bit in the file (the embedding, Q8_0) go int8 in q4 mode */
  const kr_wkind other = mode == KR_WEIGHTS_Q4 ? KR_W_INT8 : mat;
  const kr_gguf_tensor *emb = kr_need_tensor(g, "token_embd.weight", H, V, err, err_len);
  if (!emb) return -1;
  const float scale = c->embd_scale > 0 ? (float)c->embd_scale : 1.0f;
  kr_weight table; /* the lookup table, in the activation dtype, times embd_scale */
  ld->scale = scale;
  const int rc = kr_load_matrix(ld, &emb, 1, KR_W_DENSE, &table, err, err_len);
  ld->scale = 1.0f;
  if (rc) return -1;
  n->embd = table.data;
  const kr_gguf_tensor *outw =
      c->tied_embeddings ? emb : kr_need_tensor(g, "output.weight", H, V, err, err_len);
  if (!outw) return -1;
  const int shared = other == KR_W_DENSE && c->tied_embeddings;
  if (shared)
    n->lm_head = table;
  else if (n->rank == 0 && kr_load_matrix(ld, &outw, 1, kr_ggml_is_block(outw->type) ? mat : other,
                                          &n->lm_head, err, err_len))
    return -1;
  /* a shared scaled table scales the logits: the output norm takes it back out */
  const kr_gguf_tensor *on = kr_need_tensor(g, "output_norm.weight", H, 1, err, err_len);
  if (!on) return -1;
  ld->scale = shared ? 1.0f / scale : 1.0f;
  const int rn = kr_load_vector(ld, &on, 1, &n->out_norm, err, err_len);
  ld->scale = 1.0f;
  if (rn) return -1;
  n->layers = calloc((size_t)c->n_layer, sizeof *n->layers);
  if (!n->layers) return kr_errf(err, err_len, "model: out of memory");
  for (int l = 0; l < c->n_layer; l++)
    if (load_layer(n, ld, g, l, mat, &n->layers[l], err, err_len)) return -1;
  return 0;
}

/* The RoPE cache of base theta into *out; the global one (local 0) takes the linear scaling
 * and rope_freqs.weight's divisors (f32 [rot_dim / 2]: llama.cpp's form of Llama 3.1 scaling). */
static int rope_cache(dec_net *n, const kr_gguf *g, double theta, int local, void **out, char *err,
                      size_t err_len) {
  const kr_config *c = &n->c;
  const int64_t half = c->rot_dim / 2;
  const size_t count = (size_t)n->ctx_len * (size_t)c->rot_dim;
  const kr_gguf_tensor *ff = NULL;
  if (!local && c->rope_freqs) {
    ff = kr_gguf_tensor_find(g, "rope_freqs.weight");
    if (!ff || ff->type != KR_GGML_F32 || ff->n_dims != 1 || ff->ne[0] != half)
      return kr_errf(err, err_len, "model: rope_freqs.weight is not f32 [%lld]", (long long)half);
  }
  float *cs = malloc(count * sizeof(float)); /* [ctx_len, rot_dim] */
  if (!cs) return kr_errf(err, err_len, "model: out of memory");
  const kite_rope_scaling lin = {.type = KITE_ROPE_SCALING_LINEAR, .factor = c->rope_linear};
  const kite_rope_scaling *scaling = !local && c->rope_linear != 1.0 ? &lin : NULL;
  if (kite_rope_cache_build(cs, n->ctx_len, c->rot_dim, theta, scaling) != KITE_OK) {
    free(cs);
    return kr_errf(err, err_len, "%s", kite_last_error());
  }
  if (ff) /* the same table over the divided frequencies: row p = cos, then sin, of p f_i */
    for (int64_t i = 0; i < half; i++) {
      float div;
      memcpy(&div, (const uint8_t *)ff->data + (size_t)i * sizeof div, sizeof div);
      const double f = pow(theta, -2.0 * (double)i / (double)c->rot_dim) / div / c->rope_linear;
      for (int64_t p = 0; p < n->ctx_len; p++) {
        cs[p * c->rot_dim + i] = (float)cos((double)p * f);
        cs[p * c->rot_dim + half + i] = (float)sin((double)p * f);
      }
    }
  const int rc = kr_dev_upload(n->ctx, cs, count * sizeof(float), out, err, err_len);
  free(cs);
  return rc;
}

/* The RoPE caches and the step's activation buffers. */
static int alloc_buffers(dec_net *n, const kr_gguf *g, const kr_net_params *p, char *err,
                         size_t err_len) {
  const kr_config *c = &n->c;
  const size_t T = (size_t)p->max_tokens, B = (size_t)p->max_seqs, es = kite_dtype_size(n->act);
  const size_t H = (size_t)c->n_embd, F = (size_t)n->n_ff;
  const size_t Dq = (size_t)n->n_head * (size_t)c->head_dim;
  int any_local = 0;
  for (int l = 0; l < c->n_layer; l++) any_local |= kr_decoder_layer_is_local(c, l);
  /* local layers need a cache of their own where their base or scaling differs */
  const int two =
      any_local && (c->rope_theta_swa != c->rope_theta || c->rope_linear != 1.0 || c->rope_freqs);
  if (rope_cache(n, g, c->rope_theta, 0, &n->cos_sin[0], err, err_len) ||
      (two && rope_cache(n, g, c->rope_theta_swa, 1, &n->cos_sin[1], err, err_len)))
    return -1;
  size_t widest = F > H ? F : H; /* the widest input of a linear layer */
  if (Dq > widest) widest = Dq;
  const struct {
    void **buf;
    size_t bytes;
  } bufs[] = {{&n->residual, T * H * es},
              {&n->normed, T * H * es},
              {&n->qkv, T * (size_t)n->qkv_dim * es},
              {&n->attn, T * Dq * es},
              {&n->delta, T * H * es},
              {&n->gate_up, T * 2 * F * es},
              {&n->ffn, T * F * es},
              {&n->last, B * H * es},
              {&n->scratch.xq, T * widest},
              {&n->scratch.xs, T * sizeof(float)},
              /* MoE routing (none without experts) */
              {&n->router, T * (size_t)c->n_expert * es},
              {&n->route_w, T * (size_t)c->n_expert_used * sizeof(float)},
              {&n->route_ids, T * (size_t)c->n_expert_used * sizeof(int32_t)}};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
    if (bufs[i].bytes && kr_dev_alloc(n->ctx, bufs[i].bytes, bufs[i].buf, err, err_len)) return -1;
  return 0;
}

void *kr_decoder_load(kite_ctx *ctx, const kr_gguf *g, const kr_config *c, const kr_net_params *p,
                      kr_net_info *info, char *err, size_t err_len) {
  dec_net *n = calloc(1, sizeof *n);
  if (!n) {
    kr_errf(err, err_len, "model: out of memory");
    return NULL;
  }
  n->ctx = ctx;
  n->dev = kite_ctx_device(ctx);
  n->c = *c;
  n->ctx_len = p->ctx_len;
  n->max_tokens = p->max_tokens;
  n->split_qkv = c->qk_norm;
  n->comm = p->comm;
  n->rank = p->rank;
  n->nranks = p->nranks > 1 ? p->nranks : 1;
  if (kr_tp_check(c, n->nranks, err, err_len)) {
    free(n);
    return NULL;
  }
  n->n_head = c->n_head / n->nranks;
  n->n_head_kv = c->n_head_kv / n->nranks;
  n->n_ff = c->n_ff / n->nranks;
  n->qkv_dim = (int64_t)(n->n_head + 2 * n->n_head_kv) * c->head_dim;
  const kr_gguf_tensor *q0 =
      kr_gguf_tensor_find(g, c->fused ? "blk.0.attn_qkv.weight" : "blk.0.attn_q.weight");
  kr_weights mode = p->weights;
  if (mode == KR_WEIGHTS_AUTO)
    mode = q0 && kr_ggml_default_as_stored(q0->type) ? KR_WEIGHTS_Q4
           : n->dev.device_type == kDLCPU            ? KR_WEIGHTS_F32
                                                     : KR_WEIGHTS_BF16;
  n->act = mode == KR_WEIGHTS_BF16 ? KITE_DTYPE_BF16 : KITE_DTYPE_F32;
  /* q4 on the CPU: GGUF blocks with 8-bit activations and integer dot products, as llama.cpp's
   * CPU path runs them (kite.h's linear_gguf_q8) */
  kr_loader ld = {ctx, n->act, 0, 1.0f, mode == KR_WEIGHTS_Q4 && n->dev.device_type == kDLCPU};
  if (load_weights(n, &ld, g, mode, err, err_len) || alloc_buffers(n, g, p, err, err_len)) {
    kr_decoder_free(n);
    return NULL;
  }
  info->weights = mode;
  info->act = n->act;
  info->weight_bytes = ld.bytes;
  return n;
}
