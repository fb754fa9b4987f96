#include "driver.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kite/dtype.h"
#include "util.h"

void kt_case_push(kt_case_list *l, kt_case c) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 64;
    kt_case *p = realloc(l->c, (size_t)cap * sizeof *p);
    if (!p) return;
    l->c = p, l->cap = cap;
  }
  if (c.inplace) c.pad_y = 0; /* y is x: it has x's stride */
  l->c[l->n++] = c;
}

void kt_case_list_free(kt_case_list *l) {
  free(l->c);
  memset(l, 0, sizeof *l);
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
  c.attn.opts = kite_attn_opts_default();
  return c;
}

/* ---- element access ---------------------------------------------------------------------- */

double kt_load(kite_dtype t, const void *p, int64_t i) {
  switch (t) {
  case KITE_DTYPE_F32:
    return ((const float *)p)[i];
  case KITE_DTYPE_F16:
  case KITE_DTYPE_BF16:
    return kite_load_f32(t, p, i);
  case KITE_DTYPE_I32:
    return ((const int32_t *)p)[i];
  case KITE_DTYPE_I8:
    return ((const int8_t *)p)[i];
  case KITE_DTYPE_U8:
    return ((const uint8_t *)p)[i];
  case KITE_DTYPE_F64:
    return ((const double *)p)[i];
  case KITE_DTYPE_FP8_E4M3:
    return kite_fp8_e4m3_to_f32(((const uint8_t *)p)[i]);
  default:
    return 0;
  }
}

static double clampd(double v, double lo, double hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

void kt_store(kite_dtype t, void *p, int64_t i, double v) {
  switch (t) {
  case KITE_DTYPE_F32:
  case KITE_DTYPE_F16:
  case KITE_DTYPE_BF16:
    kite_store_f32(t, p, i, (float)v);
    break;
  case KITE_DTYPE_I32:
    ((int32_t *)p)[i] = (int32_t)clampd(nearbyint(v), INT32_MIN, INT32_MAX);
    break;
  case KITE_DTYPE_I8:
    ((int8_t *)p)[i] = (int8_t)clampd(nearbyint(v), INT8_MIN, INT8_MAX);
    break;
  case KITE_DTYPE_U8:
    ((uint8_t *)p)[i] = (uint8_t)clampd(nearbyint(v), 0, UINT8_MAX);
    break;
  case KITE_DTYPE_F64:
    ((double *)p)[i] = v;
    break;
  case KITE_DTYPE_FP8_E4M3:
    ((uint8_t *)p)[i] = kite_f32_to_fp8_e4m3((float)v);
    break;
  default:
    break;
  }
}

/* ---- layout ------------------------------------------------------------------------------ */

int kt_add_buf(kt_run *r, const char *name, kite_dtype t, int64_t count) {
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

int kt_add_view(kt_run *r, const char *name, int buf, kite_dtype t, kt_role role, int ndim,
                const int64_t *shape, const int64_t *strides, int64_t offset, kt_fill_kind fill,
                float lo, float hi) {
  if (buf < 0 || r->nviews == KT_MAX_VIEWS || ndim < 1 || ndim > KT_MAX_DIMS ||
      kite_dtype_size(t) != r->buf[buf].elem) {
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
  /* every element must lie inside the buffer body */
  int64_t last = offset;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] == 0) last = -1;
    if (last >= 0) last += (shape[d] - 1) * strides[d];
  }
  if (offset < 0 || (last >= 0 && last >= r->buf[buf].count)) r->bad = 1;
  return r->nviews++;
}

int kt_add_matrix(kt_run *r, const char *name, kite_dtype t, kt_role role, int64_t rows,
                  int64_t cols, int64_t pad, float lo, float hi) {
  int64_t shape[2] = {rows, cols}, strides[2] = {cols + pad, 1};
  int b = kt_add_buf(r, name, t, rows * (cols + pad));
  return kt_add_view(r, name, b, t, role, 2, shape, strides, 0, KT_FILL_UNIFORM, lo, hi);
}

int kt_add_tensor(kt_run *r, const char *name, kite_dtype t, kt_role role, int ndim,
                  const int64_t *shape, kt_fill_kind fill, float lo, float hi) {
  int64_t strides[KT_MAX_DIMS], n = 1;
  if (ndim < 1 || ndim > KT_MAX_DIMS) {
    r->bad = 1;
    return -1;
  }
  for (int d = ndim - 1; d >= 0; d--) strides[d] = n, n *= shape[d];
  int b = kt_add_buf(r, name, t, n);
  return kt_add_view(r, name, b, t, role, ndim, shape, strides, 0, fill, lo, hi);
}

void kt_cat(char *buf, size_t n, size_t *len, const char *fmt, ...) {
  if (*len >= n) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(buf + *len, n - *len, fmt, ap);
  va_end(ap);
  if (k > 0) *len = *len + (size_t)k < n ? *len + (size_t)k : n - 1;
}

int kt_slot(const kt_run *r, const char *name) {
  const kite_fn_info *fi = kite_fn_get(r->fn);
  if (!fi) return -1;
  for (size_t i = 0; i < fi->nargs && i < KT_MAX_ARGS; i++)
    if (strcmp(fi->args[i].name, name) == 0) return (int)i;
  return -1;
}

int kt_bind(kt_run *r, const char *name, int v) {
  int i = kt_slot(r, name);
  if (i < 0) {
    const kite_fn_info *fi = kite_fn_get(r->fn);
    fprintf(stderr, "kite: bad plan: kite_%s has no argument '%s'\n", fi ? fi->name : "?", name);
    r->bad = 1;
    return v;
  }
  r->arg[i] = v;
  return v;
}

int kt_arg_view(const kt_run *r, const char *name) {
  int i = kt_slot(r, name);
  return i >= 0 ? r->arg[i] : -1;
}

DLTensor *kt_arg_named(kt_run *r, const char *name) {
  int v = kt_arg_view(r, name);
  return v >= 0 ? &r->view[v].t : NULL;
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

int64_t kt_view_at(const kt_view *v, int64_t n) {
  int64_t cols = kt_view_cols(v);
  return kt_view_row(v, n / cols) + n % cols;
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
    if (v->fill == KT_FILL_CUSTOM) {
      if (v->fill_fn) v->fill_fn(r, i, key, body);
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
          kt_store(v->dtype, body, at + j, v->lo + (v->hi - v->lo) * kt_unit(key, n));
          break;
        case KT_FILL_IDS:
          kt_store(v->dtype, body, at + j,
                   (double)((int64_t)v->lo +
                            (span > 0 ? (int64_t)(kt_hash(key, n) % (uint64_t)span) : 0)));
          break;
        case KT_FILL_SEQ:
          ((int32_t *)body)[at + j] = (int32_t)(v->hi >= 1 ? (int64_t)n % (int64_t)v->hi : 0);
          break;
        case KT_FILL_ROPE_CACHE:
          ((float *)body)[at + j] = cache ? cache[n] : kt_unit(key, n);
          break;
        case KT_FILL_CUSTOM:
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
    v->t.dtype = kite_dtype_dlpack(v->dtype);
    if (v->dl_bool) v->t.dtype.code = KITE_DL_BOOL;
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

int kt_scalar_from(const kt_scalar_field *fields, size_t n, const kt_case *c,
                   const kite_arg_info *a, kite_value *out) {
  for (size_t i = 0; i < n; i++) {
    if (strcmp(fields[i].name, a->name) != 0) continue;
    const char *p = (const char *)c + fields[i].offset;
    switch (fields[i].type) {
    case 'f':
      out->f = *(const float *)p;
      return 0;
    case 'i':
      out->i = *(const int32_t *)p;
      return 0;
    case 'l':
      out->i = *(const int64_t *)p;
      return 0;
    default:
      out->u = *(const size_t *)p;
      return 0;
    }
  }
  return 1;
}
