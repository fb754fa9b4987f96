/* Front-ends of the elementwise activations, x[..., N] -> y[..., N] (both viewed as rows), and of
 * their backward, dx[..., N] = dy * act'(x). The checks the two backward ops share live here;
 * gated.c's backward uses them too. */
#include "core/internal.h"

static kite_status activation(kite_ctx *ctx, kite_op op, const DLTensor *x, DLTensor *y) {
  kite_rowwise v;
  kite_status s = kite_rowwise_begin(ctx, kite_op_name(op), x, y, 1, &v);
  if (s != KITE_OK) return s;

  kite_act_args a = {KITE_ROWWISE_FIELDS(op, v)};
  if (a.rows == 0 || a.cols == 0) return KITE_OK;
  return kite_dispatch(ctx, op, a.dtype, &a);
}

/* kite_silu ... kite_relu: one function per activation of backend.h's list */
#define ACTIVATION_FN(ID, name)                                                                    \
  kite_status kite_##name(kite_ctx *ctx, const DLTensor *x, DLTensor *y) {                         \
    return activation(ctx, KITE_OP_##ID, x, y);                                                    \
  }
KITE_ACTIVATION_OPS(ACTIVATION_FN)
#undef ACTIVATION_FN

/* ---- backward ----------------------------------------------------------------------------- */

kite_status kite_act_bwd_check(kite_ctx *ctx, kite_op opid, kite_op act, const DLTensor *x,
                               const DLTensor *dy, kite_tensor *xt, kite_tensor *dyt,
                               kite_act_bwd_args *a) {
  const char *op = kite_op_name(opid);
  const bool gated = opid == KITE_OP_GATED_BACKWARD;
  kite_clear_error();
  kite_init();
  kite_status s;
  int64_t rows, xcols, x_stride, dyrows, dycols, dy_stride;
  if ((s = kite_check_ctx(ctx, op)) != KITE_OK) return s;
  if (!(gated ? kite_op_is_gated(act) : kite_op_is_activation(act)))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: act: %d is not a%s activation op", op,
                          (int)act, gated ? " gated" : "n");
  if ((s = kite_tensor_check_float_rows(ctx, op, "x", x, xt, &rows, &xcols, &x_stride)) != KITE_OK)
    return s;
  if ((s = kite_tensor_check_float_rows(ctx, op, "dy", dy, dyt, &dyrows, &dycols, &dy_stride)) !=
      KITE_OK)
    return s;
  if ((s = kite_tensor_require_dtype(op, "dy", dyt, xt->dtype)) != KITE_OK) return s;
  const kite_act_bwd_args r = {.op = opid,
                               .dtype = xt->dtype,
                               .act = act,
                               .rows = rows,
                               .cols = dycols,
                               .x = xt->data,
                               .x_stride = x_stride,
                               .dy = dyt->data,
                               .dy_stride = dy_stride};
  *a = r;
  return KITE_OK;
}

kite_status kite_activation_backward(kite_ctx *ctx, kite_op act, const DLTensor *x,
                                     const DLTensor *dy, DLTensor *dx) {
  const char *op = "activation_backward";
  kite_tensor xt, dyt, dxt;
  kite_act_bwd_args a;
  kite_status s;
  if ((s = kite_act_bwd_check(ctx, KITE_OP_ACTIVATION_BACKWARD, act, x, dy, &xt, &dyt, &a)) !=
      KITE_OK)
    return s;
  if ((s = kite_tensor_require_same_shape(op, "dy", &dyt, &xt, "x")) != KITE_OK) return s;
  if ((s = kite_tensor_check_like(ctx, op, "dx", dx, &xt, "x", &dxt, &a.dx_stride)) != KITE_OK)
    return s;
  /* dx may be dy (in place), never x */
  if ((s = kite_tensor_check_out(op, "dx", &dxt, &dyt, "dy", &xt, "x")) != KITE_OK) return s;
  a.dx = dxt.data;
  if (a.rows == 0 || a.cols == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_ACTIVATION_BACKWARD, a.dtype, &a);
}
