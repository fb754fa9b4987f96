/* Front-ends of the losses (kite.h "Training"): cross_entropy over logits[N, V] and its
 * backward, and fused_linear_cross_entropy over h[N, H] and w[V, H]. The backward ops of the
 * other families live with their forward ops. */
#include <math.h>

#include "core/internal.h"

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

/* lse: f32 [N], compact. */
static kite_status check_lse(const kite_ctx *ctx, const char *op, const DLTensor *lse, int64_t n,
                             kite_tensor *et) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, "lse", lse, et)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, "lse", et, 1)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "lse", et, KITE_DTYPE_F32)) != KITE_OK) return s;
  if (et->shape[0] != n)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: lse: length %lld, expected N = %lld", op,
                          (long long)et->shape[0], (long long)n);
  return kite_tensor_require_compact(op, "lse", et);
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
  if ((s = kite_tensor_check_ids(ctx, op, "targets", targets, tt)) != KITE_OK) return s;
  if (tt->shape[0] != *rows)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: targets: length %lld, expected N = %lld", op,
                          (long long)tt->shape[0], (long long)*rows);
  return KITE_OK;
}

/* What cross_entropy and its backward check first, in order: ctx, opts (NULL: the defaults),
 * logits and targets; fills *a but for the outputs and lse / dloss. */
static kite_status ce_begin(kite_ctx *ctx, kite_op opid, const DLTensor *logits,
                            const DLTensor *targets, const kite_ce_opts *opts, kite_tensor *xt,
                            kite_tensor *tt, kite_ce_args *a) {
  const char *op = kite_op_name(opid);
  kite_clear_error();
  kite_init();
  kite_status s;
  int64_t rows, vocab, stride;
  const kite_ce_opts o = opts ? *opts : kite_ce_opts_default();
  if ((s = kite_check_ctx(ctx, op)) != KITE_OK) return s;
  if ((s = check_ce_opts(op, &o)) != KITE_OK) return s;
  if ((s = check_logits(ctx, op, "logits", logits, targets, xt, tt, &rows, &vocab, &stride)) !=
      KITE_OK)
    return s;
  const kite_ce_args r = {.op = opid,
                          .dtype = xt->dtype,
                          .rows = rows,
                          .vocab = vocab,
                          .logits = xt->data,
                          .logits_stride = stride,
                          .targets = tt->data,
                          .opts = o};
  *a = r;
  return KITE_OK;
}

/* The forward's outputs: loss, and lse when not NULL (et then holds it), each disjoint from the
 * inputs and from each other; fills a->loss and a->lse. */
static kite_status ce_forward_outputs(kite_ctx *ctx, const char *op, DLTensor *loss, DLTensor *lse,
                                      const kite_tensor *xt, const kite_tensor *tt, kite_tensor *lt,
                                      kite_tensor *et, kite_ce_args *a) {
  kite_status s;
  if ((s = check_loss(ctx, op, "loss", loss, &a->opts, a->rows, lt)) != KITE_OK) return s;
  const kite_tensor *ins[2] = {xt, tt};
  const char *in_names[2] = {"logits", "targets"};
  for (int i = 0; i < 2; i++)
    if ((s = kite_tensor_require_disjoint(op, "loss", lt, ins[i], in_names[i])) != KITE_OK)
      return s;
  if (lse) {
    if ((s = check_lse(ctx, op, lse, a->rows, et)) != KITE_OK) return s;
    for (int i = 0; i < 2; i++)
      if ((s = kite_tensor_require_disjoint(op, "lse", et, ins[i], in_names[i])) != KITE_OK)
        return s;
    if ((s = kite_tensor_require_disjoint(op, "lse", et, lt, "loss")) != KITE_OK) return s;
  }
  a->loss = lt->data;
  a->lse = lse ? et->data : NULL;
  return KITE_OK;
}

kite_status kite_cross_entropy(kite_ctx *ctx, const DLTensor *logits, const DLTensor *targets,
                               const kite_ce_opts *opts, DLTensor *loss, DLTensor *lse) {
  kite_status s;
  kite_tensor xt, tt, lt, et;
  kite_ce_args a;
  if ((s = ce_begin(ctx, KITE_OP_CROSS_ENTROPY, logits, targets, opts, &xt, &tt, &a)) != KITE_OK)
    return s;
  if ((s = ce_forward_outputs(ctx, "cross_entropy", loss, lse, &xt, &tt, &lt, &et, &a)) != KITE_OK)
    return s;
  /* N = 0 still has a reduced loss to write (0) */
  return kite_dispatch(ctx, KITE_OP_CROSS_ENTROPY, a.dtype, &a);
}

/* dlogits like logits, possibly the logits themselves, disjoint from every other argument. */
static kite_status check_dlogits(kite_ctx *ctx, const char *op, DLTensor *dlogits,
                                 const kite_tensor *xt, const kite_tensor *const *others,
                                 const char *const *names, int n, kite_tensor *gt,
                                 int64_t *stride) {
  kite_status s;
  if ((s = kite_tensor_check_like(ctx, op, "dlogits", dlogits, xt, "logits", gt, stride)) !=
      KITE_OK)
    return s;
  /* dlogits may be the logits (in place), no other overlap */
  const bool inplace = kite_tensor_same_view(gt, xt);
  if ((s = kite_tensor_require_no_overlap(op, "dlogits", gt)) != KITE_OK) return s;
  if (!inplace && (s = kite_tensor_require_disjoint(op, "dlogits", gt, xt, "logits")) != KITE_OK)
    return s;
  for (int i = 0; i < n; i++)
    if ((s = kite_tensor_require_disjoint(op, "dlogits", gt, others[i], names[i])) != KITE_OK)
      return s;
  return KITE_OK;
}

kite_status kite_cross_entropy_backward(kite_ctx *ctx, const DLTensor *logits,
                                        const DLTensor *targets, const DLTensor *lse,
                                        const DLTensor *dloss, const kite_ce_opts *opts,
                                        DLTensor *dlogits) {
  const char *op = "cross_entropy_backward";
  kite_status s;
  kite_tensor xt, tt, et, dt, gt;
  kite_ce_args a;
  if ((s = ce_begin(ctx, KITE_OP_CROSS_ENTROPY_BACKWARD, logits, targets, opts, &xt, &tt, &a)) !=
      KITE_OK)
    return s;
  if ((s = check_lse(ctx, op, lse, a.rows, &et)) != KITE_OK) return s;
  if ((s = check_loss(ctx, op, "dloss", dloss, &a.opts, a.rows, &dt)) != KITE_OK) return s;
  const kite_tensor *ins[3] = {&tt, &et, &dt};
  const char *in_names[3] = {"targets", "lse", "dloss"};
  if ((s = check_dlogits(ctx, op, dlogits, &xt, ins, in_names, 3, &gt, &a.dlogits_stride)) !=
      KITE_OK)
    return s;
  a.lse = et.data;
  a.dloss = dt.data;
  a.dlogits = gt.data;
  if (a.rows == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_CROSS_ENTROPY_BACKWARD, a.dtype, &a);
}

kite_status kite_cross_entropy_with_grad(kite_ctx *ctx, const DLTensor *logits,
                                         const DLTensor *targets, const kite_ce_opts *opts,
                                         DLTensor *loss, DLTensor *lse, DLTensor *dlogits) {
  const char *op = "cross_entropy_with_grad";
  kite_status s;
  kite_tensor xt, tt, lt, et, gt;
  kite_ce_args a;
  if ((s = ce_begin(ctx, KITE_OP_CROSS_ENTROPY_WITH_GRAD, logits, targets, opts, &xt, &tt, &a)) !=
      KITE_OK)
    return s;
  if ((s = ce_forward_outputs(ctx, op, loss, lse, &xt, &tt, &lt, &et, &a)) != KITE_OK) return s;
  const kite_tensor *others[3] = {&tt, &lt, &et};
  const char *other_names[3] = {"targets", "loss", "lse"};
  if ((s = check_dlogits(ctx, op, dlogits, &xt, others, other_names, lse ? 3 : 2, &gt,
                         &a.dlogits_stride)) != KITE_OK)
    return s;
  a.dlogits = gt.data;
  /* N = 0 still has a reduced loss to write (0) */
  return kite_dispatch(ctx, KITE_OP_CROSS_ENTROPY_WITH_GRAD, a.dtype, &a);
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
  if ((s = kite_tensor_check_float_rows(ctx, op, "h", h, &ht, &rows, &hidden, &h_stride)) !=
      KITE_OK)
    return s;
  if ((s = kite_tensor_check(ctx, op, "w", w, &wt)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, "w", &wt, 2)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "w", &wt, ht.dtype)) != KITE_OK) return s;
  if ((s = kite_tensor_rows(op, "w", &wt, &vocab, &wcols, &w_stride)) != KITE_OK) return s;
  if (wcols != hidden)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: w: width %lld, expected H = %lld (h)", op,
                          (long long)wcols, (long long)hidden);
  if (vocab < 1) return kite_set_error(KITE_ERR_INVALID_ARG, "%s: w: V = 0 (no classes)", op);
  if ((s = kite_tensor_check_vector(ctx, op, "bias", bias, ht.dtype, vocab, NULL, &bt, &bp)) !=
      KITE_OK)
    return s;
  if ((s = kite_tensor_check_ids(ctx, op, "targets", targets, &tt)) != KITE_OK) return s;
  if (tt.shape[0] != rows)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: targets: length %lld, expected N = %lld", op,
                          (long long)tt.shape[0], (long long)rows);
  if ((s = check_loss(ctx, op, "loss", loss, &o.ce, rows, &lt)) != KITE_OK) return s;
  if (dh && (s = kite_tensor_check_like(ctx, op, "dh", dh, &ht, "h", &dht, &dh_stride)) != KITE_OK)
    return s;
  if (dw && (s = kite_tensor_check_like(ctx, op, "dw", dw, &wt, "w", &dwt, &dw_stride)) != KITE_OK)
    return s;
  if ((s = kite_tensor_check_vector(ctx, op, "db", db, ht.dtype, vocab, NULL, &dbt, &dbp)) !=
      KITE_OK)
    return s;
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
