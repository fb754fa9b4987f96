/* Front-ends of the training ops (kite.h "Training"): the backward ops of the activations,
 * norms, softmax and embedding, and the cross-entropy losses. rope_backward lives with rope. */
#include <math.h>

#include "core/internal.h"

/* A tensor of ref's shape and dtype, viewed as rows (the last dim unit-stride). */
static kite_status check_like(const kite_ctx *ctx, const char *op, const char *arg,
                              const DLTensor *t, const kite_tensor *ref, const char *ref_arg,
                              kite_tensor *out, int64_t *stride) {
  kite_status s;
  int64_t rows, cols;
  if ((s = kite_tensor_check(ctx, op, arg, t, out)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, arg, out, ref->dtype)) != KITE_OK) return s;
  if ((s = kite_tensor_require_same_shape(op, arg, out, ref, ref_arg)) != KITE_OK) return s;
  return kite_tensor_rows(op, arg, out, &rows, &cols, stride);
}

/* A float tensor viewed as [rows, cols]. */
static kite_status check_float_rows(const kite_ctx *ctx, const char *op, const char *arg,
                                    const DLTensor *t, kite_tensor *out, int64_t *rows,
                                    int64_t *cols, int64_t *stride) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, arg, t, out)) != KITE_OK) return s;
  if ((s = kite_tensor_require_float(op, arg, out)) != KITE_OK) return s;
  return kite_tensor_rows(op, arg, out, rows, cols, stride);
}

/* Whether a and b are the same view: same address, shape and strides. */
static bool same_view(const kite_tensor *a, const kite_tensor *b) {
  if (a->data != b->data || a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i] || (a->shape[i] > 1 && a->strides[i] != b->strides[i]))
      return false;
  return true;
}

/* An output that may share memory with `alias` only by being exactly it (in place). Any other
 * overlap with alias, and any overlap with `other`, is an error. */
static kite_status check_out(const char *op, const char *arg, const kite_tensor *out,
                             const kite_tensor *alias, const char *alias_arg,
                             const kite_tensor *other, const char *other_arg) {
  kite_status s;
  if ((s = kite_tensor_require_no_overlap(op, arg, out)) != KITE_OK) return s;
  if (alias && !same_view(out, alias))
    if ((s = kite_tensor_require_disjoint(op, arg, out, alias, alias_arg)) != KITE_OK) return s;
  if (other && (s = kite_tensor_require_disjoint(op, arg, out, other, other_arg)) != KITE_OK)
    return s;
  return KITE_OK;
}

/* An optional vector [n] of dtype t, compact; *out NULL when v is. */
static kite_status check_vector(const kite_ctx *ctx, const char *op, const char *arg,
                                const DLTensor *v, kite_dtype t, int64_t n, kite_tensor *vt,
                                const void **out) {
  kite_status s;
  *out = NULL;
  if (!v) return KITE_OK;
  if ((s = kite_tensor_check(ctx, op, arg, v, vt)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, vt, 1)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, arg, vt, t)) != KITE_OK) return s;
  if (vt->shape[0] != n)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: length %lld, expected %lld", op, arg,
                          (long long)vt->shape[0], (long long)n);
  if ((s = kite_tensor_require_compact(op, arg, vt)) != KITE_OK) return s;
  *out = vt->data;
  return KITE_OK;
}

/* ---- activations -------------------------------------------------------------------------- */

static kite_status act_backward(kite_ctx *ctx, kite_op opid, kite_op act, const DLTensor *x,
                                const DLTensor *dy, float limit, DLTensor *dx) {
  const char *op = kite_op_name(opid);
  const bool gated = opid == KITE_OP_GATED_BACKWARD;
  kite_clear_error();
  kite_init();
  kite_status s;
  kite_tensor xt, dyt, dxt;
  int64_t rows, xcols, x_stride, dyrows, dycols, dy_stride, dx_stride;
  if ((s = kite_check_ctx(ctx, op)) != KITE_OK) return s;
  const bool ok = gated ? act == KITE_OP_SILU_AND_MUL || act == KITE_OP_GELU_AND_MUL ||
                              act == KITE_OP_GELU_TANH_AND_MUL
                        : act == KITE_OP_SILU || act == KITE_OP_GELU || act == KITE_OP_GELU_TANH ||
                              act == KITE_OP_GELU_QUICK || act == KITE_OP_RELU;
  if (!ok)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: act: %d is not a%s activation op", op,
                          (int)act, gated ? " gated" : "n");
  if ((s = check_float_rows(ctx, op, "x", x, &xt, &rows, &xcols, &x_stride)) != KITE_OK) return s;
  if ((s = check_float_rows(ctx, op, "dy", dy, &dyt, &dyrows, &dycols, &dy_stride)) != KITE_OK)
    return s;
  if ((s = kite_tensor_require_dtype(op, "dy", &dyt, xt.dtype)) != KITE_OK) return s;
  if (gated) {
    char a[160], b[160];
    if (xcols % 2 != 0)
      return kite_set_error(KITE_ERR_INVALID_ARG, "%s: x: last dim %lld is not even (2I)", op,
                            (long long)xcols);
    if (!kite_tensor_same_lead(&dyt, &xt) || dycols != xcols / 2)
      return kite_set_error(KITE_ERR_INVALID_ARG,
                            "%s: dy: shape %s does not fit x %s (same leading dims, last dim %lld)",
                            op, kite_shape_str(&dyt, a, sizeof a), kite_shape_str(&xt, b, sizeof b),
                            (long long)(xcols / 2));
    if (!isfinite(limit))
      return kite_set_error(KITE_ERR_INVALID_ARG, "%s: limit: %g is not finite", op, (double)limit);
  } else if ((s = kite_tensor_require_same_shape(op, "dy", &dyt, &xt, "x")) != KITE_OK) {
    return s;
  }
  if ((s = check_like(ctx, op, "dx", dx, &xt, "x", &dxt, &dx_stride)) != KITE_OK) return s;
  if ((s = check_out(op, "dx", &dxt, gated ? NULL : &dyt, "dy", &xt, "x")) != KITE_OK) return s;
  if (gated && (s = kite_tensor_require_disjoint(op, "dx", &dxt, &dyt, "dy")) != KITE_OK) return s;

  kite_act_bwd_args a = {.op = opid,
                         .dtype = xt.dtype,
                         .act = act,
                         .rows = rows,
                         .cols = dycols,
                         .x = xt.data,
                         .x_stride = x_stride,
                         .dy = dyt.data,
                         .dy_stride = dy_stride,
                         .dx = dxt.data,
                         .dx_stride = dx_stride,
                         .limit = gated && limit > 0 ? limit : 0.0f};
  if (rows == 0 || dycols == 0) return KITE_OK;
  return kite_dispatch(ctx, opid, a.dtype, &a);
}

kite_status kite_activation_backward(kite_ctx *ctx, kite_op act, const DLTensor *x,
                                     const DLTensor *dy, DLTensor *dx) {
  return act_backward(ctx, KITE_OP_ACTIVATION_BACKWARD, act, x, dy, 0.0f, dx);
}

kite_status kite_gated_backward(kite_ctx *ctx, kite_op act, const DLTensor *x, const DLTensor *dy,
                                float limit, DLTensor *dx) {
  return act_backward(ctx, KITE_OP_GATED_BACKWARD, act, x, dy, limit, dx);
}

/* ---- norms -------------------------------------------------------------------------------- */

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
  if ((s = check_float_rows(ctx, op, xname, x, &xt, &rows, &cols, &x_stride)) != KITE_OK) return s;
  if ((s = check_like(ctx, op, "dy", dy, &xt, xname, &dyt, &dy_stride)) != KITE_OK) return s;
  if (dres && (s = check_like(ctx, op, "dres", dres, &xt, xname, &rt, &dres_stride)) != KITE_OK)
    return s;
  if ((s = check_like(ctx, op, "dx", dx, &xt, xname, &dxt, &dx_stride)) != KITE_OK) return s;
  if ((s = check_out(op, "dx", &dxt, &dyt, "dy", &xt, xname)) != KITE_OK) return s;
  if (dres && (s = check_out(op, "dx", &dxt, &rt, "dres", NULL, NULL)) != KITE_OK) return s;
  if ((s = check_vector(ctx, op, "w", w, xt.dtype, cols, &wt, &wp)) != KITE_OK) return s;
  if ((s = check_vector(ctx, op, "dw", dw, xt.dtype, cols, &dwt, &dwp)) != KITE_OK) return s;
  if ((s = check_vector(ctx, op, "db", db, xt.dtype, cols, &dbt, &dbp)) != KITE_OK) return s;
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

/* ---- softmax ------------------------------------------------------------------------------ */

kite_status kite_softmax_backward(kite_ctx *ctx, const DLTensor *y, const DLTensor *dy, float scale,
                                  DLTensor *dx) {
  const char *op = "softmax_backward";
  kite_clear_error();
  kite_init();
  kite_status s;
  kite_tensor yt, dyt, dxt;
  int64_t rows, cols, y_stride, dy_stride, dx_stride;
  if ((s = kite_check_ctx(ctx, op)) != KITE_OK) return s;
  if ((s = check_float_rows(ctx, op, "y", y, &yt, &rows, &cols, &y_stride)) != KITE_OK) return s;
  if ((s = check_like(ctx, op, "dy", dy, &yt, "y", &dyt, &dy_stride)) != KITE_OK) return s;
  if ((s = check_like(ctx, op, "dx", dx, &yt, "y", &dxt, &dx_stride)) != KITE_OK) return s;
  if ((s = check_out(op, "dx", &dxt, &dyt, "dy", &yt, "y")) != KITE_OK) return s;
  if (!isfinite(scale))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: scale: %g is not finite", op, (double)scale);
  kite_softmax_bwd_args a = {.op = KITE_OP_SOFTMAX_BACKWARD,
                             .dtype = yt.dtype,
                             .rows = rows,
                             .cols = cols,
                             .y = yt.data,
                             .y_stride = y_stride,
                             .dy = dyt.data,
                             .dy_stride = dy_stride,
                             .dx = dxt.data,
                             .dx_stride = dx_stride,
                             .scale = scale};
  if (rows == 0 || cols == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_SOFTMAX_BACKWARD, a.dtype, &a);
}

/* ---- embedding ---------------------------------------------------------------------------- */

/* ids[T] int32, compact. */
static kite_status check_ids(const kite_ctx *ctx, const char *op, const char *arg,
                             const DLTensor *ids, kite_tensor *it) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, arg, ids, it)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, it, 1)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, arg, it, KITE_DTYPE_I32)) != KITE_OK) return s;
  return kite_tensor_require_compact(op, arg, it);
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
  if ((s = check_ids(ctx, op, "ids", ids, &it)) != KITE_OK) return s;
  if ((s = kite_tensor_check(ctx, op, "dy", dy, &dyt)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, "dy", &dyt, 2)) != KITE_OK) return s;
  if ((s = kite_tensor_require_float(op, "dy", &dyt)) != KITE_OK) return s;
  if ((s = kite_tensor_rows(op, "dy", &dyt, &tokens, &hidden, &dy_stride)) != KITE_OK) return s;
  if (tokens != it.shape[0])
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: dy: %lld rows, expected T = %lld (ids)", op,
                          (long long)tokens, (long long)it.shape[0]);
  if ((s = kite_tensor_check(ctx, op, "dtable", dtable, &tt)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, "dtable", &tt, 2)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "dtable", &tt, dyt.dtype)) != KITE_OK) return s;
  if ((s = kite_tensor_rows(op, "dtable", &tt, &vocab, &tcols, &t_stride)) != KITE_OK) return s;
  if (tcols != hidden)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: dtable: width %lld, expected H = %lld (dy)",
                          op, (long long)tcols, (long long)hidden);
  if ((s = check_out(op, "dtable", &tt, NULL, NULL, &dyt, "dy")) != KITE_OK) return s;
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

/* ---- cross-entropy ------------------------------------------------------------------------ */

kite_ce_opts kite_ce_opts_default(void) {
  kite_ce_opts o = {.ignore_index = -100,
                    .label_smoothing = 0.0f,
                    .z_loss = 0.0f,
                    .softcap = 0.0f,
                    .reduction = KITE_REDUCTION_MEAN};
  return o;
}

kite_flce_opts kite_flce_opts_default(void) {
  kite_flce_opts o = {.ce = kite_ce_opts_default(), .chunk_bytes = 0};
  return o;
}

static kite_status check_ce_opts(const char *op, const kite_ce_opts *o) {
  if (!(o->label_smoothing >= 0.0f && o->label_smoothing <= 1.0f))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: opts.label_smoothing: %g must be in [0, 1]",
                          op, (double)o->label_smoothing);
  if (!(o->z_loss >= 0.0f) || !isfinite(o->z_loss))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: opts.z_loss: %g must be finite and >= 0", op,
                          (double)o->z_loss);
  if (!(o->softcap >= 0.0f) || !isfinite(o->softcap))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: opts.softcap: %g must be finite and >= 0", op,
                          (double)o->softcap);
  if (o->reduction != KITE_REDUCTION_NONE && o->reduction != KITE_REDUCTION_SUM &&
      o->reduction != KITE_REDUCTION_MEAN)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: opts.reduction: %d is not a kite_reduction",
                          op, (int)o->reduction);
  return KITE_OK;
}

/* loss (or dloss): f32, [N] for reduction none, [1] otherwise, compact. */
static kite_status check_loss(const kite_ctx *ctx, const char *op, const char *arg,
                              const DLTensor *t, const kite_ce_opts *o, int64_t n,
                              kite_tensor *lt) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, arg, t, lt)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, lt, 1)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, arg, lt, KITE_DTYPE_F32)) != KITE_OK) return s;
  const int64_t want = o->reduction == KITE_REDUCTION_NONE ? n : 1;
  if (lt->shape[0] != want)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: length %lld, expected %lld (%s)", op, arg,
                          (long long)lt->shape[0], (long long)want,
                          o->reduction == KITE_REDUCTION_NONE ? "reduction none: one per row"
                                                              : "a reduced loss");
  return kite_tensor_require_compact(op, arg, lt);
}

/* logits[N, V] (V >= 1) and targets[N]. */
static kite_status check_logits(const kite_ctx *ctx, const char *op, const char *arg,
                                const DLTensor *logits, const DLTensor *targets, kite_tensor *xt,
                                kite_tensor *tt, int64_t *rows, int64_t *vocab, int64_t *stride) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, arg, logits, xt)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, xt, 2)) != KITE_OK) return s;
  if ((s = kite_tensor_require_float(op, arg, xt)) != KITE_OK) return s;
  if ((s = kite_tensor_rows(op, arg, xt, rows, vocab, stride)) != KITE_OK) return s;
  if (*vocab < 1)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: V = 0 (no classes)", op, arg);
  if ((s = check_ids(ctx, op, "targets", targets, tt)) != KITE_OK) return s;
  if (tt->shape[0] != *rows)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: targets: length %lld, expected N = %lld", op,
                          (long long)tt->shape[0], (long long)*rows);
  return KITE_OK;
}

kite_status kite_cross_entropy(kite_ctx *ctx, const DLTensor *logits, const DLTensor *targets,
                               const kite_ce_opts *opts, DLTensor *loss, DLTensor *lse) {
  const char *op = "cross_entropy";
  kite_clear_error();
  kite_init();
  kite_status s;
  kite_tensor xt, tt, lt, et;
  int64_t rows, vocab, stride;
  const kite_ce_opts o = opts ? *opts : kite_ce_opts_default();
  if ((s = kite_check_ctx(ctx, op)) != KITE_OK) return s;
  if ((s = check_ce_opts(op, &o)) != KITE_OK) return s;
  if ((s = check_logits(ctx, op, "logits", logits, targets, &xt, &tt, &rows, &vocab, &stride)) !=
      KITE_OK)
    return s;
  if ((s = check_loss(ctx, op, "loss", loss, &o, rows, &lt)) != KITE_OK) return s;
  const kite_tensor *ins[2] = {&xt, &tt};
  const char *in_names[2] = {"logits", "targets"};
  for (int i = 0; i < 2; i++)
    if ((s = kite_tensor_require_disjoint(op, "loss", &lt, ins[i], in_names[i])) != KITE_OK)
      return s;
  if (lse) {
    if ((s = kite_tensor_check(ctx, op, "lse", lse, &et)) != KITE_OK) return s;
    if ((s = kite_tensor_require_ndim(op, "lse", &et, 1)) != KITE_OK) return s;
    if ((s = kite_tensor_require_dtype(op, "lse", &et, KITE_DTYPE_F32)) != KITE_OK) return s;
    if (et.shape[0] != rows)
      return kite_set_error(KITE_ERR_INVALID_ARG, "%s: lse: length %lld, expected N = %lld", op,
                            (long long)et.shape[0], (long long)rows);
    if ((s = kite_tensor_require_compact(op, "lse", &et)) != KITE_OK) return s;
    for (int i = 0; i < 2; i++)
      if ((s = kite_tensor_require_disjoint(op, "lse", &et, ins[i], in_names[i])) != KITE_OK)
        return s;
    if ((s = kite_tensor_require_disjoint(op, "lse", &et, &lt, "loss")) != KITE_OK) return s;
  }
  kite_ce_args a = {.op = KITE_OP_CROSS_ENTROPY,
                    .dtype = xt.dtype,
                    .rows = rows,
                    .vocab = vocab,
                    .logits = xt.data,
                    .logits_stride = stride,
                    .targets = tt.data,
                    .opts = o,
                    .loss = lt.data,
                    .lse = lse ? et.data : NULL};
  /* N = 0 still has a reduced loss to write (0) */
  return kite_dispatch(ctx, KITE_OP_CROSS_ENTROPY, a.dtype, &a);
}

kite_status kite_cross_entropy_backward(kite_ctx *ctx, const DLTensor *logits,
                                        const DLTensor *targets, const DLTensor *lse,
                                        const DLTensor *dloss, const kite_ce_opts *opts,
                                        DLTensor *dlogits) {
  const char *op = "cross_entropy_backward";
  kite_clear_error();
  kite_init();
  kite_status s;
  kite_tensor xt, tt, et, dt, gt;
  int64_t rows, vocab, stride, g_stride;
  const kite_ce_opts o = opts ? *opts : kite_ce_opts_default();
  if ((s = kite_check_ctx(ctx, op)) != KITE_OK) return s;
  if ((s = check_ce_opts(op, &o)) != KITE_OK) return s;
  if ((s = check_logits(ctx, op, "logits", logits, targets, &xt, &tt, &rows, &vocab, &stride)) !=
      KITE_OK)
    return s;
  if ((s = kite_tensor_check(ctx, op, "lse", lse, &et)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, "lse", &et, 1)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "lse", &et, KITE_DTYPE_F32)) != KITE_OK) return s;
  if (et.shape[0] != rows)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: lse: length %lld, expected N = %lld", op,
                          (long long)et.shape[0], (long long)rows);
  if ((s = kite_tensor_require_compact(op, "lse", &et)) != KITE_OK) return s;
  if ((s = check_loss(ctx, op, "dloss", dloss, &o, rows, &dt)) != KITE_OK) return s;
  if ((s = check_like(ctx, op, "dlogits", dlogits, &xt, "logits", &gt, &g_stride)) != KITE_OK)
    return s;
  const bool inplace = same_view(&gt, &xt);
  if ((s = kite_tensor_require_no_overlap(op, "dlogits", &gt)) != KITE_OK) return s;
  if (!inplace && (s = kite_tensor_require_disjoint(op, "dlogits", &gt, &xt, "logits")) != KITE_OK)
    return s;
  const kite_tensor *ins[3] = {&tt, &et, &dt};
  const char *in_names[3] = {"targets", "lse", "dloss"};
  for (int i = 0; i < 3; i++)
    if ((s = kite_tensor_require_disjoint(op, "dlogits", &gt, ins[i], in_names[i])) != KITE_OK)
      return s;
  kite_ce_args a = {.op = KITE_OP_CROSS_ENTROPY_BACKWARD,
                    .dtype = xt.dtype,
                    .rows = rows,
                    .vocab = vocab,
                    .logits = xt.data,
                    .logits_stride = stride,
                    .targets = tt.data,
                    .opts = o,
                    .lse = et.data,
                    .dloss = dt.data,
                    .dlogits = gt.data,
                    .dlogits_stride = g_stride};
  if (rows == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_CROSS_ENTROPY_BACKWARD, a.dtype, &a);
}

/* The scratch fused_linear_cross_entropy may use when the caller gives no budget. */
#define FLCE_DEFAULT_CHUNK_BYTES ((size_t)256 << 20)

kite_status kite_fused_linear_cross_entropy(kite_ctx *ctx, const DLTensor *h, const DLTensor *w,
                                            const DLTensor *bias, const DLTensor *targets,
                                            const kite_flce_opts *opts, DLTensor *loss,
                                            DLTensor *dh, DLTensor *dw, DLTensor *db) {
  const char *op = "fused_linear_cross_entropy";
  kite_clear_error();
  kite_init();
  kite_status s;
  kite_tensor ht, wt, bt, tt, lt, dht, dwt, dbt;
  int64_t rows, hidden, h_stride, vocab, wcols, w_stride, dh_stride = 0, dw_stride = 0;
  const void *bp = NULL, *dbp = NULL;
  const kite_flce_opts o = opts ? *opts : kite_flce_opts_default();
  if ((s = kite_check_ctx(ctx, op)) != KITE_OK) return s;
  if ((s = check_ce_opts(op, &o.ce)) != KITE_OK) return s;
  if ((s = kite_tensor_check(ctx, op, "h", h, &ht)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, "h", &ht, 2)) != KITE_OK) return s;
  if ((s = check_float_rows(ctx, op, "h", h, &ht, &rows, &hidden, &h_stride)) != KITE_OK) return s;
  if ((s = kite_tensor_check(ctx, op, "w", w, &wt)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, "w", &wt, 2)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "w", &wt, ht.dtype)) != KITE_OK) return s;
  if ((s = kite_tensor_rows(op, "w", &wt, &vocab, &wcols, &w_stride)) != KITE_OK) return s;
  if (wcols != hidden)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: w: width %lld, expected H = %lld (h)", op,
                          (long long)wcols, (long long)hidden);
  if (vocab < 1) return kite_set_error(KITE_ERR_INVALID_ARG, "%s: w: V = 0 (no classes)", op);
  if ((s = check_vector(ctx, op, "bias", bias, ht.dtype, vocab, &bt, &bp)) != KITE_OK) return s;
  if ((s = check_ids(ctx, op, "targets", targets, &tt)) != KITE_OK) return s;
  if (tt.shape[0] != rows)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: targets: length %lld, expected N = %lld", op,
                          (long long)tt.shape[0], (long long)rows);
  if ((s = check_loss(ctx, op, "loss", loss, &o.ce, rows, &lt)) != KITE_OK) return s;
  if (dh && (s = check_like(ctx, op, "dh", dh, &ht, "h", &dht, &dh_stride)) != KITE_OK) return s;
  if (dw && (s = check_like(ctx, op, "dw", dw, &wt, "w", &dwt, &dw_stride)) != KITE_OK) return s;
  if ((s = check_vector(ctx, op, "db", db, ht.dtype, vocab, &dbt, &dbp)) != KITE_OK) return s;
  /* every output apart from every input and from each other */
  const kite_tensor *outs[4] = {&lt, dh ? &dht : NULL, dw ? &dwt : NULL, db ? &dbt : NULL};
  const char *out_names[4] = {"loss", "dh", "dw", "db"};
  const kite_tensor *all[8] = {&ht,     &wt,     bias ? &bt : NULL, &tt,
                               outs[0], outs[1], outs[2],           outs[3]};
  const char *all_names[8] = {"h", "w", "bias", "targets", "loss", "dh", "dw", "db"};
  for (int i = 3; i >= 0; i--) { /* the later outputs first: db is named before loss */
    if (!outs[i]) continue;
    if ((s = kite_tensor_require_no_overlap(op, out_names[i], outs[i])) != KITE_OK) return s;
    for (int j = 0; j < 8; j++)
      if (all[j] && all[j] != outs[i] &&
          (s = kite_tensor_require_disjoint(op, out_names[i], outs[i], all[j], all_names[j])) !=
              KITE_OK)
        return s;
  }
  kite_flce_args a = {.op = KITE_OP_FUSED_LINEAR_CROSS_ENTROPY,
                      .dtype = ht.dtype,
                      .rows = rows,
                      .hidden = hidden,
                      .vocab = vocab,
                      .h = ht.data,
                      .h_stride = h_stride,
                      .w = wt.data,
                      .w_stride = w_stride,
                      .bias = bp,
                      .targets = tt.data,
                      .opts = o.ce,
                      .chunk_bytes = o.chunk_bytes ? o.chunk_bytes : FLCE_DEFAULT_CHUNK_BYTES,
                      .loss = lt.data,
                      .dh = dh ? dht.data : NULL,
                      .dh_stride = dh_stride,
                      .dw = dw ? dwt.data : NULL,
                      .dw_stride = dw_stride,
                      .db = (void *)dbp};
  return kite_dispatch(ctx, KITE_OP_FUSED_LINEAR_CROSS_ENTROPY, a.dtype, &a);
}
