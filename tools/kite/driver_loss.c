/*
 * Drivers of the losses:
 *   cross_entropy:           logits[N, V], targets[N] -> loss ([N] or [1]), lse[N]
 *   cross_entropy_backward:  logits, targets, lse, dloss -> dlogits[N, V] (may be the logits)
 *   cross_entropy_with_grad: logits, targets -> loss, lse, dlogits (may be the logits)
 *   fused_linear_cross_entropy: h[N, H], w[V, H], bias[V], targets -> loss, dh, dw, db
 * rows = N, cols = V (cross-entropy); vocab = V and train.hidden = H (fused).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rows.h"
#include "util.h"

/* argument slots */

static int is_ce(kite_op op) {
  return op == KITE_OP_CROSS_ENTROPY || op == KITE_OP_CROSS_ENTROPY_BACKWARD ||
         op == KITE_OP_CROSS_ENTROPY_WITH_GRAD;
}

static int loss_has(kite_op op) {
  return is_ce(op) || op == KITE_OP_FUSED_LINEAR_CROSS_ENTROPY;
}

/* ---- descriptions ------------------------------------------------------------------------ */

static void loss_shape(const kt_case *c, char *buf, size_t n) {
  if (c->op == KITE_OP_FUSED_LINEAR_CROSS_ENTROPY)
    snprintf(buf, n, "%lldx%lldx%lld", (long long)c->rows, (long long)c->train.hidden,
             (long long)c->vocab);
  else
    kt_rows_shape(c, buf, n);
}

static void loss_describe(const kt_case *c, char *buf, size_t n) {
  size_t len = 0;
  const kt_train_case *t = &c->train;
  buf[0] = '\0';
  if (c->op == KITE_OP_FUSED_LINEAR_CROSS_ENTROPY) {
    kt_cat(buf, n, &len, "N=%lld H=%lld V=%lld", (long long)c->rows, (long long)t->hidden,
           (long long)c->vocab);
    if (t->with_bias) kt_cat(buf, n, &len, " bias");
    if (!t->want_grads) kt_cat(buf, n, &len, " loss-only");
    if (t->chunk_bytes) kt_cat(buf, n, &len, " chunk=%zuB", t->chunk_bytes);
  } else {
    kt_cat(buf, n, &len, "%lldx%lld", (long long)c->rows, (long long)c->cols);
  }
  kt_cat(buf, n, &len, " %s", kt_reduction_name(t->ce.reduction));
  if (t->ignore_frac > 0) kt_cat(buf, n, &len, " ignore=%g", (double)t->ignore_frac);
  if (t->ce.label_smoothing > 0) kt_cat(buf, n, &len, " ls=%g", (double)t->ce.label_smoothing);
  if (t->ce.z_loss > 0) kt_cat(buf, n, &len, " z_loss=%g", (double)t->ce.z_loss);
  if (t->ce.softcap > 0) kt_cat(buf, n, &len, " softcap=%g", (double)t->ce.softcap);
  kt_describe_tail(c, buf, n, &len);
}

/* ---- layout ------------------------------------------------------------------------------ */

/* targets: ignore_index for about ignore_frac of the rows, else uniform in [0, V). */
static void fill_targets(const kt_run *r, int vi, uint64_t seed, unsigned char *body) {
  const kt_view *v = &r->view[vi];
  const kt_train_case *t = &r->c.train;
  const int64_t vocab = r->c.op == KITE_OP_FUSED_LINEAR_CROSS_ENTROPY ? r->c.vocab : r->c.cols;
  for (int64_t i = 0, n = kt_view_numel(v); i < n; i++) {
    int32_t tg = (int32_t)(kt_hash(seed, (uint64_t)i) % (uint64_t)(vocab > 0 ? vocab : 1));
    if (kt_unit(seed ^ 0x5bd1e995u, (uint64_t)i) < t->ignore_frac) tg = t->ce.ignore_index;
    ((int32_t *)body)[kt_view_at(v, i)] = tg;
  }
}

static void add_targets(kt_run *r, int64_t rows) {
  int tg = kt_bind(r, "targets",
                   kt_add_vector(r, "targets", KITE_DTYPE_I32, KT_IN, rows, KT_FILL_CUSTOM, 0, 0));
  r->view[tg].fill_fn = fill_targets;
}

static void loss_plan(kt_run *r, const kt_case *c) {
  const kite_dtype t = c->dtype;
  const kt_train_case *tc = &c->train;
  const float lo = c->shift - c->amp, hi = c->shift + c->amp;
  const int64_t R = c->rows, C = c->cols;
  const int64_t nl = tc->ce.reduction == KITE_REDUCTION_NONE ? R : 1;
  if (c->op == KITE_OP_FUSED_LINEAR_CROSS_ENTROPY) {
    const int64_t H = tc->hidden, V = c->vocab;
    kt_bind(r, "h", kt_add_matrix(r, "h", t, KT_IN, R, H, c->pad_x, lo, hi));
    kt_bind(r, "w", kt_add_matrix(r, "w", t, KT_IN, V, H, c->pad_x, lo, hi));
    if (tc->with_bias)
      kt_bind(r, "bias", kt_add_vector(r, "bias", t, KT_IN, V, KT_FILL_UNIFORM, -1, 1));
    add_targets(r, R);
    kt_bind(r, "loss", kt_add_vector(r, "loss", KITE_DTYPE_F32, KT_OUT, nl, KT_FILL_UNIFORM, 0, 0));
    if (tc->want_grads) {
      kt_bind(r, "dh", kt_add_matrix(r, "dh", t, KT_OUT, R, H, c->pad_y, 0, 0));
      kt_bind(r, "dw", kt_add_matrix(r, "dw", t, KT_OUT, V, H, c->pad_y, 0, 0));
      if (tc->with_bias)
        kt_bind(r, "db", kt_add_vector(r, "db", t, KT_OUT, V, KT_FILL_UNIFORM, 0, 0));
    }
    return;
  }
  int x = kt_bind(r, "logits", kt_add_matrix(r, "logits", t, KT_IN, R, C, c->pad_x, lo, hi));
  add_targets(r, R);
  if (c->op != KITE_OP_CROSS_ENTROPY_BACKWARD) {
    kt_bind(r, "loss", kt_add_vector(r, "loss", KITE_DTYPE_F32, KT_OUT, nl, KT_FILL_UNIFORM, 0, 0));
    kt_bind(r, "lse", kt_add_vector(r, "lse", KITE_DTYPE_F32, KT_OUT, R, KT_FILL_UNIFORM, 0, 0));
    if (c->op == KITE_OP_CROSS_ENTROPY_WITH_GRAD)
      kt_bind(r, "dlogits", kt_add_out_or_inplace(r, c, x, "dlogits", R, C));
    return;
  }
  /* any lse works for comparing kernels; one at least the largest z keeps p <= 1 */
  const float l0 = hi + logf((float)(C > 0 ? C : 1));
  kt_bind(r, "lse",
          kt_add_vector(r, "lse", KITE_DTYPE_F32, KT_IN, R, KT_FILL_UNIFORM, l0, l0 + 1.0f));
  kt_bind(r, "dloss",
          kt_add_vector(r, "dloss", KITE_DTYPE_F32, KT_IN, nl, KT_FILL_UNIFORM, 0.5f, 1.5f));
  kt_bind(r, "dlogits", kt_add_out_or_inplace(r, c, x, "dlogits", R, C));
}

/* ---- the call ---------------------------------------------------------------------------- */

KT_SCALARS(loss_scalar, KT_FIELD("ignore_index", 'i', train.ce.ignore_index),
           KT_FIELD("label_smoothing", 'f', train.ce.label_smoothing),
           KT_FIELD("z_loss", 'f', train.ce.z_loss), KT_FIELD("softcap", 'f', train.ce.softcap),
           KT_FIELD("reduction", 'i', train.ce.reduction),
           KT_FIELD("chunk_bytes", 'z', train.chunk_bytes))

/* ---- bounds and cases -------------------------------------------------------------------- */

/* NMSE bounds [f32, f16, bf16]. The cross-entropy loss is f32 math whatever the logits' dtype;
 * its gradient is rounded to the dtype; fused_linear_cross_entropy rounds the logits and their
 * gradient to the dtype before its products, as a separate linear then cross_entropy would. */
static double loss_bound(kite_op op, kite_dtype t) {
  static const double ce[3] = {1e-8, 1e-8, 1e-8}, grad[3] = {1e-6, 1e-5, 1e-4},
                      flce[3] = {1e-7, 1e-3, 1e-2};
  return kt_bound_of(t, op == KITE_OP_CROSS_ENTROPY                ? ce
                        : op == KITE_OP_FUSED_LINEAR_CROSS_ENTROPY ? flce
                                                                   : grad);
}

static void gen_ce(kt_case_list *l, kite_op op, kite_dtype t, kt_shape2 s, int quick) {
  for (int red = 0; red < 3; red++) {
    kt_case c = kt_bwd_case(op, t, s.rows, s.cols);
    c.amp = 3.0f;
    c.train.ce.reduction = (kite_reduction)red;
    c.train.ignore_frac = 0.25f;
    kt_case_push(l, c);
    if (quick) continue;
    c.train.ce.label_smoothing = 0.1f, c.train.ce.z_loss = 1e-2f, c.pad_x = 3, c.pad_y = 1;
    kt_case_push(l, c);
    c = kt_bwd_case(op, t, s.rows, s.cols);
    c.train.ce.reduction = (kite_reduction)red;
    c.amp = 8.0f, c.train.ce.softcap = 5.0f, c.inplace = op != KITE_OP_CROSS_ENTROPY;
    kt_case_push(l, c);
    c.train.ignore_frac = 1.0f; /* every row ignored: loss 0, gradient 0 */
    kt_case_push(l, c);
  }
}

typedef struct flce_geom {
  int64_t n, h, v;
} flce_geom;

static void gen_flce(kt_case_list *l, kite_dtype t, int quick) {
  static const flce_geom g[] = {{0, 8, 5},    {1, 1, 3},       {3, 17, 10},
                                {7, 64, 100}, {33, 128, 1000}, {16, 128, 1500}};
  const int n = quick ? 4 : (int)(sizeof g / sizeof *g);
  for (int i = 0; i < n; i++)
    for (int red = 0; red < 3; red++) {
      /* at 16 bits a row of one or a few products is all rounding of the logits: f32 only */
      if (t != KITE_DTYPE_F32 && g[i].h < 8 && g[i].n > 0) continue;
      kt_case c = kt_bwd_case(KITE_OP_FUSED_LINEAR_CROSS_ENTROPY, t, g[i].n, 0);
      c.vocab = g[i].v, c.train.hidden = g[i].h;
      c.amp = 0.5f;
      c.train.ce.reduction = (kite_reduction)red;
      c.train.ignore_frac = 0.2f;
      c.train.with_bias = red != 1;
      c.train.chunk_bytes = red == 2 ? 16384 : 0; /* many vocabulary chunks */
      kt_case_push(l, c);
      if (quick) continue;
      c.train.ce.label_smoothing = 0.1f, c.train.ce.z_loss = 1e-3f, c.train.ce.softcap = 5.0f;
      c.pad_x = 2, c.pad_y = 3;
      kt_case_push(l, c);
      c.train.want_grads = red == 0 ? 0 : 1, c.train.ignore_frac = red == 1 ? 1.0f : 0.0f;
      kt_case_push(l, c);
    }
}

static void loss_check_cases(kite_op op, kite_dtype t, int quick, kt_case_list *l) {
  if (op == KITE_OP_FUSED_LINEAR_CROSS_ENTROPY) {
    gen_flce(l, t, quick);
    return;
  }
  int n;
  const kt_shape2 *s = kt_bwd_sizes(quick, &n);
  for (int i = 0; i < n; i++)
    if (s[i].cols >= 1) gen_ce(l, op, t, s[i], quick); /* cols = V >= 1 */
  /* vocabularies that spread a row over several blocks (a cluster on sm_90: 4 and 8 blocks) */
  if (op == KITE_OP_CROSS_ENTROPY_WITH_GRAD) {
    gen_ce(l, op, t, (kt_shape2){3, 40000}, quick);
    if (!quick) gen_ce(l, op, t, (kt_shape2){2, 128256}, 1);
  }
}

/* small: T = 512 rows; llm: T = 8192, the vocabularies of Llama 2 and Llama 3. */
static void loss_bench_cases(kite_op op, kite_dtype t, int llm, kt_case_list *l) {
  kt_case c = kt_bwd_case(op, t, kt_bwd_bench_rows(llm), 4096);
  if (op == KITE_OP_FUSED_LINEAR_CROSS_ENTROPY) {
    c.amp = 0.05f;
    c.rows = 512, c.train.hidden = 1024, c.vocab = 32000; /* timeable on a CPU */
    kt_case_push(l, c);
    if (llm) c.rows = 8192, c.train.hidden = 4096, c.vocab = 128256, kt_case_push(l, c);
    return;
  }
  c.inplace = op != KITE_OP_CROSS_ENTROPY; /* dlogits over the logits */
  c.cols = 32000;
  kt_case_push(l, c);
  if (llm) c.cols = 128256, kt_case_push(l, c);
}

/* Bytes: every tensor read once and every output written once (e = element size):
 *   cross_entropy        logits, targets, loss, lse             N V e + 12 N
 *   its backward         logits, dlogits, targets, lse, dloss   2 N V e + 12 N
 *   with_grad            logits, dlogits, targets, loss, lse    2 N V e + 12 N
 *   fused_linear_ce      h, w read, dh, dw written (+ bias, db), targets, loss
 *                        2 (N + V) H e + 2 V e + 8 N
 * FLOPs: fused_linear_cross_entropy's three products of N V H, 6 N V H. */
static double loss_bytes(const kt_case *c) {
  const double e = (double)kite_dtype_size(c->dtype), R = (double)c->rows, C = (double)c->cols;
  switch (c->op) {
  case KITE_OP_CROSS_ENTROPY:
    return R * C * e + 12 * R;
  case KITE_OP_CROSS_ENTROPY_BACKWARD:
  case KITE_OP_CROSS_ENTROPY_WITH_GRAD:
    return 2 * R * C * e + 12 * R;
  case KITE_OP_FUSED_LINEAR_CROSS_ENTROPY:
    return 2 * (R + (double)c->vocab) * (double)c->train.hidden * e + 2 * (double)c->vocab * e +
           8 * R;
  default:
    return 0;
  }
}

static double loss_flops(const kt_case *c) {
  if (c->op != KITE_OP_FUSED_LINEAR_CROSS_ENTROPY) return 0;
  return 6.0 * (double)c->rows * (double)c->vocab * (double)c->train.hidden;
}

const kt_family_ops kt_family_loss = {
    .name = "loss",
    .has = loss_has,
    .plan = loss_plan,
    .scalar = loss_scalar,
    .describe = loss_describe,
    .shape = loss_shape,
    .check_cases = loss_check_cases,
    .bench_cases = loss_bench_cases,
    .bytes = loss_bytes,
    .flops = loss_flops,
    .bound = loss_bound,
};
