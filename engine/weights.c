#include "weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kite/dtype.h>

#include "common.h"

int kr_ggml_is_q4(uint32_t type) {
  return type == KR_GGML_Q4_0 || type == KR_GGML_Q4_1;
}

int kr_ggml_is_block(uint32_t type) {
  return type <= 0xffff && kite_gguf_type_name((kite_gguf_type)type) != NULL;
}

int kr_ggml_default_as_stored(uint32_t type) {
  return kr_ggml_is_block(type) && type != KR_GGML_Q8_0;
}

static int readable(uint32_t type) {
  return type == KR_GGML_F32 || type == KR_GGML_F16 || type == KR_GGML_BF16 ||
         kr_ggml_is_block(type);
}

/* A ctx on the host for decoding blocks at load (kite_dequant_gguf), when one of parts needs it;
 * NULL and *rc = 0 when none does, *rc = -1 with the message when it cannot be made. */
static kite_ctx *host_ctx(const kr_gguf_tensor *const *parts, int n_parts, int *rc, char *err,
                          size_t err_len) {
  *rc = 0;
  int blocks = 0;
  for (int i = 0; i < n_parts; i++) blocks |= kr_ggml_is_block(parts[i]->type);
  kite_ctx *host = NULL;
  if (blocks && kite_ctx_create(NULL, &host) != KITE_OK)
    *rc = kr_errf(err, err_len, "model: %s", kite_last_error());
  return host;
}

int kr_tensor_row_f32(const kr_gguf_tensor *t, int64_t r, float *out, kite_ctx *host, char *err,
                      size_t err_len) {
  const int64_t cols = t->ne[0];
  uint64_t bv, bb;
  kr_ggml_block(t->type, &bv, &bb);
  const int64_t width = cols / (int64_t)bv * (int64_t)bb;
  const uint8_t *row = (const uint8_t *)t->data + (uint64_t)r * (uint64_t)width;
  uint16_t h;
  switch (t->type) {
  case KR_GGML_F32:
    memcpy(out, row, (size_t)cols * sizeof(float));
    return 0;
  case KR_GGML_F16:
  case KR_GGML_BF16:
    for (int64_t i = 0; i < cols; i++) {
      memcpy(&h, row + 2 * i, 2);
      out[i] = t->type == KR_GGML_F16 ? kite_f16_to_f32(h) : kite_bf16_to_f32(h);
    }
    return 0;
  default:
    break;
  }
  const DLDevice cpu = {kDLCPU, 0};
  kr_tensor tw, ty;
  KR_CALL(kite_dequant_gguf(host, kr_view2(&tw, cpu, (void *)row, KITE_DTYPE_U8, 1, width),
                            (kite_gguf_type)t->type,
                            kr_view2(&ty, cpu, out, KITE_DTYPE_F32, 1, cols)));
  return 0;
}

const kr_gguf_tensor *kr_need_tensor(const kr_gguf *g, const char *name, int64_t cols, int64_t rows,
                                     char *err, size_t err_len) {
  return kr_need_tensor3(g, name, cols, rows, 1, err, err_len);
}

const kr_gguf_tensor *kr_need_tensor3(const kr_gguf *g, const char *name, int64_t cols,
                                      int64_t rows, int64_t groups, char *err, size_t err_len) {
  const kr_gguf_tensor *t = kr_gguf_tensor_find(g, name);
  if (!t) {
    kr_errf(err, err_len, "model: tensor %s missing", name);
    return NULL;
  }
  if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != groups || t->ne[3] != 1) {
    kr_errf(err, err_len,
            "model: tensor %s is [%lld, %lld, %lld], expected [%lld, %lld, %lld] (ne order)", name,
            (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)cols,
            (long long)rows, (long long)groups);
    return NULL;
  }
  if (!readable(t->type)) {
    const char *tn = kr_ggml_type_name(t->type);
    kr_errf(err, err_len,
            "model: tensor %s has type %s (%u), which kite does not load (f32, f16, bf16, q4_0, "
            "q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl load)",
            name, tn ? tn : "?", (unsigned)t->type);
    return NULL;
  }
  return t;
}

static int upload(kr_loader *ld, const void *host, size_t bytes, void **out, char *err,
                  size_t err_len) {
  if (kr_dev_upload(ld->ctx, host, bytes, out, err, err_len)) return -1;
  ld->bytes += bytes;
  return 0;
}

int kr_load_vector(kr_loader *ld, const kr_gguf_tensor *const *parts, int n_parts, void **out,
                   char *err, size_t err_len) {
  int64_t total = 0;
  for (int i = 0; i < n_parts; i++) total += parts[i]->ne[0];
  const size_t es = kite_dtype_size(ld->act);
  float *f32 = malloc((size_t)total * sizeof(float)); /* [total] */
  uint8_t *dev = malloc((size_t)total * es);          /* [total] in ld->act */
  int rc;
  kite_ctx *host = host_ctx(parts, n_parts, &rc, err, err_len);
  if (rc) {
  } else if (!f32 || !dev) {
    rc = kr_errf(err, err_len, "model: out of memory");
  } else {
    int64_t at = 0;
    for (int i = 0; i < n_parts && !rc; i++) {
      rc = kr_tensor_row_f32(parts[i], 0, f32 + at, host, err, err_len);
      at += parts[i]->ne[0];
    }
    const float scale = ld->scale != 0 ? ld->scale : 1.0f;
    for (int64_t i = 0; i < total && !rc; i++) kite_store_f32(ld->act, dev, i, f32[i] * scale);
    if (!rc) rc = upload(ld, dev, (size_t)total * es, out, err, err_len);
  }
  kite_ctx_destroy(host);
  free(f32);
  free(dev);
  return rc;
}

/* The blocks of every part, concatenated as stored (KR_W_Q4, KR_W_GGUF). */
static int load_blocks(kr_loader *ld, const kr_gguf_tensor *const *parts, int n_parts, kr_weight *w,
                       char *err, size_t err_len) {
  w->format = parts[0]->type == KR_GGML_Q4_0 ? KITE_WQ4_SYM : KITE_WQ4_MIN;
  w->nparts = n_parts;
  w->act_q8 = ld->act_q8;
  for (int i = 0; i < n_parts; i++) {
    w->types[i] = (kite_gguf_type)parts[i]->type;
    w->part_rows[i] = parts[i]->ne[1];
  }
  size_t bytes = 0;
  for (int i = 0; i < n_parts; i++) bytes += parts[i]->nbytes;
  uint8_t *blocks = malloc(bytes); /* [n, k / 32 * block bytes] */
  if (!blocks) return kr_errf(err, err_len, "model: out of memory");
  size_t at = 0;
  for (int i = 0; i < n_parts; i++) {
    memcpy(blocks + at, parts[i]->data, parts[i]->nbytes);
    at += parts[i]->nbytes;
  }
  const int rc = upload(ld, blocks, bytes, &w->data, err, err_len);
  free(blocks);
  return rc;
}

int kr_load_matrix(kr_loader *ld, const kr_gguf_tensor *const *parts, int n_parts, kr_wkind kind,
                   kr_weight *w, char *err, size_t err_len) {
  const int64_t k = parts[0]->ne[0];
  int64_t n = 0;
  for (int i = 0; i < n_parts; i++) n += parts[i]->ne[1];
  memset(w, 0, sizeof *w);
  w->n = n;
  w->k = k;
  if (n_parts > KR_MAX_PARTS) return kr_errf(err, err_len, "model: %d tensors fused", n_parts);
  if (kind == KR_W_Q4) { /* as stored: one 4-bit type, else blocks of any types, else int8 */
    for (int i = 0; i < n_parts; i++) {
      if (parts[i]->type != parts[0]->type || !kr_ggml_is_q4(parts[i]->type)) kind = KR_W_GGUF;
      if (!kr_ggml_is_block(parts[i]->type)) {
        kind = KR_W_INT8;
        break;
      }
    }
  }
  w->kind = kind;
  if (kind == KR_W_Q4 || kind == KR_W_GGUF) return load_blocks(ld, parts, n_parts, w, err, err_len);
  w->dtype = ld->act;
  const size_t es = kind == KR_W_INT8 ? 1 : kite_dtype_size(ld->act);
  float *row = malloc((size_t)k * sizeof(float));    /* [k] one dequantized row */
  uint8_t *mat = malloc((size_t)n * (size_t)k * es); /* [n, k] i8 or ld->act */
  float *scales = malloc((size_t)n * sizeof(float)); /* [n] int8 row scales */
  int rc = -1;
  kite_ctx *host = host_ctx(parts, n_parts, &rc, err, err_len);
  if (rc) goto done;
  rc = -1;
  if (!row || !mat || !scales) {
    kr_errf(err, err_len, "model: out of memory");
    goto done;
  }
  int64_t r = 0;
  for (int i = 0; i < n_parts; i++)
    for (int64_t j = 0; j < parts[i]->ne[1]; j++, r++) {
      if (kr_tensor_row_f32(parts[i], j, row, host, err, err_len)) goto done;
      uint8_t *dst = mat + (size_t)r * (size_t)k * es;
      if (kind == KR_W_DENSE) {
        const float scale = ld->scale != 0 ? ld->scale : 1.0f;
        for (int64_t x = 0; x < k; x++) kite_store_f32(ld->act, dst, x, row[x] * scale);
        continue;
      }
      /* per-row symmetric int8, as kite_quant does for activations */
      float amax = 0;
      for (int64_t x = 0; x < k; x++) amax = fmaxf(amax, fabsf(row[x]));
      const float s = amax / 127.0f;
      scales[r] = s;
      for (int64_t x = 0; x < k; x++)
        ((int8_t *)dst)[x] = s > 0 ? (int8_t)lrintf(fminf(fmaxf(row[x] / s, -127), 127)) : 0;
    }
  rc = upload(ld, mat, (size_t)n * (size_t)k * es, &w->data, err, err_len);
  if (!rc && kind == KR_W_INT8)
    rc = upload(ld, scales, (size_t)n * sizeof(float), &w->scales, err, err_len);
done:
  kite_ctx_destroy(host);
  free(row);
  free(mat);
  free(scales);
  return rc;
}

int kr_load_stacked(kr_loader *ld, const kr_gguf_tensor *const *parts, int n_parts, void **out,
                    char *err, size_t err_len) {
  const int64_t k = parts[0]->ne[0], G = parts[0]->ne[2];
  int64_t n = 0; /* rows of a group */
  for (int i = 0; i < n_parts; i++) n += parts[i]->ne[1];
  const size_t es = kite_dtype_size(ld->act), total = (size_t)G * (size_t)n * (size_t)k;
  float *row = malloc((size_t)k * sizeof(float)); /* [k] one decoded row */
  uint8_t *mat = malloc(total * es);              /* [G, n, k] ld->act */
  int rc;
  kite_ctx *host = host_ctx(parts, n_parts, &rc, err, err_len);
  if (rc) goto done;
  if (!row || !mat) {
    rc = kr_errf(err, err_len, "model: out of memory");
    goto done;
  }
  size_t at = 0; /* values written */
  for (int64_t g = 0; g < G && !rc; g++)
    for (int i = 0; i < n_parts && !rc; i++) {
      const int64_t rows = parts[i]->ne[1];
      for (int64_t j = 0; j < rows && !rc; j++, at += (size_t)k) {
        rc = kr_tensor_row_f32(parts[i], g * rows + j, row, host, err, err_len);
        for (int64_t x = 0; x < k && !rc; x++) kite_store_f32(ld->act, mat, at + (size_t)x, row[x]);
      }
    }
  if (!rc) rc = upload(ld, mat, total * es, out, err, err_len);
done:
  kite_ctx_destroy(host);
  free(row);
  free(mat);
  return rc;
}

void kr_weight_free(kite_ctx *ctx, kr_weight *w) {
  kr_dev_free(ctx, &w->data);
  kr_dev_free(ctx, &w->scales);
}

int kr_linear(kite_ctx *ctx, const kr_weight *w, kite_dtype act, const void *x, int64_t rows,
              const void *bias, void *y, const kr_linear_scratch *s, char *err, size_t err_len) {
  const DLDevice dev = kite_ctx_device(ctx);
  kr_tensor tx, ty, tbias, tw, tscales, txq, txs;
  DLTensor *X = kr_view2(&tx, dev, (void *)x, act, rows, w->k);
  DLTensor *Y = kr_view2(&ty, dev, y, act, rows, w->n);
  DLTensor *B = bias ? kr_view1(&tbias, dev, (void *)bias, act, w->n) : NULL;
  switch (w->kind) {
  case KR_W_DENSE:
    KR_CALL(kite_linear(ctx, X, kr_view2(&tw, dev, w->data, w->dtype, w->n, w->k), B, Y));
    return 0;
  case KR_W_INT8: {
    DLTensor *XQ = kr_view2(&txq, dev, s->xq, KITE_DTYPE_I8, rows, w->k);
    DLTensor *XS = kr_view1(&txs, dev, s->xs, KITE_DTYPE_F32, rows);
    KR_CALL(kite_quant(ctx, X, XQ, XS));
    KR_CALL(kite_linear_quant(ctx, XQ, XS, kr_view2(&tw, dev, w->data, KITE_DTYPE_I8, w->n, w->k),
                              kr_view1(&tscales, dev, w->scales, KITE_DTYPE_F32, w->n), B, Y));
    return 0;
  }
  case KR_W_GGUF: { /* a call per part, into its columns of y (and of the bias) */
    const size_t es = kite_dtype_size(act);
    int64_t col = 0;
    const uint8_t *data = w->data;
    for (int p = 0; p < w->nparts; p++) {
      int64_t bv, bb;
      KR_CALL(kite_gguf_block_info(w->types[p], &bv, &bb));
      const int64_t np = w->part_rows[p], width = w->k / bv * bb;
      const int64_t ysh[2] = {rows, np}, yst[2] = {w->n, 1};
      DLTensor *YP = kr_view(&ty, dev, (char *)y + (size_t)col * es, act, 2, ysh, yst);
      DLTensor *BP = bias ? kr_view1(&tbias, dev, (char *)bias + (size_t)col * es, act, np) : NULL;
      DLTensor *WP = kr_view2(&tw, dev, (void *)data, KITE_DTYPE_U8, np, width);
      if (w->act_q8)
        KR_CALL(kite_linear_gguf_q8(ctx, X, WP, w->types[p], BP, YP));
      else
        KR_CALL(kite_linear_gguf(ctx, X, WP, w->types[p], BP, YP));
      data += (size_t)(np * width);
      col += np;
    }
    return 0;
  }
  case KR_W_Q4: {
    uint64_t bv, bb; /* values per block: kite's blocks are GGUF's */
    kr_ggml_block(KR_GGML_Q4_0, &bv, &bb);
    const int64_t width = w->k / (int64_t)bv * kite_wq4_block_bytes(w->format);
    KR_CALL(kite_linear_wq4(ctx, X, kr_view2(&tw, dev, w->data, KITE_DTYPE_U8, w->n, width),
                            w->format, B, Y));
    return 0;
  }
  }
  return kr_errf(err, err_len, "model: bad weight kind");
}
