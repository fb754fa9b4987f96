/*
 * What every engine file shares: error messages into a caller's buffer, a monotonic clock, and
 * DLTensor views over device buffers (a view owns its shape and strides, so it can be built on
 * the stack next to the call that uses it).
 */
#ifndef KITE_ENGINE_COMMON_H
#define KITE_ENGINE_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <kite/dtype.h> /* kite_dtype, kite_dtype_size, f16 / bf16 conversions */
#include <kite/kite.h>

/* Writes the message into err[err_len] and returns -1 (so `return kr_errf(...)` fails). */
int kr_errf(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Seconds on a monotonic clock. */
double kr_now_s(void);

/* Returns -1 with kite's message in err when a kite call fails (err and err_len in scope). */
#define KR_CALL(call)                                                                              \
  do {                                                                                             \
    kite_status st_ = (call);                                                                      \
    if (st_ != KITE_OK) return kr_errf(err, err_len, "%s", kite_last_error());                     \
  } while (0)

/* A DLTensor with room for its own shape and strides (up to 4 dims). */
typedef struct kr_tensor {
  DLTensor t;
  int64_t shape[4], strides[4];
} kr_tensor;

/* Fills v as a view of `data` (nd dims of `shape`; strides NULL for compact row-major) and
 * returns &v->t. */
DLTensor *kr_view(kr_tensor *v, DLDevice dev, void *data, kite_dtype dt, int nd,
                  const int64_t *shape, const int64_t *strides);
/* Compact [n] and [rows, cols] views. */
DLTensor *kr_view1(kr_tensor *v, DLDevice dev, void *data, kite_dtype dt, int64_t n);
DLTensor *kr_view2(kr_tensor *v, DLDevice dev, void *data, kite_dtype dt, int64_t rows,
                   int64_t cols);

/* kite_malloc of `bytes` (at least 1, so an empty buffer is still a distinct pointer). */
int kr_dev_alloc(kite_ctx *ctx, size_t bytes, void **out, char *err, size_t err_len);
/* kite_malloc, then one host-to-device copy of host[bytes]. */
int kr_dev_upload(kite_ctx *ctx, const void *host, size_t bytes, void **out, char *err,
                  size_t err_len);
/* kite_free of each non-NULL pointer, which is then set to NULL. */
void kr_dev_free(kite_ctx *ctx, void **p);

/* a * b into *out; 0, or -1 when it does not fit a size_t. */
int kr_mul_size(size_t a, size_t b, size_t *out);

#endif /* KITE_ENGINE_COMMON_H */
