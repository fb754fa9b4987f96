/* Front-ends of the MoE router of today's models (moe_route) and of the auxiliary
 * load-balancing loss with its backward (moe_aux_loss, moe_aux_loss_backward). */
#include <math.h>

#include "ops/matrix.h"

kite_route_opts kite_route_opts_default(void) {
  kite_route_opts o = {.k = 1,
                       .score = KITE_ROUTE_SOFTMAX,
                       .n_group = 1,
                       .topk_group = 1,
                       .renormalize = 0,
                       .scaling = 1.0f};
  return o;
}

static kite_status check_route_opts(const kite_route_opts *o, int64_t e) {
  if (o->score != KITE_ROUTE_SOFTMAX && o->score != KITE_ROUTE_SIGMOID &&
      o->score != KITE_ROUTE_SOFTMAX_TOPK)
    return kite_set_error(KITE_ERR_INVALID_ARG, "moe_route: score: %d is not a kite_route_score",
                          (int)o->score);
  if (o->k < 1 || o->k > e)
    return kite_set_error(KITE_ERR_INVALID_ARG, "moe_route: k: %lld is outside [1, E=%lld]",
                          (long long)o->k, (long long)e);
  if (o->n_group < 1 || e % o->n_group != 0)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "moe_route: n_group: %d must be >= 1 and divide E=%lld", (int)o->n_group,
                          (long long)e);
  if (o->topk_group < 1 || o->topk_group > o->n_group)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "moe_route: topk_group: %d is outside [1, n_group=%d]",
                          (int)o->topk_group, (int)o->n_group);
  if (o->k > (int64_t)o->topk_group * (e / o->n_group))
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "moe_route: n_group: %d groups of %lld experts, topk_group %d keeps "
                          "fewer than k=%lld",
                          (int)o->n_group, (long long)(e / o->n_group), (int)o->topk_group,
                          (long long)o->k);
  if (!isfinite(o->scaling))
    return kite_set_error(KITE_ERR_INVALID_ARG, "moe_route: scaling: %g is not finite",
                          (double)o->scaling);
  return KITE_OK;
}

kite_status kite_moe_route(kite_ctx *ctx, const DLTensor *logits, const DLTensor *bias,
                           const kite_route_opts *opts, DLTensor *weights, DLTensor *ids) {
  const char *op = "moe_route";
  kite_mat lm, wm, im;
  kite_tensor bt;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if (!opts)
    return kite_set_error(KITE_ERR_INVALID_ARG, "moe_route: opts is NULL (k has no default)");
  if ((s = kite_float_mat_check(ctx, op, "logits", logits, &lm)) != KITE_OK) return s;
  const int64_t t = lm.rows, e = lm.cols;
  if ((s = kite_vec_check(ctx, op, "bias", bias, true, KITE_DTYPE_F32, e, "E", &bt)) != KITE_OK)
    return s;
  if ((s = check_route_opts(opts, e)) != KITE_OK) return s;
  const int64_t k = opts->k;
  if ((s = kite_route_out_check(ctx, op, weights, ids, t, k, &wm, &im)) != KITE_OK) return s;
  const kite_tensor *in[] = {&lm.t, bias ? &bt : NULL};
  const char *names[] = {"logits", "bias"};
  if ((s = kite_require_apart(op, "weights", &wm.t, in, names, 2)) != KITE_OK) return s;
  if ((s = kite_require_apart(op, "ids", &im.t, in, names, 2)) != KITE_OK) return s;

  kite_route_args a = {.op = KITE_OP_MOE_ROUTE,
                       .dtype = lm.t.dtype,
                       .tokens = t,
                       .experts = e,
                       .opts = *opts,
                       .logits = lm.t.data,
                       .logits_stride = lm.stride,
                       .bias = bias ? bt.data : NULL,
                       .weights = wm.t.data,
                       .weights_stride = wm.stride,
                       .ids = im.t.data,
                       .ids_stride = im.stride};
  if (t == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_MOE_ROUTE, a.dtype, &a);
}

/* The arguments both aux-loss ops share: logits, ids, mask. */
static kite_status aux_check(kite_ctx *ctx, const char *op, const DLTensor *logits,
                             const DLTensor *ids, const DLTensor *mask, kite_mat *lm, kite_mat *im,
                             kite_tensor *mt) {
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = kite_float_mat_check(ctx, op, "logits", logits, lm)) != KITE_OK) return s;
  if ((s = kite_typed_mat_check(ctx, op, "ids", ids, KITE_DTYPE_I32, im)) != KITE_OK) return s;
  if (im->rows != lm->rows)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: ids: %lld rows, expected T=%lld", op,
                          (long long)im->rows, (long long)lm->rows);
  return kite_vec_check(ctx, op, "mask", mask, true, KITE_DTYPE_F32, lm->rows, "T", mt);
}

/* A compact f32 [1] (loss, dloss). */
static kite_status scalar_check(const kite_ctx *ctx, const char *op, const char *arg,
                                const DLTensor *d, kite_tensor *t) {
  return kite_vec_check(ctx, op, arg, d, false, KITE_DTYPE_F32, 1, "one", t);
}

static kite_aux_loss_args aux_args(kite_op id, const kite_mat *lm, const kite_mat *im,
                                   const DLTensor *mask, const kite_tensor *mt) {
  kite_aux_loss_args a = {.op = id,
                          .dtype = lm->t.dtype,
                          .tokens = lm->rows,
                          .experts = lm->cols,
                          .k = im->cols,
                          .logits = lm->t.data,
                          .logits_stride = lm->stride,
                          .ids = im->t.data,
                          .ids_stride = im->stride,
                          .mask = mask ? mt->data : NULL};
  return a;
}

kite_status kite_moe_aux_loss(kite_ctx *ctx, const DLTensor *logits, const DLTensor *ids,
                              const DLTensor *mask, DLTensor *loss) {
  const char *op = "moe_aux_loss";
  kite_mat lm, im;
  kite_tensor mt, lt;
  kite_status s;
  if ((s = aux_check(ctx, op, logits, ids, mask, &lm, &im, &mt)) != KITE_OK) return s;
  if ((s = scalar_check(ctx, op, "loss", loss, &lt)) != KITE_OK) return s;
  const kite_tensor *in[] = {&lm.t, &im.t, mask ? &mt : NULL};
  const char *names[] = {"logits", "ids", "mask"};
  if ((s = kite_require_apart(op, "loss", &lt, in, names, 3)) != KITE_OK) return s;
  kite_aux_loss_args a = aux_args(KITE_OP_MOE_AUX_LOSS, &lm, &im, mask, &mt);
  a.loss = lt.data;
  return kite_dispatch(ctx, KITE_OP_MOE_AUX_LOSS, a.dtype, &a);
}

kite_status kite_moe_aux_loss_backward(kite_ctx *ctx, const DLTensor *logits, const DLTensor *ids,
                                       const DLTensor *mask, const DLTensor *dloss,
                                       DLTensor *dlogits) {
  const char *op = "moe_aux_loss_backward";
  kite_mat lm, im, dm;
  kite_tensor mt, dt;
  kite_status s;
  if ((s = aux_check(ctx, op, logits, ids, mask, &lm, &im, &mt)) != KITE_OK) return s;
  if ((s = scalar_check(ctx, op, "dloss", dloss, &dt)) != KITE_OK) return s;
  if ((s = kite_mat_check(ctx, op, "dlogits", dlogits, true, &dm)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "dlogits", &dm.t, lm.t.dtype)) != KITE_OK) return s;
  if ((s = kite_mat_require_shape(op, "dlogits", &dm, lm.rows, lm.cols, "T", "E")) != KITE_OK)
    return s;
  const kite_tensor *in[] = {&lm.t, &im.t, mask ? &mt : NULL, &dt};
  const char *names[] = {"logits", "ids", "mask", "dloss"};
  if ((s = kite_require_apart(op, "dlogits", &dm.t, in, names, 4)) != KITE_OK) return s;
  kite_aux_loss_args a = aux_args(KITE_OP_MOE_AUX_LOSS_BACKWARD, &lm, &im, mask, &mt);
  a.dloss = dt.data, a.dlogits = dm.t.data, a.dlogits_stride = dm.stride;
  if (lm.rows == 0 || lm.cols == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_MOE_AUX_LOSS_BACKWARD, a.dtype, &a);
}
