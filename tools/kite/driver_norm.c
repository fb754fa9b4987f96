/*
 * Drivers of the norms over the last dim, forward and backward:
 *   rms_norm, layer_norm:            x[rows, cols], w[cols], b[cols] -> y[rows, cols]
 *   add_rms_norm, add_layer_norm:    the same with residual[rows, cols] updated (pre / post)
 *   rms_norm_backward, layer_norm_backward: x (or s of the pre rule), dy[rows, cols], w[cols]
 *                                    (+ dres) -> dx[rows, cols], dw[cols], db[cols]
 */

#include <string.h>

#include "rows.h"
#include "util.h"

static int is_bwd(kite_op op) {
  return op == KITE_OP_RMS_NORM_BACKWARD || op == KITE_OP_LAYER_NORM_BACKWARD;
}

static int has_residual(kite_op op) {
  return op == KITE_OP_ADD_RMS_NORM || op == KITE_OP_ADD_LAYER_NORM;
}

static int is_layer_norm(kite_op op) {
  return op == KITE_OP_LAYER_NORM || op == KITE_OP_ADD_LAYER_NORM;
}

static int norm_has(kite_op op) {
  return op == KITE_OP_RMS_NORM || op == KITE_OP_LAYER_NORM || has_residual(op) || is_bwd(op);
}

/* ---- descriptions ------------------------------------------------------------------------ */

static void norm_describe(const kt_case *c, char *buf, size_t n) {
  size_t len = 0;
  const kt_train_case *t = &c->train;
  buf[0] = '\0';
  kt_cat(buf, n, &len, "%lldx%lld", (long long)c->rows, (long long)c->cols);
  if (!c->with_w) kt_cat(buf, n, &len, " w=NULL");
  if (is_bwd(c->op)) {
    if (c->op == KITE_OP_RMS_NORM_BACKWARD) kt_cat(buf, n, &len, " offset=%g", (double)c->offset);
    if (t->want_dw) kt_cat(buf, n, &len, " dw");
    if (t->want_db) kt_cat(buf, n, &len, " db");
    if (t->with_dres) kt_cat(buf, n, &len, " pre+dres");
  } else {
    if (is_layer_norm(c->op) && !c->with_b) kt_cat(buf, n, &len, " b=NULL");
    if (!is_layer_norm(c->op)) kt_cat(buf, n, &len, " offset=%g", (double)c->offset);
    if (has_residual(c->op)) kt_cat(buf, n, &len, c->pos == KITE_NORM_POST ? " post" : " pre");
  }
  kt_describe_tail(c, buf, n, &len);
}

/* ---- layout ------------------------------------------------------------------------------ */

/* Norm rows whose first 32 elements sit far above the rest, which is uniform as usual: a
 * row's start says little of its mean (layer norm's one-pass variance must notice). */
static void fill_step(const kt_run *r, int vi, uint64_t seed, unsigned char *body) {
  const kt_view *v = &r->view[vi];
  const float lo = r->c.shift - r->c.amp, span = 2.0f * r->c.amp;
  for (int64_t e = 0, n = kt_view_numel(v); e < n; e++) {
    int64_t at = kt_view_at(v, e);
    double x = e % v->shape[1] < 32 ? r->c.shift + 16.0 * r->c.amp
                                    : lo + span * kt_unit(seed, (uint64_t)at);
    kt_store(v->dtype, body, at, x);
  }
}

static void plan_bwd(kt_run *r, const kt_case *c) {
  const kite_dtype t = c->dtype;
  const kt_train_case *tc = &c->train;
  const float lo = c->shift - c->amp, hi = c->shift + c->amp;
  const int64_t R = c->rows, C = c->cols;
  /* the fused functions name the saved input s (x + residual of the pre rule) */
  kt_bind(r, tc->with_dres ? "s" : "x", kt_add_matrix(r, "x", t, KT_IN, R, C, c->pad_x, lo, hi));
  int dy = kt_bind(r, "dy", kt_add_matrix(r, "dy", t, KT_IN, R, C, c->pad_x, -1, 1));
  if (c->with_w) kt_bind(r, "w", kt_add_vector(r, "w", t, KT_IN, C, KT_FILL_UNIFORM, -1, 1));
  if (tc->with_dres) kt_bind(r, "dres", kt_add_matrix(r, "dres", t, KT_IN, R, C, 0, -1, 1));
  kt_bind(r, "dx", kt_add_out_or_inplace(r, c, dy, "dx", R, C));
  if (tc->want_dw && c->with_w)
    kt_bind(r, "dw", kt_add_vector(r, "dw", t, KT_OUT, C, KT_FILL_UNIFORM, 0, 0));
  if (tc->want_db && c->op == KITE_OP_LAYER_NORM_BACKWARD)
    kt_bind(r, "db", kt_add_vector(r, "db", t, KT_OUT, C, KT_FILL_UNIFORM, 0, 0));
}

static void norm_plan(kt_run *r, const kt_case *c) {
  const kite_dtype t = c->dtype;
  const float lo = c->shift - c->amp, hi = c->shift + c->amp;
  const int64_t R = c->rows, C = c->cols;
  if (is_bwd(c->op)) {
    plan_bwd(r, c);
    return;
  }
  int x = kt_bind(r, "x",
                  kt_add_matrix(r, "x", t, c->inplace ? KT_INOUT : KT_IN, R, C, c->pad_x, lo, hi));
  if (c->step) {
    r->view[x].fill = KT_FILL_CUSTOM;
    r->view[x].fill_fn = fill_step;
  }
  if (has_residual(c->op))
    kt_bind(r, "residual",
            kt_add_matrix(r, "residual", t, KT_INOUT, R, C, c->pad_x, -c->amp, c->amp));
  if (c->with_w) kt_bind(r, "w", kt_add_vector(r, "w", t, KT_IN, C, KT_FILL_UNIFORM, -1.0f, 1.0f));
  if (c->with_b && is_layer_norm(c->op))
    kt_bind(r, "b", kt_add_vector(r, "b", t, KT_IN, C, KT_FILL_UNIFORM, -1.0f, 1.0f));
  kt_bind(r, "y", c->inplace ? x : kt_add_matrix(r, "y", t, KT_OUT, R, C, c->pad_y, 0, 0));
}

/* ---- the call ---------------------------------------------------------------------------- */

/* A backward case with dres calls the fused function of the pre rule (kite_add_rms_norm_backward,
 * kite_add_layer_norm_backward); every other case its op's own. */
static int norm_fn(const kt_case *c) {
  if (is_bwd(c->op) && c->train.with_dres)
    return kite_fn_find(c->op == KITE_OP_RMS_NORM_BACKWARD ? "add_rms_norm_backward"
                                                           : "add_layer_norm_backward");
  return (int)c->op;
}

KT_SCALARS(norm_scalar, KT_FIELD("eps", 'f', eps), KT_FIELD("offset", 'f', offset),
           KT_FIELD("pos", 'i', pos))

/* ---- bounds and cases -------------------------------------------------------------------- */

/* NMSE bounds [f32, f16, bf16]. The forward rounds once to the output type (NMSE ~ 1e-14 for
 * f32); the backward's dx cancels (g - mean g - xhat mean(g xhat)) and its dw sums over rows in
 * f32. */
static double norm_bound(kite_op op, kite_dtype t) {
  static const double fwd[3] = {1e-10, 1e-6, 1e-4}, bwd[3] = {1e-8, 1e-5, 1e-4};
  return kt_bound_of(t, is_bwd(op) ? bwd : fwd);
}

/* Every option of a forward norm at shape s. */
static void gen_rows(kt_case_list *l, kite_op op, kite_dtype t, kt_shape2 s) {
  kt_case base = kt_case_default(op, t, s.rows, s.cols), c;
  int layer = is_layer_norm(op), add = has_residual(op), k = 0;
  for (int w = 1; w >= 0; w--)
    for (int b = 1; b >= (layer ? 0 : 1); b--)
      for (int off = 0; off <= (layer ? 0 : 1); off++)
        for (int pos = 0; pos <= (add ? 1 : 0); pos++, k++) {
          c = base, c.with_w = w, c.with_b = b, c.offset = (float)off;
          c.pos = pos ? KITE_NORM_POST : KITE_NORM_PRE;
          if (k % 2) c.pad_x = 5, c.pad_y = 3;
          if (k % 4 == 3) c.inplace = 1;
          kt_case_push(l, c);
        }
  c = base, c.inplace = 1, kt_case_push(l, c);
  c = base, c.shift = 3.0f, kt_case_push(l, c);   /* mean far from 0: layer norm's variance */
  c = base, c.shift = 100.0f, kt_case_push(l, c); /* mean 170 std from 0 */
  c = base, c.step = 1, c.pad_x = 3, kt_case_push(l, c);
  c = base, c.amp = 50.0f, c.pad_y = 2, kt_case_push(l, c);
}

/* Every option of a backward norm at shape s. */
static void gen_bwd(kt_case_list *l, kite_op op, kite_dtype t, kt_shape2 s, int quick) {
  const int layer = op == KITE_OP_LAYER_NORM_BACKWARD;
  int k = 0;
  for (int w = 1; w >= 0; w--)
    for (int dres = 0; dres <= 1; dres++)
      for (int off = 0; off <= (layer ? 0 : 1); off++, k++) {
        kt_case c = kt_bwd_case(op, t, s.rows, s.cols);
        c.with_w = w, c.train.want_dw = w, c.train.want_db = layer && (k % 2 == 0);
        c.train.with_dres = dres, c.offset = (float)off;
        if (k % 2) c.pad_x = 5, c.pad_y = 3;
        if (k % 3 == 2) c.inplace = 1;
        kt_case_push(l, c);
        if (quick) return;
      }
  kt_case c = kt_bwd_case(op, t, s.rows, s.cols);
  c.shift = 3.0f, kt_case_push(l, c); /* mean far from 0 */
  c.shift = 100.0f, c.amp = 1.0f, kt_case_push(l, c);
  c = kt_bwd_case(op, t, s.rows, s.cols), c.train.want_dw = 0, c.train.want_db = 0;
  kt_case_push(l, c); /* dx only */
}

static void norm_check_cases(kite_op op, kite_dtype t, int quick, kt_case_list *l) {
  if (!is_bwd(op)) {
    kt_rows_check_cases(op, t, quick, 0, gen_rows, l);
    return;
  }
  int n;
  const kt_shape2 *s = kt_bwd_sizes(quick, &n);
  for (int i = 0; i < n; i++) {
    /* a row of 1 (or 2, for layer norm) elements normalizes to a constant: its true dx is
     * about eps-sized and any f32 result is rounding noise, so NMSE says nothing there.
     * Layer norm's short row is 4, not 3: dx = rstd (g - mean(g) - xhat mean(g xhat)) is g
     * projected off 1 and xhat, onto the (n - 2)-dimensional rest. At n = 3 that is a line,
     * and |dx| / |g| falls below any delta with probability ~ delta (a row of seed 119
     * gave |dx| ~ 1e-4 |g|), while f32's error stays ~ 1e-7 |g|: NMSE ~ (1e-7 / delta)^2 then
     * measures the inputs, not the kernel. At n = 4 (a plane) the odds are ~ delta^2. */
    kt_shape2 sh = s[i];
    if (op == KITE_OP_LAYER_NORM_BACKWARD && sh.cols == 3) sh.cols = 4;
    if (sh.cols >= 3 || sh.rows == 0) gen_bwd(l, op, t, sh, quick);
  }
}

/* small: one mid shape; llm: T in {1, 16, 512, 8192} at H = 4096 and 5120; the backward at
 * T = 8192 (llm) or 512, H = 4096, plain and under the fused pre rule. */
static void norm_bench_cases(kite_op op, kite_dtype t, int llm, kt_case_list *l) {
  static const int64_t hidden[] = {4096, 5120};
  if (is_bwd(op)) {
    kt_case c = kt_bwd_case(op, t, kt_bwd_bench_rows(llm), 4096);
    kt_case_push(l, c);
    c.train.with_dres = 1; /* the fused pre rule */
    kt_case_push(l, c);
  } else if (!llm) {
    kt_case_push(l, kt_case_default(op, t, 512, 4096));
  } else {
    kt_rows_llm_cases(op, t, hidden, 2, l);
  }
}

/* Minimum bytes each op must move (read + write), e = element size, for GB/s:
 *   rms_norm          x + y + w                               (2 R C + C) e
 *   layer_norm        x + y + w + b                           (2 R C + 2 C) e
 *   add_rms_norm      x + residual read + written + y + w     (4 R C + C) e
 *   add_layer_norm    the same + b                            (4 R C + 2 C) e
 *   norm backward     x, dy, dx (+ dres) + w, dw, db          (3 or 4) R C e + (1 to 3) C e
 * (w, b, dw and db count only when present.) */
static double norm_bytes(const kt_case *c) {
  const double e = (double)kite_dtype_size(c->dtype), R = (double)c->rows, C = (double)c->cols;
  const kt_train_case *t = &c->train;
  if (is_bwd(c->op))
    return ((t->with_dres ? 4 : 3) * R * C +
            C * ((c->with_w ? 1 : 0) + (c->with_w && t->want_dw ? 1 : 0) +
                 (c->op == KITE_OP_LAYER_NORM_BACKWARD && t->want_db ? 1 : 0))) *
           e;
  const double wb = (c->with_w ? C : 0) + (c->with_b && is_layer_norm(c->op) ? C : 0);
  return ((has_residual(c->op) ? 4 : 2) * R * C + wb) * e;
}

const kt_family_ops kt_family_norm = {
    .name = "norm",
    .has = norm_has,
    .plan = norm_plan,
    .fn = norm_fn,
    .scalar = norm_scalar,
    .describe = norm_describe,
    .shape = kt_rows_shape,
    .check_cases = norm_check_cases,
    .bench_cases = norm_bench_cases,
    .bytes = norm_bytes,
    .flops = NULL,
    .bound = norm_bound,
};
