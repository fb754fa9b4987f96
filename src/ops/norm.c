/* Front-ends of the norms over the last dim, plain and fused with the residual add:
 * x[..., H] -> y[..., H]; w[H], b[H] optional; residual[..., H] updated in place. And their
 * backward: x (or s) and dy[..., H] -> dx[..., H], dw[H], db[H] (+ dres[..., H] under the pre
 * rule). */
#include <math.h>

#include "core/internal.h"

/* What the length of w and b must match, for messages. */
#define X_LAST "x's last dim"

/* Everything the four norms share: ctx, x, y, residual (when fused, residual non-NULL for
 * the check), w, b, eps, pos, into *a (a->op is `op`). No dispatch. */
static kite_status norm_check(kite_ctx *ctx, kite_op op, const char *name, bool fused,
                              const DLTensor *x, DLTensor *residual, const DLTensor *w,
                              const DLTensor *b, float eps, float offset, kite_norm_pos pos,
                              DLTensor *y, kite_norm_args *out) {
  kite_rowwise v;
  kite_status s;
  if ((s = kite_check_ctx(ctx, name)) != KITE_OK) return s;
  if ((s = kite_check_rowwise(ctx, name, x, y, 1, &v)) != KITE_OK) return s;

  kite_norm_args a = {KITE_ROWWISE_FIELDS(op, v), .eps = eps, .offset = offset, .pos = pos};
  if (fused) {
    kite_tensor rt;
    int64_t rows, cols;
    if ((s = kite_tensor_check(ctx, name, "residual", residual, &rt)) != KITE_OK) return s;
    if ((s = kite_tensor_require_dtype(name, "residual", &rt, v.dtype)) != KITE_OK) return s;
    if ((s = kite_tensor_require_same_shape(name, "residual", &rt, &v.xt, "x")) != KITE_OK)
      return s;
    if ((s = kite_tensor_rows(name, "residual", &rt, &rows, &cols, &a.residual_stride)) != KITE_OK)
      return s;
    if ((s = kite_tensor_require_no_overlap(name, "residual", &rt)) != KITE_OK) return s;
    if ((s = kite_tensor_require_disjoint(name, "residual", &rt, &v.xt, "x")) != KITE_OK) return s;
    if ((s = kite_tensor_require_disjoint(name, "residual", &rt, &v.yt, "y")) != KITE_OK) return s;
    if (pos != KITE_NORM_PRE && pos != KITE_NORM_POST)
      return kite_set_error(KITE_ERR_INVALID_ARG, "%s: pos: %d is not a kite_norm_pos", name,
                            (int)pos);
    a.residual = rt.data;
  }
  kite_tensor wt, bt;
  if ((s = kite_tensor_check_vector(ctx, name, "w", w, v.dtype, v.x_cols, X_LAST, &wt, &a.w)) !=
      KITE_OK)
    return s;
  if ((s = kite_tensor_check_vector(ctx, name, "b", b, v.dtype, v.x_cols, X_LAST, &bt, &a.b)) !=
      KITE_OK)
    return s;
  if (!isfinite(eps) || eps < 0)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: eps: %g must be finite and >= 0", name,
                          (double)eps);
  if (!isfinite(offset))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: offset: %g is not finite", name,
                          (double)offset);
  *out = a;
  return KITE_OK;
}

kite_status kite_add_norm_check(kite_ctx *ctx, const char *name, const DLTensor *x,
                                DLTensor *residual, const DLTensor *w, const DLTensor *b, float eps,
                                float offset, kite_norm_pos pos, DLTensor *y, kite_norm_args *out) {
  return norm_check(ctx, KITE_OP_ADD_RMS_NORM, name, true, x, residual, w, b, eps, offset, pos, y,
                    out);
}

static kite_status norm(kite_ctx *ctx, kite_op op, const DLTensor *x, DLTensor *residual,
                        const DLTensor *w, const DLTensor *b, float eps, float offset,
                        kite_norm_pos pos, DLTensor *y) {
  const char *name = kite_op_name(op);
  const bool fused = op == KITE_OP_ADD_RMS_NORM || op == KITE_OP_ADD_LAYER_NORM;
  kite_clear_error();
  kite_init();
  kite_norm_args a;
  kite_status s = norm_check(ctx, op, name, fused, x, residual, w, b, eps, offset, pos, y, &a);
  if (s != KITE_OK) return s;
  if (a.rows == 0 || a.cols == 0) return KITE_OK;
  return kite_dispatch(ctx, op, a.dtype, &a);
}

kite_status kite_rms_norm(kite_ctx *ctx, const DLTensor *x, const DLTensor *w, float eps,
                          float offset, DLTensor *y) {
  return norm(ctx, KITE_OP_RMS_NORM, x, NULL, w, NULL, eps, offset, KITE_NORM_PRE, y);
}

kite_status kite_layer_norm(kite_ctx *ctx, const DLTensor *x, const DLTensor *w, const DLTensor *b,
                            float eps, DLTensor *y) {
  return norm(ctx, KITE_OP_LAYER_NORM, x, NULL, w, b, eps, 0.0f, KITE_NORM_PRE, y);
}

kite_status kite_add_rms_norm(kite_ctx *ctx, const DLTensor *x, DLTensor *residual,
                              const DLTensor *w, float eps, float offset, kite_norm_pos pos,
                              DLTensor *y) {
  return norm(ctx, KITE_OP_ADD_RMS_NORM, x, residual, w, NULL, eps, offset, pos, y);
}

kite_status kite_add_layer_norm(kite_ctx *ctx, const DLTensor *x, DLTensor *residual,
                                const DLTensor *w, const DLTensor *b, float eps, kite_norm_pos pos,
                                DLTensor *y) {
  return norm(ctx, KITE_OP_ADD_LAYER_NORM, x, residual, w, b, eps, 0.0f, pos, y);
}

/* ---- backward ----------------------------------------------------------------------------- */

/* Every norm backward: the plain ones (dres NULL) and the fused pre rule's (x is s then, named
 * xname in messages). op names the public function. */
static kite_status norm_backward(kite_ctx *ctx, kite_op opid, const char *op, const char *xname,
                                 const DLTensor *x, const DLTensor *w, const DLTensor *dy,
                                 const DLTensor *dres, float eps, float offset, DLTensor *dx,
                                 DLTensor *dw, DLTensor *db) {
  kite_clear_error();
  kite_init();
  kite_status s;
  kite_tensor xt, dyt, rt = {0}, dxt, wt, dwt, dbt;
  int64_t rows, cols, x_stride, dy_stride, dres_stride = 0, dx_stride;
  const void *wp, *dwp, *dbp;
  if ((s = kite_check_ctx(ctx, op)) != KITE_OK) return s;
  if ((s = kite_tensor_check_float_rows(ctx, op, xname, x, &xt, &rows, &cols, &x_stride)) !=
      KITE_OK)
    return s;
  if ((s = kite_tensor_check_like(ctx, op, "dy", dy, &xt, xname, &dyt, &dy_stride)) != KITE_OK)
    return s;
  if (dres &&
      (s = kite_tensor_check_like(ctx, op, "dres", dres, &xt, xname, &rt, &dres_stride)) != KITE_OK)
    return s;
  if ((s = kite_tensor_check_like(ctx, op, "dx", dx, &xt, xname, &dxt, &dx_stride)) != KITE_OK)
    return s;
  /* dx may be dy or dres (in place), never x */
  if ((s = kite_tensor_check_out(op, "dx", &dxt, &dyt, "dy", &xt, xname)) != KITE_OK) return s;
  if (dres && (s = kite_tensor_check_out(op, "dx", &dxt, &rt, "dres", NULL, NULL)) != KITE_OK)
    return s;
  if ((s = kite_tensor_check_vector(ctx, op, "w", w, xt.dtype, cols, NULL, &wt, &wp)) != KITE_OK)
    return s;
  if ((s = kite_tensor_check_vector(ctx, op, "dw", dw, xt.dtype, cols, NULL, &dwt, &dwp)) !=
      KITE_OK)
    return s;
  if ((s = kite_tensor_check_vector(ctx, op, "db", db, xt.dtype, cols, NULL, &dbt, &dbp)) !=
      KITE_OK)
    return s;
  if (dw && db && (s = kite_tensor_require_disjoint(op, "db", &dbt, &dwt, "dw")) != KITE_OK)
    return s;
  const kite_tensor *outs[2] = {dw ? &dwt : NULL, db ? &dbt : NULL};
  const char *names[2] = {"dw", "db"};
  for (int i = 0; i < 2; i++) {
    if (!outs[i]) continue;
    const kite_tensor *others[4] = {&xt, &dyt, &dxt, dres ? &rt : NULL};
    const char *onames[4] = {xname, "dy", "dx", "dres"};
    for (int j = 0; j < 4; j++)
      if (others[j] && (s = kite_tensor_require_disjoint(op, names[i], outs[i], others[j],
                                                         onames[j])) != KITE_OK)
        return s;
  }
  if (!isfinite(eps) || eps < 0)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: eps: %g must be finite and >= 0", op,
                          (double)eps);
  if (!isfinite(offset))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: offset: %g is not finite", op, (double)offset);

  kite_norm_bwd_args a = {.op = opid,
                          .dtype = xt.dtype,
                          .rows = rows,
                          .cols = cols,
                          .x = xt.data,
                          .x_stride = x_stride,
                          .w = wp,
                          .dy = dyt.data,
                          .dy_stride = dy_stride,
                          .dres = dres ? rt.data : NULL,
                          .dres_stride = dres_stride,
                          .dx = dxt.data,
                          .dx_stride = dx_stride,
                          .dw = (void *)dwp,
                          .db = (void *)dbp,
                          .eps = eps,
                          .offset = offset};
  if (cols == 0) return KITE_OK;
  /* 0 rows still has gradients to write: dw and db of an empty batch are zeros */
  if (rows == 0 && !dwp && !dbp) return KITE_OK;
  return kite_dispatch(ctx, opid, a.dtype, &a);
}

kite_status kite_rms_norm_backward(kite_ctx *ctx, const DLTensor *x, const DLTensor *w,
                                   const DLTensor *dy, float eps, float offset, DLTensor *dx,
                                   DLTensor *dw) {
  return norm_backward(ctx, KITE_OP_RMS_NORM_BACKWARD, "rms_norm_backward", "x", x, w, dy, NULL,
                       eps, offset, dx, dw, NULL);
}

kite_status kite_layer_norm_backward(kite_ctx *ctx, const DLTensor *x, const DLTensor *w,
                                     const DLTensor *dy, float eps, DLTensor *dx, DLTensor *dw,
                                     DLTensor *db) {
  return norm_backward(ctx, KITE_OP_LAYER_NORM_BACKWARD, "layer_norm_backward", "x", x, w, dy, NULL,
                       eps, 0.0f, dx, dw, db);
}

kite_status kite_add_rms_norm_backward(kite_ctx *ctx, const DLTensor *s, const DLTensor *w,
                                       const DLTensor *dy, const DLTensor *dres, float eps,
                                       float offset, DLTensor *dx, DLTensor *dw) {
  return norm_backward(ctx, KITE_OP_RMS_NORM_BACKWARD, "add_rms_norm_backward", "s", s, w, dy, dres,
                       eps, offset, dx, dw, NULL);
}

kite_status kite_add_layer_norm_backward(kite_ctx *ctx, const DLTensor *s, const DLTensor *w,
                                         const DLTensor *dy, const DLTensor *dres, float eps,
                                         DLTensor *dx, DLTensor *dw, DLTensor *db) {
  return norm_backward(ctx, KITE_OP_LAYER_NORM_BACKWARD, "add_layer_norm_backward", "s", s, w, dy,
                       dres, eps, 0.0f, dx, dw, db);
}
