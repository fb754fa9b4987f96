/*
 * Embedding lookup: y[t, :] = table[ids[t], :], a bit-exact copy of the row; an id outside
 * [0, vocab) gives a row of zeros. Any element type works, as nothing is computed.
 */
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
