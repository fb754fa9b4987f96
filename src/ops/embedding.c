/* Front-ends of the embedding lookup, y[t, :] = table[ids[t], :] with zeros for ids outside
 * [0, V), and of its backward, the scatter-add dtable[v, :] = sum of dy[t, :] over ids[t] = v. */
#include "core/internal.h"

/* A 2-d tensor viewed as [rows, cols], of dtype `want`, or float when want is NULL. */
static kite_status check_matrix(const kite_ctx *ctx, const char *op, const char *arg,
                                const DLTensor *t, const kite_dtype *want, kite_tensor *out,
                                int64_t *rows, int64_t *cols, int64_t *stride) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, arg, t, out)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, out, 2)) != KITE_OK) return s;
  s = want ? kite_tensor_require_dtype(op, arg, out, *want)
           : kite_tensor_require_float(op, arg, out);
  if (s != KITE_OK) return s;
  return kite_tensor_rows(op, arg, out, rows, cols, stride);
}

kite_status kite_embedding(kite_ctx *ctx, const DLTensor *ids, const DLTensor *table, DLTensor *y) {
  kite_clear_error();
  kite_init();
  kite_tensor it, tt, yt;
  int64_t vocab, hidden, table_stride, tokens, cols, y_stride;
  kite_status s;
  if ((s = kite_check_ctx(ctx, "embedding")) != KITE_OK) return s;

  if ((s = kite_tensor_check_ids(ctx, "embedding", "ids", ids, &it)) != KITE_OK) return s;

  if ((s = check_matrix(ctx, "embedding", "table", table, NULL, &tt, &vocab, &hidden,
                        &table_stride)) != KITE_OK)
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

kite_status kite_embedding_backward(kite_ctx *ctx, const DLTensor *ids, const DLTensor *dy,
                                    DLTensor *dtable) {
  const char *op = "embedding_backward";
  kite_clear_error();
  kite_init();
  kite_status s;
  kite_tensor it, dyt, tt;
  int64_t tokens, hidden, dy_stride, vocab, tcols, t_stride;
  if ((s = kite_check_ctx(ctx, op)) != KITE_OK) return s;
  if ((s = kite_tensor_check_ids(ctx, op, "ids", ids, &it)) != KITE_OK) return s;
  if ((s = check_matrix(ctx, op, "dy", dy, NULL, &dyt, &tokens, &hidden, &dy_stride)) != KITE_OK)
    return s;
  if (tokens != it.shape[0])
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: dy: %lld rows, expected T = %lld (ids)", op,
                          (long long)tokens, (long long)it.shape[0]);
  if ((s = check_matrix(ctx, op, "dtable", dtable, &dyt.dtype, &tt, &vocab, &tcols, &t_stride)) !=
      KITE_OK)
    return s;
  if (tcols != hidden)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: dtable: width %lld, expected H = %lld (dy)",
                          op, (long long)tcols, (long long)hidden);
  if ((s = kite_tensor_check_out(op, "dtable", &tt, NULL, NULL, &dyt, "dy")) != KITE_OK) return s;
  if ((s = kite_tensor_require_disjoint(op, "dtable", &tt, &it, "ids")) != KITE_OK) return s;
  kite_embedding_bwd_args a = {.op = KITE_OP_EMBEDDING_BACKWARD,
                               .dtype = dyt.dtype,
                               .tokens = tokens,
                               .hidden = hidden,
                               .vocab = vocab,
                               .ids = it.data,
                               .dy = dyt.data,
                               .dy_stride = dy_stride,
                               .dtable = tt.data,
                               .dtable_stride = t_stride};
  if (vocab == 0 || hidden == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_EMBEDDING_BACKWARD, a.dtype, &a);
}
