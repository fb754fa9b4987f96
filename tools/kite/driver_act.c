/*
 * Drivers of the activations and gated activations, forward and backward:
 *   act:      x[rows, cols] -> y[rows, cols];  activation_backward: x, dy -> dx [rows, cols]
 *   gated:    x[rows, 2 cols] -> y[rows, cols];  gated_backward: x[rows, 2 cols], dy[rows, cols]
 *             -> dx[rows, 2 cols]
 * The backward ops take the forward op as `act` (case field train.act).
 */
#include <math.h>
#include <string.h>

#include "rows.h"
#include "util.h"

static int is_bwd(kite_op op) {
  return op == KITE_OP_ACTIVATION_BACKWARD || op == KITE_OP_GATED_BACKWARD;
}

static int is_gated(kite_op op) {
  return kite_op_is_gated(op) || op == KITE_OP_GATED_BACKWARD;
}

static int act_has(kite_op op) {
  return kite_op_is_activation(op) || kite_op_is_gated(op) || is_bwd(op);
}

/* ---- descriptions ------------------------------------------------------------------------ */

static void act_describe(const kt_case *c, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = '\0';
  if (is_bwd(c->op))
    kt_cat(buf, n, &len, "%s %lldx%lld", kite_op_name(c->train.act), (long long)c->rows,
           (long long)c->cols);
  else if (is_gated(c->op))
    kt_cat(buf, n, &len, "%lldx(2x%lld)", (long long)c->rows, (long long)c->cols);
  else
    kt_cat(buf, n, &len, "%lldx%lld", (long long)c->rows, (long long)c->cols);
  if (c->limit > 0) kt_cat(buf, n, &len, " limit=%g", (double)c->limit);
  kt_describe_tail(c, buf, n, &len);
}

/* ---- layout ------------------------------------------------------------------------------ */

/* Activation inputs where a fifth of the elements are +-inf and a fifth +-huge (the largest
 * finite magnitude of the dtype's order), the rest uniform: kite.h fixes act(+-inf). */
static void fill_specials(const kt_run *r, int vi, uint64_t seed, unsigned char *body) {
  const kt_view *v = &r->view[vi];
  const float lo = r->c.shift - r->c.amp, span = 2.0f * r->c.amp;
  const double huge = v->dtype == KITE_DTYPE_F16 ? 6.0e4 : 3.0e38;
  for (int64_t e = 0, n = kt_view_numel(v); e < n; e++) {
    int64_t at = kt_view_at(v, e);
    const double sign = e / 5 % 2 ? -1.0 : 1.0;
    double x = e % 5 == 0   ? sign * INFINITY
               : e % 5 == 1 ? sign * huge
                            : lo + span * kt_unit(seed, (uint64_t)at);
    kt_store(v->dtype, body, at, x);
  }
}

static void act_plan(kt_run *r, const kt_case *c) {
  const kite_dtype t = c->dtype;
  const float lo = c->shift - c->amp, hi = c->shift + c->amp;
  const int64_t R = c->rows, C = c->cols;
  switch (c->op) {
  case KITE_OP_ACTIVATION_BACKWARD: {
    kt_bind(r, "x", kt_add_matrix(r, "x", t, KT_IN, R, C, c->pad_x, lo, hi));
    int dy = kt_bind(r, "dy", kt_add_matrix(r, "dy", t, KT_IN, R, C, c->pad_x, -1, 1));
    kt_bind(r, "dx", kt_add_out_or_inplace(r, c, dy, "dx", R, C));
    return;
  }
  case KITE_OP_GATED_BACKWARD: {
    const int x =
        kt_add_matrix(r, "x", t, c->inplace ? KT_INOUT : KT_IN, R, 2 * C, c->pad_x, lo, hi);
    kt_bind(r, "x", x);
    kt_bind(r, "dy", kt_add_matrix(r, "dy", t, KT_IN, R, C, c->pad_x, -1, 1));
    kt_bind(r, "dx", c->inplace ? x : kt_add_matrix(r, "dx", t, KT_OUT, R, 2 * C, c->pad_y, 0, 0));
    return;
  }
  default:
    break;
  }
  if (is_gated(c->op)) {
    kt_bind(r, "x", kt_add_matrix(r, "x", t, KT_IN, R, 2 * C, c->pad_x, lo, hi));
    kt_bind(r, "y", kt_add_matrix(r, "y", t, KT_OUT, R, C, c->pad_y, 0, 0));
    return;
  }
  int x = kt_bind(r, "x",
                  kt_add_matrix(r, "x", t, c->inplace ? KT_INOUT : KT_IN, R, C, c->pad_x, lo, hi));
  if (c->specials) {
    r->view[x].fill = KT_FILL_CUSTOM;
    r->view[x].fill_fn = fill_specials;
  }
  kt_bind(r, "y", c->inplace ? x : kt_add_matrix(r, "y", t, KT_OUT, R, C, c->pad_y, 0, 0));
}

/* ---- the call's scalars ------------------------------------------------------------------ */

KT_SCALARS(act_scalar, KT_FIELD("limit", 'f', limit), KT_FIELD("act", 'i', train.act))

/* ---- bounds and cases -------------------------------------------------------------------- */

/* NMSE bounds [f32, f16, bf16]. A forward kernel that computes in f32 and rounds once to the
 * output type differs from the float64 ref by about one rounding of the output: NMSE ~ 1e-14
 * (f32), 1e-7 (f16), 5e-6 (bf16). The backward ops' products of derivatives round more. */
static double act_bound(kite_op op, kite_dtype t) {
  static const double fwd[3] = {1e-10, 1e-6, 1e-4}, bwd[3] = {1e-6, 1e-5, 1e-4};
  return kt_bound_of(t, is_bwd(op) ? bwd : fwd);
}

/* Every option of a forward op at shape s. */
static void gen_rows(kt_case_list *l, kite_op op, kite_dtype t, kt_shape2 s) {
  kt_case base = kt_case_default(op, t, s.rows, s.cols), c;
  if (is_gated(op)) {
    c = base, c.pad_x = 5, c.pad_y = 3, kt_case_push(l, c);
    c = base, c.amp = 4, c.limit = 1.0f, kt_case_push(l, c); /* many values beyond the limit */
    c = base, c.amp = 4, c.limit = 0.5f, c.pad_x = 2, c.pad_y = 6, kt_case_push(l, c);
    c = base, c.amp = 6, kt_case_push(l, c);
    return;
  }
  c = base, c.pad_x = 5, c.pad_y = 3, kt_case_push(l, c);
  c = base, c.inplace = 1, kt_case_push(l, c);
  c = base, c.inplace = 1, c.pad_x = 7, kt_case_push(l, c);
  c = base, c.amp = 8, c.pad_y = 1, kt_case_push(l, c); /* saturated tails */
  c = base, c.specials = 1, c.pad_x = 2, kt_case_push(l, c);
}

/* Every activation (or gated activation) of a backward op at shape s. */
static void gen_bwd(kt_case_list *l, kite_op op, kite_dtype t, kt_shape2 s, int quick) {
  static const kite_op acts[] = {KITE_ACTIVATION_OPS(KT_OP_ITEM)};
  static const kite_op gated[] = {KITE_GATED_OPS(KT_GATED_ITEM)};
  const int g = op == KITE_OP_GATED_BACKWARD;
  const int n = g ? (int)(sizeof gated / sizeof *gated) : (int)(sizeof acts / sizeof *acts);
  for (int a = 0; a < n; a++) {
    kt_case c = kt_bwd_case(op, t, s.rows, s.cols);
    c.train.act = g ? gated[a] : acts[a];
    c.amp = 4.0f;
    kt_case_push(l, c);
    if (quick) continue;
    if (g) {
      c.limit = 1.0f, c.pad_x = 3, c.pad_y = 5;
      kt_case_push(l, c);
      c.inplace = 1; /* dx is x, clamp and padded rows kept */
      kt_case_push(l, c);
    } else {
      c.inplace = 1, c.pad_x = 2;
      kt_case_push(l, c);
    }
  }
}

static void act_check_cases(kite_op op, kite_dtype t, int quick, kt_case_list *l) {
  if (!is_bwd(op)) {
    kt_rows_check_cases(op, t, quick, 0, gen_rows, l);
    return;
  }
  int n;
  const kt_shape2 *s = kt_bwd_sizes(quick, &n);
  for (int i = 0; i < n; i++) gen_bwd(l, op, t, s[i], quick);
}

/* small: one mid shape; llm: T in {1, 16, 512, 8192} over Llama-like widths (gated: the
 * intermediate size I); the backward ops at T = 8192 (llm) or 512, 4096 wide. */
static void act_bench_cases(kite_op op, kite_dtype t, int llm, kt_case_list *l) {
  static const int64_t hidden[] = {4096, 5120}, inter[] = {14336};
  if (is_bwd(op))
    kt_case_push(l, kt_bwd_case(op, t, kt_bwd_bench_rows(llm), 4096));
  else if (!llm)
    kt_case_push(l, kt_case_default(op, t, 512, 4096));
  else if (is_gated(op))
    kt_rows_llm_cases(op, t, inter, 1, l);
  else
    kt_rows_llm_cases(op, t, hidden, 2, l);
}

/* Minimum bytes each op must move (read + write), e = element size, for GB/s:
 *   activations          x + y                     2 R C e
 *   gated (y is RxI)     x[R, 2I] + y              3 R I e
 *   activation_backward  x, dy, dx                 3 R C e
 *   gated_backward       x[R, 2I], dy[R, I], dx    5 R I e */
static double act_bytes(const kt_case *c) {
  const double e = (double)kite_dtype_size(c->dtype), R = (double)c->rows, C = (double)c->cols;
  if (is_bwd(c->op)) return (is_gated(c->op) ? 5 : 3) * R * C * e;
  return (is_gated(c->op) ? 3 : 2) * R * C * e;
}

const kt_family_ops kt_family_act = {
    .name = "act",
    .has = act_has,
    .plan = act_plan,
    .scalar = act_scalar,
    .describe = act_describe,
    .shape = kt_rows_shape,
    .check_cases = act_check_cases,
    .bench_cases = act_bench_cases,
    .bytes = act_bytes,
    .flops = NULL,
    .bound = act_bound,
};
