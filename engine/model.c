#include "model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <kite/backend.h>
#include <kite/dtype.h>

/* ---- tensors -------------------------------------------------------------------------------- */
/* A DLTensor with its own shape and strides (so a view can be built in place). */
typedef struct tens {
  DLTensor t;
  int64_t shape[4], strides[4];
} tens;

static DLTensor *view(tens *v, DLDevice dev, void *data, kite_dtype dt, int nd,
                      const int64_t *shape, const int64_t *strides) {
  memset(v, 0, sizeof *v);
  v->t.data = data;
  v->t.device = dev;
  v->t.ndim = nd;
  v->t.dtype = kite_dtype_dlpack(dt);
  for (int i = 0; i < nd; i++) v->shape[i] = shape[i];
  v->t.shape = v->shape;
  if (strides) {
    for (int i = 0; i < nd; i++) v->strides[i] = strides[i];
    v->t.strides = v->strides;
  }
  return &v->t;
}

/* Compact 1-D and 2-D views. */
static DLTensor *v1(tens *v, DLDevice dev, void *data, kite_dtype dt, int64_t n) {
  return view(v, dev, data, dt, 1, &n, NULL);
}
static DLTensor *v2(tens *v, DLDevice dev, void *data, kite_dtype dt, int64_t r, int64_t c) {
  int64_t s[2] = {r, c};
  return view(v, dev, data, dt, 2, s, NULL);
}

/* ---- weights -------------------------------------------------------------------------------- */
typedef enum wkind { W_DENSE, W_INT8, W_Q4 } wkind;
typedef struct weight {
  wkind kind;
  kite_dtype dtype;       /* W_DENSE: element type */
  kite_wq4_format format; /* W_Q4 */
  int64_t n, k;           /* rows (outputs), columns (inputs) */
  void *data;             /* device */
  float *scales;          /* W_INT8: f32 [n] on the device */
} weight;

typedef struct layer {
  void *attn_norm, *ffn_norm; /* [H] in the activation dtype */
  weight qkv, o, gate_up, down;
  void *qkv_bias; /* [QKV] or NULL */
} layer;

typedef enum seq_state { SEQ_WAITING, SEQ_RUNNING, SEQ_DONE } seq_state;
typedef struct seq {
  int32_t *tok;
  size_t n_tok, cap;
  size_t n_cached; /* tokens whose keys and values are in the cache */
  int max_new, n_new;
  int32_t *blocks;
  int n_blocks;
  seq_state state;
} seq;

struct kr_model {
  kite_ctx *ctx;
  DLDevice dev;
  kr_config c;
  kr_weights mode;
  kite_dtype act; /* activation dtype */
  size_t weight_bytes;
  int qkv_dim;
  void *embd;     /* [V, H] act dtype: the lookup table */
  weight lm_head; /* [V, H] */
  void *out_norm; /* [H] */
  layer *layers;
  void *cos_sin; /* [ctx_len, rot_dim] f32 */
  void **kcache, **vcache;
  int block_size, num_blocks, max_blocks, ctx_len, max_batch, max_tokens;
  /* step buffers on the device; the index arrays are views of one buffer (d_idx) that one copy
   * per step fills from its host mirror (h_idx), since each kite_memcpy synchronizes */
  void *d_idx, *d_ids, *d_pos, *d_slots, *d_table, *d_seq_lens, *d_cu, *d_gather, *d_next;
  void *d_temp, *d_topk, *d_topp, *d_seeds, *d_steps; /* per-row sampling parameters */
  int64_t *h_seeds, *h_steps;
  void *res, *y, *qkv, *attn, *delta, *gu, *ffn, *xq, *xs, *fin, *logits;
  /* the same index arrays on the host: views of h_idx laid out as d_idx */
  int32_t *h_idx, *h_ids, *h_pos, *h_slots, *h_table, *h_seq_lens, *h_cu, *h_gather, *h_next;
  int *h_step_seq;
  /* block allocator */
  int32_t *free_blocks;
  int n_free;
  seq *seqs;
  int n_seqs, cap_seqs;
  kr_stats stats;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int errf(char *err, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
  return -1;
}

#define KCALL(call)                                                                                \
  do {                                                                                             \
    kite_status st_ = (call);                                                                      \
    if (st_ != KITE_OK) return errf(err, err_len, "%s", kite_last_error());                        \
  } while (0)

const char *kr_weights_name(kr_weights w) {
  switch (w) {
  case KR_WEIGHTS_F32:
    return "f32";
  case KR_WEIGHTS_BF16:
    return "bf16";
  case KR_WEIGHTS_INT8:
    return "int8";
  case KR_WEIGHTS_Q4:
    return "q4";
  default:
    return "auto";
  }
}

/* Row r of a GGUF tensor (ne[0] = cols values) as f32. */
static void dequant_row(const kr_gguf_tensor *t, int64_t r, float *out) {
  int64_t cols = t->ne[0];
  uint64_t bv, bb;
  kr_ggml_block(t->type, &bv, &bb);
  const uint8_t *row = (const uint8_t *)t->data + (uint64_t)r * ((uint64_t)cols / bv * bb);
  switch (t->type) {
  case KR_GGML_F32:
    memcpy(out, row, (size_t)cols * 4);
    break;
  case KR_GGML_F16:
    for (int64_t i = 0; i < cols; i++) {
      uint16_t h;
      memcpy(&h, row + 2 * i, 2);
      out[i] = kite_f16_to_f32(h);
    }
    break;
  case KR_GGML_BF16:
    for (int64_t i = 0; i < cols; i++) {
      uint16_t h;
      memcpy(&h, row + 2 * i, 2);
      out[i] = kite_bf16_to_f32(h);
    }
    break;
  default:
    for (int64_t b = 0; b < cols / 32; b++) {
      const uint8_t *blk = row + b * (int64_t)bb;
      uint16_t h;
      memcpy(&h, blk, 2);
      float d = kite_f16_to_f32(h), mn = 0;
      float *o = out + 32 * b;
      if (t->type == KR_GGML_Q8_0) {
        for (int i = 0; i < 32; i++) o[i] = d * (float)(int8_t)blk[2 + i];
        continue;
      }
      const uint8_t *qs = blk + 2;
      if (t->type == KR_GGML_Q4_1) {
        memcpy(&h, blk + 2, 2);
        mn = kite_f16_to_f32(h);
        qs = blk + 4;
      }
      int off = t->type == KR_GGML_Q4_0 ? 8 : 0;
      for (int i = 0; i < 16; i++) {
        o[i] = (float)((qs[i] & 15) - off) * d + mn;
        o[i + 16] = (float)((qs[i] >> 4) - off) * d + mn;
      }
    }
    break;
  }
}

static int dequant_ok(uint32_t type) {
  return type == KR_GGML_F32 || type == KR_GGML_F16 || type == KR_GGML_BF16 ||
         type == KR_GGML_Q8_0 || type == KR_GGML_Q4_0 || type == KR_GGML_Q4_1;
}

static int dev_upload(kr_model *m, const void *host, size_t bytes, void **out, char *err,
                      size_t err_len) {
  KCALL(kite_malloc(m->ctx, bytes ? bytes : 1, out));
  if (bytes) KCALL(kite_memcpy(m->ctx, *out, host, bytes, KITE_COPY_HOST_TO_DEVICE));
  m->weight_bytes += bytes;
  return 0;
}

static const kr_gguf_tensor *need(const kr_gguf *g, const char *name, int64_t cols, int64_t rows,
                                  char *err, size_t err_len) {
  const kr_gguf_tensor *t = kr_gguf_tensor_find(g, name);
  if (!t) {
    errf(err, err_len, "model: tensor %s missing", name);
    return NULL;
  }
  if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1) {
    errf(err, err_len, "model: tensor %s is [%lld, %lld], expected [%lld, %lld] (ne order)", name,
         (long long)t->ne[0], (long long)t->ne[1], (long long)cols, (long long)rows);
    return NULL;
  }
  if (!dequant_ok(t->type)) {
    errf(err, err_len, "model: tensor %s has type %s (f32, f16, bf16, q8_0, q4_0, q4_1 load)", name,
         kr_ggml_type_name(t->type) ? kr_ggml_type_name(t->type) : "?");
    return NULL;
  }
  return t;
}

/* A vector ([H] norm weight or bias) in the activation dtype on the device. */
static int load_vec(kr_model *m, const kr_gguf_tensor *const *parts, int n_parts, void **out,
                    char *err, size_t err_len) {
  int64_t total = 0;
  for (int i = 0; i < n_parts; i++) total += parts[i]->ne[0];
  float *f = malloc((size_t)total * 4);
  uint16_t *h = malloc((size_t)total * 2);
  if (!f || !h) {
    free(f);
    free(h);
    return errf(err, err_len, "model: out of memory");
  }
  int64_t at = 0;
  for (int i = 0; i < n_parts; i++) {
    dequant_row(parts[i], 0, f + at);
    at += parts[i]->ne[0];
  }
  int rc;
  if (m->act == KITE_DTYPE_BF16) {
    for (int64_t i = 0; i < total; i++) h[i] = kite_f32_to_bf16(f[i]);
    rc = dev_upload(m, h, (size_t)total * 2, out, err, err_len);
  } else {
    rc = dev_upload(m, f, (size_t)total * 4, out, err, err_len);
  }
  free(f);
  free(h);
  return rc;
}

/* A matrix made of the rows of `parts` one after another ([sum rows, K]) in the given kind. */
static int load_mat(kr_model *m, const kr_gguf_tensor *const *parts, int n_parts, wkind kind,
                    weight *w, char *err, size_t err_len) {
  int64_t k = parts[0]->ne[0], n = 0;
  for (int i = 0; i < n_parts; i++) n += parts[i]->ne[1];
  memset(w, 0, sizeof *w);
  w->kind = kind;
  w->n = n;
  w->k = k;
  if (kind == W_Q4) {
    uint32_t t0 = parts[0]->type;
    for (int i = 0; i < n_parts; i++)
      if (parts[i]->type != t0 || (t0 != KR_GGML_Q4_0 && t0 != KR_GGML_Q4_1)) kind = W_INT8;
    if (kind == W_Q4) {
      w->format = t0 == KR_GGML_Q4_0 ? KITE_WQ4_SYM : KITE_WQ4_MIN;
      size_t bytes = 0;
      for (int i = 0; i < n_parts; i++) bytes += parts[i]->nbytes;
      uint8_t *buf = malloc(bytes);
      if (!buf) return errf(err, err_len, "model: out of memory");
      size_t at = 0;
      for (int i = 0; i < n_parts; i++) {
        memcpy(buf + at, parts[i]->data, parts[i]->nbytes);
        at += parts[i]->nbytes;
      }
      int rc = dev_upload(m, buf, bytes, &w->data, err, err_len);
      free(buf);
      return rc;
    }
    w->kind = kind;
  }
  float *row = malloc((size_t)k * 4);
  size_t esz = kind == W_INT8 ? 1 : kite_dtype_size(m->act);
  uint8_t *buf = malloc((size_t)n * (size_t)k * esz);
  float *scales = malloc((size_t)n * 4);
  if (!row || !buf || !scales) {
    free(row);
    free(buf);
    free(scales);
    return errf(err, err_len, "model: out of memory");
  }
  w->dtype = m->act;
  int64_t r = 0;
  for (int i = 0; i < n_parts; i++)
    for (int64_t j = 0; j < parts[i]->ne[1]; j++, r++) {
      dequant_row(parts[i], j, row);
      uint8_t *dst = buf + (size_t)r * (size_t)k * esz;
      if (kind == W_INT8) {
        /* per-row symmetric int8, as kite_quant does for activations */
        float amax = 0;
        for (int64_t x = 0; x < k; x++) amax = fmaxf(amax, fabsf(row[x]));
        float s = amax / 127.0f;
        scales[r] = s;
        for (int64_t x = 0; x < k; x++)
          ((int8_t *)dst)[x] = s > 0 ? (int8_t)lrintf(fminf(fmaxf(row[x] / s, -127), 127)) : 0;
      } else {
        for (int64_t x = 0; x < k; x++) kite_store_f32(m->act, dst, x, row[x]);
      }
    }
  int rc = dev_upload(m, buf, (size_t)n * (size_t)k * esz, &w->data, err, err_len);
  if (!rc && kind == W_INT8)
    rc = dev_upload(m, scales, (size_t)n * 4, (void **)&w->scales, err, err_len);
  free(row);
  free(buf);
  free(scales);
  return rc;
}

static int cfg_int(const kr_gguf *g, const char *arch, const char *key, int64_t lo, int64_t hi,
                   int required, int def, int *out, char *err, size_t err_len) {
  char name[128];
  snprintf(name, sizeof name, "%s.%s", arch, key);
  int64_t v;
  if (kr_gguf_get_int(g, name, &v)) {
    if (required) return errf(err, err_len, "model: metadata %s missing", name);
    *out = def;
    return 0;
  }
  if (v < lo || v > hi)
    return errf(err, err_len, "model: %s = %lld outside [%lld, %lld]", name, (long long)v,
                (long long)lo, (long long)hi);
  *out = (int)v;
  return 0;
}

static int read_config(const kr_gguf *g, kr_config *c, char *err, size_t err_len) {
  const char *a;
  uint64_t alen;
  memset(c, 0, sizeof *c);
  if (kr_gguf_get_str(g, "general.architecture", &a, &alen) || alen >= sizeof c->arch)
    return errf(err, err_len, "model: general.architecture missing");
  memcpy(c->arch, a, alen);
  c->arch[alen] = 0;
  int qwen2 = strcmp(c->arch, "qwen2") == 0;
  if (strcmp(c->arch, "llama") && strcmp(c->arch, "mistral") && !qwen2)
    return errf(err, err_len, "model: architecture '%s' not supported (llama, mistral, qwen2)",
                c->arch);
  if (cfg_int(g, c->arch, "block_count", 1, 1024, 1, 0, &c->n_layer, err, err_len) ||
      cfg_int(g, c->arch, "embedding_length", 1, 1 << 16, 1, 0, &c->n_embd, err, err_len) ||
      cfg_int(g, c->arch, "attention.head_count", 1, 1024, 1, 0, &c->n_head, err, err_len) ||
      cfg_int(g, c->arch, "attention.head_count_kv", 1, 1024, 0, c->n_head, &c->n_head_kv, err,
              err_len) ||
      cfg_int(g, c->arch, "feed_forward_length", 1, 1 << 20, 1, 0, &c->n_ff, err, err_len) ||
      cfg_int(g, c->arch, "context_length", 1, 1 << 24, 0, 2048, &c->n_ctx, err, err_len))
    return -1;
  if (c->n_embd % c->n_head || c->n_head % c->n_head_kv)
    return errf(err, err_len, "model: %d heads over %d dims / %d kv heads do not divide", c->n_head,
                c->n_embd, c->n_head_kv);
  c->head_dim = c->n_embd / c->n_head;
  if (cfg_int(g, c->arch, "attention.key_length", 1, 256, 0, c->head_dim, &c->head_dim, err,
              err_len) ||
      cfg_int(g, c->arch, "rope.dimension_count", 2, c->head_dim, 0, c->head_dim, &c->rot_dim, err,
              err_len))
    return -1;
  if (c->rot_dim % 2) return errf(err, err_len, "model: odd rope dimension %d", c->rot_dim);
  char name[128];
  snprintf(name, sizeof name, "%s.rope.freq_base", c->arch);
  if (kr_gguf_get_float(g, name, &c->rope_theta)) c->rope_theta = 10000.0;
  snprintf(name, sizeof name, "%s.attention.layer_norm_rms_epsilon", c->arch);
  if (kr_gguf_get_float(g, name, &c->rms_eps)) c->rms_eps = 1e-5;
  if (!(c->rope_theta > 0) || !(c->rms_eps >= 0))
    return errf(err, err_len, "model: bad rope theta or rms eps");
  /* llama.cpp's converter permutes llama's q/k rows for adjacent-pair rotation; qwen2 keeps the
   * halves */
  c->rope_style = qwen2 ? KITE_ROPE_NEOX : KITE_ROPE_GPTJ;
  const kr_gguf_tensor *e = kr_gguf_tensor_find(g, "token_embd.weight");
  if (!e || e->ne[0] != c->n_embd) return errf(err, err_len, "model: token_embd.weight missing");
  c->n_vocab = (int)e->ne[1];
  c->tied_embeddings = kr_gguf_tensor_find(g, "output.weight") == NULL;
  c->has_qkv_bias = kr_gguf_tensor_find(g, "blk.0.attn_q.bias") != NULL;
  return 0;
}

static int alloc_dev(kr_model *m, size_t bytes, void **out, char *err, size_t err_len) {
  KCALL(kite_malloc(m->ctx, bytes ? bytes : 1, out));
  return 0;
}

static int build(kr_model *m, const kr_gguf *g, const kr_model_params *p, char *err,
                 size_t err_len) {
  kr_config *c = &m->c;
  if (read_config(g, c, err, err_len)) return -1;
  int H = c->n_embd, D = c->head_dim, Hq = c->n_head, Hkv = c->n_head_kv, F = c->n_ff;
  int V = c->n_vocab;
  m->qkv_dim = (Hq + 2 * Hkv) * D;
  if (Hq * D != H) return errf(err, err_len, "model: heads * head_dim != embedding length");

  const kr_gguf_tensor *q0 = kr_gguf_tensor_find(g, "blk.0.attn_q.weight");
  int file_q4 = q0 && (q0->type == KR_GGML_Q4_0 || q0->type == KR_GGML_Q4_1);
  m->mode = p->weights;
  if (m->mode == KR_WEIGHTS_AUTO)
    m->mode = file_q4                        ? KR_WEIGHTS_Q4
              : m->dev.device_type == kDLCPU ? KR_WEIGHTS_F32
                                             : KR_WEIGHTS_BF16;
  m->act = m->mode == KR_WEIGHTS_BF16 ? KITE_DTYPE_BF16 : KITE_DTYPE_F32;
  wkind mat = m->mode == KR_WEIGHTS_INT8 ? W_INT8 : m->mode == KR_WEIGHTS_Q4 ? W_Q4 : W_DENSE;
  /* matrices that are not 4-bit in the file (the embedding, Q8_0) go int8 in q4 mode */
  wkind other = m->mode == KR_WEIGHTS_Q4 ? W_INT8 : mat;

  const kr_gguf_tensor *emb = need(g, "token_embd.weight", H, V, err, err_len);
  if (!emb) return -1;
  /* the lookup table, in the activation dtype */
  weight tab;
  wkind saved = mat;
  (void)saved;
  if (load_mat(m, &emb, 1, W_DENSE, &tab, err, err_len)) return -1;
  m->embd = tab.data;
  const kr_gguf_tensor *outw =
      c->tied_embeddings ? emb : need(g, "output.weight", H, V, err, err_len);
  if (!outw) return -1;
  if (other == W_DENSE && c->tied_embeddings) {
    m->lm_head = tab;
  } else if (load_mat(m, &outw, 1,
                      outw->type == KR_GGML_Q4_0 || outw->type == KR_GGML_Q4_1 ? mat : other,
                      &m->lm_head, err, err_len)) {
    return -1;
  }
  const kr_gguf_tensor *on = need(g, "output_norm.weight", H, 1, err, err_len);
  if (!on || load_vec(m, &on, 1, &m->out_norm, err, err_len)) return -1;

  m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
  if (!m->layers) return errf(err, err_len, "model: out of memory");
  for (int l = 0; l < c->n_layer; l++) {
    layer *L = &m->layers[l];
    char n[8][64];
    const char *suffix[8] = {"attn_norm", "ffn_norm",    "attn_q",   "attn_k",
                             "attn_v",    "attn_output", "ffn_gate", "ffn_up"};
    for (int i = 0; i < 8; i++) snprintf(n[i], sizeof n[i], "blk.%d.%s.weight", l, suffix[i]);
    char dn[64];
    snprintf(dn, sizeof dn, "blk.%d.ffn_down.weight", l);
    const kr_gguf_tensor *an = need(g, n[0], H, 1, err, err_len);
    const kr_gguf_tensor *fn = an ? need(g, n[1], H, 1, err, err_len) : NULL;
    const kr_gguf_tensor *qkv[3] = {fn ? need(g, n[2], H, Hq * D, err, err_len) : NULL};
    if (qkv[0]) qkv[1] = need(g, n[3], H, Hkv * D, err, err_len);
    if (qkv[1]) qkv[2] = need(g, n[4], H, Hkv * D, err, err_len);
    const kr_gguf_tensor *o = qkv[2] ? need(g, n[5], Hq * D, H, err, err_len) : NULL;
    const kr_gguf_tensor *gu[2] = {o ? need(g, n[6], H, F, err, err_len) : NULL};
    if (gu[0]) gu[1] = need(g, n[7], H, F, err, err_len);
    const kr_gguf_tensor *down = gu[1] ? need(g, dn, F, H, err, err_len) : NULL;
    if (!down) return -1;
    if (load_vec(m, &an, 1, &L->attn_norm, err, err_len) ||
        load_vec(m, &fn, 1, &L->ffn_norm, err, err_len) ||
        load_mat(m, qkv, 3, mat, &L->qkv, err, err_len) ||
        load_mat(m, &o, 1, mat, &L->o, err, err_len) ||
        load_mat(m, gu, 2, mat, &L->gate_up, err, err_len) ||
        load_mat(m, &down, 1, mat, &L->down, err, err_len))
      return -1;
    if (c->has_qkv_bias) {
      const kr_gguf_tensor *b[3];
      const char *bn[3] = {"attn_q", "attn_k", "attn_v"};
      int64_t len[3] = {Hq * D, Hkv * D, Hkv * D};
      for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.%s.bias", l, bn[i]);
        if (!(b[i] = need(g, name, len[i], 1, err, err_len))) return -1;
      }
      if (load_vec(m, b, 3, &L->qkv_bias, err, err_len)) return -1;
    }
  }

  /* serving buffers */
  m->block_size = p->block_size > 0 ? p->block_size : 16;
  m->ctx_len = p->ctx_len > 0 ? p->ctx_len : (c->n_ctx < 4096 ? c->n_ctx : 4096);
  m->max_batch = p->max_batch > 0 ? p->max_batch : 1;
  m->max_tokens = p->max_tokens >= m->max_batch ? p->max_tokens : m->max_batch + 255;
  m->max_blocks = (m->ctx_len + m->block_size - 1) / m->block_size;
  m->num_blocks = p->num_blocks > 0 ? p->num_blocks : m->max_blocks * m->max_batch;
  float *cs = malloc((size_t)m->ctx_len * (size_t)c->rot_dim * 4);
  if (!cs) return errf(err, err_len, "model: out of memory");
  if (kite_rope_cache_build(cs, m->ctx_len, c->rot_dim, c->rope_theta, NULL) != KITE_OK) {
    free(cs);
    return errf(err, err_len, "%s", kite_last_error());
  }
  int rc =
      dev_upload(m, cs, (size_t)m->ctx_len * (size_t)c->rot_dim * 4, &m->cos_sin, err, err_len);
  free(cs);
  if (rc) return -1;
  m->weight_bytes -= (size_t)m->ctx_len * (size_t)c->rot_dim * 4;

  size_t es = kite_dtype_size(m->act);
  size_t cache = (size_t)m->num_blocks * (size_t)Hkv * (size_t)m->block_size * (size_t)D * es;
  m->kcache = calloc((size_t)c->n_layer, sizeof *m->kcache);
  m->vcache = calloc((size_t)c->n_layer, sizeof *m->vcache);
  if (!m->kcache || !m->vcache) return errf(err, err_len, "model: out of memory");
  for (int l = 0; l < c->n_layer; l++)
    if (alloc_dev(m, cache, &m->kcache[l], err, err_len) ||
        alloc_dev(m, cache, &m->vcache[l], err, err_len))
      return -1;
  size_t T = (size_t)m->max_tokens, B = (size_t)m->max_tokens; /* a step may hold T sequences */
  size_t KQ = (size_t)(F > H ? F : H);
  /* the index arrays, in int32 units: ids, pos, slots [T]; seq_lens, gather [B]; cu [B + 1];
   * then the block table [B, max_blocks] last, so a step copies a prefix */
  const size_t idx_off[8] = {0,
                             T,
                             2 * T,
                             3 * T,
                             3 * T + B,
                             3 * T + 2 * B,
                             3 * T + 3 * B + 1,
                             3 * T + 3 * B + 1 + B * (size_t)m->max_blocks};
  m->h_idx = calloc(idx_off[7], 4);
  if (!m->h_idx) return errf(err, err_len, "model: out of memory");
  if (alloc_dev(m, idx_off[7] * 4, &m->d_idx, err, err_len)) return -1;
  int32_t *const di = m->d_idx, *const hi = m->h_idx;
  m->d_ids = di, m->h_ids = hi;
  m->d_pos = di + idx_off[1], m->h_pos = hi + idx_off[1];
  m->d_slots = di + idx_off[2], m->h_slots = hi + idx_off[2];
  m->d_seq_lens = di + idx_off[3], m->h_seq_lens = hi + idx_off[3];
  m->d_gather = di + idx_off[4], m->h_gather = hi + idx_off[4];
  m->d_cu = di + idx_off[5], m->h_cu = hi + idx_off[5];
  m->d_table = di + idx_off[6], m->h_table = hi + idx_off[6];
  if (alloc_dev(m, B * 4, &m->d_next, err, err_len) ||
      alloc_dev(m, B * 4, &m->d_temp, err, err_len) ||
      alloc_dev(m, B * 4, &m->d_topk, err, err_len) ||
      alloc_dev(m, B * 4, &m->d_topp, err, err_len) ||
      alloc_dev(m, B * 8, &m->d_seeds, err, err_len) ||
      alloc_dev(m, B * 8, &m->d_steps, err, err_len) ||
      alloc_dev(m, T * (size_t)H * es, &m->res, err, err_len) ||
      alloc_dev(m, T * (size_t)H * es, &m->y, err, err_len) ||
      alloc_dev(m, T * (size_t)m->qkv_dim * es, &m->qkv, err, err_len) ||
      alloc_dev(m, T * (size_t)H * es, &m->attn, err, err_len) ||
      alloc_dev(m, T * (size_t)H * es, &m->delta, err, err_len) ||
      alloc_dev(m, T * 2 * (size_t)F * es, &m->gu, err, err_len) ||
      alloc_dev(m, T * (size_t)F * es, &m->ffn, err, err_len) ||
      alloc_dev(m, T * KQ, &m->xq, err, err_len) || alloc_dev(m, T * 4, &m->xs, err, err_len) ||
      alloc_dev(m, B * (size_t)H * es, &m->fin, err, err_len) ||
      alloc_dev(m, B * (size_t)V * es, &m->logits, err, err_len))
    return -1;
  m->h_next = calloc(B, 4);
  m->h_step_seq = calloc(B, sizeof(int));
  m->h_seeds = calloc(B, 8);
  m->h_steps = calloc(B, 8);
  m->free_blocks = malloc((size_t)m->num_blocks * 4);
  if (!m->h_next || !m->h_step_seq || !m->h_seeds || !m->h_steps || !m->free_blocks)
    return errf(err, err_len, "model: out of memory");
  kr_reset(m);
  return 0;
}

kr_model *kr_model_load(kite_ctx *ctx, const kr_gguf *g, const kr_model_params *p, char *err,
                        size_t err_len) {
  kr_model *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->ctx = ctx;
  m->dev = kite_ctx_device(ctx);
  if (build(m, g, p, err, err_len)) {
    kr_model_free(m);
    return NULL;
  }
  return m;
}

static void free_weight(kr_model *m, weight *w) {
  if (w->data) kite_free(m->ctx, w->data);
  if (w->scales) kite_free(m->ctx, w->scales);
}

void kr_model_free(kr_model *m) {
  if (!m) return;
  kite_ctx *ctx = m->ctx;
  if (m->lm_head.data != m->embd) free_weight(m, &m->lm_head);
  void *bufs[] = {m->embd, m->out_norm, m->cos_sin, m->d_idx,  m->d_next, m->res,     m->y,
                  m->qkv,  m->attn,     m->delta,   m->gu,     m->ffn,    m->xq,      m->xs,
                  m->fin,  m->logits,   m->d_temp,  m->d_topk, m->d_topp, m->d_seeds, m->d_steps};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
    if (bufs[i]) kite_free(ctx, bufs[i]);
  for (int l = 0; m->layers && l < m->c.n_layer; l++) {
    layer *L = &m->layers[l];
    if (L->attn_norm) kite_free(ctx, L->attn_norm);
    if (L->ffn_norm) kite_free(ctx, L->ffn_norm);
    if (L->qkv_bias) kite_free(ctx, L->qkv_bias);
    free_weight(m, &L->qkv);
    free_weight(m, &L->o);
    free_weight(m, &L->gate_up);
    free_weight(m, &L->down);
  }
  for (int l = 0; l < m->c.n_layer; l++) {
    if (m->kcache && m->kcache[l]) kite_free(ctx, m->kcache[l]);
    if (m->vcache && m->vcache[l]) kite_free(ctx, m->vcache[l]);
  }
  for (int i = 0; i < m->n_seqs; i++) {
    free(m->seqs[i].tok);
    free(m->seqs[i].blocks);
  }
  free(m->seqs);
  free(m->layers);
  free(m->kcache);
  free(m->vcache);
  free(m->h_idx);
  free(m->h_next);
  free(m->h_step_seq);
  free(m->h_seeds);
  free(m->h_steps);
  free(m->free_blocks);
  free(m);
}

const kr_config *kr_model_config(const kr_model *m) {
  return &m->c;
}
kr_weights kr_model_weights(const kr_model *m) {
  return m->mode;
}
size_t kr_model_weight_bytes(const kr_model *m) {
  return m->weight_bytes;
}
void kr_model_stats(const kr_model *m, kr_stats *out) {
  *out = m->stats;
}

int kr_model_num_blocks(const kr_model *m) {
  return m->num_blocks;
}
int kr_model_free_blocks(const kr_model *m) {
  return m->n_free;
}

void kr_reset(kr_model *m) {
  for (int i = 0; i < m->n_seqs; i++) {
    free(m->seqs[i].tok);
    free(m->seqs[i].blocks);
  }
  m->n_seqs = 0;
  m->n_free = m->num_blocks;
  for (int i = 0; i < m->num_blocks; i++) m->free_blocks[i] = m->num_blocks - 1 - i;
  memset(&m->stats, 0, sizeof m->stats);
}

/* ---- forward -------------------------------------------------------------------------------- */
/* y[rows, w.n] = x[rows, w.k] w^T (+ bias), through the op that fits the weight's kind. */
static int lin(kr_model *m, const weight *w, const void *x, int64_t rows, const void *bias, void *y,
               char *err, size_t err_len) {
  tens tx, tw, tb, ty, tq, ts, tws;
  DLDevice d = m->dev;
  DLTensor *X = v2(&tx, d, (void *)x, m->act, rows, w->k);
  DLTensor *Y = v2(&ty, d, y, m->act, rows, w->n);
  DLTensor *Bi = bias ? v1(&tb, d, (void *)bias, m->act, w->n) : NULL;
  switch (w->kind) {
  case W_DENSE:
    KCALL(kite_linear(m->ctx, X, v2(&tw, d, w->data, w->dtype, w->n, w->k), Bi, Y));
    return 0;
  case W_INT8: {
    DLTensor *Q = v2(&tq, d, m->xq, KITE_DTYPE_I8, rows, w->k);
    DLTensor *S = v1(&ts, d, m->xs, KITE_DTYPE_F32, rows);
    KCALL(kite_quant(m->ctx, X, Q, S));
    KCALL(kite_linear_quant(m->ctx, Q, S, v2(&tw, d, w->data, KITE_DTYPE_I8, w->n, w->k),
                            v1(&tws, d, w->scales, KITE_DTYPE_F32, w->n), Bi, Y));
    return 0;
  }
  case W_Q4: {
    int64_t bb = w->format == KITE_WQ4_SYM ? 18 : 20;
    KCALL(kite_linear_wq4(m->ctx, X, v2(&tw, d, w->data, KITE_DTYPE_U8, w->n, w->k / 32 * bb),
                          w->format, Bi, Y));
    return 0;
  }
  }
  return errf(err, err_len, "model: bad weight kind");
}

/* One forward pass over n_tok tokens: rows [0, nd) are decode tokens of sequences [0, nd) of the
 * step, rows [nd, n_tok) prefill chunks of sequences [nd, n_seq). Index arrays are on the
 * device. Leaves the logits of the n_seq gathered rows in m->logits. */
static int forward(kr_model *m, int n_tok, int nd, int n_seq, char *err, size_t err_len) {
  const kr_config *c = &m->c;
  DLDevice d = m->dev;
  kite_dtype A = m->act;
  int64_t H = c->n_embd, D = c->head_dim, Hq = c->n_head, Hkv = c->n_head_kv, F = c->n_ff;
  int64_t QKV = m->qkv_dim, T = n_tok;
  size_t es = kite_dtype_size(A);
  float eps = (float)c->rms_eps;
  tens t[16];
  kite_attn_opts opts = kite_attn_opts_default();

  KCALL(kite_embedding(m->ctx, v1(&t[0], d, m->d_ids, KITE_DTYPE_I32, T),
                       v2(&t[1], d, m->embd, A, c->n_vocab, H), v2(&t[2], d, m->res, A, T, H)));
  for (int l = 0; l < c->n_layer; l++) {
    layer *L = &m->layers[l];
    DLTensor *Y = v2(&t[0], d, m->y, A, T, H);
    DLTensor *W = v1(&t[1], d, L->attn_norm, A, H);
    if (l == 0)
      KCALL(kite_rms_norm(m->ctx, v2(&t[2], d, m->res, A, T, H), W, eps, 0.0f, Y));
    else
      KCALL(kite_add_rms_norm(m->ctx, v2(&t[2], d, m->delta, A, T, H),
                              v2(&t[3], d, m->res, A, T, H), W, eps, 0.0f, KITE_NORM_PRE, Y));
    if (lin(m, &L->qkv, m->y, T, L->qkv_bias, m->qkv, err, err_len)) return -1;
    /* q, k, v: row-strided views of the fused projection */
    uint8_t *qkv = m->qkv;
    int64_t qs[3] = {T, Hq, D}, ks[3] = {T, Hkv, D}, st[3] = {QKV, D, 1};
    DLTensor *Q = view(&t[4], d, qkv, A, 3, qs, st);
    DLTensor *K = view(&t[5], d, qkv + (size_t)(Hq * D) * es, A, 3, ks, st);
    DLTensor *Vv = view(&t[6], d, qkv + (size_t)((Hq + Hkv) * D) * es, A, 3, ks, st);
    DLTensor *P = v1(&t[7], d, m->d_pos, KITE_DTYPE_I32, T);
    KCALL(kite_rope(m->ctx, Q, K, P,
                    v2(&t[8], d, m->cos_sin, KITE_DTYPE_F32, m->ctx_len, c->rot_dim), c->rot_dim,
                    c->rope_style));
    int64_t cs[4] = {m->num_blocks, Hkv, m->block_size, D};
    DLTensor *KC = view(&t[9], d, m->kcache[l], A, 4, cs, NULL);
    DLTensor *VC = view(&t[10], d, m->vcache[l], A, 4, cs, NULL);
    KCALL(kite_store_kv(m->ctx, K, Vv, KC, VC, v1(&t[11], d, m->d_slots, KITE_DTYPE_I32, T)));
    int64_t os[3] = {0, Hq, D};
    if (nd > 0) {
      qs[0] = os[0] = nd;
      DLTensor *Qd = view(&t[4], d, qkv, A, 3, qs, st);
      DLTensor *Od = view(&t[12], d, m->attn, A, 3, os, NULL);
      KCALL(kite_paged_decode(m->ctx, Qd, KC, VC,
                              v2(&t[13], d, m->d_table, KITE_DTYPE_I32, nd, m->max_blocks),
                              v1(&t[14], d, m->d_seq_lens, KITE_DTYPE_I32, nd), &opts, Od, NULL));
    }
    if (n_seq > nd) {
      int np = n_seq - nd;
      qs[0] = os[0] = T - nd;
      DLTensor *Qp = view(&t[4], d, qkv + (size_t)(nd * QKV) * es, A, 3, qs, st);
      DLTensor *Op = view(&t[12], d, (uint8_t *)m->attn + (size_t)(nd * H) * es, A, 3, os, NULL);
      KCALL(kite_paged_prefill(
          m->ctx, Qp, KC, VC,
          v2(&t[13], d, (int32_t *)m->d_table + (size_t)nd * (size_t)m->max_blocks, KITE_DTYPE_I32,
             np, m->max_blocks),
          v1(&t[15], d, m->d_cu, KITE_DTYPE_I32, np + 1),
          v1(&t[14], d, (int32_t *)m->d_seq_lens + nd, KITE_DTYPE_I32, np), &opts, Op, NULL));
    }
    if (lin(m, &L->o, m->attn, T, NULL, m->delta, err, err_len)) return -1;
    KCALL(kite_add_rms_norm(m->ctx, v2(&t[2], d, m->delta, A, T, H), v2(&t[3], d, m->res, A, T, H),
                            v1(&t[1], d, L->ffn_norm, A, H), eps, 0.0f, KITE_NORM_PRE,
                            v2(&t[0], d, m->y, A, T, H)));
    if (lin(m, &L->gate_up, m->y, T, NULL, m->gu, err, err_len)) return -1;
    KCALL(kite_silu_and_mul(m->ctx, v2(&t[4], d, m->gu, A, T, 2 * F), 0.0f,
                            v2(&t[5], d, m->ffn, A, T, F)));
    if (lin(m, &L->down, m->ffn, T, NULL, m->delta, err, err_len)) return -1;
  }
  KCALL(kite_add_rms_norm(m->ctx, v2(&t[2], d, m->delta, A, T, H), v2(&t[3], d, m->res, A, T, H),
                          v1(&t[1], d, m->out_norm, A, H), eps, 0.0f, KITE_NORM_PRE,
                          v2(&t[0], d, m->y, A, T, H)));
  /* the rows that predict a next token, gathered through the embedding lookup */
  KCALL(kite_embedding(m->ctx, v1(&t[4], d, m->d_gather, KITE_DTYPE_I32, n_seq),
                       v2(&t[5], d, m->y, A, T, H), v2(&t[6], d, m->fin, A, n_seq, H)));
  return lin(m, &m->lm_head, m->fin, n_seq, NULL, m->logits, err, err_len);
}

/* ---- scheduling ----------------------------------------------------------------------------- */
int kr_submit(kr_model *m, const int32_t *prompt, size_t n, int max_new, char *err,
              size_t err_len) {
  if (n == 0) return errf(err, err_len, "submit: empty prompt");
  if (n + 1 > (size_t)m->ctx_len)
    return errf(err, err_len, "submit: prompt of %zu tokens does not fit a context of %d", n,
                m->ctx_len);
  for (size_t i = 0; i < n; i++)
    if (prompt[i] < 0 || prompt[i] >= m->c.n_vocab)
      return errf(err, err_len, "submit: token %d outside the vocabulary", prompt[i]);
  if ((n + (size_t)m->block_size) / (size_t)m->block_size > (size_t)m->num_blocks)
    return errf(err, err_len, "submit: prompt needs more KV blocks than the cache has");
  if (m->n_seqs == m->cap_seqs) {
    int c = m->cap_seqs ? 2 * m->cap_seqs : 8;
    seq *s = realloc(m->seqs, (size_t)c * sizeof *s);
    if (!s) return errf(err, err_len, "submit: out of memory");
    m->seqs = s;
    m->cap_seqs = c;
  }
  seq *s = &m->seqs[m->n_seqs];
  memset(s, 0, sizeof *s);
  s->cap = n + (size_t)(max_new > 0 ? max_new : 0) + 1;
  s->tok = malloc(s->cap * 4);
  s->blocks = malloc((size_t)m->max_blocks * 4);
  if (!s->tok || !s->blocks) {
    free(s->tok);
    free(s->blocks);
    return errf(err, err_len, "submit: out of memory");
  }
  memcpy(s->tok, prompt, n * 4);
  s->n_tok = n;
  s->max_new = max_new;
  s->state = SEQ_WAITING;
  return m->n_seqs++;
}

/* Gives s blocks to cover `upto` positions; 0, or -1 when the cache is full. */
static int grow_blocks(kr_model *m, seq *s, size_t upto) {
  int need = (int)((upto + (size_t)m->block_size - 1) / (size_t)m->block_size);
  if (need > m->max_blocks) return -1;
  if (need - s->n_blocks > m->n_free) return -1;
  while (s->n_blocks < need) s->blocks[s->n_blocks++] = m->free_blocks[--m->n_free];
  return 0;
}

static void finish(kr_model *m, seq *s) {
  s->state = SEQ_DONE;
  while (s->n_blocks > 0) m->free_blocks[m->n_free++] = s->blocks[--s->n_blocks];
}

int kr_generate(kr_model *m, const kr_sampling *sp, kr_token_fn on_token, kr_stop_fn stop,
                void *user, char *err, size_t err_len) {
  /* the sampling settings, the same for every row: uploaded once */
  const int greedy = !sp || sp->temperature <= 0;
  if (!greedy) {
    size_t B = (size_t)m->max_tokens;
    float *f = calloc(B, 4);
    int32_t *k = calloc(B, 4);
    if (!f || !k) {
      free(f);
      free(k);
      return errf(err, err_len, "generate: out of memory");
    }
    kite_status st = KITE_OK;
    for (size_t i = 0; i < B; i++) f[i] = sp->temperature, k[i] = sp->top_k;
    st = kite_memcpy(m->ctx, m->d_temp, f, B * 4, KITE_COPY_HOST_TO_DEVICE);
    if (st == KITE_OK) st = kite_memcpy(m->ctx, m->d_topk, k, B * 4, KITE_COPY_HOST_TO_DEVICE);
    for (size_t i = 0; i < B; i++) f[i] = sp->top_p;
    if (st == KITE_OK) st = kite_memcpy(m->ctx, m->d_topp, f, B * 4, KITE_COPY_HOST_TO_DEVICE);
    free(f);
    free(k);
    if (st != KITE_OK) return errf(err, err_len, "%s", kite_last_error());
  }
  for (;;) {
    int n_seq = 0, n_tok = 0, nd = 0, any = 0;
    /* decode: running sequences whose prompt is in the cache */
    for (int i = 0; i < m->n_seqs && n_seq < m->max_batch; i++) {
      seq *s = &m->seqs[i];
      if (s->state != SEQ_RUNNING || s->n_cached + 1 != s->n_tok) continue;
      if (grow_blocks(m, s, s->n_tok)) {
        finish(m, s); /* the cache is full: the sequence ends here */
        continue;
      }
      m->h_step_seq[n_seq++] = i;
      nd++;
    }
    /* prefill: running sequences with prompt left, then waiting ones while blocks last */
    for (int pass = 0; pass < 2; pass++)
      for (int i = 0; i < m->n_seqs && n_seq < m->max_batch; i++) {
        seq *s = &m->seqs[i];
        if (pass == 0 ? !(s->state == SEQ_RUNNING && s->n_cached + 1 < s->n_tok)
                      : s->state != SEQ_WAITING)
          continue;
        int budget = m->max_tokens - nd - n_tok;
        if (budget <= 0) break;
        size_t left = s->n_tok - s->n_cached;
        size_t q = left < (size_t)budget ? left : (size_t)budget;
        if (grow_blocks(m, s, s->n_cached + q)) continue; /* waits for blocks */
        s->state = SEQ_RUNNING;
        m->h_step_seq[n_seq++] = i;
        n_tok += (int)q;
      }
    if (n_seq == 0) {
      for (int i = 0; i < m->n_seqs; i++) any |= m->seqs[i].state != SEQ_DONE;
      if (!any) return 0;
      return errf(err, err_len, "generate: the KV cache cannot hold any waiting prompt");
    }
    /* index arrays: decode rows first, then the prefill chunks */
    int row = 0;
    m->h_cu[0] = 0;
    int n_out = 0;
    for (int j = 0; j < n_seq; j++) {
      seq *s = &m->seqs[m->h_step_seq[j]];
      size_t q = j < nd ? 1 : 0;
      if (j >= nd) {
        size_t left = s->n_tok - s->n_cached;
        int budget = m->max_tokens - row;
        q = left < (size_t)budget ? left : (size_t)budget;
      }
      for (size_t i = 0; i < q; i++, row++) {
        size_t p = s->n_cached + i;
        m->h_ids[row] = s->tok[p];
        m->h_pos[row] = (int32_t)p;
        m->h_slots[row] = s->blocks[p / (size_t)m->block_size] * m->block_size +
                          (int32_t)(p % (size_t)m->block_size);
      }
      memcpy(m->h_table + (size_t)j * (size_t)m->max_blocks, s->blocks, (size_t)s->n_blocks * 4);
      for (int b = s->n_blocks; b < m->max_blocks; b++)
        m->h_table[(size_t)j * (size_t)m->max_blocks + (size_t)b] = 0;
      m->h_seq_lens[j] = (int32_t)(s->n_cached + q);
      if (j >= nd) m->h_cu[j - nd + 1] = row - nd;
      m->h_gather[j] = row - 1;
      s->n_cached += q;
      n_out++;
    }
    n_tok = row;
    double t0 = now_s();
    kite_ctx *ctx = m->ctx;
    /* one copy for every index array: the prefix up to this step's rows of the block table */
    const size_t idx_bytes =
        (size_t)((const char *)(m->h_table + (size_t)n_seq * (size_t)m->max_blocks) -
                 (const char *)m->h_idx);
    KCALL(kite_memcpy(ctx, m->d_idx, m->h_idx, idx_bytes, KITE_COPY_HOST_TO_DEVICE));
    if (forward(m, n_tok, nd, n_seq, err, err_len)) return -1;
    /* one sampling call for every row: greedy through argmax, else each sequence draws from
     * its own seed (the run's seed + its index) at its own step, so a request gets the same
     * tokens whatever else runs beside it */
    tens tl, tt, tp[5];
    DLTensor *L = v2(&tl, m->dev, m->logits, m->act, n_seq, m->c.n_vocab);
    DLTensor *Tk = v1(&tt, m->dev, m->d_next, KITE_DTYPE_I32, n_seq);
    if (greedy) {
      KCALL(kite_argmax(ctx, L, Tk));
    } else {
      for (int j = 0; j < n_seq; j++) {
        m->h_seeds[j] = (int64_t)(sp->seed + (uint64_t)m->h_step_seq[j]);
        m->h_steps[j] = m->seqs[m->h_step_seq[j]].n_new;
      }
      KCALL(kite_memcpy(ctx, m->d_seeds, m->h_seeds, (size_t)n_seq * 8, KITE_COPY_HOST_TO_DEVICE));
      KCALL(kite_memcpy(ctx, m->d_steps, m->h_steps, (size_t)n_seq * 8, KITE_COPY_HOST_TO_DEVICE));
      kite_sampling_params p = kite_sampling_params_default();
      p.temperature = v1(&tp[0], m->dev, m->d_temp, KITE_DTYPE_F32, n_seq);
      p.top_k = sp->top_k > 0 ? v1(&tp[1], m->dev, m->d_topk, KITE_DTYPE_I32, n_seq) : NULL;
      p.top_p = sp->top_p < 1 ? v1(&tp[2], m->dev, m->d_topp, KITE_DTYPE_F32, n_seq) : NULL;
      p.seeds = v1(&tp[3], m->dev, m->d_seeds, KITE_DTYPE_I64, n_seq);
      p.steps = v1(&tp[4], m->dev, m->d_steps, KITE_DTYPE_I64, n_seq);
      KCALL(kite_sample(ctx, L, &p, Tk));
    }
    KCALL(kite_memcpy(ctx, m->h_next, m->d_next, (size_t)n_seq * 4, KITE_COPY_DEVICE_TO_HOST));
    for (int j = 0; j < n_seq; j++) {
      seq *s = &m->seqs[m->h_step_seq[j]];
      if (s->n_cached < s->n_tok) continue; /* a prompt chunk that is not the last */
      int32_t tok = m->h_next[j];
      s->tok[s->n_tok++] = tok;
      s->n_new++;
      if (on_token) on_token(user, m->h_step_seq[j], tok);
      if ((stop && stop(user, tok)) || s->n_new >= s->max_new || s->n_tok + 1 > (size_t)m->ctx_len)
        finish(m, s);
    }
    double dt = now_s() - t0;
    m->stats.steps++;
    if (nd == n_seq) {
      m->stats.decode_s += dt;
      m->stats.decode_tokens += n_tok;
    } else {
      m->stats.prefill_s += dt;
      m->stats.prefill_tokens += n_tok;
    }
  }
}
