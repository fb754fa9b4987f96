/*
 * What the row-wise family drivers share (rows.h).
 */
#include "rows.h"

#include <stdio.h>

double kt_bound_of(kite_dtype t, const double bounds[3]) {
  return bounds[t == KITE_DTYPE_F16 ? 1 : t == KITE_DTYPE_BF16 ? 2 : 0];
}

/* ---- forward ops ------------------------------------------------------------------------- */

/* 0 rows, 1 row, odd widths, powers of two, one larger tensor. */
static const kt_shape2 g_sizes[] = {{0, 64},   {1, 1},    {1, 3},  {3, 17},   {5, 127},
                                    {4, 1000}, {2, 1031}, {8, 64}, {3, 4096}, {512, 4096}};
static const kt_shape2 g_quick_sizes[] = {{0, 64}, {1, 3}, {3, 17}, {4, 1000}, {2, 4096}};
/* where every option is tried */
static const kt_shape2 g_option_sizes[] = {{3, 17}, {4, 1000}, {2, 4096}};
static const kt_shape2 g_quick_option_sizes[] = {{3, 17}};

void kt_rows_check_cases(kite_op op, kite_dtype t, int quick, int64_t wide,
                         kt_rows_options_fn options, kt_case_list *l) {
  const kt_shape2 *sizes = quick ? g_quick_sizes : g_sizes;
  int ns =
      quick ? (int)(sizeof g_quick_sizes / sizeof *sizes) : (int)(sizeof g_sizes / sizeof *sizes);
  for (int i = 0; i < ns; i++)
    kt_case_push(l, kt_case_default(op, t, sizes[i].rows, sizes[i].cols));
  if (wide > 0 && !quick) kt_case_push(l, kt_case_default(op, t, 2, wide));
  if (!quick) /* > 16 MB moved at every type: the CPU's streaming-store path (CPU_STREAM_BYTES) */
    kt_case_push(l, kt_case_default(op, t, 1031, 4104));
  const kt_shape2 *opt = quick ? g_quick_option_sizes : g_option_sizes;
  int no = quick ? (int)(sizeof g_quick_option_sizes / sizeof *opt)
                 : (int)(sizeof g_option_sizes / sizeof *opt);
  for (int i = 0; i < no; i++) options(l, op, t, opt[i]);
}

void kt_rows_llm_cases(kite_op op, kite_dtype t, const int64_t *widths, int nwidths,
                       kt_case_list *l) {
  static const int64_t tokens[] = {1, 16, 512, 8192};
  for (int i = 0; i < 4; i++)
    for (int w = 0; w < nwidths; w++) kt_case_push(l, kt_case_default(op, t, tokens[i], widths[w]));
}

/* ---- backward ops and losses ------------------------------------------------------------- */

static const kt_shape2 g_bwd_sizes[] = {{0, 64},   {1, 1},    {1, 3},    {3, 17},    {5, 127},
                                        {4, 1000}, {2, 4096}, {40, 256}, {100, 1031}};
static const kt_shape2 g_bwd_quick[] = {{0, 64}, {1, 3}, {3, 17}, {40, 256}};

const kt_shape2 *kt_bwd_sizes(int quick, int *n) {
  *n = quick ? (int)(sizeof g_bwd_quick / sizeof *g_bwd_quick)
             : (int)(sizeof g_bwd_sizes / sizeof *g_bwd_sizes);
  return quick ? g_bwd_quick : g_bwd_sizes;
}

kt_case kt_bwd_case(kite_op op, kite_dtype t, int64_t rows, int64_t cols) {
  kt_case c = kt_case_default(op, t, rows, cols);
  c.train.ce = kite_ce_opts_default();
  c.train.act = op == KITE_OP_GATED_BACKWARD ? KITE_OP_SILU_AND_MUL : KITE_OP_SILU;
  c.train.want_dw = c.train.want_db = 1;
  c.train.want_grads = 1;
  return c;
}

int64_t kt_bwd_bench_rows(int llm) {
  return llm ? 8192 : 512;
}

const char *kt_reduction_name(kite_reduction r) {
  return r == KITE_REDUCTION_NONE ? "none" : r == KITE_REDUCTION_SUM ? "sum" : "mean";
}

/* ---- layout and description -------------------------------------------------------------- */

int kt_add_vector(kt_run *r, const char *name, kite_dtype t, kt_role role, int64_t n,
                  kt_fill_kind fill, float lo, float hi) {
  return kt_add_tensor(r, name, t, role, 1, &n, fill, lo, hi);
}

int kt_add_out_or_inplace(kt_run *r, const kt_case *c, int in, const char *name, int64_t rows,
                          int64_t cols) {
  if (c->inplace) {
    r->view[in].role = KT_INOUT;
    return in;
  }
  return kt_add_matrix(r, name, c->dtype, KT_OUT, rows, cols, c->pad_y, 0, 0);
}

void kt_rows_shape(const kt_case *c, char *buf, size_t n) {
  snprintf(buf, n, "%lldx%lld", (long long)c->rows, (long long)c->cols);
}

void kt_describe_tail(const kt_case *c, char *buf, size_t n, size_t *len) {
  if (c->amp != 1.0f || c->shift != 0.0f)
    kt_cat(buf, n, len, " in[%g,%g]", (double)(c->shift - c->amp), (double)(c->shift + c->amp));
  if (c->step) kt_cat(buf, n, len, " step");
  if (c->specials) kt_cat(buf, n, len, " inf");
  if (c->pad_x) kt_cat(buf, n, len, " x+%lld", (long long)c->pad_x);
  if (c->pad_y) kt_cat(buf, n, len, " y+%lld", (long long)c->pad_y);
  if (c->inplace) kt_cat(buf, n, len, " inplace");
}
