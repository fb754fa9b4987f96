/* Front-end of the embedding lookup: y[t, :] = table[ids[t], :], zeros for ids outside [0, V). */
#include "core/internal.h"

kite_status kite_embedding(kite_ctx *ctx, const DLTensor *ids, const DLTensor *table, DLTensor *y) {
  kite_clear_error();
  kite_init();
  kite_tensor it, tt, yt;
  int64_t vocab, hidden, table_stride, tokens, cols, y_stride;
  kite_status s;
  if ((s = kite_check_ctx(ctx, "embedding")) != KITE_OK) return s;

  if ((s = kite_tensor_check(ctx, "embedding", "ids", ids, &it)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim("embedding", "ids", &it, 1)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype("embedding", "ids", &it, KITE_DTYPE_I32)) != KITE_OK) return s;
  if ((s = kite_tensor_require_compact("embedding", "ids", &it)) != KITE_OK) return s;

  if ((s = kite_tensor_check(ctx, "embedding", "table", table, &tt)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim("embedding", "table", &tt, 2)) != KITE_OK) return s;
  if ((s = kite_tensor_require_float("embedding", "table", &tt)) != KITE_OK) return s;
  if ((s = kite_tensor_rows("embedding", "table", &tt, &vocab, &hidden, &table_stride)) != KITE_OK)
    return s;

  if ((s = kite_tensor_check(ctx, "embedding", "y", y, &yt)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim("embedding", "y", &yt, 2)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype("embedding", "y", &yt, tt.dtype)) != KITE_OK) return s;
  if (yt.shape[0] != it.shape[0] || yt.shape[1] != hidden)
    return kite_set_error(
        KITE_ERR_INVALID_ARG, "embedding: y: shape [%lld, %lld], expected [T=%lld, H=%lld]",
        (long long)yt.shape[0], (long long)yt.shape[1], (long long)it.shape[0], (long long)hidden);
  if ((s = kite_tensor_rows("embedding", "y", &yt, &tokens, &cols, &y_stride)) != KITE_OK) return s;
  if ((s = kite_tensor_require_no_overlap("embedding", "y", &yt)) != KITE_OK) return s;
  /* a row written before a later token reads it would change that token's result */
  if ((s = kite_tensor_require_disjoint("embedding", "y", &yt, &tt, "table")) != KITE_OK) return s;
  if ((s = kite_tensor_require_disjoint("embedding", "y", &yt, &it, "ids")) != KITE_OK) return s;

  kite_embedding_args a = {.op = KITE_OP_EMBEDDING,
                           .dtype = tt.dtype,
                           .tokens = tokens,
                           .hidden = hidden,
                           .vocab = vocab,
                           .ids = it.data,
                           .table = tt.data,
                           .table_stride = table_stride,
                           .y = yt.data,
                           .y_stride = y_stride};
  if (tokens == 0 || hidden == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_EMBEDDING, a.dtype, &a);
}
