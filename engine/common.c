#include "common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <kite/dtype.h>

int kr_errf(char *err, size_t err_len, const char *fmt, ...) {
  if (err && err_len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
  }
  return -1;
}

double kr_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

DLTensor *kr_view(kr_tensor *v, DLDevice dev, void *data, kite_dtype dt, int nd,
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

DLTensor *kr_view1(kr_tensor *v, DLDevice dev, void *data, kite_dtype dt, int64_t n) {
  return kr_view(v, dev, data, dt, 1, &n, NULL);
}

DLTensor *kr_view2(kr_tensor *v, DLDevice dev, void *data, kite_dtype dt, int64_t rows,
                   int64_t cols) {
  const int64_t shape[2] = {rows, cols};
  return kr_view(v, dev, data, dt, 2, shape, NULL);
}

int kr_dev_alloc(kite_ctx *ctx, size_t bytes, void **out, char *err, size_t err_len) {
  KR_CALL(kite_malloc(ctx, bytes ? bytes : 1, out));
  return 0;
}

int kr_dev_upload(kite_ctx *ctx, const void *host, size_t bytes, void **out, char *err,
                  size_t err_len) {
  if (kr_dev_alloc(ctx, bytes, out, err, err_len)) return -1;
  if (bytes) KR_CALL(kite_memcpy(ctx, *out, host, bytes, KITE_COPY_HOST_TO_DEVICE));
  return 0;
}

void kr_dev_free(kite_ctx *ctx, void **p) {
  if (*p) kite_free(ctx, *p);
  *p = NULL;
}

int kr_mul_size(size_t a, size_t b, size_t *out) {
  if (a && b > (size_t)-1 / a) return -1;
  *out = a * b;
  return 0;
}
