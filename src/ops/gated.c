/* Front-ends of the gated activations, x[..., 2I] -> y[..., I] = act(gate) * up, and of their
 * backward, x[..., 2I], dy[..., I] -> dx[..., 2I] (d gate, d up). */
#include <math.h>

#include "core/internal.h"

static kite_status gated(kite_ctx *ctx, kite_op op, const DLTensor *x, float limit, DLTensor *y) {
  const char *name = kite_op_name(op);
  kite_rowwise v;
  kite_status s = kite_rowwise_begin(ctx, name, x, y, 2, &v);
  if (s != KITE_OK) return s;
  if (isnan(limit))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: limit: is NaN (use 0 for no clamp)", name);

  /* Kernels see a single spelling of "no clamp": 0. */
  kite_gated_args a = {.op = op,
                       .dtype = v.dtype,
                       .rows = v.rows,
                       .cols = v.y_cols,
                       .x = v.x,
                       .x_stride = v.x_stride,
                       .y = v.y,
                       .y_stride = v.y_stride,
                       .limit = limit > 0 ? limit : 0.0f};
  if (a.rows == 0 || a.cols == 0) return KITE_OK;
  return kite_dispatch(ctx, op, a.dtype, &a);
}

/* kite_silu_and_mul ...: one function per gated activation of backend.h's list */
#define GATED_FN(ID, name, AID, aname)                                                             \
  kite_status kite_##name(kite_ctx *ctx, const DLTensor *x, float limit, DLTensor *y) {            \
    return gated(ctx, KITE_OP_##ID, x, limit, y);                                                  \
  }
KITE_GATED_OPS(GATED_FN)
#undef GATED_FN

/* ---- backward ----------------------------------------------------------------------------- */

kite_status kite_gated_backward(kite_ctx *ctx, kite_op act, const DLTensor *x, const DLTensor *dy,
                                float limit, DLTensor *dx) {
  const char *op = "gated_backward";
  kite_tensor xt, dyt, dxt;
  kite_act_bwd_args a;
  kite_status s;
  if ((s = kite_act_bwd_check(ctx, KITE_OP_GATED_BACKWARD, act, x, dy, &xt, &dyt, &a)) != KITE_OK)
    return s;
  const int64_t xcols = xt.shape[xt.ndim - 1];
  char sa[160], sb[160];
  if (xcols % 2 != 0)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: x: last dim %lld is not even (2I)", op,
                          (long long)xcols);
  if (!kite_tensor_same_lead(&dyt, &xt) || a.cols != xcols / 2)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: dy: shape %s does not fit x %s (same leading dims, last dim %lld)",
                          op, kite_shape_str(&dyt, sa, sizeof sa),
                          kite_shape_str(&xt, sb, sizeof sb), (long long)(xcols / 2));
  if (!isfinite(limit))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: limit: %g is not finite", op, (double)limit);
  if ((s = kite_tensor_check_like(ctx, op, "dx", dx, &xt, "x", &dxt, &a.dx_stride)) != KITE_OK)
    return s;
  /* dx may be x itself (every kernel reads a row's (gate, up) pair before it writes their
   * gradients there): training frees the saved [.., 2I] input instead of holding a second one.
   * Any other overlap with x, and any with dy, is refused. */
  if ((s = kite_tensor_check_out(op, "dx", &dxt, &xt, "x", &dyt, "dy")) != KITE_OK) return s;
  a.dx = dxt.data;
  a.limit = limit > 0 ? limit : 0.0f;
  if (a.rows == 0 || a.cols == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_GATED_BACKWARD, a.dtype, &a);
}
