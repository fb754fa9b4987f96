/* Front-ends of the collectives (kite.h "Communication between ranks"): every check is local to
 * the calling rank and happens before any communication, so a bad call never joins a
 * collective. */
#include <math.h>

#include "core/internal.h"

/* ctx, comm and the comm's device; fills the args' comm reference. */
static kite_status check_comm(const kite_ctx *ctx, const kite_comm *comm, const char *op,
                              kite_comm_ref *out) {
  kite_status s;
  if ((s = kite_check_ctx(ctx, op)) != KITE_OK) return s;
  if (!comm) return kite_set_error(KITE_ERR_INVALID_ARG, "%s: comm is NULL", op);
  if (comm->device.device_type != ctx->p.device.device_type ||
      comm->device.device_id != ctx->p.device.device_id)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: comm is on %s:%d, the ctx on %s:%d", op,
                          kite_device_name(comm->device.device_type), comm->device.device_id,
                          kite_device_name(ctx->p.device.device_type), ctx->p.device.device_id);
  *out = comm->ref;
  return KITE_OK;
}

/* A compact float tensor of the collective. */
static kite_status check_buffer(const kite_ctx *ctx, const char *op, const char *arg,
                                const DLTensor *t, kite_tensor *out) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, arg, t, out)) != KITE_OK) return s;
  if ((s = kite_tensor_require_float(op, arg, out)) != KITE_OK) return s;
  return kite_tensor_require_compact(op, arg, out);
}

/* y's shape is x's with the first dim multiplied by `factor` (x's first dim times factor when
 * gather, y's times factor when scatter), everything else equal. */
static kite_status check_scaled(const char *op, const kite_tensor *small, const char *small_arg,
                                const kite_tensor *big, const char *big_arg, int factor) {
  char a[96], b[96];
  bool ok = small->ndim == big->ndim && big->shape[0] == small->shape[0] * factor;
  for (int i = 1; ok && i < small->ndim; i++) ok = small->shape[i] == big->shape[i];
  if (ok) return KITE_OK;
  return kite_set_error(KITE_ERR_INVALID_ARG,
                        "%s: %s %s must be %s %s with its first dim times nranks %d", op, big_arg,
                        kite_shape_str(big, b, sizeof b), small_arg,
                        kite_shape_str(small, a, sizeof a), factor);
}

/* Overlap of x and y is allowed only as the op's in-place layout: y's bytes starting `offset`
 * elements into the larger buffer (all_reduce: 0). */
static kite_status check_in_place(const char *op, const kite_tensor *xt, const kite_tensor *yt,
                                  const kite_tensor *big, const kite_tensor *small,
                                  int64_t offset) {
  if (xt->numel == 0 || yt->numel == 0) return KITE_OK;
  const char *bp = (const char *)big->data, *sp = (const char *)small->data;
  if (sp == bp + offset * (int64_t)kite_dtype_size(big->dtype)) return KITE_OK;
  return kite_tensor_require_disjoint(op, "y", yt, xt, "x");
}

static kite_status collective(kite_ctx *ctx, kite_comm *comm, kite_op op, const DLTensor *x,
                              DLTensor *y) {
  const char *name = kite_op_name(op);
  kite_clear_error();
  kite_init();
  kite_comm_args a = {.op = op};
  kite_tensor xt, yt;
  kite_status s;
  if ((s = check_comm(ctx, comm, name, &a.comm)) != KITE_OK) return s;
  if ((s = check_buffer(ctx, name, "x", x, &xt)) != KITE_OK) return s;
  if ((s = check_buffer(ctx, name, "y", y, &yt)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(name, "y", &yt, xt.dtype)) != KITE_OK) return s;
  const int n = a.comm.nranks, r = a.comm.rank;
  switch (op) {
  case KITE_OP_ALL_GATHER:
    if ((s = check_scaled(name, &xt, "x", &yt, "y", n)) != KITE_OK) return s;
    s = check_in_place(name, &xt, &yt, &yt, &xt, r * xt.numel);
    a.count = xt.numel;
    break;
  case KITE_OP_REDUCE_SCATTER:
    if ((s = check_scaled(name, &yt, "y", &xt, "x", n)) != KITE_OK) return s;
    s = check_in_place(name, &xt, &yt, &xt, &yt, r * yt.numel);
    a.count = yt.numel;
    break;
  default:
    if ((s = kite_tensor_require_same_shape(name, "y", &yt, &xt, "x")) != KITE_OK) return s;
    s = check_in_place(name, &xt, &yt, &xt, &yt, 0);
    a.count = xt.numel;
    break;
  }
  if (s != KITE_OK) return s;
  a.dtype = xt.dtype;
  a.x = xt.data;
  a.y = yt.data;
  /* an empty collective still runs: every rank takes part, so that the ranks stay in step */
  return kite_dispatch(ctx, op, a.dtype, &a);
}

kite_status kite_all_reduce(kite_ctx *ctx, kite_comm *comm, const DLTensor *x, DLTensor *y) {
  return collective(ctx, comm, KITE_OP_ALL_REDUCE, x, y);
}

kite_status kite_all_gather(kite_ctx *ctx, kite_comm *comm, const DLTensor *x, DLTensor *y) {
  return collective(ctx, comm, KITE_OP_ALL_GATHER, x, y);
}

kite_status kite_reduce_scatter(kite_ctx *ctx, kite_comm *comm, const DLTensor *x, DLTensor *y) {
  return collective(ctx, comm, KITE_OP_REDUCE_SCATTER, x, y);
}

/* The norm's checks are kite_add_rms_norm's (rows of x, y and residual, w), plus x compact. */
kite_status kite_all_reduce_add_rms_norm(kite_ctx *ctx, kite_comm *comm, const DLTensor *x,
                                         DLTensor *residual, const DLTensor *w, float eps,
                                         float offset, kite_norm_pos pos, DLTensor *y) {
  const kite_op op = KITE_OP_ALL_REDUCE_ADD_RMS_NORM;
  const char *name = kite_op_name(op);
  kite_clear_error();
  kite_init();
  kite_comm_norm_args a = {.op = op};
  kite_status s;
  if ((s = check_comm(ctx, comm, name, &a.comm)) != KITE_OK) return s;
  kite_norm_args *na = &a.norm;
  if ((s = kite_add_norm_check(ctx, name, x, residual, w, NULL, eps, offset, pos, y, na)) !=
      KITE_OK)
    return s;
  kite_tensor xt;
  if ((s = check_buffer(ctx, name, "x", x, &xt)) != KITE_OK) return s;
  na->op = KITE_OP_ADD_RMS_NORM;
  a.dtype = na->dtype;
  return kite_dispatch(ctx, op, a.dtype, &a);
}
