/*
 * Drivers of the training ops: activation, gated, norm, softmax and embedding backward;
 * cross_entropy forward and backward; fused_linear_cross_entropy (rope_backward is rope's
 * driver, driver_core.c). And the check of the oracle itself: every ref backward against
 * central finite differences of ref's forward ops (kt_train_fd_check).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "families.h"
#include "kite/dtype.h"
#include "util.h"

/* argument slots */
enum { A_X, A_DY, A_DX, A_W, A_DRES, A_DW, A_DB, A_TG, A_LOSS, A_LSE, A_DLOSS, A_BIAS };

int kt_train_has(kite_op op) {
  switch (op) {
  case KITE_OP_ACTIVATION_BACKWARD:
  case KITE_OP_GATED_BACKWARD:
  case KITE_OP_RMS_NORM_BACKWARD:
  case KITE_OP_LAYER_NORM_BACKWARD:
  case KITE_OP_SOFTMAX_BACKWARD:
  case KITE_OP_EMBEDDING_BACKWARD:
  case KITE_OP_CROSS_ENTROPY:
  case KITE_OP_CROSS_ENTROPY_BACKWARD:
  case KITE_OP_FUSED_LINEAR_CROSS_ENTROPY:
    return 1;
  default:
    return 0;
  }
}

static int is_norm(kite_op op) {
  return op == KITE_OP_RMS_NORM_BACKWARD || op == KITE_OP_LAYER_NORM_BACKWARD;
}

static int is_ce(kite_op op) {
  return op == KITE_OP_CROSS_ENTROPY || op == KITE_OP_CROSS_ENTROPY_BACKWARD;
}

/* ---- descriptions ------------------------------------------------------------------------ */

static void train_shape(const kt_case *c, char *buf, size_t n) {
  if (c->op == KITE_OP_FUSED_LINEAR_CROSS_ENTROPY)
    snprintf(buf, n, "%lldx%lldx%lld", (long long)c->rows, (long long)c->train.hidden,
             (long long)c->vocab);
  else if (c->op == KITE_OP_EMBEDDING_BACKWARD)
    snprintf(buf, n, "%lldx%lldx%lld", (long long)c->rows, (long long)c->vocab, (long long)c->cols);
  else
    snprintf(buf, n, "%lldx%lld", (long long)c->rows, (long long)c->cols);
}

static const char *red_name(kite_reduction r) {
  return r == KITE_REDUCTION_NONE ? "none" : r == KITE_REDUCTION_SUM ? "sum" : "mean";
}

static void train_describe(const kt_case *c, char *buf, size_t n) {
  size_t len = 0;
  const kt_train_case *t = &c->train;
  buf[0] = '\0';
  switch (c->op) {
  case KITE_OP_ACTIVATION_BACKWARD:
  case KITE_OP_GATED_BACKWARD:
    kt_cat(buf, n, &len, "%s %lldx%lld", kite_op_name(t->act), (long long)c->rows,
           (long long)c->cols);
    if (c->limit > 0) kt_cat(buf, n, &len, " limit=%g", (double)c->limit);
    break;
  case KITE_OP_EMBEDDING_BACKWARD:
    kt_cat(buf, n, &len, "T=%lld V=%lld H=%lld", (long long)c->rows, (long long)c->vocab,
           (long long)c->cols);
    if (c->oob_ids) kt_cat(buf, n, &len, " ids-out-of-range");
    break;
  case KITE_OP_FUSED_LINEAR_CROSS_ENTROPY:
    kt_cat(buf, n, &len, "N=%lld H=%lld V=%lld", (long long)c->rows, (long long)t->hidden,
           (long long)c->vocab);
    if (t->with_bias) kt_cat(buf, n, &len, " bias");
    if (!t->want_grads) kt_cat(buf, n, &len, " loss-only");
    if (t->chunk_bytes) kt_cat(buf, n, &len, " chunk=%zuB", t->chunk_bytes);
    break;
  default:
    kt_cat(buf, n, &len, "%lldx%lld", (long long)c->rows, (long long)c->cols);
    break;
  }
  if (is_norm(c->op)) {
    if (!c->with_w) kt_cat(buf, n, &len, " w=NULL");
    if (c->op == KITE_OP_RMS_NORM_BACKWARD) kt_cat(buf, n, &len, " offset=%g", (double)c->offset);
    if (t->want_dw) kt_cat(buf, n, &len, " dw");
    if (t->want_db) kt_cat(buf, n, &len, " db");
    if (t->with_dres) kt_cat(buf, n, &len, " pre+dres");
  }
  if (c->op == KITE_OP_SOFTMAX_BACKWARD && c->scale != 1.0f)
    kt_cat(buf, n, &len, " scale=%g", (double)c->scale);
  if (is_ce(c->op) || c->op == KITE_OP_FUSED_LINEAR_CROSS_ENTROPY) {
    kt_cat(buf, n, &len, " %s", red_name(t->ce.reduction));
    if (t->ignore_frac > 0) kt_cat(buf, n, &len, " ignore=%g", (double)t->ignore_frac);
    if (t->ce.label_smoothing > 0) kt_cat(buf, n, &len, " ls=%g", (double)t->ce.label_smoothing);
    if (t->ce.z_loss > 0) kt_cat(buf, n, &len, " z_loss=%g", (double)t->ce.z_loss);
    if (t->ce.softcap > 0) kt_cat(buf, n, &len, " softcap=%g", (double)t->ce.softcap);
  }
  if (c->amp != 1.0f || c->shift != 0.0f)
    kt_cat(buf, n, &len, " in[%g,%g]", (double)(c->shift - c->amp), (double)(c->shift + c->amp));
  if (c->pad_x) kt_cat(buf, n, &len, " x+%lld", (long long)c->pad_x);
  if (c->pad_y) kt_cat(buf, n, &len, " y+%lld", (long long)c->pad_y);
  if (c->inplace) kt_cat(buf, n, &len, " inplace");
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

static int add_vec(kt_run *r, const char *name, kite_dtype t, kt_role role, int64_t n,
                   kt_fill_kind fill, float lo, float hi) {
  return kt_add_tensor(r, name, t, role, 1, &n, fill, lo, hi);
}

/* An output [rows, cols] that is `in` itself when the case is in place (in becomes INOUT). */
static int add_out_or_inplace(kt_run *r, const kt_case *c, int in, const char *name, int64_t rows,
                              int64_t cols) {
  if (c->inplace) {
    r->view[in].role = KT_INOUT;
    return in;
  }
  return kt_add_matrix(r, name, c->dtype, KT_OUT, rows, cols, c->pad_y, 0, 0);
}

static void train_plan(kt_run *r, const kt_case *c) {
  const kite_dtype t = c->dtype;
  const kt_train_case *tc = &c->train;
  const float lo = c->shift - c->amp, hi = c->shift + c->amp;
  const int64_t R = c->rows, C = c->cols;
  switch (c->op) {
  case KITE_OP_ACTIVATION_BACKWARD:
    r->arg[A_X] = kt_add_matrix(r, "x", t, KT_IN, R, C, c->pad_x, lo, hi);
    r->arg[A_DY] = kt_add_matrix(r, "dy", t, KT_IN, R, C, c->pad_x, -1, 1);
    r->arg[A_DX] = add_out_or_inplace(r, c, r->arg[A_DY], "dx", R, C);
    break;
  case KITE_OP_GATED_BACKWARD:
    r->arg[A_X] = kt_add_matrix(r, "x", t, KT_IN, R, 2 * C, c->pad_x, lo, hi);
    r->arg[A_DY] = kt_add_matrix(r, "dy", t, KT_IN, R, C, c->pad_x, -1, 1);
    r->arg[A_DX] = kt_add_matrix(r, "dx", t, KT_OUT, R, 2 * C, c->pad_y, 0, 0);
    break;
  case KITE_OP_RMS_NORM_BACKWARD:
  case KITE_OP_LAYER_NORM_BACKWARD:
    r->arg[A_X] = kt_add_matrix(r, "x", t, KT_IN, R, C, c->pad_x, lo, hi);
    r->arg[A_DY] = kt_add_matrix(r, "dy", t, KT_IN, R, C, c->pad_x, -1, 1);
    if (c->with_w) r->arg[A_W] = add_vec(r, "w", t, KT_IN, C, KT_FILL_UNIFORM, -1, 1);
    if (tc->with_dres) r->arg[A_DRES] = kt_add_matrix(r, "dres", t, KT_IN, R, C, 0, -1, 1);
    r->arg[A_DX] = add_out_or_inplace(r, c, r->arg[A_DY], "dx", R, C);
    if (tc->want_dw && c->with_w)
      r->arg[A_DW] = add_vec(r, "dw", t, KT_OUT, C, KT_FILL_UNIFORM, 0, 0);
    if (tc->want_db && c->op == KITE_OP_LAYER_NORM_BACKWARD)
      r->arg[A_DB] = add_vec(r, "db", t, KT_OUT, C, KT_FILL_UNIFORM, 0, 0);
    break;
  case KITE_OP_SOFTMAX_BACKWARD:
    /* y: probabilities-like values (the formula holds for any y) */
    r->arg[A_X] = kt_add_matrix(r, "y", t, KT_IN, R, C, c->pad_x, 0, 2.0f / (float)(C > 0 ? C : 1));
    r->arg[A_DY] = kt_add_matrix(r, "dy", t, KT_IN, R, C, c->pad_x, -1, 1);
    r->arg[A_DX] = add_out_or_inplace(r, c, r->arg[A_DY], "dx", R, C);
    break;
  case KITE_OP_EMBEDDING_BACKWARD: {
    const float extra = c->oob_ids ? (float)(c->vocab / 8 + 2) : 0.0f;
    r->arg[A_TG] =
        add_vec(r, "ids", KITE_DTYPE_I32, KT_IN, R, KT_FILL_IDS, -extra, (float)c->vocab + extra);
    r->arg[A_DY] = kt_add_matrix(r, "dy", t, KT_IN, R, C, c->pad_x, lo, hi);
    r->arg[A_DX] = kt_add_matrix(r, "dtable", t, KT_OUT, c->vocab, C, c->pad_y, 0, 0);
    break;
  }
  case KITE_OP_CROSS_ENTROPY:
  case KITE_OP_CROSS_ENTROPY_BACKWARD: {
    const int bwd = c->op == KITE_OP_CROSS_ENTROPY_BACKWARD;
    const int64_t nl = tc->ce.reduction == KITE_REDUCTION_NONE ? R : 1;
    r->arg[A_X] = kt_add_matrix(r, "logits", t, KT_IN, R, C, c->pad_x, lo, hi);
    r->arg[A_TG] = add_vec(r, "targets", KITE_DTYPE_I32, KT_IN, R, KT_FILL_CUSTOM, 0, 0);
    r->view[r->arg[A_TG]].fill_fn = fill_targets;
    if (!bwd) {
      r->arg[A_LOSS] = add_vec(r, "loss", KITE_DTYPE_F32, KT_OUT, nl, KT_FILL_UNIFORM, 0, 0);
      r->arg[A_LSE] = add_vec(r, "lse", KITE_DTYPE_F32, KT_OUT, R, KT_FILL_UNIFORM, 0, 0);
      break;
    }
    /* any lse works for comparing kernels; one at least the largest z keeps p <= 1 */
    const float l0 = hi + logf((float)(C > 0 ? C : 1));
    r->arg[A_LSE] = add_vec(r, "lse", KITE_DTYPE_F32, KT_IN, R, KT_FILL_UNIFORM, l0, l0 + 1.0f);
    r->arg[A_DLOSS] = add_vec(r, "dloss", KITE_DTYPE_F32, KT_IN, nl, KT_FILL_UNIFORM, 0.5f, 1.5f);
    r->arg[A_DX] = add_out_or_inplace(r, c, r->arg[A_X], "dlogits", R, C);
    break;
  }
  case KITE_OP_FUSED_LINEAR_CROSS_ENTROPY: {
    const int64_t H = tc->hidden, V = c->vocab;
    const int64_t nl = tc->ce.reduction == KITE_REDUCTION_NONE ? R : 1;
    r->arg[A_X] = kt_add_matrix(r, "h", t, KT_IN, R, H, c->pad_x, lo, hi);
    r->arg[A_W] = kt_add_matrix(r, "w", t, KT_IN, V, H, c->pad_x, lo, hi);
    if (tc->with_bias) r->arg[A_BIAS] = add_vec(r, "bias", t, KT_IN, V, KT_FILL_UNIFORM, -1, 1);
    r->arg[A_TG] = add_vec(r, "targets", KITE_DTYPE_I32, KT_IN, R, KT_FILL_CUSTOM, 0, 0);
    r->view[r->arg[A_TG]].fill_fn = fill_targets;
    r->arg[A_LOSS] = add_vec(r, "loss", KITE_DTYPE_F32, KT_OUT, nl, KT_FILL_UNIFORM, 0, 0);
    if (tc->want_grads) {
      r->arg[A_DX] = kt_add_matrix(r, "dh", t, KT_OUT, R, H, c->pad_y, 0, 0);
      r->arg[A_DW] = kt_add_matrix(r, "dw", t, KT_OUT, V, H, c->pad_y, 0, 0);
      if (tc->with_bias) r->arg[A_DB] = add_vec(r, "db", t, KT_OUT, V, KT_FILL_UNIFORM, 0, 0);
    }
    break;
  }
  default:
    r->bad = 1;
    break;
  }
}

/* ---- the call ---------------------------------------------------------------------------- */

static kite_status train_call(kt_run *r) {
  const kt_case *c = &r->c;
  const kt_train_case *t = &c->train;
  kite_ctx *ctx = r->ctx;
  DLTensor *x = kt_arg(r, A_X), *dy = kt_arg(r, A_DY), *dx = kt_arg(r, A_DX);
  switch (c->op) {
  case KITE_OP_ACTIVATION_BACKWARD:
    return kite_activation_backward(ctx, t->act, x, dy, dx);
  case KITE_OP_GATED_BACKWARD:
    return kite_gated_backward(ctx, t->act, x, dy, c->limit, dx);
  case KITE_OP_RMS_NORM_BACKWARD:
    if (t->with_dres)
      return kite_add_rms_norm_backward(ctx, x, kt_arg(r, A_W), dy, kt_arg(r, A_DRES), c->eps,
                                        c->offset, dx, kt_arg(r, A_DW));
    return kite_rms_norm_backward(ctx, x, kt_arg(r, A_W), dy, c->eps, c->offset, dx,
                                  kt_arg(r, A_DW));
  case KITE_OP_LAYER_NORM_BACKWARD:
    if (t->with_dres)
      return kite_add_layer_norm_backward(ctx, x, kt_arg(r, A_W), dy, kt_arg(r, A_DRES), c->eps, dx,
                                          kt_arg(r, A_DW), kt_arg(r, A_DB));
    return kite_layer_norm_backward(ctx, x, kt_arg(r, A_W), dy, c->eps, dx, kt_arg(r, A_DW),
                                    kt_arg(r, A_DB));
  case KITE_OP_SOFTMAX_BACKWARD:
    return kite_softmax_backward(ctx, x, dy, c->scale, dx);
  case KITE_OP_EMBEDDING_BACKWARD:
    return kite_embedding_backward(ctx, kt_arg(r, A_TG), dy, dx);
  case KITE_OP_CROSS_ENTROPY:
    return kite_cross_entropy(ctx, x, kt_arg(r, A_TG), &t->ce, kt_arg(r, A_LOSS), kt_arg(r, A_LSE));
  case KITE_OP_CROSS_ENTROPY_BACKWARD:
    return kite_cross_entropy_backward(ctx, x, kt_arg(r, A_TG), kt_arg(r, A_LSE),
                                       kt_arg(r, A_DLOSS), &t->ce, dx);
  case KITE_OP_FUSED_LINEAR_CROSS_ENTROPY: {
    kite_flce_opts o = {.ce = t->ce, .chunk_bytes = t->chunk_bytes};
    return kite_fused_linear_cross_entropy(ctx, x, kt_arg(r, A_W), kt_arg(r, A_BIAS),
                                           kt_arg(r, A_TG), &o, kt_arg(r, A_LOSS), dx,
                                           kt_arg(r, A_DW), kt_arg(r, A_DB));
  }
  default:
    break;
  }
  return kite_set_error(KITE_ERR_UNSUPPORTED, "kite: the CLI has no driver for op %d", (int)c->op);
}

/* ---- bounds ------------------------------------------------------------------------------ */

/* NMSE bounds [f32, f16, bf16]. The norm backward's dx cancels (g - mean g - xhat mean(g xhat))
 * and its dw sums over rows in f32; fused_linear_cross_entropy rounds the logits and their
 * gradient to the dtype before its products, as a separate linear then cross_entropy would. The
 * cross-entropy losses are f32 whatever the logits' dtype. */
static double train_bound(kite_op op, kite_dtype t) {
  const int i = t == KITE_DTYPE_F16 ? 1 : t == KITE_DTYPE_BF16 ? 2 : 0;
  static const double act[3] = {1e-6, 1e-5, 1e-4}, norm[3] = {1e-8, 1e-5, 1e-4},
                      ce[3] = {1e-8, 1e-8, 1e-8}, flce[3] = {1e-7, 1e-3, 1e-2};
  switch (op) {
  case KITE_OP_RMS_NORM_BACKWARD:
  case KITE_OP_LAYER_NORM_BACKWARD:
    return norm[i];
  case KITE_OP_CROSS_ENTROPY:
    return ce[i];
  case KITE_OP_FUSED_LINEAR_CROSS_ENTROPY:
    return flce[i];
  default:
    return act[i];
  }
}

/* ---- cases ------------------------------------------------------------------------------- */

static kt_case base_case(kite_op op, kite_dtype t, int64_t rows, int64_t cols) {
  kt_case c = kt_case_default(op, t, rows, cols);
  c.train.ce = kite_ce_opts_default();
  c.train.act = op == KITE_OP_GATED_BACKWARD ? KITE_OP_SILU_AND_MUL : KITE_OP_SILU;
  c.train.want_dw = c.train.want_db = 1;
  c.train.want_grads = 1;
  return c;
}

typedef struct shape2 {
  int64_t rows, cols;
} shape2;

static const shape2 g_sizes[] = {{0, 64},   {1, 1},    {1, 3},    {3, 17},    {5, 127},
                                 {4, 1000}, {2, 4096}, {40, 256}, {100, 1031}};
static const shape2 g_quick[] = {{0, 64}, {1, 3}, {3, 17}, {40, 256}};

static void gen_act(kt_case_list *l, kite_op op, kite_dtype t, shape2 s, int quick) {
  static const kite_op acts[] = {KITE_OP_SILU, KITE_OP_GELU, KITE_OP_GELU_TANH, KITE_OP_GELU_QUICK,
                                 KITE_OP_RELU};
  static const kite_op gated[] = {KITE_OP_SILU_AND_MUL, KITE_OP_GELU_AND_MUL,
                                  KITE_OP_GELU_TANH_AND_MUL};
  const int g = op == KITE_OP_GATED_BACKWARD, n = g ? 3 : 5;
  for (int a = 0; a < n; a++) {
    kt_case c = base_case(op, t, s.rows, s.cols);
    c.train.act = g ? gated[a] : acts[a];
    c.amp = 4.0f;
    kt_case_push(l, c);
    if (quick) continue;
    if (g) {
      c.limit = 1.0f, c.pad_x = 3, c.pad_y = 5;
      kt_case_push(l, c);
    } else {
      c.inplace = 1, c.pad_x = 2;
      kt_case_push(l, c);
    }
  }
}

static void gen_norm(kt_case_list *l, kite_op op, kite_dtype t, shape2 s, int quick) {
  const int layer = op == KITE_OP_LAYER_NORM_BACKWARD;
  int k = 0;
  for (int w = 1; w >= 0; w--)
    for (int dres = 0; dres <= 1; dres++)
      for (int off = 0; off <= (layer ? 0 : 1); off++, k++) {
        kt_case c = base_case(op, t, s.rows, s.cols);
        c.with_w = w, c.train.want_dw = w, c.train.want_db = layer && (k % 2 == 0);
        c.train.with_dres = dres, c.offset = (float)off;
        if (k % 2) c.pad_x = 5, c.pad_y = 3;
        if (k % 3 == 2) c.inplace = 1;
        kt_case_push(l, c);
        if (quick) return;
      }
  kt_case c = base_case(op, t, s.rows, s.cols);
  c.shift = 3.0f, kt_case_push(l, c); /* mean far from 0 */
  c.shift = 100.0f, c.amp = 1.0f, kt_case_push(l, c);
  c = base_case(op, t, s.rows, s.cols), c.train.want_dw = 0, c.train.want_db = 0;
  kt_case_push(l, c); /* dx only */
}

static void gen_ce(kt_case_list *l, kite_op op, kite_dtype t, shape2 s, int quick) {
  for (int red = 0; red < 3; red++) {
    kt_case c = base_case(op, t, s.rows, s.cols);
    c.amp = 3.0f;
    c.train.ce.reduction = (kite_reduction)red;
    c.train.ignore_frac = 0.25f;
    kt_case_push(l, c);
    if (quick) continue;
    c.train.ce.label_smoothing = 0.1f, c.train.ce.z_loss = 1e-2f, c.pad_x = 3, c.pad_y = 1;
    kt_case_push(l, c);
    c = base_case(op, t, s.rows, s.cols);
    c.train.ce.reduction = (kite_reduction)red;
    c.amp = 8.0f, c.train.ce.softcap = 5.0f, c.inplace = op == KITE_OP_CROSS_ENTROPY_BACKWARD;
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
      kt_case c = base_case(KITE_OP_FUSED_LINEAR_CROSS_ENTROPY, t, g[i].n, 0);
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

static void train_check_cases(kite_op op, kite_dtype t, int quick, kt_case_list *l) {
  if (op == KITE_OP_FUSED_LINEAR_CROSS_ENTROPY) {
    gen_flce(l, t, quick);
    return;
  }
  if (op == KITE_OP_EMBEDDING_BACKWARD) {
    static const int64_t g[][5] = {{0, 8, 64, 0, 0},      {1, 5, 1, 0, 0},
                                   {3, 50, 17, 0, 0},     {17, 50, 127, 5, 3},
                                   {64, 1000, 256, 1, 0}, {300, 7, 1031, 0, 2}};
    const int n = quick ? 3 : 6;
    for (int i = 0; i < n; i++) {
      kt_case c = base_case(op, t, g[i][0], g[i][2]);
      c.vocab = g[i][1], c.pad_x = g[i][3], c.pad_y = g[i][4], c.oob_ids = 1;
      kt_case_push(l, c);
    }
    return;
  }
  const shape2 *s = quick ? g_quick : g_sizes;
  const int n = quick ? (int)(sizeof g_quick / sizeof *s) : (int)(sizeof g_sizes / sizeof *s);
  for (int i = 0; i < n; i++) {
    switch (op) {
    case KITE_OP_ACTIVATION_BACKWARD:
    case KITE_OP_GATED_BACKWARD:
      gen_act(l, op, t, s[i], quick);
      break;
    case KITE_OP_RMS_NORM_BACKWARD:
    case KITE_OP_LAYER_NORM_BACKWARD: {
      /* a row of 1 (or 2, for layer norm) elements normalizes to a constant: its true dx is
       * about eps-sized and any f32 result is rounding noise, so NMSE says nothing there.
       * Layer norm's short row is 4, not 3: dx = rstd (g - mean(g) - xhat mean(g xhat)) is g
       * projected off 1 and xhat, onto the (n - 2)-dimensional rest. At n = 3 that is a line,
       * and |dx| / |g| falls below any delta with probability ~ delta (a row of seed 119
       * gave |dx| ~ 1e-4 |g|), while f32's error stays ~ 1e-7 |g|: NMSE ~ (1e-7 / delta)^2 then
       * measures the inputs, not the kernel. At n = 4 (a plane) the odds are ~ delta^2. */
      shape2 sh = s[i];
      if (op == KITE_OP_LAYER_NORM_BACKWARD && sh.cols == 3) sh.cols = 4;
      if (sh.cols >= 3 || sh.rows == 0) gen_norm(l, op, t, sh, quick);
      break;
    }
    case KITE_OP_SOFTMAX_BACKWARD: {
      kt_case c = base_case(op, t, s[i].rows, s[i].cols);
      kt_case_push(l, c);
      c.scale = 0.125f, c.pad_x = 3, c.pad_y = 2;
      kt_case_push(l, c);
      c = base_case(op, t, s[i].rows, s[i].cols), c.inplace = 1, c.scale = 2.0f;
      kt_case_push(l, c);
      break;
    }
    default: /* cross_entropy and its backward: cols = V >= 1 */
      if (s[i].cols >= 1) gen_ce(l, op, t, s[i], quick);
      break;
    }
  }
}

/* small: one mid shape; llm: T = 8192, H = 4096 (the rows), the vocabularies of
 * Llama 2 and Llama 3 for the losses. */
static void train_bench_cases(kite_op op, kite_dtype t, int llm, kt_case_list *l) {
  const int64_t T = llm ? 8192 : 512, H = 4096;
  kt_case c = base_case(op, t, T, H);
  switch (op) {
  case KITE_OP_EMBEDDING_BACKWARD:
    c.vocab = 32000;
    kt_case_push(l, c);
    return;
  case KITE_OP_CROSS_ENTROPY:
  case KITE_OP_CROSS_ENTROPY_BACKWARD:
    c.inplace = op == KITE_OP_CROSS_ENTROPY_BACKWARD; /* dlogits over the logits */
    c.cols = 32000;
    kt_case_push(l, c);
    if (llm) c.cols = 128256, kt_case_push(l, c);
    return;
  case KITE_OP_FUSED_LINEAR_CROSS_ENTROPY:
    c.amp = 0.05f;
    c.rows = 512, c.train.hidden = 1024, c.vocab = 32000; /* timeable on a CPU */
    kt_case_push(l, c);
    if (llm) c.rows = 8192, c.train.hidden = 4096, c.vocab = 128256, kt_case_push(l, c);
    return;
  case KITE_OP_RMS_NORM_BACKWARD:
  case KITE_OP_LAYER_NORM_BACKWARD:
    kt_case_push(l, c);
    c.train.with_dres = 1; /* the fused pre rule */
    kt_case_push(l, c);
    return;
  default:
    kt_case_push(l, c);
    return;
  }
}

/* Bytes: every tensor read once and every output written once (e = element size):
 *   activation_backward  x, dy, dx                       3 R C e
 *   gated_backward       x[R, 2I], dy[R, I], dx[R, 2I]    5 R I e
 *   norm backward        x, dy, dx (+ dres) + w, dw, db   (3 or 4) R C e + (1 to 3) C e
 *   softmax_backward     y, dy, dx                        3 R C e
 *   embedding_backward   ids, dy, dtable written          4 T + (T + V) H e
 *   cross_entropy        logits, targets, loss, lse       N V e + 12 N
 *   its backward         logits, dlogits, targets, lse, dloss   2 N V e + 12 N
 *   fused_linear_ce      h, w read, dh, dw written (+ bias, db), targets, loss
 *                        2 (N + V) H e + 2 V e + 8 N
 * FLOPs: fused_linear_cross_entropy's three products of N V H, 6 N V H. */
static double train_bytes(const kt_case *c) {
  const double e = (double)kite_dtype_size(c->dtype), R = (double)c->rows, C = (double)c->cols;
  const kt_train_case *t = &c->train;
  switch (c->op) {
  case KITE_OP_ACTIVATION_BACKWARD:
  case KITE_OP_SOFTMAX_BACKWARD:
    return 3 * R * C * e;
  case KITE_OP_GATED_BACKWARD:
    return 5 * R * C * e;
  case KITE_OP_RMS_NORM_BACKWARD:
  case KITE_OP_LAYER_NORM_BACKWARD:
    return ((t->with_dres ? 4 : 3) * R * C +
            C * ((c->with_w ? 1 : 0) + (c->with_w && t->want_dw ? 1 : 0) +
                 (c->op == KITE_OP_LAYER_NORM_BACKWARD && t->want_db ? 1 : 0))) *
           e;
  case KITE_OP_EMBEDDING_BACKWARD:
    return 4 * R + (R + (double)c->vocab) * C * e;
  case KITE_OP_CROSS_ENTROPY:
    return R * C * e + 12 * R;
  case KITE_OP_CROSS_ENTROPY_BACKWARD:
    return 2 * R * C * e + 12 * R;
  case KITE_OP_FUSED_LINEAR_CROSS_ENTROPY:
    return 2 * (R + (double)c->vocab) * (double)t->hidden * e + 2 * (double)c->vocab * e + 8 * R;
  default:
    return 0;
  }
}

static double train_flops(const kt_case *c) {
  if (c->op != KITE_OP_FUSED_LINEAR_CROSS_ENTROPY) return 0;
  return 6.0 * (double)c->rows * (double)c->vocab * (double)c->train.hidden;
}

const kt_family_ops kt_family_train = {
    .name = "train",
    .has = kt_train_has,
    .plan = train_plan,
    .call = train_call,
    .describe = train_describe,
    .shape = train_shape,
    .check_cases = train_check_cases,
    .bench_cases = train_bench_cases,
    .bytes = train_bytes,
    .flops = train_flops,
    .bound = train_bound,
};

/* ---- the oracle's own check: ref backward against finite differences of ref forward -------
 *
 * On small f32 shapes, every op pinned to ref: for a loss L = sum(dy * forward outputs) (dy
 * fixed and random), each input element x_i is moved both ways, x_i +- h with h = 2^-8, and
 * (L(+) - L(-)) / (x+ - x-) (the moved values as f32 holds them; L summed in double) is that
 * element's gradient by central differences. The backward op's gradient must match it:
 * NMSE <= FD_BOUND over the tensor (the f32 rounding of the forward's outputs, about 1e-7
 * relative, divided by 2h, and h^2 truncation leave NMSE near 1e-8). Inputs stay 0.05 away from
 * kinks (relu at 0, a gated clamp at +-limit), where differences do not tell the gradient. */

#define FD_H 0x1p-8
#define FD_BOUND 1e-5
#define FD_MAX 64 /* elements per tensor */

typedef struct fd_t {
  float p[FD_MAX];
  int64_t shape[3];
  int ndim;
  int64_t n;
} fd_t;

/* A compact f32 tensor of up to 3 dims; NULL data pointer never (p is inline). */
static void fd_make(fd_t *t, int ndim, int64_t a, int64_t b, int64_t c) {
  memset(t, 0, sizeof *t);
  t->ndim = ndim, t->shape[0] = a, t->shape[1] = b, t->shape[2] = c;
  t->n = a * (ndim > 1 ? b : 1) * (ndim > 2 ? c : 1);
}

static DLTensor fd_dl(fd_t *t) {
  DLTensor d = {.data = t->p,
                .device = {kDLCPU, 0},
                .ndim = t->ndim,
                .dtype = {kDLFloat, 32, 1},
                .shape = t->shape,
                .strides = NULL,
                .byte_offset = 0};
  return d;
}

static void fd_fill(fd_t *t, uint64_t seed, float lo, float hi) {
  for (int64_t i = 0; i < t->n; i++) t->p[i] = lo + (hi - lo) * kt_unit(seed, (uint64_t)i);
}

/* Moves values within 0.05 of a kink k out to k +- 0.05. */
static void fd_avoid(fd_t *t, float k) {
  for (int64_t i = 0; i < t->n; i++)
    if (fabsf(t->p[i] - k) < 0.05f) t->p[i] = t->p[i] < k ? k - 0.05f : k + 0.05f;
}

static double fd_dot(const fd_t *a, const fd_t *b) {
  double s = 0;
  for (int64_t i = 0; i < a->n; i++) s += (double)a->p[i] * b->p[i];
  return s;
}

/* One finite-difference problem: the op's inputs and the upstream gradients. */
typedef struct fd_case {
  kite_ctx *ctx;
  kite_op op;  /* the backward op checked */
  kite_op act; /* activations */
  int variant; /* norms: 1 = fused pre rule; ce / flce: option set */
  float limit, eps, offset, scale;
  kite_ce_opts ce;
  fd_t x, w, b, res, q, k, ids, dy, dy2, out, out2, pos, cs;
  int32_t idv[FD_MAX];
} fd_case;

/* L for the current inputs, through ref's forward op; NaN when the call fails. */
static double fd_loss(fd_case *f) {
  kite_status s = KITE_ERR_INTERNAL;
  DLTensor x = fd_dl(&f->x), w = fd_dl(&f->w), b = fd_dl(&f->b), y = fd_dl(&f->out);
  switch (f->op) {
  case KITE_OP_ACTIVATION_BACKWARD:
    switch (f->act) {
    case KITE_OP_SILU:
      s = kite_silu(f->ctx, &x, &y);
      break;
    case KITE_OP_GELU:
      s = kite_gelu(f->ctx, &x, &y);
      break;
    case KITE_OP_GELU_TANH:
      s = kite_gelu_tanh(f->ctx, &x, &y);
      break;
    case KITE_OP_GELU_QUICK:
      s = kite_gelu_quick(f->ctx, &x, &y);
      break;
    default:
      s = kite_relu(f->ctx, &x, &y);
      break;
    }
    break;
  case KITE_OP_GATED_BACKWARD:
    s = f->act == KITE_OP_SILU_AND_MUL   ? kite_silu_and_mul(f->ctx, &x, f->limit, &y)
        : f->act == KITE_OP_GELU_AND_MUL ? kite_gelu_and_mul(f->ctx, &x, f->limit, &y)
                                         : kite_gelu_tanh_and_mul(f->ctx, &x, f->limit, &y);
    break;
  case KITE_OP_RMS_NORM_BACKWARD:
  case KITE_OP_LAYER_NORM_BACKWARD: {
    const int rms = f->op == KITE_OP_RMS_NORM_BACKWARD;
    if (f->variant) { /* pre rule: residual <- x + residual, y = norm(that) */
      fd_t res = f->res;
      DLTensor r = fd_dl(&res);
      s = rms ? kite_add_rms_norm(f->ctx, &x, &r, &w, f->eps, f->offset, KITE_NORM_PRE, &y)
              : kite_add_layer_norm(f->ctx, &x, &r, &w, &b, f->eps, KITE_NORM_PRE, &y);
      if (s != KITE_OK) return NAN;
      return fd_dot(&f->dy, &f->out) + fd_dot(&f->dy2, &res);
    }
    s = rms ? kite_rms_norm(f->ctx, &x, &w, f->eps, f->offset, &y)
            : kite_layer_norm(f->ctx, &x, &w, &b, f->eps, &y);
    break;
  }
  case KITE_OP_ROPE_BACKWARD: {
    fd_t q = f->q, k = f->k;
    DLTensor qd = fd_dl(&q), kd = fd_dl(&k), p = fd_dl(&f->pos), c = fd_dl(&f->cs);
    p.data = f->idv, p.dtype = (DLDataType){kDLInt, 32, 1};
    s = kite_rope(f->ctx, &qd, &kd, &p, &c, f->cs.shape[1],
                  f->variant ? KITE_ROPE_GPTJ : KITE_ROPE_NEOX);
    if (s != KITE_OK) return NAN;
    return fd_dot(&f->dy, &q) + fd_dot(&f->dy2, &k);
  }
  case KITE_OP_SOFTMAX_BACKWARD:
    s = kite_softmax(f->ctx, &x, f->scale, &y);
    break;
  case KITE_OP_EMBEDDING_BACKWARD: {
    DLTensor ids = fd_dl(&f->ids);
    ids.data = f->idv, ids.dtype = (DLDataType){kDLInt, 32, 1};
    s = kite_embedding(f->ctx, &ids, &w, &y);
    break;
  }
  case KITE_OP_CROSS_ENTROPY_BACKWARD:
  case KITE_OP_FUSED_LINEAR_CROSS_ENTROPY: {
    DLTensor tg = fd_dl(&f->ids);
    tg.data = f->idv, tg.dtype = (DLDataType){kDLInt, 32, 1};
    if (f->op == KITE_OP_CROSS_ENTROPY_BACKWARD) {
      s = kite_cross_entropy(f->ctx, &x, &tg, &f->ce, &y, NULL);
    } else {
      kite_flce_opts o = {.ce = f->ce, .chunk_bytes = 0};
      s = kite_fused_linear_cross_entropy(f->ctx, &x, &w, &b, &tg, &o, &y, NULL, NULL, NULL);
    }
    break;
  }
  default:
    break;
  }
  return s == KITE_OK ? fd_dot(&f->dy, &f->out) : NAN;
}

/* NMSE of grad against the central differences of L over the elements of x. */
static double fd_nmse(fd_case *f, fd_t *x, const fd_t *grad) {
  double sd = 0, sb = 0;
  for (int64_t i = 0; i < x->n; i++) {
    const float x0 = x->p[i], xp = (float)(x0 + FD_H), xm = (float)(x0 - FD_H);
    x->p[i] = xp;
    const double lp = fd_loss(f);
    x->p[i] = xm;
    const double lm = fd_loss(f);
    x->p[i] = x0;
    const double fd = (lp - lm) / ((double)xp - (double)xm), d = fd - grad->p[i];
    sd += d * d, sb += fd * fd;
  }
  return sb > 0 ? sd / sb : sd;
}

typedef struct fd_report {
  int verbose, *passed, *failed;
} fd_report;

static void fd_judge(const fd_report *rp, const fd_case *f, const char *what, const char *arg,
                     kite_status s, double nmse) {
  const int ok = s == KITE_OK && nmse <= FD_BOUND;
  ok ? ++*rp->passed : ++*rp->failed;
  if (ok && !rp->verbose) return;
  printf("%s %-18s %-20s cpu  f32  [finite differences: %s, d%s]", ok ? "ok  " : "FAIL",
         kite_op_name(f->op), "ref.generic", what, arg);
  if (s != KITE_OK)
    printf(": %s: %s\n", kite_status_name(s), kite_last_error());
  else
    printf(" nmse=%.2e%s\n", nmse, ok ? "" : " above the finite-difference bound");
  fflush(stdout);
}

static void fd_act(const fd_report *rp, kite_ctx *ctx, kite_op bwd, kite_op act, float limit,
                   uint64_t seed) {
  fd_case f = {.ctx = ctx, .op = bwd, .act = act, .limit = limit};
  const int g = bwd == KITE_OP_GATED_BACKWARD;
  fd_make(&f.x, 2, 3, g ? 10 : 7, 0);
  fd_fill(&f.x, seed, -2.5f, 2.5f);
  if (act == KITE_OP_RELU) fd_avoid(&f.x, 0.0f);
  if (limit > 0) fd_avoid(&f.x, limit), fd_avoid(&f.x, -limit);
  fd_make(&f.dy, 2, 3, g ? 5 : 7, 0);
  fd_make(&f.out, 2, 3, g ? 5 : 7, 0);
  fd_fill(&f.dy, seed + 1, -1, 1);
  fd_t dx = f.x;
  DLTensor X = fd_dl(&f.x), DY = fd_dl(&f.dy), DX = fd_dl(&dx);
  kite_status s = g ? kite_gated_backward(ctx, act, &X, &DY, limit, &DX)
                    : kite_activation_backward(ctx, act, &X, &DY, &DX);
  char what[64];
  snprintf(what, sizeof what, "%s%s", kite_op_name(act), limit > 0 ? " limit=1" : "");
  fd_judge(rp, &f, what, "x", s, s == KITE_OK ? fd_nmse(&f, &f.x, &dx) : 0);
}

static void fd_norm(const fd_report *rp, kite_ctx *ctx, kite_op bwd, int pre, float offset,
                    uint64_t seed) {
  const int rms = bwd == KITE_OP_RMS_NORM_BACKWARD;
  fd_case f = {.ctx = ctx, .op = bwd, .variant = pre, .eps = 1e-5f, .offset = offset};
  fd_make(&f.x, 2, 3, 9, 0);
  fd_fill(&f.x, seed, -1.0f, 1.5f);
  fd_make(&f.res, 2, 3, 9, 0);
  fd_fill(&f.res, seed + 5, -1, 1);
  fd_make(&f.w, 1, 9, 0, 0);
  fd_fill(&f.w, seed + 2, -1, 1);
  fd_make(&f.b, 1, 9, 0, 0);
  fd_fill(&f.b, seed + 3, -1, 1);
  fd_make(&f.dy, 2, 3, 9, 0), fd_fill(&f.dy, seed + 4, -1, 1);
  fd_make(&f.dy2, 2, 3, 9, 0), fd_fill(&f.dy2, seed + 6, -1, 1);
  fd_make(&f.out, 2, 3, 9, 0);
  /* the backward's input: the norm's input (for the pre rule, s = x + residual) */
  fd_t in = f.x, dx = f.x, dw = f.w, db = f.b;
  if (pre)
    for (int64_t i = 0; i < in.n; i++) in.p[i] = f.x.p[i] + f.res.p[i];
  DLTensor IN = fd_dl(&in), W = fd_dl(&f.w), DY = fd_dl(&f.dy), DR = fd_dl(&f.dy2);
  DLTensor DX = fd_dl(&dx), DW = fd_dl(&dw), DB = fd_dl(&db);
  kite_status s;
  if (rms)
    s = pre ? kite_add_rms_norm_backward(ctx, &IN, &W, &DY, &DR, f.eps, offset, &DX, &DW)
            : kite_rms_norm_backward(ctx, &IN, &W, &DY, f.eps, offset, &DX, &DW);
  else
    s = pre ? kite_add_layer_norm_backward(ctx, &IN, &W, &DY, &DR, f.eps, &DX, &DW, &DB)
            : kite_layer_norm_backward(ctx, &IN, &W, &DY, f.eps, &DX, &DW, &DB);
  char what[64];
  snprintf(what, sizeof what, "%s%s offset=%g", rms ? "rms" : "layer", pre ? " pre+dres" : "",
           (double)offset);
  fd_judge(rp, &f, what, "x", s, s == KITE_OK ? fd_nmse(&f, &f.x, &dx) : 0);
  fd_judge(rp, &f, what, "w", s, s == KITE_OK ? fd_nmse(&f, &f.w, &dw) : 0);
  if (!rms) fd_judge(rp, &f, what, "b", s, s == KITE_OK ? fd_nmse(&f, &f.b, &db) : 0);
}

static void fd_rope(const fd_report *rp, kite_ctx *ctx, int gptj, uint64_t seed) {
  fd_case f = {.ctx = ctx, .op = KITE_OP_ROPE_BACKWARD, .variant = gptj};
  fd_make(&f.q, 3, 2, 2, 8), fd_fill(&f.q, seed, -1, 1);
  fd_make(&f.k, 3, 2, 1, 8), fd_fill(&f.k, seed + 1, -1, 1);
  fd_make(&f.dy, 3, 2, 2, 8), fd_fill(&f.dy, seed + 2, -1, 1);
  fd_make(&f.dy2, 3, 2, 1, 8), fd_fill(&f.dy2, seed + 3, -1, 1);
  fd_make(&f.pos, 1, 2, 0, 0);
  f.idv[0] = 3, f.idv[1] = 6; /* the positions */
  fd_make(&f.cs, 2, 8, 6, 0);
  kite_status s = kite_rope_cache_build(f.cs.p, 8, 6, 100.0, NULL);
  fd_t dq = f.dy, dk = f.dy2;
  DLTensor DQ = fd_dl(&dq), DK = fd_dl(&dk), P = fd_dl(&f.pos), C = fd_dl(&f.cs);
  P.data = f.idv, P.dtype = (DLDataType){kDLInt, 32, 1};
  if (s == KITE_OK)
    s = kite_rope_backward(ctx, &DQ, &DK, &P, &C, 6, gptj ? KITE_ROPE_GPTJ : KITE_ROPE_NEOX);
  const char *what = gptj ? "gptj rot=6 of D=8" : "neox rot=6 of D=8";
  fd_judge(rp, &f, what, "q", s, s == KITE_OK ? fd_nmse(&f, &f.q, &dq) : 0);
  fd_judge(rp, &f, what, "k", s, s == KITE_OK ? fd_nmse(&f, &f.k, &dk) : 0);
}

static void fd_softmax(const fd_report *rp, kite_ctx *ctx, uint64_t seed) {
  fd_case f = {.ctx = ctx, .op = KITE_OP_SOFTMAX_BACKWARD, .scale = 0.7f};
  fd_make(&f.x, 2, 3, 7, 0), fd_fill(&f.x, seed, -3, 3);
  fd_make(&f.dy, 2, 3, 7, 0), fd_fill(&f.dy, seed + 1, -1, 1);
  fd_make(&f.out, 2, 3, 7, 0);
  fd_t y = f.out, dx = f.x;
  DLTensor X = fd_dl(&f.x), Y = fd_dl(&y), DY = fd_dl(&f.dy), DX = fd_dl(&dx);
  kite_status s = kite_softmax(ctx, &X, f.scale, &Y);
  if (s == KITE_OK) s = kite_softmax_backward(ctx, &Y, &DY, f.scale, &DX);
  fd_judge(rp, &f, "scale=0.7 (from y)", "x", s, s == KITE_OK ? fd_nmse(&f, &f.x, &dx) : 0);
}

static void fd_embedding(const fd_report *rp, kite_ctx *ctx, uint64_t seed) {
  fd_case f = {.ctx = ctx, .op = KITE_OP_EMBEDDING_BACKWARD};
  static const int32_t ids[6] = {2, 0, 2, -1, 5, 3}; /* repeats; -1 and 5 outside [0, 4) */
  memcpy(f.idv, ids, sizeof ids);
  fd_make(&f.ids, 1, 6, 0, 0);
  fd_make(&f.w, 2, 4, 3, 0), fd_fill(&f.w, seed, -1, 1);
  fd_make(&f.dy, 2, 6, 3, 0), fd_fill(&f.dy, seed + 1, -1, 1);
  fd_make(&f.out, 2, 6, 3, 0);
  fd_t dt = f.w;
  DLTensor I = fd_dl(&f.ids), DY = fd_dl(&f.dy), DT = fd_dl(&dt);
  I.data = f.idv, I.dtype = (DLDataType){kDLInt, 32, 1};
  kite_status s = kite_embedding_backward(ctx, &I, &DY, &DT);
  fd_judge(rp, &f, "T=6 V=4 H=3, repeated and bad ids", "table", s,
           s == KITE_OK ? fd_nmse(&f, &f.w, &dt) : 0);
}

/* Option sets of the losses: 0 plain mean, 1 sum with smoothing and z-loss, 2 none with a
 * softcap, 3 mean with everything. */
static kite_ce_opts fd_ce_opts(int v) {
  kite_ce_opts o = kite_ce_opts_default();
  o.ignore_index = 1;
  if (v == 1) o.reduction = KITE_REDUCTION_SUM, o.label_smoothing = 0.2f, o.z_loss = 0.05f;
  if (v == 2) o.reduction = KITE_REDUCTION_NONE, o.softcap = 2.0f;
  if (v == 3) o.label_smoothing = 0.1f, o.z_loss = 0.02f, o.softcap = 3.0f;
  return o;
}

static void fd_ce(const fd_report *rp, kite_ctx *ctx, int v, uint64_t seed) {
  fd_case f = {.ctx = ctx, .op = KITE_OP_CROSS_ENTROPY_BACKWARD, .variant = v};
  f.ce = fd_ce_opts(v);
  static const int32_t tg[4] = {4, 1, 0, 5}; /* row 1 is ignored (ignore_index 1) */
  memcpy(f.idv, tg, sizeof tg);
  fd_make(&f.ids, 1, 4, 0, 0);
  fd_make(&f.x, 2, 4, 6, 0), fd_fill(&f.x, seed, -3, 3);
  const int64_t nl = f.ce.reduction == KITE_REDUCTION_NONE ? 4 : 1;
  fd_make(&f.out, 1, nl, 0, 0), fd_make(&f.dy, 1, nl, 0, 0), fd_fill(&f.dy, seed + 1, 0.5f, 1.5f);
  fd_t lse, dx = f.x;
  fd_make(&lse, 1, 4, 0, 0);
  DLTensor X = fd_dl(&f.x), T = fd_dl(&f.ids), L = fd_dl(&f.out), E = fd_dl(&lse);
  DLTensor DL = fd_dl(&f.dy), DX = fd_dl(&dx);
  T.data = f.idv, T.dtype = (DLDataType){kDLInt, 32, 1};
  kite_status s = kite_cross_entropy(ctx, &X, &T, &f.ce, &L, &E);
  if (s == KITE_OK) s = kite_cross_entropy_backward(ctx, &X, &T, &E, &DL, &f.ce, &DX);
  char what[96];
  snprintf(what, sizeof what, "%s ls=%g z_loss=%g softcap=%g, a row ignored",
           red_name(f.ce.reduction), (double)f.ce.label_smoothing, (double)f.ce.z_loss,
           (double)f.ce.softcap);
  fd_judge(rp, &f, what, "logits", s, s == KITE_OK ? fd_nmse(&f, &f.x, &dx) : 0);
}

static void fd_flce(const fd_report *rp, kite_ctx *ctx, int v, uint64_t seed) {
  fd_case f = {.ctx = ctx, .op = KITE_OP_FUSED_LINEAR_CROSS_ENTROPY, .variant = v};
  f.ce = fd_ce_opts(v);
  static const int32_t tg[3] = {6, 1, 0};
  memcpy(f.idv, tg, sizeof tg);
  fd_make(&f.ids, 1, 3, 0, 0);
  fd_make(&f.x, 2, 3, 5, 0), fd_fill(&f.x, seed, -1, 1);
  fd_make(&f.w, 2, 7, 5, 0), fd_fill(&f.w, seed + 1, -1, 1);
  fd_make(&f.b, 1, 7, 0, 0), fd_fill(&f.b, seed + 2, -1, 1);
  const int64_t nl = f.ce.reduction == KITE_REDUCTION_NONE ? 3 : 1;
  fd_make(&f.out, 1, nl, 0, 0), fd_make(&f.dy, 1, nl, 0, 0);
  for (int64_t i = 0; i < nl; i++) f.dy.p[i] = 1.0f; /* the gradients are of sum(loss) */
  fd_t dh = f.x, dw = f.w, db = f.b;
  DLTensor H = fd_dl(&f.x), W = fd_dl(&f.w), B = fd_dl(&f.b), T = fd_dl(&f.ids), L = fd_dl(&f.out);
  DLTensor DH = fd_dl(&dh), DW = fd_dl(&dw), DB = fd_dl(&db);
  T.data = f.idv, T.dtype = (DLDataType){kDLInt, 32, 1};
  kite_flce_opts o = {.ce = f.ce, .chunk_bytes = 0};
  kite_status s = kite_fused_linear_cross_entropy(ctx, &H, &W, &B, &T, &o, &L, &DH, &DW, &DB);
  char what[96];
  snprintf(what, sizeof what, "N=3 H=5 V=7 %s ls=%g z_loss=%g softcap=%g", red_name(f.ce.reduction),
           (double)f.ce.label_smoothing, (double)f.ce.z_loss, (double)f.ce.softcap);
  fd_judge(rp, &f, what, "h", s, s == KITE_OK ? fd_nmse(&f, &f.x, &dh) : 0);
  fd_judge(rp, &f, what, "w", s, s == KITE_OK ? fd_nmse(&f, &f.w, &dw) : 0);
  fd_judge(rp, &f, what, "bias", s, s == KITE_OK ? fd_nmse(&f, &f.b, &db) : 0);
}

void kt_train_fd_check(kite_ctx *ctx, int verbose, int only_op, int *passed, int *failed) {
  /* every op pinned to ref: the forward ops are the oracle's */
  char cfg[2048];
  size_t len = 0;
  cfg[0] = '\0';
  for (int op = 0; op < KITE_OP_COUNT; op++)
    kt_cat(cfg, sizeof cfg, &len, "%s%s=ref", len ? "," : "", kite_op_name((kite_op)op));
  if (kite_config_set(cfg) != KITE_OK) {
    printf("FAIL finite differences: cannot pin the ops to ref: %s\n", kite_last_error());
    ++*failed;
    return;
  }
  const fd_report rp = {verbose, passed, failed};
  const uint64_t seed = 0x6b697465u;
#define FD_WANT(op) (only_op < 0 || only_op == (int)(op))
  static const kite_op acts[] = {KITE_OP_SILU, KITE_OP_GELU, KITE_OP_GELU_TANH, KITE_OP_GELU_QUICK,
                                 KITE_OP_RELU};
  static const kite_op gated[] = {KITE_OP_SILU_AND_MUL, KITE_OP_GELU_AND_MUL,
                                  KITE_OP_GELU_TANH_AND_MUL};
  for (int i = 0; i < 5 && FD_WANT(KITE_OP_ACTIVATION_BACKWARD); i++)
    fd_act(&rp, ctx, KITE_OP_ACTIVATION_BACKWARD, acts[i], 0.0f, seed + (uint64_t)i);
  for (int i = 0; i < 6 && FD_WANT(KITE_OP_GATED_BACKWARD); i++)
    fd_act(&rp, ctx, KITE_OP_GATED_BACKWARD, gated[i % 3], i < 3 ? 0.0f : 1.0f,
           seed + 10 + (uint64_t)i);
  for (int pre = 0; pre <= 1; pre++) {
    for (int off = 0; off <= 1 && FD_WANT(KITE_OP_RMS_NORM_BACKWARD); off++)
      fd_norm(&rp, ctx, KITE_OP_RMS_NORM_BACKWARD, pre, (float)off, seed + 20 + (uint64_t)off);
    if (FD_WANT(KITE_OP_LAYER_NORM_BACKWARD))
      fd_norm(&rp, ctx, KITE_OP_LAYER_NORM_BACKWARD, pre, 0.0f, seed + 30 + (uint64_t)pre);
  }
  for (int gptj = 0; gptj <= 1 && FD_WANT(KITE_OP_ROPE_BACKWARD); gptj++)
    fd_rope(&rp, ctx, gptj, seed + 40 + (uint64_t)gptj);
  if (FD_WANT(KITE_OP_SOFTMAX_BACKWARD)) fd_softmax(&rp, ctx, seed + 50);
  if (FD_WANT(KITE_OP_EMBEDDING_BACKWARD)) fd_embedding(&rp, ctx, seed + 60);
  for (int v = 0; v < 4; v++) {
    if (FD_WANT(KITE_OP_CROSS_ENTROPY_BACKWARD)) fd_ce(&rp, ctx, v, seed + 70 + (uint64_t)v);
    if (FD_WANT(KITE_OP_FUSED_LINEAR_CROSS_ENTROPY)) fd_flce(&rp, ctx, v, seed + 80 + (uint64_t)v);
  }
#undef FD_WANT
  kite_config_set("");
}
