/*
 * Embedding lookup: y[t, :] = table[ids[t], :], a bit-exact copy of the row; an id outside
 * [0, vocab) gives a row of zeros. Any element type works, as nothing is computed.
 */
#include <stdlib.h>
#include <string.h>

#include "ref.h"

kite_status ref_embedding_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_embedding_args *a = args;
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "embedding: ref: NULL args");
  if (a->op != KITE_OP_EMBEDDING)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "embedding: ref: op %s is not embedding",
                          ref_op_str(a->op));
  const size_t esize = (unsigned)a->dtype < KITE_DTYPE_COUNT ? kite_dtype_size(a->dtype) : 0;
  if (esize == 0)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "embedding: ref: dtype %s is not supported",
                          ref_dtype_str(a->dtype));
  if (a->tokens <= 0 || a->hidden <= 0) return KITE_OK;
  if (!a->ids) return kite_set_error(KITE_ERR_INVALID_ARG, "embedding: ref: ids is NULL");

  const size_t row_bytes = (size_t)a->hidden * esize;
  for (int64_t t = 0; t < a->tokens; t++) {
    char *dst = (char *)a->y + (size_t)(t * a->y_stride) * esize;
    const int64_t id = a->ids[t];
    if (id >= 0 && id < a->vocab)
      memcpy(dst, (const char *)a->table + (size_t)(id * a->table_stride) * esize, row_bytes);
    else
      memset(dst, 0, row_bytes);
  }
  return KITE_OK;
}

/* Backward: dtable[v] = the sum of dy over the tokens of id v (ids outside [0, vocab) add
 * nowhere), in double and in token order; rows of ids no token has are zeros. */
kite_status ref_embedding_bwd_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_embedding_bwd_args *a = args;
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "embedding_backward: ref: NULL args");
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED,
                          "embedding_backward: ref: dtype %s is not supported",
                          ref_dtype_str(a->dtype));
  const kite_dtype t = a->dtype;
  /* tokens grouped by id in token order (a counting sort), then one sum per table row */
  int64_t *start = calloc((size_t)a->vocab + 2, sizeof(int64_t));
  int64_t *order = malloc(((size_t)a->tokens + 1) * sizeof(int64_t));
  double *acc = malloc(((size_t)a->hidden + 1) * sizeof(double));
  if (!start || !order || !acc) {
    free(start), free(order), free(acc);
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "embedding_backward: ref: out of memory");
  }
  for (int64_t i = 0; i < a->tokens; i++)
    if (a->ids[i] >= 0 && a->ids[i] < a->vocab) start[a->ids[i] + 2]++;
  for (int64_t v = 0; v < a->vocab; v++) start[v + 2] += start[v + 1];
  for (int64_t i = 0; i < a->tokens; i++)
    if (a->ids[i] >= 0 && a->ids[i] < a->vocab) order[start[a->ids[i] + 1]++] = i;
  for (int64_t v = 0; v < a->vocab; v++) {
    for (int64_t j = 0; j < a->hidden; j++) acc[j] = 0.0;
    for (int64_t e = start[v]; e < start[v + 1]; e++)
      for (int64_t j = 0; j < a->hidden; j++)
        acc[j] += kite_load_f32(t, a->dy, order[e] * a->dy_stride + j);
    for (int64_t j = 0; j < a->hidden; j++)
      kite_store_f32(t, a->dtable, v * a->dtable_stride + j, (float)acc[j]);
  }
  free(start), free(order), free(acc);
  return KITE_OK;
}
