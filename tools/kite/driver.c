#include "driver.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kite/dtype.h"
#include "util.h"

kt_family kt_op_family(kite_op op) {
  switch (op) {
  case KITE_OP_SILU_AND_MUL:
  case KITE_OP_GELU_AND_MUL:
  case KITE_OP_GELU_TANH_AND_MUL:
    return KT_GATED;
  case KITE_OP_RMS_NORM:
  case KITE_OP_LAYER_NORM:
  case KITE_OP_ADD_RMS_NORM:
  case KITE_OP_ADD_LAYER_NORM:
    return KT_NORM;
  case KITE_OP_ROPE:
    return KT_ROPE;
  case KITE_OP_SOFTMAX:
    return KT_SOFTMAX;
  case KITE_OP_EMBEDDING:
    return KT_EMBEDDING;
  case KITE_OP_SILU:
  case KITE_OP_GELU:
  case KITE_OP_GELU_TANH:
  case KITE_OP_GELU_QUICK:
  case KITE_OP_RELU:
    return KT_ACT;
  default:
    return KT_NONE;
  }
}

int kt_op_has_residual(kite_op op) {
  return op == KITE_OP_ADD_RMS_NORM || op == KITE_OP_ADD_LAYER_NORM;
}

int kt_op_is_layer_norm(kite_op op) {
  return op == KITE_OP_LAYER_NORM || op == KITE_OP_ADD_LAYER_NORM;
}

kt_case kt_case_default(kite_op op, kite_dtype dtype, int64_t rows, int64_t cols) {
  kt_case c;
  memset(&c, 0, sizeof c);
  c.op = op;
  c.dtype = dtype;
  c.rows = rows;
  c.cols = cols;
  c.amp = 1.0f;
  c.with_w = c.with_b = 1;
  c.eps = 1e-6f;
  c.pos = KITE_NORM_PRE;
  c.scale = 1.0f;
  c.hq = 4, c.hkv = 2, c.head_dim = 64, c.rot_dim = 64, c.max_pos = 64;
  c.style = KITE_ROPE_NEOX;
  c.vocab = 50;
  return c;
}

/* ---- descriptions ------------------------------------------------------------------------ */

/* Appends printf output to buf (length n) at *len, never overflowing. */
__attribute__((format(printf, 4, 5))) static void cat(char *buf, size_t n, size_t *len,
                                                      const char *fmt, ...) {
  if (*len >= n) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(buf + *len, n - *len, fmt, ap);
  va_end(ap);
  if (k > 0) *len = *len + (size_t)k < n ? *len + (size_t)k : n - 1;
}

const char *kt_case_shape(const kt_case *c, char *buf, size_t n) {
  if (c->op == KITE_OP_ROPE)
    snprintf(buf, n, "%lldx%lldx%lldx%lld", (long long)c->rows, (long long)c->hq, (long long)c->hkv,
             (long long)c->head_dim);
  else
    snprintf(buf, n, "%lldx%lld", (long long)c->rows, (long long)c->cols);
  return buf;
}

const char *kt_case_str(const kt_case *c, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = '\0';
  switch (kt_op_family(c->op)) {
  case KT_ROPE:
    cat(buf, n, &len, "T=%lld Hq=%lld Hkv=%lld D=%lld rot=%lld %s", (long long)c->rows,
        (long long)c->hq, (long long)c->hkv, (long long)c->head_dim, (long long)c->rot_dim,
        c->style == KITE_ROPE_GPTJ ? "gptj" : "neox");
    if (c->layout == KT_QK_FUSED) cat(buf, n, &len, " fused-qkv");
    if (c->layout == KT_QK_HEAD_PAD) cat(buf, n, &len, " head+%lld", (long long)c->pad_x);
    if (c->k_null) cat(buf, n, &len, " k=NULL");
    return buf;
  case KT_EMBEDDING:
    cat(buf, n, &len, "T=%lld V=%lld H=%lld", (long long)c->rows, (long long)c->vocab,
        (long long)c->cols);
    if (c->oob_ids) cat(buf, n, &len, " ids-out-of-range");
    break;
  case KT_GATED:
    cat(buf, n, &len, "%lldx(2x%lld)", (long long)c->rows, (long long)c->cols);
    if (c->limit > 0) cat(buf, n, &len, " limit=%g", (double)c->limit);
    break;
  default:
    cat(buf, n, &len, "%lldx%lld", (long long)c->rows, (long long)c->cols);
    break;
  }
  if (kt_op_family(c->op) == KT_NORM) {
    if (!c->with_w) cat(buf, n, &len, " w=NULL");
    if (kt_op_is_layer_norm(c->op) && !c->with_b) cat(buf, n, &len, " b=NULL");
    if (!kt_op_is_layer_norm(c->op)) cat(buf, n, &len, " offset=%g", (double)c->offset);
    if (kt_op_has_residual(c->op)) cat(buf, n, &len, c->pos == KITE_NORM_POST ? " post" : " pre");
  }
  if (c->op == KITE_OP_SOFTMAX && c->scale != 1.0f)
    cat(buf, n, &len, " scale=%g", (double)c->scale);
  if (c->amp != 1.0f || c->shift != 0.0f)
    cat(buf, n, &len, " in[%g,%g]", (double)(c->shift - c->amp), (double)(c->shift + c->amp));
  if (c->pad_x) cat(buf, n, &len, " x+%lld", (long long)c->pad_x);
  if (c->pad_y) cat(buf, n, &len, " y+%lld", (long long)c->pad_y);
  if (c->inplace) cat(buf, n, &len, " inplace");
  return buf;
}

/* ---- layout ------------------------------------------------------------------------------ */

static int add_buf(kt_run *r, const char *name, kite_dtype t, int64_t count) {
  if (r->nbufs == KT_MAX_BUFS || count < 0 || kite_dtype_size(t) == 0) {
    r->bad = 1;
    return -1;
  }
  kt_buf *b = &r->buf[r->nbufs];
  b->name = name;
  b->elem = kite_dtype_size(t);
  b->count = count;
  b->dev = NULL;
  return r->nbufs++;
}

/* A view of up to 3 dims whose last dim is unit-stride; returns its index (-1 on a bad plan). */
static int add_view(kt_run *r, const char *name, int buf, kite_dtype t, kt_role role, int ndim,
                    const int64_t *shape, const int64_t *strides, int64_t offset, kt_fill_kind fill,
                    float lo, float hi) {
  if (buf < 0 || r->nviews == KT_MAX_VIEWS) {
    r->bad = 1;
    return -1;
  }
  kt_view *v = &r->view[r->nviews];
  memset(v, 0, sizeof *v);
  v->name = name;
  v->buf = buf;
  v->dtype = t;
  v->role = role;
  v->ndim = ndim;
  for (int d = 0; d < ndim; d++) v->shape[d] = shape[d], v->strides[d] = strides[d];
  v->offset = offset;
  v->fill = fill;
  v->lo = lo;
  v->hi = hi;
  return r->nviews++;
}

/* A [rows, cols] tensor with row stride cols + pad in a buffer of its own. */
static int add_matrix(kt_run *r, const char *name, kite_dtype t, kt_role role, int64_t rows,
                      int64_t cols, int64_t pad, float lo, float hi) {
  int64_t shape[2] = {rows, cols}, strides[2] = {cols + pad, 1};
  int b = add_buf(r, name, t, rows * (cols + pad));
  return add_view(r, name, b, t, role, 2, shape, strides, 0, KT_FILL_UNIFORM, lo, hi);
}

static int add_vector(kt_run *r, const char *name, kite_dtype t, int64_t n, kt_fill_kind fill,
                      float lo, float hi) {
  int64_t shape[1] = {n}, strides[1] = {1};
  int b = add_buf(r, name, t, n);
  return add_view(r, name, b, t, KT_IN, 1, shape, strides, 0, fill, lo, hi);
}

/* q[T, Hq, D] and k[T, Hkv, D] as the case's layout says. */
static void plan_rope(kt_run *r, const kt_case *c, float lo, float hi) {
  int64_t T = c->rows, hq = c->hq, hkv = c->hkv, D = c->head_dim;
  kite_dtype t = c->dtype;
  if (c->layout == KT_QK_FUSED) {
    int64_t ts = (hq + 2 * hkv) * D; /* token stride of the fused projection */
    int b = add_buf(r, "qkv", t, T * ts);
    int64_t qs[3] = {T, hq, D}, ks[3] = {T, hkv, D}, st[3] = {ts, D, 1};
    r->q = add_view(r, "q", b, t, KT_INOUT, 3, qs, st, 0, KT_FILL_UNIFORM, lo, hi);
    if (!c->k_null)
      r->k = add_view(r, "k", b, t, KT_INOUT, 3, ks, st, hq * D, KT_FILL_UNIFORM, lo, hi);
    if (hkv > 0) add_view(r, "v", b, t, KT_IN, 3, ks, st, (hq + hkv) * D, KT_FILL_UNIFORM, lo, hi);
    return;
  }
  int64_t hs = D + (c->layout == KT_QK_HEAD_PAD ? c->pad_x : 0); /* head stride */
  int64_t qs[3] = {T, hq, D}, qst[3] = {hq * hs, hs, 1};
  r->q = add_view(r, "q", add_buf(r, "q", t, T * hq * hs), t, KT_INOUT, 3, qs, qst, 0,
                  KT_FILL_UNIFORM, lo, hi);
  if (c->k_null) return;
  int64_t ks[3] = {T, hkv, D}, kst[3] = {hkv * hs, hs, 1};
  r->k = add_view(r, "k", add_buf(r, "k", t, T * hkv * hs), t, KT_INOUT, 3, ks, kst, 0,
                  KT_FILL_UNIFORM, lo, hi);
}

int kt_plan(kt_run *r, const kt_case *c) {
  memset(r, 0, sizeof *r);
  r->c = *c;
  r->x = r->y = r->w = r->b = r->res = r->q = r->k = r->pos = r->cos_sin = r->ids = r->table = -1;
  kite_dtype t = c->dtype;
  float lo = c->shift - c->amp, hi = c->shift + c->amp;
  int64_t R = c->rows, C = c->cols;
  switch (kt_op_family(c->op)) {
  case KT_ACT:
  case KT_SOFTMAX:
    r->x = add_matrix(r, "x", t, c->inplace ? KT_INOUT : KT_IN, R, C, c->pad_x, lo, hi);
    r->y = c->inplace ? r->x : add_matrix(r, "y", t, KT_OUT, R, C, c->pad_y, 0, 0);
    break;
  case KT_GATED:
    r->x = add_matrix(r, "x", t, KT_IN, R, 2 * C, c->pad_x, lo, hi);
    r->y = add_matrix(r, "y", t, KT_OUT, R, C, c->pad_y, 0, 0);
    break;
  case KT_NORM:
    r->x = add_matrix(r, "x", t, c->inplace ? KT_INOUT : KT_IN, R, C, c->pad_x, lo, hi);
    if (kt_op_has_residual(c->op))
      r->res = add_matrix(r, "residual", t, KT_INOUT, R, C, c->pad_x, -c->amp, c->amp);
    if (c->with_w) r->w = add_vector(r, "w", t, C, KT_FILL_UNIFORM, -1.0f, 1.0f);
    if (c->with_b && kt_op_is_layer_norm(c->op))
      r->b = add_vector(r, "b", t, C, KT_FILL_UNIFORM, -1.0f, 1.0f);
    r->y = c->inplace ? r->x : add_matrix(r, "y", t, KT_OUT, R, C, c->pad_y, 0, 0);
    break;
  case KT_ROPE: {
    plan_rope(r, c, lo, hi);
    r->pos = add_vector(r, "positions", KITE_DTYPE_I32, R,
                        c->seq_positions ? KT_FILL_SEQ : KT_FILL_IDS, 0.0f, (float)c->max_pos);
    int64_t shape[2] = {c->max_pos, c->rot_dim}, strides[2] = {c->rot_dim, 1};
    int b = add_buf(r, "cos_sin", KITE_DTYPE_F32, c->max_pos * c->rot_dim);
    r->cos_sin = add_view(r, "cos_sin", b, KITE_DTYPE_F32, KT_IN, 2, shape, strides, 0,
                          KT_FILL_ROPE_CACHE, 0, 0);
    break;
  }
  case KT_NONE:
    r->bad = 1;
    break;
  case KT_EMBEDDING: {
    /* with oob_ids about a fifth of the ids fall outside [0, V) on either side */
    float extra = c->oob_ids ? (float)(c->vocab / 8 + 2) : 0.0f;
    r->ids = add_vector(r, "ids", KITE_DTYPE_I32, R, KT_FILL_IDS, -extra, (float)c->vocab + extra);
    r->table = add_matrix(r, "table", t, KT_IN, c->vocab, C, c->pad_x, lo, hi);
    r->y = add_matrix(r, "y", t, KT_OUT, R, C, c->pad_y, 0, 0);
    break;
  }
  }
  return r->bad;
}

size_t kt_buf_bytes(const kt_run *r, int b) {
  return 2 * (size_t)KT_GUARD + (size_t)r->buf[b].count * r->buf[b].elem;
}

size_t kt_run_bytes(const kt_run *r) {
  size_t n = 0;
  for (int b = 0; b < r->nbufs; b++) n += kt_buf_bytes(r, b);
  return n;
}

int64_t kt_view_numel(const kt_view *v) {
  int64_t n = 1;
  for (int d = 0; d < v->ndim; d++) n *= v->shape[d];
  return n;
}

int64_t kt_view_row(const kt_view *v, int64_t i) {
  int64_t at = v->offset;
  for (int d = v->ndim - 2; d >= 0; d--) {
    at += (i % v->shape[d]) * v->strides[d];
    i /= v->shape[d];
  }
  return at;
}

static int64_t view_rows(const kt_view *v) {
  int64_t cols = kt_view_cols(v);
  return cols > 0 ? kt_view_numel(v) / cols : 0;
}

/* ---- contents ---------------------------------------------------------------------------- */

void kt_fill(const kt_run *r, uint64_t seed, unsigned char *const *img) {
  for (int b = 0; b < r->nbufs; b++) memset(img[b], KT_CANARY, kt_buf_bytes(r, b));
  for (int i = 0; i < r->nviews; i++) {
    const kt_view *v = &r->view[i];
    unsigned char *body = img[v->buf] + KT_GUARD;
    size_t es = r->buf[v->buf].elem;
    int64_t rows = view_rows(v), cols = kt_view_cols(v);
    uint64_t key = kt_hash(seed, (uint64_t)i);
    float *cache = NULL;
    if (v->role == KT_OUT) {
      for (int64_t row = 0; row < rows; row++)
        memset(body + (size_t)kt_view_row(v, row) * es, KT_POISON, (size_t)cols * es);
      continue;
    }
    if (v->fill == KT_FILL_ROPE_CACHE) {
      /* the cache's own shape: [max_pos, rot_dim] */
      cache = malloc((size_t)kt_view_numel(v) * sizeof(float) + 1);
      if (!cache ||
          kite_rope_cache_build(cache, v->shape[0], v->shape[1], 10000.0, NULL) != KITE_OK) {
        free(cache);
        cache = NULL;
      }
    }
    int64_t span = (int64_t)v->hi - (int64_t)v->lo;
    for (int64_t row = 0; row < rows; row++) {
      int64_t at = kt_view_row(v, row);
      for (int64_t j = 0; j < cols; j++) {
        uint64_t n = (uint64_t)(row * cols + j);
        switch (v->fill) {
        case KT_FILL_UNIFORM:
          kite_store_f32(v->dtype, body, at + j, v->lo + (v->hi - v->lo) * kt_unit(key, n));
          break;
        case KT_FILL_IDS:
          ((int32_t *)body)[at + j] =
              (int32_t)((int64_t)v->lo +
                        (span > 0 ? (int64_t)(kt_hash(key, n) % (uint64_t)span) : 0));
          break;
        case KT_FILL_SEQ:
          ((int32_t *)body)[at + j] = (int32_t)(v->hi >= 1 ? (int64_t)n % (int64_t)v->hi : 0);
          break;
        case KT_FILL_ROPE_CACHE:
          ((float *)body)[at + j] = cache ? cache[n] : kt_unit(key, n);
          break;
        }
      }
    }
    free(cache);
  }
}

void kt_byte_roles(const kt_run *r, int b, unsigned char *mask) {
  memset(mask, 0, kt_buf_bytes(r, b));
  for (int i = 0; i < r->nviews; i++) {
    const kt_view *v = &r->view[i];
    if (v->buf != b) continue;
    size_t es = r->buf[b].elem;
    unsigned char role = v->role == KT_IN ? 1 : 2;
    int64_t rows = view_rows(v), cols = kt_view_cols(v);
    for (int64_t row = 0; row < rows; row++) {
      unsigned char *p = mask + KT_GUARD + (size_t)kt_view_row(v, row) * es;
      for (size_t j = 0; j < (size_t)cols * es; j++)
        if (p[j] < role) p[j] = role;
    }
  }
}

/* ---- device memory ----------------------------------------------------------------------- */

static DLDataType dl_type(kite_dtype t) {
  DLDataType d = {kDLFloat, 32, 1};
  switch (t) {
  case KITE_DTYPE_F16:
    d.bits = 16;
    break;
  case KITE_DTYPE_BF16:
    d.code = kDLBfloat, d.bits = 16;
    break;
  case KITE_DTYPE_I32:
    d.code = kDLInt;
    break;
  case KITE_DTYPE_I8:
    d.code = kDLInt, d.bits = 8;
    break;
  case KITE_DTYPE_F64:
    d.bits = 64;
    break;
  default:
    break;
  }
  return d;
}

kite_status kt_alloc(kt_run *r, kite_ctx *ctx) {
  r->ctx = ctx;
  for (int b = 0; b < r->nbufs; b++) {
    kite_status s = kite_malloc(ctx, kt_buf_bytes(r, b), &r->buf[b].dev);
    if (s != KITE_OK) {
      r->buf[b].dev = NULL;
      kt_release(r);
      return s;
    }
  }
  /* DLPack style: data is the allocation, byte_offset locates the view in it */
  for (int i = 0; i < r->nviews; i++) {
    kt_view *v = &r->view[i];
    v->t.data = r->buf[v->buf].dev;
    v->t.device = kite_ctx_device(ctx);
    v->t.ndim = v->ndim;
    v->t.dtype = dl_type(v->dtype);
    v->t.shape = v->shape;
    v->t.strides = v->strides;
    v->t.byte_offset = (uint64_t)KT_GUARD + (uint64_t)v->offset * r->buf[v->buf].elem;
  }
  return KITE_OK;
}

kite_status kt_upload(kt_run *r, unsigned char *const *img) {
  for (int b = 0; b < r->nbufs; b++) {
    kite_status s =
        kite_memcpy(r->ctx, r->buf[b].dev, img[b], kt_buf_bytes(r, b), KITE_COPY_HOST_TO_DEVICE);
    if (s != KITE_OK) return s;
  }
  return KITE_OK;
}

kite_status kt_download(const kt_run *r, unsigned char *const *img) {
  for (int b = 0; b < r->nbufs; b++) {
    kite_status s =
        kite_memcpy(r->ctx, img[b], r->buf[b].dev, kt_buf_bytes(r, b), KITE_COPY_DEVICE_TO_HOST);
    if (s != KITE_OK) return s;
  }
  return KITE_OK;
}

void kt_release(kt_run *r) {
  for (int b = 0; b < r->nbufs; b++) {
    if (r->buf[b].dev) kite_free(r->ctx, r->buf[b].dev);
    r->buf[b].dev = NULL;
  }
}

/* ---- the call ---------------------------------------------------------------------------- */

static DLTensor *arg(kt_run *r, int view) {
  return view >= 0 ? &r->view[view].t : NULL;
}

kite_status kt_call(kt_run *r) {
  const kt_case *c = &r->c;
  kite_ctx *ctx = r->ctx;
  DLTensor *x = arg(r, r->x), *y = arg(r, r->y), *w = arg(r, r->w), *b = arg(r, r->b);
  switch (c->op) {
  case KITE_OP_SILU:
    return kite_silu(ctx, x, y);
  case KITE_OP_GELU:
    return kite_gelu(ctx, x, y);
  case KITE_OP_GELU_TANH:
    return kite_gelu_tanh(ctx, x, y);
  case KITE_OP_GELU_QUICK:
    return kite_gelu_quick(ctx, x, y);
  case KITE_OP_RELU:
    return kite_relu(ctx, x, y);
  case KITE_OP_SILU_AND_MUL:
    return kite_silu_and_mul(ctx, x, c->limit, y);
  case KITE_OP_GELU_AND_MUL:
    return kite_gelu_and_mul(ctx, x, c->limit, y);
  case KITE_OP_GELU_TANH_AND_MUL:
    return kite_gelu_tanh_and_mul(ctx, x, c->limit, y);
  case KITE_OP_RMS_NORM:
    return kite_rms_norm(ctx, x, w, c->eps, c->offset, y);
  case KITE_OP_LAYER_NORM:
    return kite_layer_norm(ctx, x, w, b, c->eps, y);
  case KITE_OP_ADD_RMS_NORM:
    return kite_add_rms_norm(ctx, x, arg(r, r->res), w, c->eps, c->offset, c->pos, y);
  case KITE_OP_ADD_LAYER_NORM:
    return kite_add_layer_norm(ctx, x, arg(r, r->res), w, b, c->eps, c->pos, y);
  case KITE_OP_ROPE:
    return kite_rope(ctx, arg(r, r->q), arg(r, r->k), arg(r, r->pos), arg(r, r->cos_sin),
                     c->rot_dim, c->style);
  case KITE_OP_SOFTMAX:
    return kite_softmax(ctx, x, c->scale, y);
  case KITE_OP_EMBEDDING:
    return kite_embedding(ctx, arg(r, r->ids), arg(r, r->table), y);
  default:
    break;
  }
  return kite_set_error(KITE_ERR_UNSUPPORTED, "kite: the CLI has no driver for op %d", (int)c->op);
}
